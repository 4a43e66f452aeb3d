#!/usr/bin/env bash
# The resilient runtime end to end: every fault kind is injected into a
# 2 node x 2 process ZeRO-1 run of a small GPT; the run must finish without
# any user action and end with the parameter hash of a fault-free run, bit
# for bit. Also: detection times (crash < 1 s, hang <= timeout + 1 s, the
# right rank named, its stacks kept; a stalled rank whose heartbeats go on
# named by its peers' failed collectives), injection from the CLI into a live run, SIGTERM's
# emergency checkpoint (exit 143, resumed without losing a step), an
# exhausted restart budget, bad input, a program under `fmstack run --`
# named hung through the Python client, and the regression of a 1 x 2 run
# whose newest shard is corrupt in a chunk only one rank reads ("Bad
# address": one rank left the restore agreement early).
set -euo pipefail
. "$(dirname "$0")/../../scripts/lib/runs.sh"
: "${FMSTACK:?path to the fmstack binary}" "${SRC:?source root}"
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

job() {  # file steps extra-toml
  cat > "$1" <<TOML
name = "tiny"
[model]
preset = "gpt-mini"
layers = 2
hidden = 64
heads = 2
ffn_hidden = 256
vocab = 256
seq_len = 64
[cluster]
backend = "local"
nodes = 2
procs_per_node = 2
[parallel]
zero_stage = 1
[train]
micro_batch = 2
global_batch = 8
steps = $2
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
heartbeat_interval = "0.5s"
heartbeat_timeout = "${HB_TIMEOUT:-10s}"
collective_timeout = "20s"
restart_backoff = "0.2s"
straggler_steps = ${STRAGGLER_STEPS:-1000}
${3:-}
TOML
}
incident() {  # run dir -> "kind rank detect_seconds recovery_seconds" of the first incident
  $PY - "$1/goodput.json" <<'PY'
import json, sys
i = json.load(open(sys.argv[1]))["incidents"][0]
print(i["kind"], i["rank"], round(i["detect_seconds"], 3), round(i["recovery_seconds"], 3))
PY
}

job base.toml 80
"$FMSTACK" run base.toml --out runs/base > /dev/null 2> base.err || { cat base.err; fail "fault-free run"; }
want=$(run_hash runs/base)
[ -n "$want" ] || fail "no parameter hash in the fault-free run"
echo "fault-free parameter hash: $want"

# Every kind, from the job file, on rank 1 (network-cut on node 1, node-down
# on node 0) after step 12.
kinds="crash exit hang stall straggler nan bitflip disk-full kill-during-save corrupt-checkpoint supervisor-restart notice network-cut node-down"
printf '%-20s %-18s %5s %12s %13s %s\n' kind seen rank "detected(s)" "recovered(s)" hash > table.txt
for kind in $kinds; do
  rank=1 flags=()
  if [ "$kind" = network-cut ]; then
    [ "$(id -u)" = 0 ] || fail "network-cut needs root for network namespaces (run the suite as root)"
    rank=2 flags=(--netns)
  fi
  # Only the kind under test may be detected: on a busy machine a healthy
  # rank can look slow, so the other runs watch for stragglers lazily.
  hb=10s steps=1000
  [ "$kind" = hang ] && hb=4s
  [ "$kind" = straggler ] && steps=5
  HB_TIMEOUT=$hb STRAGGLER_STEPS=$steps job "$kind.toml" 80 "[[faults.inject]]
