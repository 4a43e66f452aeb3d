#!/usr/bin/env bash
# fmstack sim end to end: policies side by side with 95% ranges, JSON that
# scripts can read, an SVG timeline, --search, and clear errors for a job
# without a cluster and for an unknown fault set.
set -euo pipefail
: "${FMSTACK:?path to the fmstack binary}" "${SRC:?source root}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
job="$SRC/examples/llama3-405b-54d.toml"

"$FMSTACK" sim "$job" --days 54 --policy all --trials 10 --svg "$tmp/t.svg" --json "$tmp/r.json" >"$tmp/out.txt"
for want in "ETTR (goodput)" "interruptions" "lost work" "checkpointless" "elastic" "faulty-gpu" "job MTTI 3.09 h"; do
  grep -q -- "$want" "$tmp/out.txt" || { echo "missing '$want'"; cat "$tmp/out.txt"; exit 1; }
done
grep -q '<svg' "$tmp/t.svg" && grep -q '</svg>' "$tmp/t.svg"
grep -c '<polyline' "$tmp/t.svg" | grep -q '^6$'   # 3 policies x (work, goodput)
python3 - "$tmp/r.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for p in ("checkpoint", "checkpointless", "elastic"):
    e = r["policies"][p]["ettr"]
    assert 0 < e["p2_5"] <= e["mean"] <= e["p97_5"] <= 1, e
    assert r["policies"][p]["trials"] == 10
    assert sum(r["policies"][p]["interruptions_by_cause"].values()) > 300
assert r["policies"]["checkpointless"]["ettr"]["mean"] > r["policies"]["checkpoint"]["ettr"]["mean"]
assert abs(r["scenario"]["job_mtti_seconds"] / 3600 - 3.09) < 0.01
PY

# Same seed, same numbers.
"$FMSTACK" sim "$job" --days 5 --trials 4 --seed 9 --format json >"$tmp/a.json"
"$FMSTACK" sim "$job" --days 5 --trials 4 --seed 9 --format json >"$tmp/b.json"
cmp "$tmp/a.json" "$tmp/b.json"

"$FMSTACK" sim "$job" --search >"$tmp/search.txt"
grep -q '^best: \[parallel\] tp = ' "$tmp/search.txt" || { cat "$tmp/search.txt"; exit 1; }

# Time to train when the job has tokens and no window is given.
"$FMSTACK" sim "$SRC/examples/llama3-70b.toml" --cluster "$SRC/examples/p5-64.toml" --trials 3 >"$tmp/ttt.txt"
grep -q 'time to train' "$tmp/ttt.txt" || { cat "$tmp/ttt.txt"; exit 1; }

printf 'model = "gpt2-124m"\n' >"$tmp/nocluster.toml"
if "$FMSTACK" sim "$tmp/nocluster.toml" 2>"$tmp/err.txt"; then echo "expected failure"; exit 1; fi
grep -q 'nocluster.toml.*cluster' "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }

sed 's/set = "llama3-405b"/set = "llama3-450b"/' "$job" >"$tmp/badset.toml"
if "$FMSTACK" sim "$tmp/badset.toml" 2>"$tmp/err2.txt"; then echo "expected failure"; exit 1; fi
grep -q 'badset.toml:.*faults.set.*unknown fault set "llama3-450b".*llama3-405b' "$tmp/err2.txt" || { cat "$tmp/err2.txt"; exit 1; }
echo "sim cli: ok"
