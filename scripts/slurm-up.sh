#!/usr/bin/env bash
# scripts/slurm-up.sh DIR JOB.toml: a real Slurm cluster on this machine for
# the job's [cluster] (its nodes, then its spares): its own munged, slurmctld
# on the host as "ctl", one slurmd per node in its own network namespace on a
# private bridge (10.77.0.0/24), configured by `fmstack slurm config`.
# Everything it makes is recorded under DIR; scripts/slurm-down.sh DIR removes
# it all. Needs root, iproute2 and Debian's slurm-wlm and munge
# (scripts/bootstrap.sh). Clients: SLURM_CONF=DIR/etc/slurm.conf sinfo.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 DIR JOB.toml" >&2; exit 2; }
dir=$(mkdir -p "$1" && cd "$1" && pwd)
job=$2
root=$(cd "$(dirname "$0")/.." && pwd)
FMSTACK=${FMSTACK:-$root/build/fmstack}
net=${SLURM_NET:-10.77.0}
for tool in slurmctld slurmd munged sinfo scontrol ip nsenter unshare; do
  command -v "$tool" > /dev/null ||
    { echo "slurm-up: $tool is not installed (run scripts/bootstrap.sh)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "slurm-up: needs root (network namespaces, slurmd)" >&2; exit 1; }
[ -e "$dir/state.env" ] && { echo "slurm-up: $dir holds a cluster already (slurm-down.sh it)" >&2; exit 1; }
ip link show fmsl0 > /dev/null 2>&1 &&
  { echo "slurm-up: bridge fmsl0 exists: another test cluster runs (scripts/slurm-down.sh its DIR)" >&2; exit 1; }

mkdir -p "$dir"/{etc,state,spool,log,munge}
: > "$dir/state.env"
record() { echo "$1" >> "$dir/state.env"; }
trap 'echo "slurm-up: failed; removing what was made" >&2; "$root/scripts/slurm-down.sh" "$dir" > /dev/null 2>&1 || true' ERR

# munge, private to this cluster: its own key and socket.
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 0400 "$dir/munge/munge.key"
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"
record "munged=$(cat "$dir/munge/munged.pid")"

"$FMSTACK" slurm config "$job" --out "$dir/etc" --controller ctl --controller-addr "$net.1" \
  --node-addr-base "$net." --cpus "${SLURM_CPUS:-2}" --memory-mb "${SLURM_MEMORY_MB:-2000}" \
  --state-dir "$dir/state" --spool-dir "$dir/spool" --log-dir "$dir/log" \
  --munge-socket "$dir/munge/munge.socket" > /dev/null
export SLURM_CONF="$dir/etc/slurm.conf"
nodes=$(sed -n 's/^NodeName=\([^ ]*\) .*/\1/p' "$SLURM_CONF")

ip link add fmsl0 type bridge
record "bridge=fmsl0"
ip addr add "$net.1/24" dev fmsl0
ip link set fmsl0 up
i=0
for n in $nodes; do
  i=$((i + 1))
  ns="fmsl-$n"
  ip netns add "$ns"
  record "netns=$ns"
  ip link add "fmslv$i" type veth peer name eth0 netns "$ns"
  ip link set "fmslv$i" master fmsl0 up
  ip -n "$ns" addr add "$net.$((10 + i))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
done

# slurmctld answers as "ctl" (SlurmctldHost); each slurmd as its node,
# entered with nsenter (ip netns exec remounts /sys and slurmd aborts).
unshare --uts sh -c "hostname ctl; exec slurmctld -D -i -f '$SLURM_CONF'" \
  > "$dir/log/slurmctld.out" 2>&1 &
record "slurmctld=$!"
for n in $nodes; do
  mkdir -p "$dir/spool/$n"
  nsenter --net="/run/netns/fmsl-$n" unshare --uts \
    sh -c "hostname $n; exec slurmd -D -f '$SLURM_CONF'" > "$dir/log/slurmd-$n.out" 2>&1 &
  record "slurmd=$!"
done

count=$(echo "$nodes" | wc -w)
for _ in $(seq 120); do
  idle=$(sinfo -h -N -o '%N %T' 2> /dev/null | grep -c ' idle$' || true)
  [ "$idle" = "$count" ] && break
  sleep 0.5
done
if [ "$idle" != "$count" ]; then
  echo "slurm-up: $idle of $count nodes idle after 60 s; sinfo says:" >&2
  sinfo -N >&2 || true
  tail -5 "$dir/log/slurmctld.log" >&2 || true
  false
fi
trap - ERR
echo "slurm-up: $count nodes idle ($(echo $nodes)); export SLURM_CONF=$SLURM_CONF"