kind = \"$kind\"
rank = $rank
at_step = 12"
  "$FMSTACK" run "$kind.toml" "${flags[@]}" --out "runs/$kind" > "$kind.out" 2> "$kind.err" ||
    { tail -30 "$kind.err"; fail "$kind: the run did not finish by itself"; }
  got=$(run_hash "runs/$kind")
  [ "$got" = "$want" ] || { tail -30 "$kind.err"; fail "$kind: parameter hash $got, fault-free $want"; }
  read -r seen blamed detect recover < <(incident "runs/$kind")
  printf '%-20s %-18s %5s %12s %13s %s\n' "$kind" "$seen" "$blamed" "$detect" "$recover" "$got" >> table.txt
  case $kind in
    crash|exit|kill-during-save|corrupt-checkpoint)
      [ "$seen" = crash ] && [ "$blamed" = 1 ] || fail "$kind: seen as $seen on rank $blamed"
      $PY -c "import sys; sys.exit(0 if $detect < 1 else 1)" || fail "$kind: detected in $detect s (> 1 s)";;
    hang)
      [ "$seen" = hang ] && [ "$blamed" = 1 ] || fail "hang: seen as $seen on rank $blamed"
      grep -q "rank 1 (node 0, local rank 1) hung: no heartbeat" hang.err || fail "hang: rank not named"
      # Its stacks were kept before the kill: every thread, with fmstack's frames.
      stacks=runs/hang/logs/incident1-rank1.stacks.txt
      [ -s "$stacks" ] || { grep "stacks of" hang.err; fail "hang: the hung rank's stacks were not kept"; }
      grep -q "^Thread 1 " "$stacks" && grep -q "in fmstack::" "$stacks" ||
        { head -20 "$stacks"; fail "hang: $stacks holds no backtrace of fmstack's threads"; }
      grep -q "stacks of rank 1 (node 0, local rank 1) (pid [0-9]*) kept in" hang.err ||
        fail "hang: the supervisor's log does not say where the stacks are"
      $PY -c "import sys; sys.exit(0 if $detect <= 5 else 1)" || fail "hang: detected in $detect s (> 4 + 1 s)";;
    stall)  # heartbeats go on; the peers' failed collectives name it
      [ "$seen" = hang ] && [ "$blamed" = 1 ] || fail "stall: seen as $seen on rank $blamed"
      grep -q "rank 1 (node 0, local rank 1) stalled: its heartbeats go on" stall.err ||
        { grep -E "fault|collective" stall.err | head; fail "stall: rank not named"; }
      grep -q "in .*StallMainThread" runs/stall/logs/incident1-rank1.stacks.txt ||
        { grep "stacks of" stall.err; head -20 runs/stall/logs/incident1-rank1.stacks.txt 2>/dev/null;
          fail "stall: the stalled rank's stacks do not show where it waits"; }
      $PY -c "import sys; sys.exit(0 if $detect <= 30 else 1)" || fail "stall: detected in $detect s (> 20 + 10 s)";;
    nan) [ "$seen" = non-finite ] || fail "nan: seen as $seen";;
    bitflip) [ "$seen" = silent-corruption ] && [ "$blamed" = 1 ] || fail "bitflip: seen as $seen on rank $blamed";;
    straggler) [ "$seen" = straggler ] && [ "$blamed" = 1 ] || fail "straggler: seen as $seen on rank $blamed";;
    disk-full) [ "$seen" = checkpoint-failed ] && [ "$blamed" = 1 ] || fail "disk-full: seen as $seen on rank $blamed";;
    notice) [ "$seen" = notice ] || fail "notice: seen as $seen";;
    supervisor-restart) [ "$seen" = supervisor-restart ] || fail "supervisor-restart: seen as $seen";;
    node-down)  # node 0 goes, both its ranks; the checkpoint policy restarts it in place
      [ "$seen" = node-lost ] && [ "$blamed" = 1 ] || fail "node-down: seen as $seen on rank $blamed";;
    network-cut)
      [ "$seen" = node-lost ] && [ "$blamed" = 2 ] || fail "network-cut: seen as $seen on rank $blamed"
      ! ip netns list | grep -q "fmstack-" || fail "network-cut: namespaces left behind";;
  esac
  if [ "$kind" = corrupt-checkpoint ]; then
    grep -q "rejected step-00000010 on local" "runs/$kind/logs/rank0.log" || fail "corrupt shard not rejected"
    ls -d "runs/$kind"/ckpt/quarantine/step-00000010.* > /dev/null || fail "the corrupt step was not kept in quarantine"
  fi
  if [ "$kind" = notice ] || [ "$kind" = straggler ]; then
    # Saved first: nothing is trained twice.
    lost=$($PY -c "import json; print(json.load(open('runs/$kind/goodput.json'))['incidents'][0]['lost_steps'])")
    [ "$lost" = 0 ] || fail "$kind: $lost steps lost after an emergency save"
  fi
done
cat table.txt

# A run's history survives its reruns: the crashed and recovered run, rerun
# with more steps, keeps the crash in its ledger and report, appends to its
# logs with a marker per attempt, and a schedule change needs the flag.
rc=0
"$FMSTACK" run crash.toml --steps 84 --out runs/crash > more.out 2> more.err || rc=$?
[ "$rc" = 2 ] && grep -q "was written under another schedule (train.steps 80 -> 84).*--allow-schedule-change" more.err ||
  { cat more.err; fail "a rerun with more steps: exit $rc, expected 2 naming the schedule change"; }
[ "$(grep -c -- '---- attempt' runs/crash/logs/rank0.log)" = 1 ] || fail "the refused rerun started workers"
"$FMSTACK" run crash.toml --steps 84 --allow-schedule-change --out runs/crash > more.out 2> more.err ||
  { tail -20 more.err; fail "the rerun with --allow-schedule-change"; }
grep -q -- "---- attempt 2 of this run directory ----" runs/crash/logs/rank0.log ||
  fail "the rerun's log has no attempt marker"
