#!/usr/bin/env bash
# Packs the CUDA tests, bench_gpu, bench_ckpt and fmstack, built here, for a GPU machine
# that has the CUDA toolkit but none of fmstack's Debian libraries (and no
# network to fetch them): the binaries, stripped, the shared libraries they
# need that are neither glibc's nor CUDA's (packed), the PyTorch peer,
# examples/gpt-mini-cuda.toml and its token shards, plus run.sh, which runs
# there: the CUDA kernel and model tests, the NCCL tests, bench_gpu beside
# PyTorch on the same model, `fmstack train` on the device, stopped and
# resumed, against one straight run, and bench_ckpt on the host's disk.
#
#   scripts/device-bundle.sh [OUT_DIR]      (default .device; about 33 MB)
#   then on the GPU machine, from the repository root:  bash .device/run.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="${FMSTACK_BUILD_DIR:-$root/build}"
out="${1:-$root/.device}"
bins=("$build/tests/gpt_cuda_test" "$build/tests/nccl_test" "$build/bench_gpu" "$build/fmstack" "$build/bench_ckpt")
[ -f "$root/data/kjv/train.bin" ] || { echo "device-bundle: data/kjv is missing: run fmstack data prepare first" >&2; exit 1; }
for b in "${bins[@]}"; do
  [ -x "$b" ] || { echo "device-bundle: $b is missing: build with the CUDA backend first (scripts/build.sh)" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out/lib" "$out/data" "$out/examples"
cp -r "$root/data/kjv" "$out/data/"
cp "$root/examples/gpt-mini-cuda.toml" "$out/examples/"  # its data dir, ../data/kjv, is beside it
cp "$root"/bench/{torch_gpt,torch_ckpt,torch_ckpt_gpu,ncu_table}.py "$out/"
for b in "${bins[@]}"; do
  strip -o "$out/$(basename "$b")" "$b"
done
# Libraries to carry: everything ldd resolves except the C library's own and
# CUDA's (the GPU machine has its own, matching its driver).
skip='/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so|/usr/local/cuda|libcuda\.so|libnvidia'
for b in "${bins[@]}"; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | grep -Ev "$skip" | while read -r lib; do
  cp -L "$lib" "$out/lib/"
  strip --strip-unneeded "$out/lib/$(basename "$lib")" 2>/dev/null || true
done
cat > "$out/run.sh" <<'SH'
#!/usr/bin/env bash
# Runs on the GPU machine; each step under a deadline, all logs in one file,
# $OUT/run.log (or .device/out/run.log), the runs' directories in a temporary one:
#   1. the CUDA twins of the CPU kernels, the whole model against the CPU model
#   2. NCCL on the devices present
#   3. bench_gpu on GPT-2 124M (fp32, TF32, bf16), PyTorch beside it on the same
#      model, batch and sequence (same attention, and its fused attention),
#      and a save's blocking part against the device-to-host copy alone and
#      against PyTorch's torch.save and DCP async_save of the same state
#   4. fmstack train on the device: 20 steps, then resumed from its own
#      checkpoint to 40, against one run of 40: the parameter hashes must agree
#   5. bench_ckpt, the checkpoint engine on the host against its disk's limits
#      and PyTorch's torch.save and DCP (1 and 4 GB): a host with many more
#      cores than ours (16 on the H200 machines lent so far), and its own disk
#   6. with --profile, where Nsight Compute (ncu) is installed: one TF32 and
#      one bf16 training step's kernels, by time (ncu_table.py), the CSVs
#      beside run.log
# STEPS='cuda_test|train_.*' (a regular expression) runs only the steps it
# names, to spend a short device lease on what changed.
set -uo pipefail
profile=0
[ "${1:-}" = "--profile" ] && profile=1
here=$(cd "$(dirname "$0")" && pwd)
out="${OUT:-$here/out}"
mkdir -p "$out"
log=$(mktemp -d)
libs=$(mktemp -d)
tar -C "$libs" -xzf "$here/lib.tar.gz" || { echo "run.sh: cannot unpack $here/lib.tar.gz" >&2; exit 1; }
pylib() {  # the lib/ folder of a pip-installed NVIDIA package, if python3 has it
  python3 -c "import nvidia.$1 as m, os; print(os.path.join(list(m.__path__)[0], 'lib'))" 2>/dev/null || true
}
cuda_lib=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e "$d/libcublas.so.13" ] && cuda_lib="$d" && break
done
[ -n "$cuda_lib" ] || cuda_lib=$(pylib cublas)
nccl_lib=""
for d in /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu; do
  [ -e "$d/libnccl.so.2" ] && nccl_lib="$d" && break
