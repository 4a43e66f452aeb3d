#!/usr/bin/env bash
# What peer replicas cost a fault-free run: the same 2 node x 2 process
# ZeRO-1 job of gpt-mini with replicas off (policy "checkpoint") and on
# (policy "checkpointless", refreshed every 1 and every 4 steps), runs
# interleaved, REPS of each; the median step time (the training thread's
# step plus its part of the refresh, steps 3 and on) side by side, and the
# overhead against off. The refresh copies each rank's shard (parameters and
# moments, 3/4 of the model's size in all) and sends it to the next node
# beside the next step, so its cost is a share of the step that shrinks as
# the batch grows.
#   bash bench/replica_overhead.sh [REPS] [GLOBAL_BATCH] [STEPS]   (defaults: 3, 32, 12)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
FMSTACK=${FMSTACK:-$root/build/fmstack}
reps=${1:-3}
batch=${2:-32}
steps=${3:-12}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
bible -f gen1:1-gen20:18 > corpus.txt
"$FMSTACK" data prepare --corpus corpus.txt --vocab 256 --held-out-every 50 --out data >/dev/null 2>&1
job() {  # file policy every
  cat > "$1" <<TOML
name = "overhead"
[model]
preset = "gpt-mini"
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
global_batch = $batch
steps = $steps
eval_interval = 0
eval_batches = 1
threads = 1
[data]
dir = "data"
[checkpoint]
every = 1000
[resilience]
policy = "$2"
peer_replica_every = $3
TOML
}
job off.toml checkpoint 1
job every1.toml checkpointless 1
job every4.toml checkpointless 4
echo "fmstack $("$FMSTACK" --version | awk '{print $2}'), $(nproc) cores, gpt-mini (10.8M parameters)," \
  "2 x 2 ranks ZeRO-1, 1 thread each, global batch $batch x 64 tokens, $reps runs each"
for i in $(seq "$reps"); do
  for c in off every1 every4; do
    rm -rf run
    "$FMSTACK" run "$c.toml" --out run > /dev/null 2> err.txt || { tail err.txt; exit 1; }
    grep -a '^@fmstack ' run/logs/rank0.log | sed 's/^@fmstack //' | python3 -c '
import json, statistics, sys
steps = [json.loads(l) for l in sys.stdin]
steps = [e for e in steps if e["ev"] == "step"][2:]
print(statistics.median(e["step_s"] + e.get("replica_s", 0) for e in steps),
      statistics.median(e.get("replica_s", 0) for e in steps))' >> "$c.txt"
    printf '\r  run %d/%d %s' "$i" "$reps" "$c" >&2
  done
done
printf '\r\033[K' >&2
python3 - <<'PY'
import statistics
rows = {c: [list(map(float, l.split())) for l in open(c + ".txt")] for c in ("off", "every1", "every4")}
off = statistics.median(r[0] for r in rows["off"])
print(f"{'replicas':<22} {'step p50':>9} {'refresh on the step':>20} {'overhead':>9}")
for c, name in (("off", "off"), ("every1", "every step"), ("every4", "every 4 steps")):
    step = statistics.median(r[0] for r in rows[c])
    refresh = statistics.median(r[1] for r in rows[c])
    over = step / off - 1
    mark = "" if c == "off" else ("  (target <= 5%: met)" if over <= 0.05 else "  (target <= 5%: NOT met)")
    print(f"{name:<22} {step:8.3f}s {refresh:19.3f}s {100 * over:8.1f}%{mark}")
PY