grep -q '"ev":"step".*"step":12[,}]' runs/crash/logs/rank0.log || fail "the first attempt's steps left the log"
"$FMSTACK" report runs/crash > report.out || fail "report after the rerun"
grep -q "^ *1 *crash *1 " report.out || { cat report.out; fail "the rerun's report lost the crash"; }
grep -Eq "^ *2 .* 80 +finished" report.out || { cat report.out; fail "the report does not show attempt 2 from step 80"; }
echo "history: the rerun to 84 steps kept the crash, two attempts in the report and the log"

# Spares: a node that loses its link, or hangs, hands its ranks to a spare
# slot (its own network namespace with --netns) instead of being repaired,
# and the result is still bit-identical.
for kind in network-cut hang; do
  flags=()
  [ "$kind" = network-cut ] && flags=(--netns)
  HB_TIMEOUT=4s job "spare-$kind.toml" 80 "[[faults.inject]]
kind = \"$kind\"
rank = 2
at_step = 12"
  sed -i 's/^procs_per_node = 2$/procs_per_node = 2\nspares = 1/' "spare-$kind.toml"
  "$FMSTACK" run "spare-$kind.toml" "${flags[@]}" --out "runs/spare-$kind" > /dev/null 2> "spare-$kind.err" ||
    { tail -20 "spare-$kind.err"; fail "spare $kind: the run did not finish"; }
  grep -q "node 1: its ranks move from slot 1 to spare slot 2" "spare-$kind.err" ||
    { tail -20 "spare-$kind.err"; fail "spare $kind: the spare was not used"; }
  [ "$(run_hash "runs/spare-$kind")" = "$want" ] || fail "spare $kind: hash differs"
done
! ip netns list | grep -q "fmstack-" || fail "spares: namespaces left behind"
echo "spares: network-cut and hang moved node 1 to spare slot 2, hash $want"

# Injection from the CLI into a live run, with bad input first.
"$FMSTACK" fault inject runs/nowhere --rank 0 --kind crash > bad1.out 2>&1 && fail "inject into a missing run"
grep -q "not a run directory" bad1.out || { cat bad1.out; fail "missing run not explained"; }
"$FMSTACK" fault inject runs/base --rank 0 --kind crash > bad2.out 2>&1 && fail "inject into a finished run"
grep -q "the run is not live" bad2.out || { cat bad2.out; fail "finished run not explained"; }
"$FMSTACK" fault inject runs/base --rank 0 --kind meteor > bad3.out 2>&1 && fail "an unknown kind"
grep -q "meteor" bad3.out || { cat bad3.out; fail "unknown kind not named"; }
job long.toml 400
"$FMSTACK" run long.toml --out runs/long-base > /dev/null 2> long-base.err || { cat long-base.err; fail "long run"; }
want_long=$(run_hash runs/long-base)
"$FMSTACK" run long.toml --out runs/cli > cli.out 2> cli.err &
bg=$!
for _ in $(seq 100); do grep -q '"state": "running"' runs/cli/run.json 2>/dev/null && break; sleep 0.1; done
# One run per directory: a second `fmstack run` there is refused, naming the first.
"$FMSTACK" run long.toml --out runs/cli > twice.out 2>&1 && fail "two runs in one directory"
grep -q "runs/cli is in use by another \`fmstack run\` (pid $bg)" twice.out || { cat twice.out; fail "second run not refused by pid"; }
# Only holders of the run's secret reach its store.
[ "$(stat -c %a runs/cli/store.secret)" = 600 ] || fail "store.secret is not 0600"
"$FMSTACK" fault inject runs/cli --rank 4 --kind crash > bad4.out 2>&1 && fail "inject into rank 4 of 4"
grep -q "has ranks 0..3" bad4.out || { cat bad4.out; fail "rank out of range not explained"; }
"$FMSTACK" fault inject runs/cli --rank 3 --kind crash --at-step 50 | grep -q "requested"
wait "$bg" || { tail -20 cli.err; fail "CLI-injected crash: the run did not finish"; }
bg=""
[ "$(run_hash runs/cli)" = "$want_long" ] || fail "CLI-injected crash: hash differs"
grep -q "fault: rank 3 (node 1, local rank 1) was killed by SIGKILL" cli.err || fail "CLI crash not named"

# SIGTERM: an emergency checkpoint of the current step, exit 143, and a rerun
# that resumes exactly there and ends bit-identical.
"$FMSTACK" run long.toml --out runs/term > term.out 2> term.err &
bg=$!
for _ in $(seq 200); do grep -q "step-00000030" term.err 2>/dev/null && break; sleep 0.05; done
kill -TERM "$bg"
set +e; wait "$bg"; rc=$?; set -e
bg=""
[ "$rc" = 143 ] || { tail -20 term.err; fail "SIGTERM: exit $rc, expected 143"; }
grep -q "every rank saved the current step first" term.err || fail "SIGTERM: no emergency save"
"$FMSTACK" run long.toml --out runs/term > /dev/null 2> term2.err || { cat term2.err; fail "resume after SIGTERM"; }
saved=$(grep -o "resumed from step-[0-9]*" runs/term/logs/rank0.log | tail -1)
echo "SIGTERM: $saved"
[ "$(run_hash runs/term)" = "$want_long" ] || fail "SIGTERM + resume: hash differs"

