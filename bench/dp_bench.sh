#!/usr/bin/env bash
# Data-parallel scaling of the reference trainer on this machine, side by side
# in one run: tokens/s at W = 1 and W = 2, and what communication adds to the
# step time at W = 2, against the same two ranks computing without talking
# (two independent processes, each with half the global batch, at the same
# time, so they share the cores exactly as the data-parallel ranks do).
#   bash bench/dp_bench.sh [STEPS] [MODEL]     (defaults: 30 steps of gpt-mini)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
FMSTACK=${FMSTACK:-$root/build/fmstack}
steps=${1:-30}
model=${2:-gpt-mini}
data=$root/data/kjv
[ -f "$data/train.bin" ] || "$FMSTACK" data prepare --out "$data"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

job() {  # name nodes procs zero global threads
  cat > "$work/$1.toml" <<TOML
name = "$1"
model = "$model"
[cluster]
backend = "local"
nodes = $2
procs_per_node = $3
[parallel]
zero_stage = $4
[train]
precision = "fp32"
micro_batch = 4
global_batch = $5
steps = $steps
eval_interval = 0
eval_batches = 1
threads = $6
[optim]
warmup_steps = 10
[data]
dir = "$data"
TOML
}

done_event() {  # log -> the "done" event's field $2
  grep '"ev":"done"' "$1" | sed 's/^@fmstack //' |
    /usr/bin/python3 -c "import sys, json; print(json.loads(sys.stdin.read())['$2'])"
}

dp_run() {  # name nodes procs zero [env...]
  local name=$1 nodes=$2 procs=$3 zero=$4
  shift 4
  job "$name" "$nodes" "$procs" "$zero" 8 0
  env "$@" "$FMSTACK" run "$work/$name.toml" --out "$work/runs/$name" > /dev/null 2> "$work/$name.err" ||
    { cat "$work/$name.err"; exit 1; }
  local log=$work/runs/$name/logs/rank0.log
  echo "$name $(done_event "$log" tok_s) $(done_event "$log" comm_share)"
}

echo "model $model, global batch 8 x 4 x 256 tokens... measuring ($steps steps per run)" >&2
results=$work/results
{
  job w1 1 1 0 8 2
  "$FMSTACK" train "$work/w1.toml" --out "$work/runs/w1" --threads 2 > "$work/w1.out" 2>/dev/null
  echo "w1 $(awk '/^throughput/ {print $2}' "$work/w1.out") 0"
  dp_run ddp 1 2 0
  dp_run ddp_no_overlap 1 2 0 FMSTACK_DP_OVERLAP=0
  dp_run zero1 1 2 1
  dp_run zero2 1 2 2
  dp_run ddp_2nodes 2 1 0
  dp_run ddp_2nodes_gloo 2 1 0 FMSTACK_COMM_NET=gloo
  # Compute only: two independent single-process trainers, half the batch each.
  job half 1 1 0 4 1
  "$FMSTACK" train "$work/half.toml" --out "$work/runs/h0" --threads 1 > "$work/h0.out" 2>/dev/null &
  "$FMSTACK" train "$work/half.toml" --out "$work/runs/h1" --threads 1 > "$work/h1.out" 2>/dev/null
  wait
  echo "independent $(awk '/^throughput/ {s += $2} END {print s}' "$work/h0.out" "$work/h1.out") 0"
} > "$results"

/usr/bin/python3 - "$results" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    name, tok_s, share = line.split()
    rows[name] = (float(tok_s), float(share))
base = rows["independent"][0]
labels = {
    "w1": "W=1 (1 process, 2 threads)",
    "independent": "W=2 compute only (2 independent processes, 1 thread each)",
    "ddp": "W=2 DDP, overlapped, 1 node (shared memory)",
    "ddp_no_overlap": "W=2 DDP, not overlapped, 1 node",
    "zero1": "W=2 ZeRO-1, 1 node",
    "zero2": "W=2 ZeRO-2, 1 node",
    "ddp_2nodes": "W=2 DDP, overlapped, 2 nodes (fmstack's TCP mesh)",
    "ddp_2nodes_gloo": "W=2 DDP, overlapped, 2 nodes (Gloo's TCP, the reference)",
}
print(f"| run | tokens/s | vs W=1 | step time vs compute only | comm waited (rank 0) |")
print(f"|---|---|---|---|---|")
for key in ["w1", "independent", "ddp", "ddp_no_overlap", "zero1", "zero2", "ddp_2nodes",
            "ddp_2nodes_gloo"]:
    tok_s, share = rows[key]
    added = base / tok_s - 1
    print(f"| {labels[key]} | {tok_s:.0f} | {tok_s / rows['w1'][0]:.2f}x | "
          f"{'+' if added >= 0 else ''}{100 * added:.1f}% | {100 * share:.1f}% |")
added = base / rows["ddp"][0] - 1
print(f"\nDDP with overlap at W=2 adds {100 * added:.1f}% to the step time of the same ranks "
      f"computing alone (target <= 10%).")
PY
