#!/usr/bin/env bash
# Recovery times of `fmstack run`, per fault kind: each kind is injected REPS
# times (default 5) into a 2 node x 2 process ZeRO-1 run, and the bench
# prints the median time from the fault to the first completed step after
# it (detection + decision + restart + restore + one step), the median
# detection time against the issue's targets (crash < 1 s, hang <= timeout
# + 1 s; a stall, whose heartbeats go on, <= collective_timeout + 2 s),
# and, side by side in the same run, a cold `fmstack run` that resumes from
# the same checkpoint (what a user re-running the job by hand
# pays after noticing, the noticing not counted).
# Then checkpointless recovery against restart-from-checkpoint on the same
# job and the same crash (mid-way between two checkpoints): the time to
# regain the lost progress = detection + recovery to the first step +
# the lost steps trained again (at the run's median step time).
#   bash bench/recovery.sh [REPS] [MODEL] [SECTIONS]   (defaults: 5, a 2-layer 64-wide GPT;
#   MODEL=gpt-mini for a 10.8M-parameter model; SECTIONS=all|kinds|peers)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
FMSTACK=${FMSTACK:-$root/build/fmstack}
reps=${1:-5}
model=${2:-tiny}
sections=${3:-all}
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
collective_timeout = "${COLLECTIVE_TIMEOUT:-20}s"
restart_backoff = "0s"
straggler_steps = ${STRAGGLER_STEPS:-1000}
${2:-}
TOML
}
echo "fmstack $("$FMSTACK" --version | awk '{print $2}'), $(nproc) cores, model $model, $reps runs per case"

kinds="crash exit hang stall nan bitflip straggler disk-full kill-during-save corrupt-checkpoint notice supervisor-restart"
[ "$(id -u)" = 0 ] && kinds="$kinds network-cut"
if [ "$sections" != peers ]; then
printf '%-20s %14s %14s %12s %9s %9s\n' kind "fault->step p50" "detect p50" "target" "vs target" "lost p50"
for kind in $kinds; do
  rank=1 flags=()
  [ "$kind" = network-cut ] && rank=2 flags=(--netns)
  steps_=1000
  [ "$kind" = straggler ] && steps_=5
  # A stall is found when its peers' collectives time out: 8 s, not the
  # job's 20, keeps its rows to a minute.
  ctimeout=20
  [ "$kind" = stall ] && ctimeout=8
  COLLECTIVE_TIMEOUT=$ctimeout STRAGGLER_STEPS=$steps_ job f.toml "[[faults.inject]]
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
  python3 - "$kind" "$timeout" "$ctimeout" times.txt <<'PY'
import statistics, sys
kind, timeout, ctimeout = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
rows = [list(map(float, l.split())) for l in open(sys.argv[4])]
total = statistics.median(r[0] for r in rows)
detect = statistics.median(r[1] for r in rows)
lost = statistics.median(r[2] for r in rows)
target = {"crash": 1.0, "exit": 1.0, "kill-during-save": 1.0, "hang": timeout + 1,
          "stall": ctimeout + 2}.get(kind)
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
fi

[ "$sections" = kinds ] && exit 0
# Checkpointless vs restart-from-checkpoint: one crash mid-way between two
# checkpoints, the same job otherwise, runs interleaved; at a frequent
# checkpoint cadence and at one 4x longer (gpt-mini: 24 steps = 11 s here,
# the Young/Daly interval sqrt(2 x 0.1 s blocking save x 10 min MTTI)).
peers() {  # every at steps
  local every=$1 at=$2 steps=$3
  echo
  echo "checkpointless vs checkpoint-restart: crash of rank 1 after step $at, checkpoint every $every steps"
  for policy in checkpoint checkpointless; do
    job "peer-$policy.toml" "policy = \"$policy\"
[[faults.inject]]
kind = \"crash\"
rank = 1
at_step = $at"
    sed -i "s/^every = .*/every = $every/; s/^steps = .*/steps = $steps/" "peer-$policy.toml"
    : > "peer-$policy.txt"
  done
  for i in $(seq "$reps"); do
    for policy in checkpoint checkpointless; do
      rm -rf run
      "$FMSTACK" run "peer-$policy.toml" --out run > /dev/null 2> err.txt || { tail err.txt; exit 1; }
      python3 - run >> "peer-$policy.txt" <<'PY'
import json, statistics, sys
run = sys.argv[1]
i = json.load(open(run + "/goodput.json"))["incidents"][0]
steps = [json.loads(l[len("@fmstack "):]) for l in open(run + "/logs/rank0.log", errors="replace")
         if l.startswith("@fmstack ")]
step_s = statistics.median(e["step_s"] + e.get("replica_s", 0) for e in steps if e["ev"] == "step")
recover = max(i["detect_seconds"], 0) + i["recovery_seconds"]
print(recover, i["lost_steps"], step_s, recover + i["lost_steps"] * step_s)
PY
      printf '\r  %s %d/%d' "$policy" "$i" "$reps" >&2
    done
  done
  printf '\r\033[K' >&2
  python3 - peer-checkpoint.txt peer-checkpointless.txt <<'PY'
import statistics, sys
rows = {}
print(f"{'policy':<16} {'fault->step p50':>16} {'lost steps p50':>15} {'step p50':>9} {'regain p50':>11}")
for name, path in (("checkpoint", sys.argv[1]), ("checkpointless", sys.argv[2])):
    r = [list(map(float, l.split())) for l in open(path)]
    med = [statistics.median(x[k] for x in r) for k in range(4)]
    rows[name] = med
    print(f"{name:<16} {med[0]:15.3f}s {med[1]:15.0f} {med[2]:8.3f}s {med[3]:10.3f}s")
fast = rows["checkpoint"][0] / rows["checkpointless"][0]
ratio = rows["checkpoint"][3] / rows["checkpointless"][3]
print(f"checkpointless: fault -> first step {fast:.1f}x faster; regains the lost progress "
      f"{ratio:.1f}x faster (target >= 3x: {'met' if ratio >= 3 else 'NOT met'})")
PY
}
if [ "$model" = tiny ]; then
  peers 10 15 30
  peers 40 60 70
else
  peers 6 9 14
  peers 24 36 40
fi
