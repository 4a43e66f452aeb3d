#!/usr/bin/env bash
# Packs the CUDA tests and bench_gpu, built here, for a GPU machine that has
# the CUDA toolkit but none of fmstack's Debian libraries (and no network to
# fetch them): the binaries, stripped, and the shared libraries they need
# that are neither glibc's nor CUDA's, plus run.sh, which runs the CUDA
# kernel and model tests, the NCCL tests and the benchmark there.
#
#   scripts/device-bundle.sh [OUT_DIR]      (default .device; under 64 MiB)
#   then on the GPU machine, from the repository root:  bash .device/run.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="${FMSTACK_BUILD_DIR:-$root/build}"
out="${1:-$root/.device}"
bins=("$build/tests/gpt_cuda_test" "$build/tests/nccl_test" "$build/bench_gpu")
for b in "${bins[@]}"; do
  [ -x "$b" ] || { echo "device-bundle: $b is missing: build with the CUDA backend first (scripts/build.sh)" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out/lib"
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
# Runs on the GPU machine: the CUDA twins of the CPU kernels, the whole model
# against the CPU model, NCCL, then bench_gpu on GPT-2 124M (fp32, then TF32).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cuda_lib=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e "$d/libcublas.so.13" ] && cuda_lib="$d" && break
done
if [ -z "$cuda_lib" ]; then
  cuda_lib=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null || true)
fi
export LD_LIBRARY_PATH="$here/lib:${cuda_lib}:${LD_LIBRARY_PATH:-}"
nvidia-smi -L || true
rc=0
"$here/gpt_cuda_test" || rc=1
"$here/nccl_test" || rc=1
"$here/bench_gpu" --model gpt2-124m --batch 8 --seq 1024 || rc=1
"$here/bench_gpu" --model gpt2-124m --batch 8 --seq 1024 --tf32 || rc=1
exit $rc
SH
chmod +x "$out/run.sh"
du -sh "$out"
