#!/usr/bin/env bash
# PyTorch programs under `fmstack run`, with Debian's python3-torch: a plain
# DDP script (gloo, env:// rendezvous) works unchanged, as under torchrun,
# and survives a killed rank by restarting the group from the checkpoint it
# saved through fmstack's Python module.
#   1. the script under torchrun's environment set by hand (Debian's torch
#      1.13 `torchrun` does not start on Python 3.11), 2 nodes x 2 processes;
#   2. the same under `fmstack run --nodes 2 --procs-per-node 2`: the same
#      weights, bit for bit, with MASTER_PORT free for the script's store;
#   3. rank 2 SIGKILLed after step 7: the supervisor restarts the group, the
#      script resumes from step 5 and ends with the fault-free weights; and
#      again with live saves (the tensors written from their own memory until
#      released before optimizer.step()), to the same weights;
#   4. torchrun's exit and restart semantics: a failing rank fails the run
#      (exit 1) once the restarts are spent, TORCHELASTIC_RESTART_COUNT counts.
set -euo pipefail
: "${FMSTACK:?path to the fmstack binary}" "${SRC:?source tree}"
PY=/usr/bin/python3
"$PY" -c "import torch, numpy" || { echo "FAIL: python3-torch and python3-numpy are required"; exit 1; }
export PYTHONPATH="$SRC/python" FMSTACK_LIB="${FMSTACK_LIB:?path to libfmstack.so.1}"
SCRIPT="$SRC/tests/integration/torch/ddp_train.py"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
free_port() { "$PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"; }

echo "== 1. torchrun's environment by hand, 2 x 2"
port=$(free_port)
pids=()
for rank in 0 1 2 3; do
  RANK=$rank LOCAL_RANK=$((rank % 2)) WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 GROUP_RANK=$((rank / 2)) \
  GROUP_WORLD_SIZE=2 ROLE_RANK=$rank ROLE_WORLD_SIZE=4 ROLE_NAME=default \
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$port TORCHELASTIC_RESTART_COUNT=0 \
  TORCHELASTIC_MAX_RESTARTS=0 TORCHELASTIC_RUN_ID=plain TORCHELASTIC_USE_AGENT_STORE=False \
  OMP_NUM_THREADS=1 timeout 120 "$PY" "$SCRIPT" --out plain.bin > "plain$rank.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || { cat plain*.log; fail "plain launch failed"; }; done
grep weights plain0.log

echo "== 2. fmstack run, 2 x 2"
timeout 180 "$FMSTACK" run --nodes 2 --procs-per-node 2 --out run -- "$PY" "$SCRIPT" \
  --out run.bin > run.log 2>&1 || { cat run.log; fail "fmstack run failed"; }
grep weights run.log
cmp plain.bin run.bin || fail "weights under fmstack run differ from the plain launch"
grep -q "rank 0: attempt 0 of at most 0 more, run cmd" run.log || fail "TORCHELASTIC_* not set"

echo "== 3. rank 2 killed after step 7: group restarted, resumed from step 5"
timeout 180 "$FMSTACK" run --nodes 2 --procs-per-node 2 --max-restarts 1 --out fault -- \
  "$PY" "$SCRIPT" --out fault.bin --ckpt ckpt --every 5 --kill-rank 2 --kill-step 7 \
  > fault.log 2>&1 || { cat fault.log; fail "the faulted run did not recover"; }
grep -E "fault:|decision:|resumed|recovered|weights" fault.log
[ "$(grep -c "resumed from step 5" fault.log)" = 4 ] || fail "every rank must resume from step 5"
grep -q "attempt 1 of at most 1 more" fault.log || fail "TORCHELASTIC_RESTART_COUNT not 1 after restart"
cmp plain.bin fault.bin || fail "weights after recovery differ from the fault-free run's"
"$PY" - fault/goodput.json <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
(i,) = g["incidents"]
assert i["kind"] == "crash" and i["rank"] == 2, i
assert i["lost_steps"] == 2 and i["recovery_seconds"] > 0, i
assert g["seconds"]["checkpoint"] > 0 and g["seconds"]["restore"] > 0, g["seconds"]
print(f"incident: {i['what']}; recovered in {i['recovery_seconds']:.2f} s, "
      f"{i['lost_steps']} steps trained again; goodput {g['goodput']:.3f}")
PY

echo "== 3b. the same with live saves: nothing copied, released before optimizer.step()"
timeout 180 "$FMSTACK" run --nodes 2 --procs-per-node 2 --max-restarts 1 --out live -- \
  "$PY" "$SCRIPT" --out live.bin --ckpt live-ckpt --every 5 --live --kill-rank 2 --kill-step 7 \
  > live.log 2>&1 || { cat live.log; fail "the faulted run with live saves did not recover"; }
grep -E "resumed|weights" live.log
[ "$(grep -c "resumed from step 5" live.log)" = 4 ] || fail "live saves: every rank must resume from step 5"
cmp plain.bin live.bin || fail "live saves: weights after recovery differ from the fault-free run's"

echo "== 4. a failing rank fails the run once the restarts are spent (exit 1)"
cat > failing.py <<'PY'
import os, sys
print("attempt", os.environ["TORCHELASTIC_RESTART_COUNT"], flush=True)
sys.exit(3 if os.environ["RANK"] == "1" else 0)
PY
set +e
timeout 60 "$FMSTACK" run --nodes 1 --procs-per-node 2 --max-restarts 1 --out failing -- \
  "$PY" failing.py > failing.log 2>&1
code=$?
set -e
[ "$code" = 1 ] || { cat failing.log; fail "exit $code, expected 1"; }
grep -q "attempt 1" failing.log || fail "no second attempt"
grep -q "exited with status 3" failing.log || fail "the rank's own status is not named"
echo "PASS"
