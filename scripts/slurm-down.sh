#!/usr/bin/env bash
# scripts/slurm-down.sh DIR: stops the test cluster scripts/slurm-up.sh made
# in DIR (daemons, namespaces, bridge) and removes DIR's state. Whatever it
# cannot remove it names, and it exits non-zero.
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
dir=$1
[ -f "$dir/state.env" ] || { echo "slurm-down: $dir has no cluster (no state.env)" >&2; exit 1; }
pids=""
# What runs in the nodes' namespaces (job steps, their workers) goes first.
while IFS='=' read -r kind value; do
  [ "$kind" = netns ] && ip netns pids "$value" 2> /dev/null | xargs -r kill -KILL 2> /dev/null
done < "$dir/state.env"
while IFS='=' read -r kind value; do
  case "$kind" in
    slurmctld|slurmd|slurmdbd|mariadbd|munged) pids="$pids $value"; kill -TERM "$value" 2> /dev/null ;;
  esac
done < "$dir/state.env"
# Those of the given pids still alive after up to 5 s. After SIGKILL too a
# process is gone only once the kernel has torn it down, which takes a moment.
survivors() {
  local still=""
  for _ in $(seq 50); do
    still=""
    for p in "$@"; do kill -0 "$p" 2> /dev/null && still="$still $p"; done
    [ -z "$still" ] && break
    sleep 0.1
  done
  echo $still
}
alive=$(survivors $pids)
for p in $alive; do kill -KILL "$p" 2> /dev/null; done
alive=$(survivors $alive)
left=0
# The bridge goes last: while it is there, no other cluster takes its number
# and finds this one's namespaces.
while IFS='=' read -r kind value; do
  case "$kind" in
    # A namespace lives on while orphaned TCP sockets of its killed
    # processes wind down: its veth is removed from the host side at once.
    veth) ip link del "$value" 2> /dev/null || { ip link show "$value" > /dev/null 2>&1 && { echo "slurm-down: cannot remove veth $value" >&2; left=1; }; } ;;
    netns) ip netns del "$value" 2> /dev/null || { ip netns list | grep -qw "$value" && { echo "slurm-down: cannot remove netns $value" >&2; left=1; }; } ;;
  esac
done < "$dir/state.env"
while IFS='=' read -r kind value; do
  [ "$kind" = bridge ] || continue
  ip link del "$value" 2> /dev/null || { ip link show "$value" > /dev/null 2>&1 && { echo "slurm-down: cannot remove bridge $value" >&2; left=1; }; }
done < "$dir/state.env"
for p in $alive; do
  echo "slurm-down: process $p ($(ps -o comm= -p "$p" 2> /dev/null)) still runs after SIGKILL" >&2
  left=1
done
rm -rf "$dir/state.env" "$dir/state" "$dir/spool" "$dir/munge" "$dir/db"
exit $left
