#!/usr/bin/env bash
# The termination contract (docs/resilience.md, "Stopping a run"): a 2 x 2
# run checkpointing every 5 steps is stopped mid-interval the ways
# schedulers stop jobs - the supervisor alone (Kubernetes' PID 1, a kill);
# the supervisor and every worker at once (Slurm's time limit, scancel,
# systemd's KillMode=control-group); the workers 0.3 s before the
# supervisor; GNU timeout (its child, then the process group: the
# supervisor sees SIGTERM twice); Slurm's --signal=USR1 warning, then
# SIGTERM; SIGHUP (a closed ssh session). Each must commit an emergency
# checkpoint of the step it stopped at, exit 128 + the first signal, book
# one "signal" incident with 0 steps lost and no crash, and a rerun must
# resume from that step (0 steps redone) and end with the fault-free
# parameter hash. Then: SIGQUIT aborts at once, resilience.on_hangup =
# "ignore" keeps a run going through SIGHUP, and a program without
# fmstack's handler (`fmstack run --`) killed by SIGTERM is a stop, not a
# crash, and is not restarted.
set -euo pipefail
. "$(dirname "$0")/../../scripts/lib/runs.sh"
: "${FMSTACK:?path to the fmstack binary}"
PY=/usr/bin/python3
work=$(mktemp -d)
bg=""
cleanup() {
  [ -n "$bg" ] && kill -9 "$bg" 2>/dev/null || true
  [ -n "${FMSTACK_KEEP_WORK:-}" ] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }

bible -f gen1:1-gen20:18 > corpus.txt
"$FMSTACK" data prepare --corpus corpus.txt --vocab 256 --held-out-every 50 --out data >/dev/null 2>&1

job() { tiny_job term 30 "$1" > "$2"; }  # extra-toml file
job "" term.toml
"$FMSTACK" run term.toml --out runs/base > /dev/null 2> base.err || { cat base.err; fail "fault-free run"; }
want=$(run_hash runs/base)
[ -n "$want" ] || fail "no parameter hash in the fault-free run"

# Waits until rank 0 has trained past step 6 (a checkpoint at 5, the next
# at 10): the stop lands mid-interval.
wait_step() {
  for _ in $(seq 600); do
    grep -aq '"step":\(7\|8\)[,}]' "$1/logs/rank0.log" 2>/dev/null && return 0
    kill -0 "$bg" 2>/dev/null || fail "$1: the run ended before step 7"
    sleep 0.05
  done
  fail "$1: no step 7 within 30 s"
}
workers() { pgrep -P "$1" | tr '\n' ' '; }
incidents() {  # run dir -> "kind:lost_steps ..." of every incident
  $PY - "$1/goodput.json" <<'PY'
import json, sys
print(" ".join(f'{i["kind"]}:{i["lost_steps"]}' for i in json.load(open(sys.argv[1]))["incidents"]))
PY
}