# An exhausted budget: a clear final message, exit 1, committed steps kept.
job budget.toml 80 "max_restarts = 1
[[faults.inject]]
kind = \"crash\"
rank = 0
at_step = 12
[[faults.inject]]
kind = \"crash\"
rank = 2
at_step = 30"
set +e; "$FMSTACK" run budget.toml --out runs/budget > /dev/null 2> budget.err; rc=$?; set -e
[ "$rc" = 1 ] || { tail budget.err; fail "budget: exit $rc, expected 1"; }
grep -q "the restart budget is spent (1 of 1 restarts used" budget.err || { tail budget.err; fail "budget: no final message"; }
"$FMSTACK" ckpt ls budget.toml --out runs/budget | grep -Eq "^local +(25|30) +committed" ||
  fail "budget: committed checkpoints lost"

# Bad spec keys are named; a job name is never a path.
job escape.toml 10
sed -i 's|^name = "tiny"|name = "../../escape"|' escape.toml
"$FMSTACK" run escape.toml > escape.out 2>&1 && fail "a job name with a path accepted"
grep -q "is not a plain name" escape.out || { cat escape.out; fail "path in a job name not explained"; }
[ ! -e ../escape ] && [ ! -e ../../escape ] || fail "something was written outside runs/"
job badkey.toml 10 "restart_budget = 3"
"$FMSTACK" run badkey.toml --out runs/badkey > badkey.out 2>&1 && fail "unknown resilience key accepted"
grep -q "restart_budget" badkey.out || { cat badkey.out; fail "unknown key not named"; }
job badhb.toml 10
sed -i 's/^collective_timeout = "20s"/collective_timeout = "5s"/' badhb.toml
"$FMSTACK" run badhb.toml --out runs/badhb > badhb.out 2>&1 && fail "heartbeat_timeout >= collective_timeout accepted"
grep -q "shorter than collective_timeout" badhb.out || { cat badhb.out; fail "timeout order not explained"; }

# Any program: the Python client's heartbeats name the rank that stopped.
set +e
HANG_RANK=1 "$FMSTACK" run --nodes 1 --procs-per-node 2 --heartbeat-timeout 2 --out runs/py -- \
  python3 "$SRC/examples/hang_demo.py" > py.out 2> py.err
rc=$?
set -e
[ "$rc" = 1 ] || { cat py.err; fail "hung program: exit $rc"; }
grep -q "rank 1 (node 0, local rank 1) hung: no heartbeat" py.err || { cat py.err; fail "hung program: rank not named"; }

# Regression: 1 node x 2 ranks, ZeRO-1, gpt-mini's 99 MB state (8 MiB chunks,
# so a chunk holds one rank's moments only): rank 0 rejects step 4, rank 1
# does not; both must agree on step 2 and finish like an uninterrupted run.
cat > mini.toml <<TOML
name = "mini"
[model]
preset = "gpt-mini"
vocab = 256
[cluster]
backend = "local"
nodes = 1
procs_per_node = 2
[parallel]
zero_stage = 1
[train]
micro_batch = 2
global_batch = 4
steps = 6
eval_interval = 0
eval_batches = 1
[data]
dir = "data"
[checkpoint]
every = 2
TOML
"$FMSTACK" run mini.toml --out runs/mini-base > /dev/null 2> mini-base.err || { cat mini-base.err; fail "mini run"; }
"$FMSTACK" run mini.toml --out runs/mini --until 4 > /dev/null 2> mini1.err || { cat mini1.err; fail "mini to 4"; }
$PY - runs/mini/ckpt/step-00000004/rank-00000.safetensors <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read()); b[-100] ^= 1; open(p, "wb").write(b)
PY
"$FMSTACK" run mini.toml --out runs/mini > /dev/null 2> mini2.err || { cat mini2.err; fail "mini resume"; }
! grep -aq "Bad address" runs/mini/logs/*.log || fail "the Bad address failure is back"
grep -q "resumed from step-00000002" runs/mini/logs/rank0.log || fail "mini: did not fall back to step 2"
grep -q '"incidents": \[\]' runs/mini/goodput.json || fail "mini: the resume needed a restart"
[ "$(run_hash runs/mini)" = "$(run_hash runs/mini-base)" ] || fail "mini: hash differs"
echo "PASS"
