"""docs/specs.md against the spec parser: every key that src/spec/ reads
(each StrictTable getter's literal key) is documented in docs/specs.md as
`key` or `table.key`, so a key cannot be added undocumented. Keys read
through catalog helpers (a fault cause's fields) are named in the doc's
prose for their table and listed here.

    python3 tests/docs/spec_keys_test.py REPO
"""
import os
import re
import sys

repo = sys.argv[1]
GETTER = re.compile(r"\b\w+(?:->|\.)(?:Int|Number|Bool|String|Choice|Bytes|Seconds|Bandwidth|Count|"
                    r"Table|TableArray|StringArray|Has|Peek|Fail)\(\"([a-z_0-9]+)\"")
keys = {}
spec_dir = os.path.join(repo, "src", "spec")
for name in sorted(os.listdir(spec_dir)):
    if name.endswith(".cc"):
        text = open(os.path.join(spec_dir, name)).read()
        for m in GETTER.finditer(text):
            keys.setdefault(m.group(1), f"src/spec/{name}:{text[:m.start()].count(chr(10)) + 1}")
doc = open(os.path.join(repo, "docs", "specs.md")).read()
documented = set()
for cell in re.findall(r"`([^`]+)`", doc):
    for word in re.split(r"[\s,\[\]]+", cell):
        documented.add(word)
        documented.update(word.split("."))  # `optim.lr` documents the table too
missing = [f"{where}: key '{k}' is read by the parser but not in docs/specs.md"
           for k, where in sorted(keys.items(), key=lambda kv: kv[1]) if k not in documented]
print(f"{len(keys)} keys read by src/spec/, {len(keys) - len(missing)} documented in docs/specs.md")
for m in missing:
    print("FAIL " + m)
sys.exit(1 if missing else 0)