printf '%-14s %4s %8s %18s %s\n' delivery exit stopped incidents rerun > table.txt
for case in supervisor all workers-first timeout-group usr1-then-term hup; do
  dir=runs/$case
  if [ "$case" = timeout-group ]; then
    timeout 600 "$FMSTACK" run term.toml --out "$dir" > "$case.out" 2> "$case.err" &
  else
    "$FMSTACK" run term.toml --out "$dir" > "$case.out" 2> "$case.err" &
  fi
  bg=$!
  wait_step "$dir"
  sup=$bg
  [ "$case" = timeout-group ] && sup=$(pgrep -P "$bg")
  ws=$(workers "$sup")
  [ "$(echo $ws | wc -w)" = 4 ] || fail "$case: expected 4 workers under pid $sup, found '$ws'"
  case $case in
    supervisor) kill -TERM "$sup"; want_rc=143;;
    all) kill -TERM "$sup" $ws; want_rc=143;;
    # The supervisor may have finished the stop before its own signal comes.
    workers-first) kill -TERM $ws; sleep 0.3; kill -TERM "$sup" 2>/dev/null || true; want_rc=143;;
    timeout-group) kill -TERM "$bg"; want_rc=143;;  # timeout: child, then its group
    usr1-then-term) kill -USR1 "$sup"; sleep 0.5; kill -TERM "$sup" $ws 2>/dev/null || true; want_rc=138;;
    hup) kill -HUP "$sup"; want_rc=129;;
  esac
  set +e; wait "$bg"; rc=$?; set -e
  bg=""
  [ "$rc" = "$want_rc" ] || { tail -20 "$case.err"; fail "$case: exit $rc, expected $want_rc"; }
  grep -q "every rank saved the current step and stopped" "$case.err" ||
    { tail -20 "$case.err"; fail "$case: no emergency checkpoint"; }
  stopped=$(grep -o "step [0-9]*: saved and stopped on request" "$case.err" | grep -o "[0-9]*" | head -1)
  [ -n "$stopped" ] || fail "$case: the stopped step is not named"
  inc=$(incidents "$dir")
  [ "$inc" = "signal:0" ] || { tail -20 "$case.err"; fail "$case: incidents '$inc', expected one stop (signal:0)"; }
  grep -q "restarting\|---- restart" "$case.err" "$dir"/logs/rank0.log && fail "$case: restarted after a stop"
  "$FMSTACK" run term.toml --out "$dir" > /dev/null 2> "$case.rerun.err" || { tail -20 "$case.rerun.err"; fail "$case: rerun"; }
  resumed=$(grep -ao "resumed from step-[0-9]*" "$dir/logs/rank0.log" | head -1 | grep -o "[0-9]*$" | sed 's/^0*//')
  [ "$resumed" = "$stopped" ] || fail "$case: stopped at step $stopped, the rerun resumed from '$resumed'"
  [ "$(run_hash "$dir")" = "$want" ] || fail "$case: hash differs from the fault-free run"
  printf '%-14s %4s %8s %18s %s\n' "$case" "$rc" "$stopped" "$inc" "resumed $resumed, hash ok" >> table.txt
done
cat table.txt
# The group's SIGTERM after the child's is the same stop (the kernel merges
# the two when both are pending): never an abort.
grep -q "aborting\|second signal" timeout-group.err && fail "timeout-group: the group's SIGTERM aborted the save"
grep -q "SIGTERM to rank" workers-first.err || fail "workers-first: the workers' reports were not the trigger"

# SIGQUIT aborts: no save, exit 131, the loss booked as steps lost.
"$FMSTACK" run term.toml --out runs/quit > quit.out 2> quit.err &
bg=$!
wait_step runs/quit
kill -QUIT "$bg"
set +e; wait "$bg"; rc=$?; set -e
bg=""
[ "$rc" = 131 ] || { tail -20 quit.err; fail "SIGQUIT: exit $rc, expected 131"; }
grep -q "aborting: every worker is killed now" quit.err || fail "SIGQUIT: no abort message"
inc=$(incidents runs/quit)
case $inc in signal:[1-9]*) ;; *) fail "SIGQUIT: incidents '$inc', expected a stop with its steps lost";; esac
echo "SIGQUIT: aborted, incidents $inc"

# on_hangup = "ignore": SIGHUP is noted and the run finishes.
job 'on_hangup = "ignore"' nohup.toml
"$FMSTACK" run nohup.toml --out runs/nohup > nohup.out 2> nohup.err &
bg=$!
wait_step runs/nohup
kill -HUP "$bg"
wait "$bg" || { tail -20 nohup.err; fail "on_hangup = ignore: the run did not finish"; }
bg=""
grep -q "SIGHUP.*the run goes on" nohup.err || fail "on_hangup = ignore: SIGHUP not noted"
[ "$(run_hash runs/nohup)" = "$want" ] || fail "on_hangup = ignore: hash differs"

# A program without fmstack's handler, killed by SIGTERM from outside: a
# stop (no restart), not a crash.
cat > sleeper.sh <<'SH'
#!/bin/sh
exec sleep 60
SH
chmod +x sleeper.sh
"$FMSTACK" run --nodes 2 --procs-per-node 2 --max-restarts 3 --out runs/prog -- ./sleeper.sh > prog.out 2> prog.err &
bg=$!
for _ in $(seq 100); do [ "$(workers "$bg" | wc -w)" = 4 ] && break; sleep 0.1; done
w=$(workers "$bg" | cut -d' ' -f1)
kill -TERM "$w"
set +e; wait "$bg"; rc=$?; set -e
bg=""
[ "$rc" = 143 ] || { tail -20 prog.err; fail "program killed by SIGTERM: exit $rc, expected 143"; }
inc=$(incidents runs/prog)
case $inc in signal:*) ;; *) fail "program killed by SIGTERM: incidents '$inc', expected a stop";; esac
grep -q "restarting" prog.err && fail "program killed by SIGTERM: restarted"
echo "PASS"
