#!/usr/bin/env bash
# The corpus pipeline on a real Slurm cluster (scripts/slurm-up.sh: munge,
# slurmctld, a slurmd per node in its own network namespace, accounting):
# `sbatch --nodes=2` runs the coordinator, which starts each worker as a job
# step (srun) of its allocation. The output is byte-identical to the local
# backend's, sacct shows the workers' steps on both nodes, and outside an
# allocation the slurm backend is refused with what to do.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/scripts/lib/runs.sh"
: "${FMSTACK:?path to the fmstack binary}"
for tool in slurmctld slurmd slurmdbd mariadbd munged sbatch sacct; do
  command -v "$tool" > /dev/null || { echo "FAIL: $tool is not installed (scripts/bootstrap.sh)"; exit 1; }
done
REF=/usr/share/debian-reference
[ -f "$REF/ch01.ja.html" ] || { echo "FAIL: debian-reference-ja is missing (scripts/bootstrap.sh)"; exit 1; }
work=$(mktemp -d)
cleanup() {
  local rc=$?
  if [ -f "$work/cl/state.env" ] && ! "$root/scripts/slurm-down.sh" "$work/cl" > "$work/down.out" 2>&1; then
    echo "FAIL: the cluster's teardown: $(cat "$work/down.out")"
    rc=1
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
cd "$work"
fail() { echo "FAIL: $*"; for f in "$work"/*.err "$work"/*.log; do [ -f "$f" ] && tail -15 "$f"; done; exit 1; }

for l in en ja de; do
  mkdir -p "html/$l"
  cp "$REF"/ch0[1-6]."$l".html "html/$l/"
  cp "html/$l/ch02.$l.html" "html/$l/ch99.$l.html"  # an exact copy
done
pipeline() {  # file out backend
  cat > "$1" <<TOML
[data.pipeline]
inputs = ["html/*"]
out = "$2"
backend = "$3"
workers = 3
partitions = 4
[[data.pipeline.stage]]
kind = "extract"
[[data.pipeline.stage]]
kind = "normalize"
[[data.pipeline.stage]]
kind = "language"
keep = ["en", "ja", "de"]
[[data.pipeline.stage]]
kind = "exact-dedup"
[[data.pipeline.stage]]
kind = "minhash-dedup"
TOML
}
pipeline local.toml local local
pipeline slurm.toml slurm slurm
"$FMSTACK" data pipeline local.toml > local.out 2> local.err || fail "the local run"

# Outside an allocation: refused, saying how to run it.
if env -u SLURM_JOB_ID "$FMSTACK" data pipeline slurm.toml > outside.out 2>&1; then
  fail "the slurm backend ran outside an allocation"
fi
grep -q "run it inside one (sbatch --nodes=N" outside.out || { cat outside.out; fail "no clear refusal"; }

{ tiny_job cluster 10 | sed 's/^backend = "local"/backend = "slurm"/; s/^procs_per_node = 2/procs_per_node = 1/'; } > cluster.toml
"$root/scripts/slurm-up.sh" "$work/cl" cluster.toml > up.out || { cat up.out; fail "slurm-up"; }
export SLURM_CONF="$work/cl/etc/slurm.conf"
sbatch --parsable --wait --nodes=2 --ntasks-per-node=1 --output="$work/batch.log" \
  --chdir="$work" --wrap "$FMSTACK data pipeline slurm.toml" > job_id ||
  { cat batch.log; fail "the batch job failed"; }
for f in local/shard-*.jsonl; do
  cmp -s "$f" "slurm/${f#local/}" || fail "${f#local/} differs between the local and slurm backends"
done
/usr/bin/python3 - local/report.json slurm/report.json <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["stages"] == b["stages"], "the reports' counts differ"
ex = {s["stage"]: s for s in a["stages"]}["exact-dedup"]["removed"]
assert ex.get("exact-duplicate") == 3, ex
PY
sacct -j "$(cat job_id)" -n -P -o JobName,NodeList > steps.txt
nodes=$(grep '^fmstack-data-' steps.txt | cut -d'|' -f2 | sort -u | wc -l)
steps=$(grep -c '^fmstack-data-' steps.txt)
[ "$nodes" -ge 2 ] || { cat steps.txt; fail "the workers' steps ran on $nodes node(s)"; }
echo "slurm: $steps worker steps on $nodes nodes; output equal to the local backend's"
