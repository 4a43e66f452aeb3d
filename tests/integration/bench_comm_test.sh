#!/usr/bin/env bash
# fmstack bench comm end to end, our side only (OpenMPI comes with
# scripts/bootstrap.sh --bench, not with the test command): two ranks in a
# node and on loopback time all-reduce at 1 and 4 KiB over about 0.2 s each
# (CalibratedIters), and print a positive busbw for every size and layout,
# "-" where OpenMPI did not run, the round-trip line and a progress line
# naming the span; a --min above --max fails naming both.
set -euo pipefail
: "${FMSTACK:?path to the fmstack binary}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"  # the bench writes runs/bench-comm/ in the current directory

timeout 300 "$FMSTACK" bench comm --ranks 2 --min 1KiB --max 4KiB --ops allreduce --rounds 1 \
  --no-mpi --markdown >out.txt 2>err.txt || { cat out.txt err.txt; exit 1; }
cat out.txt
# Rows: | size | 1 node algbw | busbw | OpenMPI | ratio | n nodes algbw | busbw | OpenMPI | ratio |
for size in "1.02 kB" "4.10 kB"; do
  row=$(grep "^| $size |" out.txt) || { echo "no row for $size"; exit 1; }
  awk -F'|' -v size="$size" '{
    for (i = 3; i <= NF - 1; ++i) gsub(/ /, "", $i)
    if (!($3 > 0 && $4 > 0 && $7 > 0 && $8 > 0)) { print "busbw not positive at " size ": " $0; exit 1 }
    if ($5 != "-" || $6 != "-") { print "an OpenMPI figure without OpenMPI at " size; exit 1 }
  }' <<<"$row"
done
grep -q "core-to-core round trip" out.txt || { echo "no round-trip line"; exit 1; }
# The progress line names the span it ran.
grep -q "1.02 kB-4.10 kB" err.txt || { echo "no progress line naming the span"; cat err.txt; exit 1; }

if "$FMSTACK" bench comm --ranks 2 --min 8KiB --max 4KiB --no-mpi >bad.txt 2>&1; then
  echo "--min above --max was accepted"; exit 1
fi
grep -q -- "--min" bad.txt && grep -q -- "--max" bad.txt || { echo "error does not name --min and --max:"; cat bad.txt; exit 1; }
echo "bench comm: ok"
