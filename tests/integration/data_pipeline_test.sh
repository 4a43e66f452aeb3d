#!/usr/bin/env bash
# The corpus pipeline end to end on real pages: the Debian Reference in six
# languages (Debian's debian-reference-* packages) as HTML directories, as
# text split into documents, and as WARC records, with known exact copies,
# edited near-copies at measured Jaccard similarities, a blocked host and
# bad input. Checked:
# - language: at least 95% of the documents of each language that reach the
#   language stage are classified as their language;
# - exact dedup removes every exact copy (no two output documents equal);
# - MinHash: the share of near-copy pairs found, by Jaccard bin, beside the
#   S-curve 1 - (1 - J^r)^b of the chosen bands and rows (within 3 binomial
#   standard deviations + 0.05), and the candidate pairs' precision against
#   brute-force Jaccard;
# - bad input is counted by reason; a malformed WARC is an error naming the
#   file and byte; every document read is counted exactly once;
# - killed mid-phase (the coordinator, then a single worker) and started
#   again, the output shards and tokens are byte-identical to a clean run's.
set -euo pipefail
: "${FMSTACK:?path to the fmstack binary}"
PY=/usr/bin/python3
REF=/usr/share/debian-reference
work=$(mktemp -d)
trap "pkill -9 -f \"fmstack data pipeline $work\" 2>/dev/null || true; [ -n \"${KEEP:-}\" ] || rm -rf \"$work\"; [ -z \"${KEEP:-}\" ] || echo kept $work" EXIT
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
for l in en ja de fr es it; do
  [ -f "$REF/ch01.$l.html" ] && [ -f "$REF/debian-reference.$l.txt.gz" ] ||
    fail "the Debian Reference in \"$l\" is missing (scripts/bootstrap.sh installs debian-reference-$l)"
done

$PY - "$REF" <<'PY'
import gzip, json, os, random, shutil, sys, zlib
ref = sys.argv[1]
rng = random.Random(12)
langs = ["en", "ja", "de", "fr", "es", "it"]
chunks = {}
for l in langs:
    os.makedirs(f"html/{l}")
    for f in sorted(os.listdir(ref)):
        if f.endswith(f".{l}.html"):
            shutil.copy(os.path.join(ref, f), f"html/{l}/{f}")
    text = gzip.open(f"{ref}/debian-reference.{l}.txt.gz", "rt", encoding="utf-8").read()
    paras, cur, out = text.split("\n\n"), "", []
    for p in paras:
        cur += p + "\n\n"
        if len(cur) > 3000:
            out.append(cur)
            cur = ""
    chunks[l] = out[5:45]
os.makedirs("text")
for l in langs:
    with open(f"text/{l}.jsonl", "w") as f:
        for i, c in enumerate(chunks[l]):
            f.write(json.dumps({"url": f"text://{l}/{i}", "text": c}) + "\n")
os.makedirs("dups")
with open("dups/exact.jsonl", "w") as f:
    for i in range(40):
        l = langs[i % 6]
        j = rng.randrange(len(chunks[l]))
        f.write(json.dumps({"url": f"copy://exact/{i}/of/{l}/{j}", "text": chunks[l][j]}) + "\n")
with open("dups/near.jsonl", "w") as f:
    for i in range(150):
        l = langs[i % 6]
        j = rng.randrange(len(chunks[l]))
        base = chunks[l][j]
        # Replace a share of the characters in place: 5-gram Jaccard falls
        # about 10x as fast as the share grows: 0.05% to 1.5% spans J 0.99..0.8.
        share = rng.uniform(0.0005, 0.015)
        chars = list(base)
        for k in rng.sample(range(len(chars)), max(1, int(share * len(chars)))):
            chars[k] = rng.choice("qxzjkv")
        f.write(json.dumps({"url": f"copy://near/{i}/of/{l}/{j}", "text": "".join(chars)}) + "\n")
def record(kind, url, payload):
    head = (f"WARC/1.0\r\nWARC-Type: {kind}\r\nWARC-Target-URI: {url}\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n").encode()
    return gzip.compress(head + payload + b"\r\n\r\n")
