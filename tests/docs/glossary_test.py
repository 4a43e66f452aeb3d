"""docs/glossary.md against the glossary that fmstack prints (src/cli/glossary.cc):
the same terms with the same meanings, so a term is defined once. Read through
`fmstack catalog list terms`.

    python3 tests/docs/glossary_test.py REPO FMSTACK
"""
import os
import re
import subprocess
import sys

repo, fmstack = sys.argv[1], sys.argv[2]
out = subprocess.run([fmstack, "catalog", "list", "terms"], check=True, capture_output=True,
                     text=True, timeout=60).stdout.splitlines()
# "term  meaning" lines under a title; continuation lines are indented.
printed, term = {}, None
for line in out[1:]:
    if not line.strip():
        continue
    if line[0] != " ":
        term, meaning = re.split(r"\s{2,}", line, maxsplit=1)
        printed[term] = meaning.strip()
    else:
        printed[term] += " " + line.strip()
doc = open(os.path.join(repo, "docs", "glossary.md"), encoding="utf-8").read()
documented = {m.group(1): m.group(2).strip()
              for m in re.finditer(r"^\| \*\*(.+?)\*\* \| (.+) \|$", doc, re.M)}
failures = []
for term, meaning in printed.items():
    if term not in documented:
        failures.append(f"'{term}' is printed by fmstack but not in docs/glossary.md")
    elif documented[term] != meaning:
        failures.append(f"'{term}': docs/glossary.md says\n    {documented[term]}\n"
                        f"  fmstack says\n    {meaning}")
for term in documented:
    if term not in printed:
        failures.append(f"'{term}' is in docs/glossary.md but fmstack does not define it")
print(f"{len(printed)} terms printed by fmstack, {len(documented)} in docs/glossary.md")
for f in failures:
    print("FAIL " + f)
sys.exit(1 if failures or not printed else 0)
