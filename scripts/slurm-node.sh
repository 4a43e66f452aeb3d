#!/usr/bin/env bash
# scripts/slurm-node.sh DIR down|up NODE: a node of the test cluster that
# scripts/slurm-up.sh made in DIR fails or comes back.
#   down: its link is cut, then slurmd and everything else on it is killed
#         (the host lost power: nothing it held says goodbye).
#   up:   its link comes back and a new slurmd starts; Slurm returns it to
#         service by itself (ReturnToService=2). Recorded for slurm-down.sh.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 DIR down|up NODE" >&2; exit 2; }
dir=$(cd "$1" && pwd)
action=$2
node=$3
[ -f "$dir/state.env" ] || { echo "slurm-node: $dir has no cluster" >&2; exit 1; }
ns="$(sed -n 's/^prefix=//p' "$dir/state.env")-$node"
grep -qx "netns=$ns" "$dir/state.env" || { echo "slurm-node: the cluster has no node $node" >&2; exit 1; }
case "$action" in
  down)
    ip -n "$ns" link set eth0 down
    # Kill until none is left, within 5 s: a process may exit between the
    # listing and the kill (not an error), or fork after the listing.
    for _ in $(seq 50); do
      pids=$(ip netns pids "$ns")
      [ -z "$pids" ] && break
      kill -KILL $pids 2>/dev/null || true
      sleep 0.1
    done
    [ -z "$(ip netns pids "$ns")" ] || { echo "slurm-node: processes in $ns survive SIGKILL" >&2; exit 1; }
    ;;
  up)
    ip -n "$ns" link set eth0 up
    nsenter --net="/run/netns/$ns" unshare --uts \
      sh -c "hostname $node; exec slurmd -D -f '$dir/etc/slurm.conf'" >> "$dir/log/slurmd-$node.out" 2>&1 &
    echo "slurmd=$!" >> "$dir/state.env"
    ;;
  *) echo "slurm-node: down or up, not $action" >&2; exit 2 ;;
esac
