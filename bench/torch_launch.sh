#!/usr/bin/env bash
# Step time of a PyTorch DDP script (tests/integration/torch/ddp_train.py,
# gloo, 2 nodes x 2 processes on this machine) launched with torchrun's
# environment set by hand vs under `fmstack run` (supervisor, heartbeats,
# step marks, metrics endpoint). Alternating, warm, median of 3 each (each
# run's own figure is its median step after two warm-up steps), one thread
# per process on both sides.
#   bash bench/torch_launch.sh [REPEATS] [STEPS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="${FMSTACK_BUILD_DIR:-$root/build}"
repeats=${1:-3} steps=${2:-40}
PY=/usr/bin/python3
export PYTHONPATH="$root/python" FMSTACK_LIB="$build/libfmstack.so.1" OMP_NUM_THREADS=1
script="$root/tests/integration/torch/ddp_train.py"
args=(--steps "$steps" --width 192 --batch 8)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
echo "torch $($PY -c 'import torch; print(torch.__version__)'), $(getconf _NPROCESSORS_ONLN) cores, 4 processes x 1 thread, $steps steps"

plain() {
  local port pids=()
  port=$($PY -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
  for rank in 0 1 2 3; do
    RANK=$rank LOCAL_RANK=$((rank % 2)) WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 GROUP_RANK=$((rank / 2)) \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port TORCHELASTIC_RESTART_COUNT=0 \
      timeout 300 "$PY" "$script" "${args[@]}" --out plain.bin > "plain$rank.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  sed -n 's/^step_ms //p' plain0.log
}
fm() {
  rm -rf run
  timeout 300 "$build/fmstack" run --nodes 2 --procs-per-node 2 --out run -- "$PY" "$script" \
    "${args[@]}" --out fm.bin > fm.log 2>&1
  sed -n 's/^\[rank 0\] step_ms //p' fm.log
}
plain > /dev/null; fm > /dev/null  # warm: page cache, imports
p=() f=()
for i in $(seq "$repeats"); do
  p+=("$(plain)")
  f+=("$(fm)")
  echo "  repeat $i/$repeats: plain ${p[-1]} ms/step, fmstack run ${f[-1]} ms/step"
done
$PY - "${p[*]}" "${f[*]}" <<'PY'
import statistics, sys
p = [float(x) for x in sys.argv[1].split()]
f = [float(x) for x in sys.argv[2].split()]
mp, mf = statistics.median(p), statistics.median(f)
print(f"\n{'launch':16}{'median ms/step':>16}")
print(f"{'torchrun env':16}{mp:16.2f}\n{'fmstack run':16}{mf:16.2f}")
print(f"\nratio: fmstack run / plain = {mf / mp:.3f} (target <= 1.03)")
PY
