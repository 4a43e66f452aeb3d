#!/usr/bin/env bash
# What a careless or hostile local process must not be able to do to a run
# (issue: termination, isolation, floods):
# - keep a recovering run's ranks out of its rendezvous store: 5,000
#   connections without the secret held open against it (reopened as fast
#   as they are dropped) while a rank is killed; the run recovers within its
#   usual time, with the default backoff and with none;
# - starve the metrics endpoint: 50 slowloris and 500 idle connections,
#   reopened as fast as they are dropped, while authenticated scrapes keep
#   answering (p99 of 100 under 1 s) and the run trains to its fault-free
#   hash;
# - share a checkpoint directory: a second job pointed at a first job's is
#   refused naming both, the first's checkpoints stay intact, and cleanup
#   leaves a planted foreign step directory and file alone; two Python
#   processes saving into one directory: the second is refused;
# - inject a fault into a run that is not live (its supervisor killed by
#   SIGKILL): refused, and nothing is replayed by the next run;
# - hang `fmstack run` after an early error: 100 starts with a directory
#   where metrics/targets.json.tmp goes, and 100 on a full file system, each
#   end with an error naming the path within 5 s.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/scripts/lib/runs.sh"
: "${FMSTACK:?path to the fmstack binary}"
PY=/usr/bin/python3
work=$(mktemp -d)
bg="" flood="" mnt=""
cleanup() {
  [ -n "$bg" ] && kill -9 "$bg" 2>/dev/null || true
  [ -n "$flood" ] && kill "$flood" 2>/dev/null || true
  wait 2>/dev/null || true
  [ -n "$mnt" ] && umount "$mnt" 2>/dev/null || true
  [ -n "${ro:-}" ] && umount "$ro" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }

bible -f gen1:1-gen20:18 > corpus.txt
"$FMSTACK" data prepare --corpus corpus.txt --vocab 256 --held-out-every 50 --out data >/dev/null 2>&1
tiny_job hostile 300 > job.toml
"$FMSTACK" run job.toml --out runs/base > /dev/null 2> base.err || { tail base.err; fail "fault-free run"; }
want=$(run_hash runs/base)

# The metrics endpoint under a flood.
"$FMSTACK" run job.toml --out runs/flooded > flooded.out 2> flooded.err &
bg=$!
for _ in $(seq 100); do [ -s runs/flooded/metrics/targets.json ] && break; sleep 0.1; done
target=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["targets"][0])' runs/flooded/metrics/targets.json)
cat > flood.py <<'PY'
# SLOW slowloris clients (a header byte every 0.5 s) and IDLE idle ones,
# each reopened as soon as the server drops it, until killed.
import resource, selectors, socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
slow, idle = int(sys.argv[2]), int(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if hard != resource.RLIM_INFINITY and hard < slow + idle + 64:
    sys.exit(f"flood: {slow + idle} connections need more descriptors than the hard limit {hard}")
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, slow + idle + 64), hard))
sel = selectors.DefaultSelector()
def open_one(kind):
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex((host, int(port)))
    sel.register(s, selectors.EVENT_READ, kind)
    if kind == "slow":
        try: s.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        except OSError: pass
for _ in range(slow): open_one("slow")
for _ in range(idle): open_one("idle")
next_drip = time.time()
while True:
    for key, _ in sel.select(timeout=0.1):
        try: data = key.fileobj.recv(4096)
        except OSError: data = b""
        if not data:
            sel.unregister(key.fileobj); key.fileobj.close(); open_one(key.data)
    if time.time() >= next_drip:
        next_drip = time.time() + 0.5
        for key in list(sel.get_map().values()):
            if key.data == "slow":
                try: key.fileobj.send(b"X")
                except OSError: pass
PY
$PY flood.py "$target" 50 500 &
flood=$!
sleep 3  # the flood is in place (and its first victims reopened)
$PY - "$target" runs/flooded/metrics/token <<'PY' > scrapes.txt || fail "scrapes under the flood: $(tail -3 scrapes.txt)"
import http.client, sys, time
host, port = sys.argv[1].rsplit(":", 1)
token = open(sys.argv[2]).read().strip()
lat = []
for _ in range(100):
    t0 = time.time()
    try:
        c = http.client.HTTPConnection(host, int(port), timeout=5)
        c.request("GET", "/metrics", headers={"Authorization": "Bearer " + token})
        r = c.getresponse(); body = r.read(); c.close()
        ok = r.status == 200 and b"fmstack_step" in body
    except OSError as e:
        ok = False
    lat.append(time.time() - t0 if ok else 99)
