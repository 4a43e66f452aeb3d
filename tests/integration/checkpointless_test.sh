#!/usr/bin/env bash
# Checkpointless recovery end to end (resilience.policy = "checkpointless"):
# lost ranks are replaced in place, from their peers' memory, while the
# other ranks keep their processes; every run must end with the parameter
# hash of the fault-free run, bit for bit. Covered: a crash (ZeRO-1, ZeRO-2
# and DDP), a hang, two faults in a row, copies refreshed every 4 steps, a
# whole node lost onto a spare (network namespaces), and a corrupted peer
# copy, which must be refused by its checksum, named, and the newest
# checkpoint restored instead; and a spare whose NIC died is skipped by name.
set -euo pipefail
. "$(dirname "$0")/../../scripts/lib/runs.sh"
: "${FMSTACK:?path to the fmstack binary}"
PY=/usr/bin/python3
work=$(mktemp -d)
bg=""
cleanup() {
  [ -n "$bg" ] && kill -9 "$bg" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }

bible -f gen1:1-gen20:18 > corpus.txt
"$FMSTACK" data prepare --corpus corpus.txt --vocab 256 --held-out-every 50 --out data >/dev/null 2>&1

job() {  # file zero-stage extra-toml
  cat > "$1" <<TOML
name = "tiny"
$(tiny_model 256)
[cluster]
backend = "local"
nodes = 2
procs_per_node = 2
${SPARES:-}
[parallel]
zero_stage = $2
[train]
micro_batch = 2
global_batch = 8
steps = 60
eval_interval = 0
eval_batches = 2
threads = 1
[optim]
lr = 3e-3
warmup_steps = 3
[data]
dir = "data"
[checkpoint]
every = 5
keep = 3
[resilience]
policy = "checkpointless"
heartbeat_interval = "0.5s"
heartbeat_timeout = "4s"
collective_timeout = "20s"
restart_backoff = "0s"
straggler_steps = 1000
${3:-}
TOML
}
inject() {  # kind rank step
  printf '[[faults.inject]]\nkind = "%s"\nrank = %s\nat_step = %s\n' "$1" "$2" "$3"
}
incidents() {  # run dir -> one line per incident: kind rank lost_steps recovery_seconds decision
  $PY - "$1/goodput.json" <<'PY'
import json, sys
for i in json.load(open(sys.argv[1]))["incidents"]:
    print(i["kind"], i["rank"], i["lost_steps"], round(i["recovery_seconds"], 3), i["decision"])
PY
}
run() {  # name zero-stage extra-toml [run flags...]
  local name=$1 stage=$2 extra=$3
  shift 3
  job "$name.toml" "$stage" "$extra"
  "$FMSTACK" run "$name.toml" "$@" --out "runs/$name" > "$name.out" 2> "$name.err" ||
    { tail -30 "$name.err"; rank_tails "$name"; fail "$name: the run did not finish by itself"; }
}
rank_tails() {  # name: each rank's last lines other than step events, for a failure's story
  local log
  for log in runs/"$1"/logs/rank*.log; do
    echo "== $log"
    grep -v '"ev":"step"' "$log" | tail -12
  done
}
same_hash() {  # name base
  local got want
  got=$(run_hash "runs/$1")
  want=$(run_hash "runs/$2")
  [ -n "$want" ] || fail "$2: no parameter hash"
  [ "$got" = "$want" ] || { tail -30 "$1.err"; fail "$1: parameter hash $got, fault-free $want"; }
}
in_place() {  # name: every incident recovered from peers, no rank of the job restarted
  grep -q "restored from peer memory" "$1.err" || { tail -30 "$1.err"; fail "$1: not restored from peers"; }
  ! grep -q -- "---- restart" runs/"$1"/logs/rank*.log || { tail -30 "$1.err"; rank_tails "$1"; fail "$1: a rank was restarted, not replaced"; }
  incidents "runs/$1" | while read -r kind rank lost rec decision; do
    case "$decision" in *checkpointless*) ;; *) fail "$1: $kind decided as: $decision";; esac
    $PY -c "import sys; sys.exit(0 if float('$rec') > 0 else 1)" || fail "$1: $kind never recovered"
  done
}

for stage in 1 2 0; do run "base$stage" "$stage" ""; done
echo "fault-free hashes: ZeRO-1 $(run_hash runs/base1), ZeRO-2 $(run_hash runs/base2), DDP $(run_hash runs/base0)"

# A crash: the lost rank comes back from its holder's memory.
run crash 1 "$(inject crash 1 12)"
same_hash crash base1
in_place crash
grep -q "replacing rank(s) 1; the other ranks keep their processes" crash.err || fail "crash: replacement not said"
grep -q -- "---- replaced (generation 1) ----" runs/crash/logs/rank1.log || fail "crash: rank 1 not replaced"
read -r _ _ lost _ < <(incidents runs/crash)
[ "$lost" -le 1 ] || fail "crash: $lost steps lost with copies refreshed every step"

