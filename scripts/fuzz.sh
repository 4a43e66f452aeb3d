#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz/ and
# runs each for SECONDS (default 30) from the seeds in tests/fuzz/corpus/.
# A crash, a sanitizer report or an exception other than fmstack::Error
# fails it, with the input saved as build-fuzz/crash-*.
#   bash scripts/fuzz.sh [SECONDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-30}
build="${FMSTACK_FUZZ_BUILD_DIR:-$root/build-fuzz}"
command -v clang++ >/dev/null || { echo "fuzz: clang++ is missing (scripts/bootstrap.sh installs it)"; exit 1; }
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
CC=clang CXX=clang++ cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DFMSTACK_FUZZ=ON -DFMSTACK_NATIVE=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target fuzz_job_spec fuzz_checkpoint
for target in fuzz_job_spec fuzz_checkpoint; do
  corpus=$(mktemp -d)
  cp "$root"/tests/fuzz/corpus/"${target#fuzz_}"/* "$corpus"/
  echo "fuzz: $target for ${seconds} s"
  (cd "$build" && "./$target" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
     -rss_limit_mb=2048 -print_final_stats=1 "$corpus" 2>&1 | tail -4)
  rm -rf "$corpus"
done
echo "fuzz: no crash"