lat.sort()
print(f"100 scrapes under 50 slowloris + 500 idle connections: median {lat[49]*1e3:.1f} ms, "
      f"p99 {lat[98]*1e3:.1f} ms, max {lat[99]*1e3:.1f} ms, failed {sum(l == 99 for l in lat)}")
sys.exit(0 if lat[98] < 1.0 else 1)
PY
cat scrapes.txt
kill "$flood"; wait "$flood" 2>/dev/null || true; flood=""
wait "$bg" || { tail -20 flooded.err; fail "the flooded run did not finish"; }
bg=""
[ "$(run_hash runs/flooded)" = "$want" ] || fail "the flooded run's hash differs from the fault-free one"

# The store under a flood while a rank is killed: the recovery time against
# the same run's without the flood, with the default backoff (1 s) and none.
recovery() {  # run dir -> seconds of its first incident's recovery
  $PY -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["incidents"][0]["recovery_seconds"], 2))' "$1/goodput.json"
}
for backoff in 1s 0s; do
  sed "s/^restart_backoff = .*/restart_backoff = \"$backoff\"/" job.toml > store.toml
  for flooded in no yes; do
    dir=runs/store-$backoff-$flooded
    "$FMSTACK" run store.toml --out "$dir" > store.out 2> store.err &
    bg=$!
    for _ in $(seq 200); do grep -aq '"step":5[,}]' "$dir/logs/rank0.log" 2>/dev/null && break; sleep 0.05; done
    if [ "$flooded" = yes ]; then
      port=$(tr '\0' '\n' < "/proc/$(pgrep -P "$bg" | head -1)/environ" | sed -n 's/^FMSTACK_STORE_PORT=//p')
      [ -n "$port" ] || fail "the store's port was not found"
      $PY flood.py "127.0.0.1:$port" 0 5000 &
      flood=$!
      sleep 3
      kill -0 "$flood" || fail "the store flood did not start"
    fi
    "$FMSTACK" fault inject "$dir" --rank 1 --kind crash > /dev/null
    wait "$bg" || { tail -20 store.err; fail "store flood ($backoff, $flooded): the run did not recover"; }
    bg=""
    [ -n "$flood" ] && { kill "$flood"; wait "$flood" 2>/dev/null || true; flood=""; }
    [ "$(run_hash "$dir")" = "$want" ] || fail "store flood ($backoff, $flooded): hash differs"
    eval "rec_$flooded=$(recovery "$dir")"
  done
  echo "store: a crash recovered in $rec_no s, and in $rec_yes s under 5,000 connections without the secret (backoff $backoff); $(grep -m1 'dropped connections without' store.err | sed 's/^fmstack run: //' | cut -c1-150)"
  $PY -c "import sys; sys.exit(0 if $rec_yes < 2 * $rec_no + 3 else 1)" ||
    fail "store flood: recovery took $rec_yes s against $rec_no s without the flood"
done

# Two jobs, one checkpoint directory.
sed "s|^\[checkpoint\]|[checkpoint]\nlocal = \"$work/shared-ckpt\"|" job.toml > a.toml
sed 's/^name = "hostile"/name = "other"/' a.toml > b.toml
"$FMSTACK" run a.toml --steps 20 --out runs/a > /dev/null 2> a.err || { tail a.err; fail "job a"; }
mkdir -p shared-ckpt/step-00000003 && echo "a user's notes" > shared-ckpt/step-00000003/notes.txt
echo "a user's file" > shared-ckpt/README
mkdir -p shared-ckpt/step-99999999999999999999
set +e; "$FMSTACK" run b.toml --steps 20 --out runs/b > b.out 2> b.err; rc=$?; set -e
[ "$rc" != 0 ] || fail "job b was let into job a's checkpoint directory"
grep -q "shared-ckpt is the checkpoint directory of job 'hostile' (run directory $work/runs/a); this job is job 'other' (run directory $work/runs/b)" b.err ||
  { cat b.err; fail "the second job's refusal does not name both jobs"; }
[ ! -d runs/b/logs ] || [ -z "$(ls runs/b/logs)" ] || fail "job b started workers"
"$FMSTACK" run a.toml --steps 30 --allow-schedule-change --out runs/a > /dev/null 2> a2.err || { tail a2.err; fail "job a's rerun"; }
"$FMSTACK" ckpt verify a.toml --out runs/a > verify.out 2>&1 || { cat verify.out; fail "job a's checkpoints after job b"; }
grep -q "left alone" a2.err || fail "the foreign step directory was not reported"
[ -f shared-ckpt/step-00000003/notes.txt ] && [ -f shared-ckpt/README ] && [ -d shared-ckpt/step-99999999999999999999 ] ||
  fail "cleanup removed what fmstack did not write"