for stage in 2 0; do
  run "crash$stage" "$stage" "$(inject crash 2 12)"
  same_hash "crash$stage" "base$stage"
  in_place "crash$stage"
done

# A hang: the silent rank is killed and replaced; its peers abort their
# collectives at once instead of waiting for the collective timeout.
run hang 1 "$(inject hang 2 12)"
same_hash hang base1
in_place hang

# A stall: rank 2's main thread stops while its heartbeats go on. The
# others' collectives time out with no rank dead; they say so and wait,
# and the one that did not say so is replaced in place.
run stall 1 "$(inject stall 2 12)"
same_hash stall base1
in_place stall
grep -q "rank 2 (node 1, local rank 0) stalled: its heartbeats go on" stall.err ||
  { tail -30 stall.err; fail "stall: the stalled rank was not named"; }

# Two faults: the second finds the first replacement holding copies again.
run two 1 "$(inject crash 0 10; inject crash 3 25)"
same_hash two base1
in_place two
[ "$(incidents runs/two | wc -l)" = 2 ] || fail "two: expected two incidents"

# Copies every 4 steps: at most that many (and the exchange in flight) redone.
run every4 1 "peer_replica_every = 4
$(inject crash 1 14)"
same_hash every4 base1
in_place every4
read -r _ _ lost _ < <(incidents runs/every4)
[ "$lost" -le 8 ] || fail "every4: $lost steps lost with copies every 4 steps"

# A corrupted copy is refused by its checksum, named, and the newest
# checkpoint takes over (a full restart, the policy's fallback).
run corrupt 1 "$(inject corrupt-replica 3 5; inject crash 1 12)"
same_hash corrupt base1
grep -q "checkpointless recovery failed: rank 1: its copy held by rank 3 failed its checksum" corrupt.err ||
  { tail -30 corrupt.err; fail "corrupt: the bad copy was not named"; }
incidents runs/corrupt | grep -q "^peer-restore-failed .*newest checkpoint" ||
  { incidents runs/corrupt; fail "corrupt: no fallback to the checkpoint"; }
grep -q "checkpoint: resumed from step-" runs/corrupt/logs/rank0.log || fail "corrupt: no checkpoint restore"

# A node lost with a spare at hand: both of its ranks start on the spare
# (its own network namespace) and take their state from the other node.
[ "$(id -u)" = 0 ] || fail "the spare case needs root for network namespaces (run the suite as root)"
SPARES="spares = 1" run spare 1 "$(inject network-cut 2 12)" --netns
same_hash spare base1
in_place spare
grep -q "replacing rank(s) 2, 3 on spare slot 2" spare.err || { tail -20 spare.err; fail "spare: node 1 not replaced on the spare"; }
! ip netns list | grep -q "fmstack-" || fail "spare: namespaces left behind"

# A spare that fails its own check is skipped, named, and the next one used.
SPARES="spares = 2" job long.toml 1 ""
sed -i 's/^steps = 60$/steps = 400/' long.toml
"$FMSTACK" run long.toml --out runs/long-base > /dev/null 2> long-base.err || { tail long-base.err; fail "long base"; }
"$FMSTACK" run long.toml --netns --out runs/badspare > badspare.out 2> badspare.err &
bg=$!
for _ in $(seq 100); do grep -q '"state": "running"' runs/badspare/run.json 2>/dev/null && break; sleep 0.1; done
sup=$($PY -c "import json; print(json.load(open('runs/badspare/run.json'))['pid'])")
ip -n "fmstack-$sup-n2" link set eth0 down  # the first spare's NIC dies before it is needed
"$FMSTACK" fault inject runs/badspare --rank 2 --kind network-cut --at-step 100 > /dev/null
wait "$bg" || { tail -30 badspare.err; fail "badspare: the run did not finish"; }
bg=""
grep -q "spare slot 2 failed its check (its link is down): skipped" badspare.err ||
  { tail -20 badspare.err; fail "badspare: the broken spare was not skipped by name"; }
grep -q "replacing rank(s) 2, 3 on spare slot 3" badspare.err || { tail -20 badspare.err; fail "badspare: the next spare was not used"; }
same_hash badspare long-base
! ip netns list | grep -q "fmstack-" || fail "badspare: namespaces left behind"

printf '%-10s %s\n' run "incidents (kind rank lost-steps recovery-s)"
for r in crash crash2 crash0 hang stall two every4 corrupt spare badspare; do
  printf '%-10s %s\n' "$r" "$(incidents "runs/$r" | cut -d' ' -f1-4 | paste -sd';')"
done
echo "checkpointless: every run ended bit-identical to its fault-free run"
