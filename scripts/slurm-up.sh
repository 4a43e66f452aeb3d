#!/usr/bin/env bash
# scripts/slurm-up.sh DIR JOB.toml: a real Slurm cluster on this machine for
# the job's [cluster] (its nodes, then its spares): its own munged, slurmctld
# on the host as "ctl", one slurmd per node in its own network namespace on a
# private bridge, configured by `fmstack slurm config`.
# Accounting, so sacct shows jobs and their steps: slurmdbd on the host over
# a private MariaDB (its own data directory, 127.0.0.1 only, a random
# password). Everything it makes is recorded under DIR; scripts/slurm-down.sh
# DIR removes it all. Needs root, iproute2 and Debian's slurm-wlm, slurmdbd,
# mariadb-server and munge (scripts/bootstrap.sh). Clients:
# SLURM_CONF=DIR/etc/slurm.conf sinfo.
#
# Each cluster takes the first free number K in 1..250 (SLURM_CLUSTER_ID
# picks one): bridge fmslK on 10.77.K.0/24, namespaces fmslK-NODE, veths
# fmslKvI, slurmctld on port 17000+2K and slurmdbd on the next. Creating the
# bridge claims K (the kernel refuses a second link of that name), so
# clusters of test runs that share a network namespace, or one a killed run
# left behind, do not collide.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 DIR JOB.toml" >&2; exit 2; }
dir=$(mkdir -p "$1" && cd "$1" && pwd)
job=$2
root=$(cd "$(dirname "$0")/.." && pwd)
FMSTACK=${FMSTACK:-$root/build/fmstack}
for tool in slurmctld slurmd slurmdbd mariadbd mariadb-install-db munged sinfo scontrol sacctmgr ip nsenter unshare; do
  command -v "$tool" > /dev/null ||
    { echo "slurm-up: $tool is not installed (run scripts/bootstrap.sh)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "slurm-up: needs root (network namespaces, slurmd)" >&2; exit 1; }
[ -e "$dir/state.env" ] && { echo "slurm-up: $dir holds a cluster already (slurm-down.sh it)" >&2; exit 1; }

mkdir -p "$dir"/{etc,state,spool,log,munge,db}
: > "$dir/state.env"
record() { echo "$1" >> "$dir/state.env"; }
trap 'echo "slurm-up: failed; removing what was made" >&2; "$root/scripts/slurm-down.sh" "$dir" > /dev/null 2>&1 || true' ERR

listening() { [ -n "$(ss -Hltn "sport = :$1")" ]; }
claim() {  # claim K: its bridge, subnet, namespaces and ports are free, and the bridge is ours
  ! ip link show "fmsl$1" > /dev/null 2>&1 && [ -z "$(ip route show "10.77.$1.0/24")" ] &&
    ! ip netns list | grep -q "^fmsl$1-" &&
    ! listening $((17000 + 2 * $1)) && ! listening $((17001 + 2 * $1)) &&
    ip link add "fmsl$1" type bridge 2> /dev/null
}
id=""
for k in ${SLURM_CLUSTER_ID:-$(seq 1 250)}; do
  [[ "$k" =~ ^[0-9]+$ ]] && [ "$k" -ge 1 ] && [ "$k" -le 250 ] ||
    { echo "slurm-up: SLURM_CLUSTER_ID=$k: expected 1 to 250" >&2; false; }
  claim "$k" && { id=$k; break; }
done
[ -n "$id" ] || { echo "slurm-up: no free cluster number (${SLURM_CLUSTER_ID:-1 to 250}): bridge fmslK, 10.77.K.0/24 or ports 17000+2K, +1 taken" >&2; false; }
bridge="fmsl$id"
net="10.77.$id"
ctl_port=$((17000 + 2 * id))
dbd_port=$((ctl_port + 1))
record "bridge=$bridge"
record "prefix=$bridge"
record "net=$net"

# munge, private to this cluster: its own key and socket.
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 0400 "$dir/munge/munge.key"
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"
record "munged=$(cat "$dir/munge/munged.pid")"

"$FMSTACK" slurm config "$job" --out "$dir/etc" --controller ctl --controller-addr "$net.1" \
  --node-addr-base "$net." --cpus "${SLURM_CPUS:-2}" --memory-mb "${SLURM_MEMORY_MB:-2000}" \
  --state-dir "$dir/state" --spool-dir "$dir/spool" --log-dir "$dir/log" \
  --munge-socket "$dir/munge/munge.socket" --accounting-host "$net.1" \
  --slurmctld-port "$ctl_port" --accounting-port "$dbd_port" > /dev/null
export SLURM_CONF="$dir/etc/slurm.conf"
cluster_name=$(sed -n 's/^ClusterName=//p' "$SLURM_CONF")

# MariaDB for slurmdbd, private to this cluster.
db_port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
db_pass=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
mariadb-install-db --no-defaults --user=root --datadir="$dir/db/data" --skip-test-db \
  > "$dir/log/mariadb-install.log" 2>&1
mariadbd --no-defaults --user=root --datadir="$dir/db/data" --socket="$dir/db/mysqld.sock" \
  --bind-address=127.0.0.1 --port="$db_port" --pid-file="$dir/db/mariadbd.pid" \
  --log-error="$dir/log/mariadbd.log" > "$dir/log/mariadbd.out" 2>&1 &
record "mariadbd=$!"
end=$((SECONDS + 30))
until mariadb --no-defaults -S "$dir/db/mysqld.sock" -e 'select 1' > /dev/null 2>&1; do
  [ $SECONDS -lt $end ] || { echo "slurm-up: MariaDB is not up after 30 s" >&2; tail -5 "$dir/log/mariadbd.log" >&2; false; }
  sleep 0.1
done
mariadb --no-defaults -S "$dir/db/mysqld.sock" -e \
  "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$db_pass'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
( umask 077; cat > "$dir/etc/slurmdbd.conf" <<CONF
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
DbdHost=ctl
DbdAddr=$net.1
DbdPort=$dbd_port
SlurmUser=root
LogFile=$dir/log/slurmdbd.log
PidFile=$dir/db/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$db_port
StorageUser=slurm
StoragePass=$db_pass
StorageLoc=slurm_acct_db
CONF
)
nodes=$(sed -n 's/^NodeName=\([^ ]*\) .*/\1/p' "$SLURM_CONF")

# Every link at the MTU that `fmstack run --netns` gives its nodes
# (cluster::kLinkMtu, src/cluster/netns.h): a veth has no wire, and at
# 1500 bytes the nodes' TCP ran at half speed.
mtu=65535
ip addr add "$net.1/24" dev "$bridge"
ip link set "$bridge" mtu $mtu up
i=0
for n in $nodes; do
  i=$((i + 1))
  ns="$bridge-$n"
  ip netns add "$ns"
  record "netns=$ns"
  ip link add "${bridge}v$i" type veth peer name eth0 netns "$ns"
  record "veth=${bridge}v$i"
  ip link set "${bridge}v$i" mtu $mtu master "$bridge" up
  ip -n "$ns" addr add "$net.$((10 + i))/24" dev eth0
  ip -n "$ns" link set eth0 mtu $mtu up
  ip -n "$ns" link set lo up
done

# slurmdbd as "ctl" too (DbdHost), on the bridge's address; the cluster is
# registered before slurmctld first reports to it.
unshare --uts sh -c "hostname ctl; exec slurmdbd -D" > "$dir/log/slurmdbd.out" 2>&1 &
record "slurmdbd=$!"
end=$((SECONDS + 30))
until timeout 5 sacctmgr -n show cluster > /dev/null 2>&1; do
  [ $SECONDS -lt $end ] || { echo "slurm-up: slurmdbd does not answer after 30 s" >&2; tail -5 "$dir/log/slurmdbd.log" >&2; false; }
  sleep 0.2
done
timeout 10 sacctmgr -i add cluster "$cluster_name" > /dev/null

# slurmctld answers as "ctl" (SlurmctldHost); each slurmd as its node,
# entered with nsenter (ip netns exec remounts /sys and slurmd aborts).
unshare --uts sh -c "hostname ctl; exec slurmctld -D -i -f '$SLURM_CONF'" \
  > "$dir/log/slurmctld.out" 2>&1 &
record "slurmctld=$!"
for n in $nodes; do
  mkdir -p "$dir/spool/$n"
  nsenter --net="/run/netns/$bridge-$n" unshare --uts \
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
echo "slurm-up: $count nodes idle ($(echo $nodes)) on $bridge ($net.0/24); export SLURM_CONF=$SLURM_CONF"
