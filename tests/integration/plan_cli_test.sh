#!/usr/bin/env bash
# fmstack plan end to end: the README's examples print complete plans, JSON
# output validates against docs/plan-schema.json, and a bad spec fails with
# exit status 2 and a message naming file:line and key.
set -euo pipefail
: "${FMSTACK:?path to the fmstack binary}" "${SRC:?source root}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$FMSTACK" plan "$SRC/examples/llama3-70b.toml" >"$tmp/70b.txt"
for section in Model Memory "Fewest accelerators" Compute Cost Checkpoints "Storage and quota"; do
  grep -q "^$section" "$tmp/70b.txt" || { echo "missing section '$section'"; cat "$tmp/70b.txt"; exit 1; }
done
"$FMSTACK" plan "$SRC/examples/llama3.1-405b.toml" --cluster "$SRC/examples/p5-512.toml" --format markdown >"$tmp/405b.md"
grep -q '^## Checkpoints' "$tmp/405b.md"

"$FMSTACK" plan "$SRC/examples/llama3-70b.toml" --format json >"$tmp/70b.json"
"$FMSTACK" plan "$SRC/examples/llama3.1-405b.toml" --cluster "$SRC/examples/p5-512.toml" --format json >"$tmp/405b.json"
printf 'model = "gpt2-124m"\n' >"$tmp/nocluster.toml"
"$FMSTACK" plan "$tmp/nocluster.toml" --format json >"$tmp/nocluster.json"
/usr/bin/python3 - "$SRC/docs/plan-schema.json" "$tmp/70b.json" "$tmp/405b.json" "$tmp/nocluster.json" <<'PY'
import json, sys
import jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
for path in sys.argv[2:]:
    doc = json.load(open(path))
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    print(f"{path}: valid against plan schema v{doc['schema_version']}")
PY

printf 'model = "llama3-8b"\n[parallel]\ntp = 3\n' >"$tmp/bad.toml"
set +e
"$FMSTACK" plan "$tmp/bad.toml" 2>"$tmp/err.txt"
rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "expected exit status 2, got $rc"; exit 1; }
grep -q "bad.toml:3:1: key 'parallel.tp': tp (3) must divide model.heads (32)" "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }
echo "plan CLI: ok"