done
[ -n "$nccl_lib" ] || nccl_lib=$(pylib nccl)
export LD_LIBRARY_PATH="$libs/lib:${cuda_lib}:${nccl_lib}:${LD_LIBRARY_PATH:-}"
echo "cuBLAS from ${cuda_lib:-nowhere}, NCCL from ${nccl_lib:-nowhere}"
nvidia-smi -L || true
failed=()
step() {  # step NAME SECONDS COMMAND...: runs it with a deadline, log in $log/NAME.log
  local name=$1 limit=$2
  shift 2
  if [ -n "${STEPS:-}" ] && ! [[ "$name" =~ ^(${STEPS})$ ]]; then
    echo "=== $name: not in STEPS"
    return 0
  fi
  echo "=== $name (deadline ${limit}s)"
  timeout "$limit" "$@" > "$log/$name.log" 2>&1
  local r=$?
  tail -n 40 "$log/$name.log"
  echo "=== $name: exit $r"
  { echo "=== $name: exit $r"; cat "$log/$name.log"; } >> "$out/run.log"
  [ "$r" -eq 0 ] || failed+=("$name")
}
step cuda_test 300 "$here/gpt_cuda_test"
step nccl_test 120 "$here/nccl_test"
gpt2=(--model gpt2-124m --batch 8 --seq 1024 --torch-script "$here/torch_gpt.py")
step bench_gpu_fp32 300 "$here/bench_gpu" "${gpt2[@]}"
step bench_gpu_tf32 300 "$here/bench_gpu" "${gpt2[@]}" --matmul tf32
step bench_gpu_bf16 300 "$here/bench_gpu" "${gpt2[@]}" --matmul bf16
step bench_gpu_checkpoint 300 "$here/bench_gpu" --checkpoint "${gpt2[@]}"
job="$here/examples/gpt-mini-cuda.toml"
rm -rf "$log/split" "$log/straight"
step train_first_half 180 "$here/fmstack" train "$job" --until 20 --out "$log/split"
step train_resumed 180 "$here/fmstack" train "$job" --out "$log/split"
step train_straight 180 "$here/fmstack" train "$job" --out "$log/straight"
hash_of() { awk '/^parameter hash/ {print $3}' "$log/$1.log" 2>/dev/null; }
if [ -z "${STEPS:-}" ] || [[ "train_straight" =~ ^(${STEPS})$ ]]; then
  echo "parameter hash: resumed $(hash_of train_resumed), straight $(hash_of train_straight)"
  if [ -z "$(hash_of train_straight)" ] || [ "$(hash_of train_resumed)" != "$(hash_of train_straight)" ]; then
    failed+=("resume-matches-straight")
  fi
fi
# On the repository's disk, not in /tmp (often memory) nor under $OUT (copied back).
step bench_ckpt 420 "$here/bench_ckpt" --sizes 1,4 --dir "$here/ckpt-bench.tmp" --python python3 \
  --torch-script "$here/torch_ckpt.py"
rm -rf "$here/ckpt-bench.tmp"
if [ "$profile" = 1 ]; then
  ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
  if [ -n "$ncu_bin" ]; then
    for mode in tf32 bf16; do
      step "profile_$mode" 300 "$ncu_bin" --profile-from-start off --metrics gpu__time_duration.sum \
        --csv --print-units base --log-file "$out/ncu_$mode.csv" \
        "$here/bench_gpu" --profile --matmul "$mode" --model gpt2-124m --batch 8 --seq 1024
      step "kernels_$mode" 60 python3 "$here/ncu_table.py" "$out/ncu_$mode.csv" --top 30
    done
  else
    echo "=== profile: no ncu on this machine"
    failed+=("profile")
  fi
fi
echo "failed: ${failed[*]:-none}"
[ ${#failed[@]} -eq 0 ]
SH
chmod +x "$out/run.sh"
# The libraries travel packed (OpenBLAS alone is 36 MB unpacked); run.sh
# unpacks them on the GPU machine.
tar -C "$out" -czf "$out/lib.tar.gz" lib
rm -rf "$out/lib"
du -sh "$out"
