"""README.md as a front door and docs/ as the current state, not a diary:

- README.md is under 200 lines and links every page in docs/;
- no page of README.md or docs/ tells run-by-run history: no dated heading,
  no "session"/"this stop", no withdrawn or "earlier figures" (history lives in
  git; a measurement keeps its date inside its table or as "(measured DATE)").

    python3 tests/docs/front_door_test.py REPO
"""
import os
import re
import sys

repo = sys.argv[1]
docs = sorted(f for f in os.listdir(os.path.join(repo, "docs")) if f.endswith(".md"))
pages = ["README.md"] + [os.path.join("docs", f) for f in docs]
failures = []

readme = open(os.path.join(repo, "README.md"), encoding="utf-8").read()
if readme.count("\n") >= 200:
    failures.append(f"README.md: {readme.count(chr(10))} lines, the front door keeps under 200")
for f in docs:
    if f"docs/{f}" not in readme:
        failures.append(f"README.md: no link to docs/{f}")

HISTORY = [
    (re.compile(r"^#+ .*\b20\d\d-\d\d-\d\d\b"), "a dated heading"),
    (re.compile(r"\b(this|that|last|later|earlier|previous|next|second|third|fourth|fifth|"
                r"sixth|seventh|eighth)\s+sessions?\b|\bsessions? before\b", re.I),
     "a session's story"),
    (re.compile(r"\bthis stop\b", re.I), "a stop's story"),
    (re.compile(r"\bwithdrawn\b", re.I), "a withdrawn figure"),
    (re.compile(r"^#+ Earlier figures", re.I), "superseded figures"),
]
for page in pages:
    in_code = False
    for n, line in enumerate(open(os.path.join(repo, page), encoding="utf-8"), 1):
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        for pattern, what in HISTORY:
            if pattern.search(line):
                failures.append(f"{page}:{n}: {what}: {line.strip()[:100]}")
for f in failures:
    print("FAIL", f)
print(f"{len(pages)} pages checked, {len(failures)} problems")
sys.exit(1 if failures else 0)