with open("dups/pages.warc.gz", "wb") as f:
    for i, l in enumerate(langs):
        page = open(f"{ref}/ch0{i + 2}.{l}.html", "rb").read()
        f.write(record("response", f"http://mirror.example/{l}/ch0{i + 2}.html",
                       b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n" + page))
    page = open(f"{ref}/ch09.en.html", "rb").read()
    f.write(record("response", "http://ads.spam.example/en/ch09.html",
                   b"HTTP/1.1 200 OK\r\n\r\n" + page))
    f.write(record("conversion", "http://broken.example/", b"text with \xff\xfe invalid bytes " * 40))
os.makedirs("bad/pages")
open("bad/empty.jsonl", "w").close()
with open("bad/odd.jsonl", "wb") as f:
    f.write(b'{"text": "ill-formed \xff UTF-8"}\n')
    f.write(b'{"text": 5}\n')
    f.write(b'{"text": "' + b"x" * (5 << 20) + b'"}\n')
    f.write(b"not json at all\n")
page = bytearray(open(f"{ref}/ch10.en.html", "rb").read())
page[len(page) // 2:len(page) // 2] = b"\xff\xfe\xc0"
open("bad/pages/invalid-bytes.en.html", "wb").write(page)
open("bad/pages/deep.en.html", "w").write("<html lang=en><body>" + "<span>" * 5000 + "deep")
PY

job() {  # file out workers
  cat > "$1" <<TOML
name = "debian-reference"
[data.pipeline]
inputs = ["html/*", "text/*.jsonl", "dups/*", "bad/*"]
out = "$2"
workers = $3
partitions = 8
max_document_bytes = "4MiB"
[[data.pipeline.stage]]
kind = "declared-language"
keep = ["en", "ja", "de", "fr", "es", "it"]
[[data.pipeline.stage]]
kind = "extract"
[[data.pipeline.stage]]
kind = "normalize"
[[data.pipeline.stage]]
kind = "footer"
[[data.pipeline.stage]]
kind = "language"
keep = ["en", "ja", "de", "fr", "es", "it"]
[[data.pipeline.stage]]
kind = "quality"
[[data.pipeline.stage]]
kind = "url-filter"
block_hosts = ["spam.example"]
[[data.pipeline.stage]]
kind = "exact-dedup"
[[data.pipeline.stage]]
kind = "minhash-dedup"
[[data.pipeline.stage]]
kind = "tokenize"
vocab = 1024
TOML
}

# 1. A clean run, 4 workers.
job clean.toml clean 4
"$FMSTACK" data pipeline clean.toml > clean.out 2> clean.err || { cat clean.err; fail "clean run"; }
cat clean.out
[ -s clean/tokens/train.bin ] || fail "no token shard in clean/tokens"

$PY - clean <<'PY'
import glob, json, struct, sys
from collections import defaultdict
out = sys.argv[1]
r = json.load(open(f"{out}/report.json"))
stages = {s["stage"]: s for s in r["stages"]}
def fail(msg):
    print("FAIL:", msg); sys.exit(1)

# Every record read is counted once: removed by one stage, or kept.
removed = sum(n for s in r["stages"] for n in s["removed"].values())
if removed + r["kept"]["docs"] != stages["read"]["docs_in"]:
    fail(f"read {stages['read']['docs_in']}, removed {removed} + kept {r['kept']['docs']}")
for s in r["stages"][1:]:
    if s["docs_in"] != s["docs_out"] + sum(s["removed"].values()):
        fail(f"stage {s['stage']}: in {s['docs_in']} != out {s['docs_out']} + removed")
# Bad input, each with its reason.
want = {("read", "too-large"), ("read", "bad-json"), ("read", "not-a-document"),
        ("extract", "html-too-deep"), ("extract", "invalid-utf8"), ("url-filter", "blocked-host")}
for stage, reason in want:
    if stages[stage]["removed"].get(reason, 0) < 1:
        fail(f"{stage}: no document removed as {reason}: {stages[stage]['removed']}")

# Truth: the language of every document, from its URL. The translations
# are partial (whole paragraphs of the French and Italian chapters are the
# English original): a document with more than a quarter of its text in
# lines that also occur in the English version is "mixed", reported apart
# and not counted against the classifier.
import html.parser, re
class Text(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(); self.parts = []
    def handle_data(self, d): self.parts.append(d)
def html_text(path):
    t = Text(); t.feed(open(path, encoding="utf-8", errors="replace").read()); return "".join(t.parts)
chunk = {}
for l in ("en", "ja", "de", "fr", "es", "it"):
    for line in open(f"text/{l}.jsonl"):
        d = json.loads(line); chunk[d["url"]] = d["text"]
def source(url):
    m = re.match(r"copy://\w+/\d+/of/(\w+)/(\d+)", url)
    if m: return chunk[f"text://{m[1]}/{m[2]}"]
    if url.startswith("text://"): return chunk[url]
    m = re.match(r"(?:file://|http://mirror.example/\w+/)(ch\d+)(?:\.(\w+))?\.html", url)
    if m:
        l = m[2] or url.split("/")[3]
        return html_text(f"html/{l}/{m[1]}.{l}.html")
    return None
def lines(t):
    return [x.strip() for x in t.splitlines() if len(x.strip()) >= 20]
english = set()
for u, t in chunk.items():
    if u.startswith("text://en/"): english.update(lines(t))
import os
for f in os.listdir("html/en"): english.update(lines(html_text(f"html/en/{f}")))
def truth(url):
    m = re.search(r"(?:/|\.)(en|ja|de|fr|es|it)(?:/|\.)", url)
    if not m or url.startswith("file://invalid") or url.startswith("file://deep"):
        return None
    t = source(url)
    if m[1] != "en" and t is not None:
        ls = lines(t)
        shared = sum(len(x) for x in ls if x in english)
        if ls and shared > 0.25 * sum(len(x) for x in ls):
            return "mixed"
    return m[1]
docs = {}
for f in sorted(glob.glob(f"{out}/work/a/shard-*/docs.jsonl")):
    for line in open(f):
        d = json.loads(line)
        docs[d["key"]] = d
seen = defaultdict(lambda: [0, 0])  # lang -> [right, all]
mixed = defaultdict(int)
def count(url, lang):
    if url.startswith("copy://"):
        return  # a copy is classified as its source is: counted once, there
    t = truth(url)
    if t == "mixed": mixed[lang] += 1
    elif t: seen[t][1] += 1; seen[t][0] += lang == t
for d in docs.values():
    count(d["url"], d["lang"])
for f in glob.glob(f"{out}/work/a/shard-*/removed.jsonl"):
    for line in open(f):
        d = json.loads(line)
        if d["stage"] in ("language", "quality", "url-filter"):
            count(d["url"], d["lang"])
print("language   right / reached")
for l in ("en", "ja", "de", "fr", "es", "it"):
    right, total = seen[l]
    print(f"  {l}        {right:4d} / {total:4d}  {100 * right / max(total, 1):5.1f}%")
    if total < 25 or right < 0.95 * total:
        fail(f"{l}: {right} of {total} documents classified as {l}")
print(f"  mixed (over a quarter untranslated English), classified as: {dict(mixed)}")

# Exact copies: none survive, and no two output documents are equal.
texts = [json.loads(l)["text"] for f in sorted(glob.glob(f"{out}/shard-*.jsonl")) for l in open(f)]
if len(texts) != len(set(texts)):
    fail(f"{len(texts) - len(set(texts))} duplicate texts in the output")
exact_copies = [d for d in docs.values() if d["url"].startswith("copy://exact/")]
if len(exact_copies) < 15:
    fail(f"only {len(exact_copies)} exact copies reached dedup")
if stages["exact-dedup"]["removed"].get("exact-duplicate", 0) < len(exact_copies):
    fail(f"exact-dedup removed {stages['exact-dedup']['removed']}, {len(exact_copies)} copies")

# MinHash against brute force. Clusters from the candidate pairs.
parent = {}
def find(x):
    parent.setdefault(x, x)
    while parent[x] != x:
        parent[x] = parent[parent[x]]; x = parent[x]
    return x
edges = []
for f in glob.glob(f"{out}/work/b/part-*/edges.bin"):
    b = open(f, "rb").read()
    for i in range(0, len(b), 16):
        a, c = struct.unpack_from("<QQ", b, i)
        edges.append((a, c)); parent[find(a)] = find(c)
def shingles(t):
    return {t[i:i + 5] for i in range(max(len(t) - 4, 1))}
sh = {}
def S(k):
    if k not in sh: sh[k] = shingles(docs[k]["text"])
    return sh[k]
def jac(a, b):
    x, y = S(a), S(b)
    return len(x & y) / len(x | y)
by_url = {d["url"]: k for k, d in docs.items()}
bands, rows = 20, 40
pairs = []
for k, d in docs.items():
    if d["url"].startswith("copy://near/"):
        _, _, _, i, _, l, j = d["url"].split("/")
        orig = by_url.get(f"text://{l}/{j}")
        if orig is not None:
            pairs.append((jac(k, orig), find(k) == find(orig)))
print("near copies: Jaccard   pairs  found  S-curve expects")
ok = True
for lo, hi in ((0.0, 0.85), (0.85, 0.9), (0.9, 0.95), (0.95, 1.01)):
    b = [(j, f) for j, f in pairs if lo <= j < hi]
    if not b:
        continue
    expect = [1 - (1 - j ** rows) ** bands for j, _ in b]
    mean = sum(expect) / len(b)
    found = sum(f for _, f in b) / len(b)
    sd = (sum(p * (1 - p) for p in expect) ** 0.5) / len(b)
    print(f"  [{lo:.2f}, {min(hi, 1):.2f})   {len(b):5d}  {found:5.2f}  {mean:5.2f} (+- {3 * sd + 0.05:.2f})")
    ok = ok and abs(found - mean) <= 3 * sd + 0.05
if len(pairs) < 40:
    fail(f"only {len(pairs)} near-copy pairs reached dedup")
if not ok:
    fail("MinHash recall is off the S-curve")
precise = sum(jac(a, b) >= 0.7 for a, b in edges)
print(f"candidate pairs: {len(edges)}, with Jaccard >= 0.7 by brute force: {precise}")
if edges and precise < 0.95 * len(edges):
    fail(f"precision {precise}/{len(edges)}")
print(f"pipeline: {stages['read']['docs_in']} read, {r['kept']['docs']} kept")
PY

# 2. A malformed WARC is an error naming the file and the byte.
mkdir -p broken
printf 'WARC/1.0\r\nWARC-Type: response\r\nContent-Length: many\r\n\r\n' > broken/x.warc
sed -e 's|inputs = .*|inputs = ["broken/x.warc"]|' -e 's|out = .*|out = "broken-out"|' clean.toml > broken.toml
if "$FMSTACK" data pipeline broken.toml > broken.out 2>&1; then fail "a malformed WARC was accepted"; fi
grep -q "broken/x.warc: byte [0-9]*: malformed: Content-Length \"many\"" broken.out ||
  { cat broken.out; fail "the malformed WARC is not named with its byte"; }

# 3. Killed mid-phase, then started again: the same bytes.
job killed.toml killed 4  # 2 nodes x 2 processes
"$FMSTACK" data pipeline killed.toml > killed.out 2> killed.err &
pid=$!
for _ in $(seq 1 600); do
  n=$(ls -d killed/work/a/shard-*/ 2>/dev/null | grep -vc tmp || true)
  [ "$n" -ge 2 ] && break
  sleep 0.05
done
kill -9 "$pid" 2>/dev/null || fail "the run finished before it could be killed"
wait "$pid" 2>/dev/null || true
committed=$(ls -d killed/work/a/shard-*/ | grep -vc tmp)
total=$(ls clean/work/a | wc -l)
[ "$committed" -lt "$total" ] || fail "the kill came after phase a ($committed of $total shards)"
echo "killed with $committed of $total shards committed"
sleep 0.5  # the workers die with their coordinator (PR_SET_PDEATHSIG)
# Resumed on 3 workers instead of 4: the work done stands.
sed -i 's/^workers = 4$/workers = 3/' killed.toml
"$FMSTACK" data pipeline killed.toml > killed2.out 2> killed2.err || { cat killed2.err; fail "resume"; }
# A changed stage is not mixed into the old work.
sed 's/^vocab = 1024$/vocab = 512/' killed.toml > changed.toml
if "$FMSTACK" data pipeline changed.toml > changed.out 2>&1; then fail "a changed job resumed old work"; fi
grep -q "made by another version of the job" changed.out || { cat changed.out; fail "no clear refusal of a changed job"; }

# A worker killed alone: its shard is redone by the next attempt.
job worker.toml worker 2
"$FMSTACK" data pipeline worker.toml > worker.out 2> worker.err &
pid=$!
victim=""
for _ in $(seq 1 600); do
  victim=$(pgrep -f "data pipeline worker.toml --worker a:1:2" || true)
  [ -n "$victim" ] && break
  sleep 0.05
done
[ -n "$victim" ] || fail "no worker to kill"
kill -9 "$victim"
wait "$pid" || { cat worker.err; fail "the run with a killed worker did not finish"; }
grep -q "phase a: worker 1 killed by signal 9" worker.err || { cat worker.err; fail "the killed worker was not noted"; }
grep -q "attempt 2 of 3" worker.err || fail "no second attempt"

for run in killed worker; do
  for f in clean/shard-*.jsonl clean/tokens/train.bin clean/tokens/val.bin clean/tokens/tokenizer.bpe; do
    cmp -s "$f" "$run/${f#clean/}" || fail "$run: ${f#clean/} differs from the clean run's"
  done
  $PY - clean/report.json $run/report.json <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["stages"] == b["stages"] and a["kept"] == b["kept"], "the reports' counts differ"
PY
done
echo "data pipeline: all checks passed"
