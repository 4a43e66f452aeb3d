#!/usr/bin/env bash
# bench_step end to end on a small model: its three limits measured and
# positive, a row for every phase of the step with a positive time, a rate
# and (but for zeroing, which has none) its share of a limit, the step's row
# with tokens/s, a progress line; a --seq beyond the model's context fails
# naming it.
set -euo pipefail
: "${BENCH_STEP:?path to the bench_step binary}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

timeout 240 "$BENCH_STEP" --model gpt-mini --batch 2 --seq 64 --steps 1 --rounds 2 \
  >"$tmp/out.txt" 2>"$tmp/err.txt" || { cat "$tmp/out.txt" "$tmp/err.txt"; exit 1; }
cat "$tmp/out.txt"
grep -Eq "^limits: sgemm on the model's shapes [0-9.]+ GFLOP/s; float sum of the gradients [0-9.]+ GB/s; p, m, v \+= 0 \* g [0-9.]+ GB/s" "$tmp/out.txt" ||
  { echo "no limits line"; exit 1; }
if grep -Eq "^limits: .* 0\.0 (GFLOP/s|GB/s)" "$tmp/out.txt"; then echo "a limit of zero"; exit 1; fi
for phase in "zero the gradients" "forward" "backward" "global norm" "AdamW update"; do
  row=$(grep "^$phase  " "$tmp/out.txt") || { echo "no row for $phase"; exit 1; }
  # phase, ms, share, rate + unit, then "x.xx of <limit>" or "-" for zeroing
  awk -v phase="$phase" '{
    sub("^" phase " +", "")
    limit = phase == "zero the gradients" ? $5 == "-" : ($5 > 0 && $6 == "of")
    if (!($1 > 0) || $2 !~ /%$/ || !($3 > 0) || !limit) { print "bad row for " phase ": " $0; exit 1 }
  }' <<<"$row"
done
grep -Eq "^step +[0-9.]+ +100% +[0-9]+ tokens/s +[0-9.]+ of sgemm" "$tmp/out.txt" ||
  { echo "no step row"; exit 1; }
grep -q "round 2/2" "$tmp/err.txt" || { echo "no progress line"; cat "$tmp/err.txt"; exit 1; }

if "$BENCH_STEP" --model gpt-mini --seq 4096 >"$tmp/bad.txt" 2>&1; then
  echo "--seq beyond the context was accepted"; exit 1
fi
grep -q -- "--seq 4096" "$tmp/bad.txt" || { echo "error does not name --seq:"; cat "$tmp/bad.txt"; exit 1; }
echo "bench step: ok"
