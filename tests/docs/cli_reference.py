"""docs/cli.md is every fmstack command's --help, generated; this test fails
when the program's options and the page differ, so an option cannot exist
undocumented (or be documented after it is gone).

    python3 tests/docs/cli_reference.py REPO FMSTACK           # check
    python3 tests/docs/cli_reference.py REPO FMSTACK --update  # rewrite docs/cli.md
"""
import difflib
import os
import re
import subprocess
import sys

HEADER = """# Command reference

Every command's `--help`, generated from the program
(`python3 tests/docs/cli_reference.py . build/fmstack --update`); the test
docs.cli_reference fails when this page and the program differ. The README
and the other pages show the commands in use; the job file's keys are in
[specs.md](specs.md) and the terms in [glossary.md](glossary.md).
"""


def help_text(fmstack, words):
    out = subprocess.run([fmstack, *words, "--help"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    # CLI11 names the program as it was invoked; the page names it fmstack.
    return re.sub(r"^Usage: \S*fmstack", "Usage: fmstack", out, flags=re.M)


def subcommands(text):
    if "Subcommands:" not in text:
        return []
    return re.findall(r"^  ([\w-]+)\s{2,}", text.split("Subcommands:", 1)[1], re.M)


def generate(fmstack):
    sections, queue = [], [[]]
    while queue:
        words = queue.pop(0)
        text = help_text(fmstack, words)
        title = " ".join(["fmstack", *words])
        sections.append(f"## {title}\n\n```text\n{text.rstrip()}\n```\n")
        queue.extend([*words, s] for s in subcommands(text))
    return HEADER + "\n" + "\n".join(sections)


def main():
    repo, fmstack = sys.argv[1], os.path.abspath(sys.argv[2])
    path = os.path.join(repo, "docs", "cli.md")
    page = generate(fmstack)
    if "--update" in sys.argv[3:]:
        with open(path, "w", encoding="utf-8") as f:
            f.write(page)
        print(f"wrote {path}")
        return 0
    with open(path, encoding="utf-8") as f:
        current = f.read()
    if current == page:
        print(f"docs/cli.md matches the --help of {page.count('## fmstack')} commands")
        return 0
    sys.stdout.writelines(difflib.unified_diff(current.splitlines(True), page.splitlines(True),
                                               "docs/cli.md", "fmstack --help"))
    print("FAIL docs/cli.md differs from the program's --help: run "
          "python3 tests/docs/cli_reference.py . build/fmstack --update and commit the page")
    return 1


if __name__ == "__main__":
    sys.exit(main())
