#!/usr/bin/env bash
# Recovery times of `fmstack run`, per fault kind: each kind is injected REPS
# times (default 5) into a 2 node x 2 process ZeRO-1 run, and the bench
# prints the median time from the fault to the first completed step after
# it (detection + decision + restart + restore + one step), the median
# detection time against the issue's targets (crash < 1 s, hang <= timeout
# + 1 s), and, side by side in the same run, a cold `fmstack run` that
# resumes from the same checkpoint (what a user re-running the job by hand
# pays after noticing, the noticing not counted).
#   bash bench/recovery.sh [REPS] [MODEL]   (defaults: 5, a 2-layer 64-wide GPT; MODEL=gpt-mini for a 99 MB state)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
FMSTACK=${FMSTACK:-$root/build/fmstack}
reps=${1:-5}
model=${2:-tiny}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
bible -f gen1:1-gen20:18 > corpus.txt
"$FMSTACK" data prepare --corpus corpus.txt --vocab 256 --held-out-every 50 --out data >/dev/null 2>&1
if [ "$model" = tiny ]; then
  shape='layers = 2
hidden = 64
heads = 2
ffn_hidden = 256'
  steps=80 at=12
else
  shape=""
  steps=14 at=4
fi
timeout=4
job() {  # file extra
  cat > "$1" <<TOML
name = "bench"
[model]
preset = "gpt-mini"
$shape
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
steps = $steps
eval_interval = 0
eval_batches = 1
threads = 1
[data]
dir = "data"
[checkpoint]
every = 5
[resilience]
heartbeat_interval = "0.5s"
heartbeat_timeout = "${timeout}s"
collective_timeout = "20s"
restart_backoff = "0s"
straggler_steps = ${STRAGGLER_STEPS:-1000}
${2:-}
TOML
}

kinds="crash exit hang nan bitflip straggler disk-full kill-during-save corrupt-checkpoint notice supervisor-restart"
[ "$(id -u)" = 0 ] && kinds="$kinds network-cut"
echo "fmstack $("$FMSTACK" --version | awk '{print $2}'), $(nproc) cores, model $model, $reps runs per kind"
printf '%-20s %14s %14s %12s %9s %9s\n' kind "fault->step p50" "detect p50" "target" "vs target" "lost p50"
for kind in $kinds; do
  rank=1 flags=()
  [ "$kind" = network-cut ] && rank=2 flags=(--netns)
  steps_=1000
  [ "$kind" = straggler ] && steps_=5
  STRAGGLER_STEPS=$steps_ job f.toml "[[faults.inject]]
kind = \"$kind\"
rank = $rank
at_step = $at"
  : > times.txt
  for i in $(seq "$reps"); do
    rm -rf run
    "$FMSTACK" run f.toml "${flags[@]}" --out run > /dev/null 2> err.txt || { tail err.txt; exit 1; }
    python3 - run/goodput.json >> times.txt <<'PY'
import json, sys
i = json.load(open(sys.argv[1]))["incidents"][0]
print(max(i["detect_seconds"], 0) + i["recovery_seconds"], i["detect_seconds"], i["lost_steps"])
PY
    printf '\r  %s %d/%d' "$kind" "$i" "$reps" >&2
  done
  printf '\r\033[K' >&2
  python3 - "$kind" "$timeout" times.txt <<'PY'
import statistics, sys
kind, timeout = sys.argv[1], float(sys.argv[2])
rows = [list(map(float, l.split())) for l in open(sys.argv[3])]
total = statistics.median(r[0] for r in rows)
detect = statistics.median(r[1] for r in rows)
lost = statistics.median(r[2] for r in rows)
target = {"crash": 1.0, "exit": 1.0, "kill-during-save": 1.0, "hang": timeout + 1}.get(kind)
print(f"{kind:<20} {total:13.2f}s {detect:13.2f}s {('< %.0f s' % target) if target else '-':>12} "
      f"{(f'{detect / target:.2f}x') if target and detect >= 0 else '-':>9} {lost:9.0f}")
PY
done

# The peer: a user's cold rerun from the same checkpoint, launch to first step.
job f.toml
rm -rf run
"$FMSTACK" run f.toml --out run --until "$at" > /dev/null 2>&1
: > cold.txt
for i in $(seq "$reps"); do
  cp -r run cold
  start=$(date +%s.%N)
  "$FMSTACK" run f.toml --out cold --until $((at + 1)) > /dev/null 2>&1
  python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$start" "$(date +%s.%N)" >> cold.txt
  rm -rf cold
done
python3 - cold.txt <<'PY'
import statistics, sys
print(f"\ncold rerun by hand (launch -> first step after the checkpoint, whole command): "
      f"{statistics.median(float(l) for l in open(sys.argv[1])):.2f} s p50")
PY
