#!/usr/bin/env bash
# Elastic data parallelism end to end (resilience.policy = "elastic"): a node
# lost with no spare is dropped and the survivors go on as a smaller group at
# the same global batch, re-partitioning their ZeRO shards in memory; a node
# that comes back (resilience.node_repair) is taken and the group grows back.
# Checked on every run: the sample ledger proves each micro-batch of each
# step trained exactly once, the world sizes it went through are printed,
# and the loss stays within the fault-free run's noise. With a spare, the
# node's ranks move there instead and the result is bitwise the fault-free
# one. A corrupted peer copy makes the shrink refuse by checksum and fall
# back to the newest checkpoint, restored into the smaller world. A tampered
# ledger is caught by `fmstack report`.
set -euo pipefail
. "$(dirname "$0")/../../scripts/lib/runs.sh"
: "${FMSTACK:?path to the fmstack binary}"
PY=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
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
nodes = ${NODES:-2}
procs_per_node = 2
${SPARES:-}
[parallel]
zero_stage = $2
[train]
micro_batch = 2
global_batch = ${GB:-8}
steps = ${STEPS:-120}
eval_interval = 0
eval_batches = 4
threads = 1
[optim]
lr = 3e-3
warmup_steps = 3
[data]
dir = "data"
[checkpoint]
every = 10
keep = 3
[resilience]
policy = "elastic"
heartbeat_interval = "0.5s"
# 10 s: a replacement starting on a busy machine (the suite runs two tests
# at once) must not be taken for hung before its first heartbeat.
heartbeat_timeout = "10s"
collective_timeout = "20s"
restart_backoff = "0s"
straggler_steps = 1000
$3
TOML
}
inject() {  # kind rank step
  printf '[[faults.inject]]\nkind = "%s"\nrank = %s\nat_step = %s\n' "$1" "$2" "$3"
}
run() {  # name zero-stage extra-toml
  job "$1.toml" "$2" "$3"
  "$FMSTACK" run "$1.toml" --out "runs/$1" > "$1.out" 2> "$1.err" ||
    {
      tail -30 "$1.err"
      cat "$1.out"
      for log in "runs/$1"/logs/rank*.log; do
        echo "== $log (last lines)"
        grep -v '"ev":"step"' "$log" | tail -8
      done
      fail "$1: the run did not finish by itself"
    }
}
samples() {  # name expected-worlds: the ledger audit passes and went through these sizes
  "$FMSTACK" report "runs/$1" --json > "$1.report.json" || fail "$1: fmstack report failed the ledger"
  $PY - "$1.report.json" "$2" "$1" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["samples"]
worlds = " ".join(str(w["world"]) for w in s["worlds"])
assert s["ok"], f"{sys.argv[3]}: ledger problems: {s['problems']}"
assert worlds == sys.argv[2], f"{sys.argv[3]}: worlds {worlds}, expected {sys.argv[2]}"
print(f"{sys.argv[3]}: {s['steps']} steps x {s['micro_per_step']} micro-batches each once; "
      f"worlds {[(w['world'], w['first'], w['last']) for w in s['worlds']]}; {s['steps_redone']} redone")
PY
}
# The loss in the last 30 steps against the fault-free run's: the mean
# differs by less than the fault-free run's own step-to-step spread there
# (its standard deviation), and so does the held-out loss.
within_noise() {  # name base
  cat "runs/$1"/logs/rank*.log > "$1.events"
  cat "runs/$2"/logs/rank*.log > "$2.events"
  $PY - "$1.events" "$2.events" "$1" <<'PY'
import json, statistics, sys
def read(path):
    loss, val = {}, None
    for line in open(path, errors="replace"):
        if not line.startswith("@fmstack "): continue
        e = json.loads(line[9:])
        if e["ev"] == "step": loss[e["step"]] = e["loss"]  # the newest attempt of a step wins
        if e["ev"] == "done": val = e["val_loss"]
    return loss, val
got, got_val = read(sys.argv[1])
base, base_val = read(sys.argv[2])
last = sorted(base)[-30:]
noise = statistics.pstdev(base[s] for s in last)
diff = abs(statistics.mean(got[s] for s in last) - statistics.mean(base[s] for s in last))
print(f"{sys.argv[3]}: last-30-step loss differs by {diff:.4f} (fault-free spread {noise:.4f}); "
      f"held-out {got_val:.4f} vs {base_val:.4f}")
assert diff < noise, f"{sys.argv[3]}: loss {diff:.4f} away from the fault-free run, spread {noise:.4f}"
assert abs(got_val - base_val) < noise, f"{sys.argv[3]}: held-out loss {got_val} vs {base_val}"
PY
}

run base 1 ""
samples base "4"
echo "fault-free: $(run_hash runs/base)"

