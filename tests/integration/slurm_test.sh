#!/usr/bin/env bash
# A real Slurm cluster for a job's [cluster], from `fmstack slurm config`:
# scripts/slurm-up.sh starts munge, slurmctld and one slurmd per node (2
# nodes and a spare, each in its own network namespace). Slurm then runs a
# batch job across the nodes and sees the rack tree of topology.conf. A node
# whose fmstack health check fails (a fake Xid 79) is drained in Slurm with
# the check's reason, and a job that needs it waits until it is resumed.
# scripts/slurm-down.sh leaves no process, namespace or bridge behind. Bad
# configurations are refused with the option named. A second cluster comes up
# beside the first on its own bridge, subnet and ports.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
: "${FMSTACK:?path to the fmstack binary}"
export FMSTACK
for tool in slurmctld slurmd munged sbatch; do
  command -v "$tool" > /dev/null || { echo "FAIL: $tool is not installed (scripts/bootstrap.sh)"; exit 1; }
done
work=$(mktemp -d)
cleanup() {
  local rc=$?
  # What slurm-down cannot remove fails the test, named.
  for cl in cl2 cl; do
    if [ -f "$work/$cl/state.env" ] && ! "$root/scripts/slurm-down.sh" "$work/$cl" > "$work/down.out" 2>&1; then
      echo "FAIL: $cl's teardown: $(cat "$work/down.out")"
      rc=1
    fi
  done
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
cd "$work"
fail() { echo "FAIL: $*"; [ -f cl/log/slurmctld.log ] && tail -5 cl/log/slurmctld.log; exit 1; }

cat > job.toml <<'TOML'
name = "tiny-slurm"
[model]
preset = "gpt-mini"
[cluster]
backend = "local"
nodes = 2
procs_per_node = 1
spares = 1
nodes_per_rack = 2
TOML

# Bad options are refused, naming the option; nothing is written.
"$FMSTACK" slurm config job.toml --out bad --node-prefix 9x > e1 2>&1 && fail "a bad prefix was accepted"
grep -q -- '--node-prefix "9x"' e1 || { cat e1; fail "the bad prefix is not named"; }
[ ! -e bad ] || fail "a refused configuration wrote files"

t0=$(date +%s%N)
"$root/scripts/slurm-up.sh" "$work/cl" job.toml > up.out || { cat up.out; fail "slurm-up"; }
echo "$(cat up.out) ($(( ($(date +%s%N) - t0) / 1000000 )) ms)"
export SLURM_CONF="$work/cl/etc/slurm.conf"
"$root/scripts/slurm-up.sh" "$work/cl" job.toml > up2.out 2>&1 && fail "a second cluster in the same DIR started"
grep -q "holds a cluster already" up2.out || { cat up2.out; fail "no clear error for a second cluster"; }

[ "$(sinfo -h -N -o '%N %T' | sort | tr '\n' ' ')" = "sn1 idle sn2 idle sn3 idle " ] ||
  { sinfo -N; fail "not 3 idle nodes"; }
scontrol show topology > topo.txt
grep -q 'SwitchName=leaf0 .*Nodes=sn\[1-2\]' topo.txt && grep -q 'SwitchName=leaf1 .*Nodes=sn3' topo.txt &&
  grep -q 'SwitchName=spine .*Switches=leaf\[0-1\]' topo.txt || { cat topo.txt; fail "the rack tree"; }

# A second cluster beside the first, as test runs that share a network
# namespace make: it takes the next free number (bridge, subnet, ports), and
# each answers for its own nodes.
sed 's/^nodes = 2/nodes = 1/; s/^spares = 1/spares = 0/' job.toml > one.toml
"$root/scripts/slurm-up.sh" "$work/cl2" one.toml > up3.out 2>&1 || { cat up3.out; fail "a second cluster beside the first"; }
b1=$(sed -n 's/^bridge=//p' cl/state.env)
b2=$(sed -n 's/^bridge=//p' cl2/state.env)
[ -n "$b1" ] && [ -n "$b2" ] && [ "$b1" != "$b2" ] || fail "the two clusters share bridge '$b1'"
[ "$(SLURM_CONF=cl2/etc/slurm.conf srun -N1 hostname)" = sn1 ] || fail "the second cluster's job"
[ "$(sinfo -h -N -o '%N %T' | sort | tr '\n' ' ')" = "sn1 idle sn2 idle sn3 idle " ] ||
  { sinfo -N; fail "the first cluster after the second came up"; }
"$root/scripts/slurm-down.sh" "$work/cl2" || fail "slurm-down of the second cluster"
ip link show "$b1" > /dev/null 2>&1 || fail "the second cluster's slurm-down removed the first's bridge"
echo "beside: a second cluster came up on $b2 (the first on $b1), ran a job, went down"

# A batch job over two nodes; each task names its node.
id=$(sbatch --parsable --requeue -N2 -o job.out --wrap 'srun -N2 hostname')
for _ in $(seq 120); do [ -z "$(squeue -h -j "$id" 2> /dev/null)" ] && break; sleep 0.25; done
[ "$(sort job.out | tr '\n' ' ')" = "sn1 sn2 " ] || { cat job.out; fail "the batch job did not run on sn1 and sn2"; }
echo "sbatch: job $id ran on $(sort job.out | tr '\n' ' ')"

# fmstack's node checks drain a node in Slurm with their reason.
mkdir -p dev && printf '{"present": true, "xid": [79]}\n' > dev/gpu0.json
srun -w sn3 "$FMSTACK" agent --once --slurm-drain --devices "fake:$work/dev" --run-dir /tmp > agent.out 2>&1 &&
  fail "the agent passed a node with Xid 79"
grep -q "drained sn3 in Slurm: fmstack: xid 79 on gpu 0" agent.out || { cat agent.out; fail "agent drain"; }
sinfo -h -R -o '%n|%E' | grep -q '^sn3|fmstack: xid 79 on gpu 0' || { sinfo -R; fail "Slurm has no drain reason"; }
id=$(sbatch --parsable -N3 -o wide.out --wrap 'srun -N3 hostname')
sleep 2
[ "$(squeue -h -j "$id" -o %T)" = PENDING ] || fail "a 3-node job ran with sn3 drained"
scontrol update nodename=sn3 state=resume
for _ in $(seq 120); do [ -z "$(squeue -h -j "$id" 2> /dev/null)" ] && break; sleep 0.25; done
[ "$(sort wide.out | tr '\n' ' ')" = "sn1 sn2 sn3 " ] || { cat wide.out; fail "the 3-node job after resume"; }
echo "health: sn3 drained in Slurm for xid 79, a 3-node job waited, ran once it was resumed"

bridge=$(sed -n 's/^bridge=//p' cl/state.env)
[ -n "$bridge" ] || fail "state.env names no bridge"
"$root/scripts/slurm-down.sh" "$work/cl" || fail "slurm-down reported leftovers"
pgrep -f "$work/cl" > /dev/null && fail "processes of the cluster are left"
ip netns list | grep -q "^$bridge-" && fail "namespaces are left"
ip link show "$bridge" > /dev/null 2>&1 && fail "the bridge $bridge is left"
"$root/scripts/slurm-down.sh" "$work/cl" > down2.out 2>&1 && fail "slurm-down of nothing succeeded"
grep -q "has no cluster" down2.out || fail "no clear error for slurm-down of nothing"
echo "PASS"
