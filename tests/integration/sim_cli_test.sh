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
# The plot reads at a glance: both axes labelled with units, round day ticks,
# one legend entry per policy in its own colour and dash, colours that no
# fault cause reuses, and it renders (librsvg) to a PNG of the right size.
grep -q '>wall time (days)<' "$tmp/t.svg" && grep -q '>trained (fault-free days)<' "$tmp/t.svg"
for p in checkpoint checkpointless elastic; do grep -q ">$p: ETTR " "$tmp/t.svg"; done
python3 - "$tmp/t.svg" <<'PY'
import re, sys
svg = open(sys.argv[1]).read()
ticks = re.findall(r'text-anchor="middle">([0-9.]+)</text>', svg)
assert ticks and all(float(t) % 5 == 0 for t in ticks), ticks   # 54 days: 0, 10, 20 ...
lines = re.findall(r'<polyline fill="none" stroke="(#[0-9A-F]{6})" stroke-width="([0-9.]+)" '
                   r'stroke-dasharray="([0-9,]*)"', svg)
styles = {(c, d) for c, w, d in lines}
assert len(styles) == 3, styles   # three policies, three distinct colour+dash pairs
faults = set(re.findall(r'<tspan fill="(#[0-9A-F]{6})"', svg))
assert not faults & {c for c, _, _ in lines}, (faults, lines)
print(f"svg: ticks {ticks}, {len(styles)} policy styles, {len(faults)} fault colours")
PY
rsvg-convert -o "$tmp/t.png" "$tmp/t.svg"
python3 - "$tmp/t.png" <<'PY'
import struct, sys
png = open(sys.argv[1], "rb").read()
assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
w, h = struct.unpack(">II", png[16:24])
assert w == 960 and h > 500, (w, h)
print(f"png: {w} x {h}, {len(png)} bytes")
PY
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
# The header reads in a terminal: no line wider than 100 columns, and it
# points at the definitions; --explain prints them.
"$FMSTACK" sim "$job" --policy all --spares 0 --trials 5 --explain >"$tmp/explain.txt" 2>/dev/null
header=$(sed -n '1,/^terms /p' "$tmp/explain.txt")
if awk 'length > 100 { bad = 1; print "too wide: " $0 } END { exit !bad }' <<<"$header"; then exit 1; fi
grep -q '^terms .*fmstack sim --explain' <<<"$header" || { echo "$header"; exit 1; }
for want in '^MTTI  *mean time to interruption' '^ETTR  *effective training time ratio' \
            '^Young/Daly interval  *the checkpoint interval' '^no spare nodes: under checkpointless'; do
  grep -q -- "$want" "$tmp/explain.txt" || { echo "missing '$want'"; cat "$tmp/explain.txt"; exit 1; }
done
# A job without [faults] says which set it used by default.
grep -v '^\[faults\]\|^set = ' "$job" >"$tmp/nofaults.toml"
"$FMSTACK" sim "$tmp/nofaults.toml" --trials 2 2>/dev/null >"$tmp/nofaults.txt"
grep -q 'fault set llama3-405b (the default' "$tmp/nofaults.txt" || { cat "$tmp/nofaults.txt"; exit 1; }
# Every trial the same (no faults): one value, not a range of one value.
sed 's/^set = .*/set = "none"/' "$job" >"$tmp/none.toml"
"$FMSTACK" sim "$tmp/none.toml" --trials 3 --days 1 2>/dev/null >"$tmp/none.txt"
grep -q '^ETTR (goodput) *[0-9.]*%$' "$tmp/none.txt" || { cat "$tmp/none.txt"; exit 1; }
echo "sim cli: ok"