# Node 1 down, no spare, never back: 4 -> 2 ranks, the 4 micro-batches of
# each step now 2 per rank instead of 1.
run shrink 1 "$(inject node-down 2 15)"
grep -q "elastic: node 1 dropped" shrink.err || fail "shrink: the drop was not said"
grep -q "elastic: 4 -> 2 data-parallel ranks; the global batch stays 4 micro-batches of 2 (2 per rank)" \
  shrink.err || fail "shrink: batch accounting not printed"
grep -q "re-partitioned over 2 ranks" shrink.err || fail "shrink: no in-memory re-partition"
! grep -q -- "---- restart" runs/shrink/logs/rank*.log || fail "shrink: a rank was restarted"
samples shrink "4 2"
within_noise shrink base

# Node 0 (the group's rank 0) down: the survivors on node 1 lead from then on.
run lead 1 "$(inject node-down 0 15)"
samples lead "4 2"
within_noise lead base
[ -n "$(run_hash runs/lead)" ] || fail "lead: no summary from the new rank 0"

# Node 1 comes back 1 s after it was lost: the group grows back to 4. The
# run must outlast the repair whatever the trainer's speed: 600 steps of the
# tiny model take several seconds (120 took under one), against a fault-free
# run of the same length.
STEPS=600 run base600 1 ""
STEPS=600 run grow 1 "node_repair = \"1s\"
$(inject node-down 2 15)"
grep -q "elastic: node 1 back on slot 1: 2 -> 4 data-parallel ranks" grow.err || fail "grow: no grow back"
grep -q -- "---- joined (generation 2) ----" runs/grow/logs/rank2.log || fail "grow: rank 2 did not join"
samples grow "4 2 4"
within_noise grow base600
# The same run beside fmstack sim's prediction for its job and fault load.
"$FMSTACK" report runs/grow --vs-sim grow.toml --trials 50 --json > grow.sim.json ||
  fail "grow: report --vs-sim failed"
$PY - grow.sim.json <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))["vs_sim"]
assert v["faults"] == 1 and v["policy"] == "elastic", v
for b in ("productive", "lost work", "restart + restore", "checkpoint"):
    assert 0 <= v["buckets"][b]["run"] <= 1 and 0 <= v["buckets"][b]["sim"] <= 1, (b, v["buckets"][b])
assert v["ettr"]["lo"] <= v["ettr"]["sim"] <= v["ettr"]["hi"], v["ettr"]
print(f"grow vs sim: goodput {v['ettr']['run']:.3f}, sim {v['ettr']['sim']:.3f} "
      f"[{v['ettr']['lo']:.3f}, {v['ettr']['hi']:.3f}]")
PY

# Three nodes, ZeRO-2 and DDP: 6 -> 4 ranks. ZeRO-2 with 6 micro-batches
# splits unevenly after the shrink (2, 2, 1, 1: the ranks with one reduce
# zero gradients in the second round); DDP with 12, 3 each.
NODES=3 GB=12 run base3z2 2 ""
NODES=3 GB=12 run shrink3z2 2 "$(inject node-down 4 15)"
grep -q "the global batch stays 6 micro-batches of 2 (2 per rank, some ranks one fewer)" shrink3z2.err ||
  fail "shrink3z2: uneven split not said"
samples shrink3z2 "6 4"
within_noise shrink3z2 base3z2
NODES=3 GB=24 run base3ddp 0 ""
NODES=3 GB=24 run shrink3ddp 0 "$(inject node-down 2 15)"
samples shrink3ddp "6 4"
within_noise shrink3ddp base3ddp

# With a spare the node's ranks move there: the same world, bitwise the same.
SPARES="spares = 1" run spare 1 "$(inject node-down 2 15)"
grep -q "its ranks move from slot 1 to spare slot 2" spare.err || fail "spare: not moved to the spare"
[ "$(run_hash runs/spare)" = "$(run_hash runs/base)" ] ||
  { grep -E "fault|decision|restored|elastic|spare" spare.err | head -20
    fail "spare: hash $(run_hash runs/spare), fault-free $(run_hash runs/base)"; }
samples spare "4"

# A corrupted copy held for the lost node: the shrink refuses by checksum,
# names it, and the newest checkpoint is restored into the smaller world.
run corrupt 1 "$(inject corrupt-replica 0 12; inject node-down 2 15)"
grep -q "its copy held by rank 0 failed its checksum" corrupt.err ||
  { tail -20 corrupt.err; fail "corrupt: the bad copy was not named"; }
grep -q "peer-restore-failed" runs/corrupt/goodput.json || fail "corrupt: no fallback incident"
samples corrupt "4 2"
within_noise corrupt base

# A ledger that trained a micro-batch twice is refused, naming the step.
cp -r runs/shrink tampered
$PY - tampered/samples/rank0.jsonl <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
e = json.loads(lines[-5]); e["micro"][1][0] -= 1; e["gen"] += 100
lines.append(json.dumps(e))
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
if "$FMSTACK" report tampered > tampered.out 2>&1; then fail "tampered: the ledger was accepted"; fi
grep -q "were trained twice" tampered.out || { cat tampered.out; fail "tampered: no duplicate named"; }
echo "elastic: all scenarios passed"
