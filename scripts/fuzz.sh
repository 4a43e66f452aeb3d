#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz/ and
# runs each from the seeds in tests/fuzz/corpus/ (crashes found before are
# kept there as regression inputs). A crash, a sanitizer report or an
# exception other than fmstack::Error fails it, with the input saved as
# build-fuzz/crash-* and the report printed.
#   bash scripts/fuzz.sh [SECONDS]     explore for SECONDS each (random seed)
#   bash scripts/fuzz.sh --ci          a fixed seed and a fixed number of runs:
#                                      the same inputs on every machine
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-30}
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
  if [ "$mode" = --ci ]; then
    limit=(-seed=1 -runs="$([ "$target" = fuzz_job_spec ] && echo 150000 || echo 20000)")
    echo "fuzz: $target, seed 1, ${limit[1]#-runs=} runs"
  else
    limit=(-max_total_time="$mode")
    echo "fuzz: $target for $mode s"
  fi
  if ! (cd "$build" && "./$target" "${limit[@]}" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
          -print_final_stats=1 "$corpus" > "$build/$target.log" 2>&1); then
    grep -v "^#\|^INFO" "$build/$target.log" | head -40
    echo "fuzz: $target FAILED; the input is in $build/crash-* (add it to tests/fuzz/corpus/)"
    exit 1
  fi
  tail -4 "$build/$target.log"
  rm -rf "$corpus"
done
echo "fuzz: no crash"
