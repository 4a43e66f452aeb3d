#!/usr/bin/env bash
# Time from a lost node to training again, on Slurm beside the local
# backend, the same fault on both: a node of a 2-node job (+1 spare) loses
# its link and everything on it is killed at step 100 (on Slurm: slurmd,
# the step's slurmstepd and the worker, scripts/slurm-node.sh; on the local
# backend: its network namespace's link and workers). Printed per backend,
# median and range of REPS: fault -> detected (the supervisor's "fault:"
# line) and fault -> training again (its "recovered from" line, the first
# step after the restore), and the ratio Slurm / local. Slurm needs the
# extra probe of the host's slurmd and srun's step launch.
#   bash bench/slurm_recovery.sh [REPS]   (default 3; root: namespaces, Slurm)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
FMSTACK=${FMSTACK:-$root/build/fmstack}
export FMSTACK
. "$root/scripts/lib/runs.sh"
reps=${1:-3}
work=$(mktemp -d)
cleanup() {
  [ -f "$work/cl/state.env" ] && "$root/scripts/slurm-down.sh" "$work/cl" > /dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
bible -f gen1:1-gen20:18 > corpus.txt
"$FMSTACK" data prepare --corpus corpus.txt --vocab 256 --held-out-every 50 --out data > /dev/null 2>&1
job() {  # file backend
  cat > "$1" <<TOML
name = "tiny"
$(tiny_model 256)
[cluster]
backend = "$2"
nodes = 2
procs_per_node = 1
spares = 1
$([ "$2" = local ] && echo 'netns = true')
[train]
micro_batch = 2
global_batch = 8
steps = 300
eval_interval = 0
eval_batches = 4
threads = 1
[data]
dir = "data"
[checkpoint]
every = 10
keep = 3
[resilience]
heartbeat_interval = "0.5s"
heartbeat_timeout = "4s"
collective_timeout = "20s"
restart_backoff = "0s"
TOML
}
job slurm.toml slurm
job local.toml local
"$root/scripts/slurm-up.sh" "$work/cl" slurm.toml > /dev/null
export SLURM_CONF="$work/cl/etc/slurm.conf"
echo "$("$FMSTACK" --version); $(sinfo --version); $(nproc) cores"

now() { date +%s.%N; }
# until_line FILE PATTERN: waits (50 ms polls, 120 s) and prints the time it appeared.
until_line() {
  for _ in $(seq 2400); do
    grep -q "$2" $1 2> /dev/null && { now; return; }
    sleep 0.05
  done
  echo "bench: '$2' never appeared in $1" >&2
  exit 1
}
wait_step() {
  for _ in $(seq 1200); do [ -d "$1/ckpt/step-00000100" ] && return; sleep 0.05; done
  echo "bench: $1 never reached step 100" >&2
  exit 1
}
: > times.txt
for rep in $(seq "$reps"); do
  # Slurm: the submitter follows the job; the batch output holds the notes.
  "$FMSTACK" run slurm.toml --out "runs/s$rep" > "s$rep.out" 2> "s$rep.err" &
  pid=$!
  wait_step "runs/s$rep"
  t0=$(now)
  "$root/scripts/slurm-node.sh" "$work/cl" down sn2
  t1=$(until_line "runs/s$rep/slurm/slurm-*.out" "fmstack run: fault: node 1")
  t2=$(until_line "runs/s$rep/slurm/slurm-*.out" "recovered from node-lost")
  wait $pid
  echo "slurm $t0 $t1 $t2" >> times.txt
  "$root/scripts/slurm-node.sh" "$work/cl" up sn2
  for _ in $(seq 600); do [ "$(sinfo -h -n sn2 -o %T)" = idle ] && break; sleep 0.1; done
  # Local: the supervisor's namespaces are fmstack-PID-nK.
  "$FMSTACK" run local.toml --out "runs/l$rep" > "l$rep.out" 2> "l$rep.err" &
  pid=$!
  wait_step "runs/l$rep"
  t0=$(now)
  ip -n "fmstack-$pid-n1" link set eth0 down
  ip netns pids "fmstack-$pid-n1" | xargs -r kill -KILL
  t1=$(until_line "l$rep.err" "fmstack run: fault: node 1")
  t2=$(until_line "l$rep.err" "recovered from node-lost")
  wait $pid
  echo "local $t0 $t1 $t2" >> times.txt
  [ "$(run_hash "runs/s$rep")" = "$(run_hash "runs/l$rep")" ] ||
    { echo "bench: rep $rep: the Slurm and local runs' hashes differ" >&2; exit 1; }
  echo "rep $rep/$reps done (hashes equal: $(run_hash "runs/l$rep"))" >&2
done
/usr/bin/python3 - times.txt <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    b, t0, t1, t2 = line.split()
    rows.setdefault(b, []).append((float(t1) - float(t0), float(t2) - float(t0)))
def cell(xs):
    return f"{statistics.median(xs):5.2f} s ({min(xs):.2f}-{max(xs):.2f})"
print(f"{'backend':8} {'fault -> detected':>24} {'fault -> training again':>26}")
for b in ("local", "slurm"):
    d = [x[0] for x in rows[b]]; r = [x[1] for x in rows[b]]
    print(f"{b:8} {cell(d):>24} {cell(r):>26}")
ratio = statistics.median(x[1] for x in rows["slurm"]) / statistics.median(x[1] for x in rows["local"])
print(f"slurm / local, fault -> training again (medians): {ratio:.2f}x")
PY