echo "isolation: $(grep -o "shared-ckpt is the checkpoint directory of job 'hostile'" b.err); foreign files kept; $(tail -1 verify.out)"
PYTHONPATH="$root/python" FMSTACK_LIB="$(dirname "$FMSTACK")/libfmstack.so.1" $PY - <<'PY' > py.out 2>&1 || { cat py.out; fail "two Python writers"; }
import fmstack, numpy as np, subprocess, sys
first = fmstack.Checkpointer("pyckpt", rank=0, world=1)
first.save(1, {"w": np.ones(4, np.float32)})
first.wait()
second = subprocess.run([sys.executable, "-c", """
import fmstack
try:
    fmstack.Checkpointer("pyckpt", rank=0, world=1)
    print("a second writer was let in")
except fmstack.Error as e:
    print("refused:", e)
"""], capture_output=True, text=True)
print(second.stdout.strip(), second.stderr.strip())
first.close()
sys.exit(0 if "being written by another process" in second.stdout else 1)
PY
cat py.out

# A fault injected into a run whose supervisor is gone: refused, not replayed.
"$FMSTACK" run job.toml --out runs/dead > /dev/null 2> dead.err &
bg=$!
for _ in $(seq 100); do [ -s runs/dead/run.json ] && break; sleep 0.1; done
kill -9 "$bg"; wait "$bg" 2>/dev/null || true; bg=""
pkill -9 -f "runs/dead" 2>/dev/null || true
set +e; "$FMSTACK" fault inject runs/dead --rank 1 --kind crash > inject.out 2>&1; rc=$?; set -e
[ "$rc" != 0 ] && grep -q "the run is not live" inject.out || { cat inject.out; fail "an injection into a dead run was accepted"; }

# Early errors end promptly, whatever failed first.
starts() {  # name dir expected-words
  local slow=0 t0 t1 rc
  for i in $(seq 100); do
    t0=$(date +%s%N)
    set +e; timeout 30 "$FMSTACK" run job.toml --out "$2" > "$1.out" 2>&1; rc=$?; set -e
    t1=$(date +%s%N)
    [ "$rc" != 0 ] && [ "$rc" != 124 ] || { cat "$1.out"; fail "$1: start $i: exit $rc"; }
    grep -q -- "$3" "$1.out" || { cat "$1.out"; fail "$1: start $i: the error does not say '$3'"; }
    [ $(( (t1 - t0) / 1000000 )) -lt 5000 ] || fail "$1: start $i took $(( (t1 - t0) / 1000000 )) ms"
    [ $(( (t1 - t0) / 1000000 )) -gt "$slow" ] && slow=$(( (t1 - t0) / 1000000 ))
  done
  echo "$1: 100 starts, each an error within $slow ms: $(grep -m1 -- "$3" "$1.out")"
}
mkdir -p runs/blocked/metrics/targets.json.tmp
starts blocked runs/blocked "runs/blocked/metrics/targets.json"
[ "$(id -u)" = 0 ] || fail "a full file system needs root to mount a tmpfs (run the suite as root)"
mnt=$work/full
mkdir -p "$mnt"
mount -t tmpfs -o size=64k tmpfs "$mnt"
dd if=/dev/zero of="$mnt/fill" bs=4k count=64 2>/dev/null || true
starts full "$mnt/run" "No space left on device"
# A read-only file system: the error names the path and the fix.
ro=$work/ro
mkdir -p "$ro"
mount -t tmpfs -o ro,size=64k tmpfs "$ro"
set +e; "$FMSTACK" run job.toml --out "$ro/run" > ro.out 2>&1; rc=$?; set -e
umount "$ro"
[ "$rc" = 2 ] && grep -q "^fmstack: error: $ro/run.*[Rr]ead-only file system" ro.out ||
  { cat ro.out; fail "a read-only run directory: exit $rc, no clear error"; }
echo "read-only: $(grep '^fmstack: error' ro.out)"

# A manifest past the bound is refused before it is read.
cp -r shared-ckpt big-ckpt
step=$(dirname "$(ls -d big-ckpt/step-*/COMMITTED | tail -1)")
truncate -s 65M "$step/manifest.json"
set +e; "$FMSTACK" ckpt inspect big-ckpt --step "$((10#${step##*step-}))" > big.out 2>&1; set -e
grep -q "more than a manifest may hold" big.out || { cat big.out; fail "a 65 MiB manifest was not refused"; }
echo "manifest: $(grep -o 'manifest.json: .*' big.out | head -1)"
echo "PASS"
