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

## Exit status

Every command exits with one of these (src/cli/options.h;
[mistakes.md](mistakes.md) shows the errors behind status 2):

| status | meaning |
|---|---|
| 0 | done |
| 1 | the work ran and its result is a failure: a run that gave up after its restarts, `ckpt verify` that found a problem, a burn-in or health check that failed, a bench request that failed |
| 2 | bad input, nothing started: an unknown or out-of-range option, a missing file, a job or cluster file that does not parse or check, a configuration the pre-flight check refuses, an allocation that cannot be made |
| 3 | an internal error: a bug in fmstack; the message says what failed |
| 75 | a worker of `fmstack run` that stops so that its supervisor recovers it (seen only in a rank's log) |
| 128 + N | `fmstack run` stopped by signal N (SIGTERM: 143) after its emergency checkpoint; the rerun resumes from it |

An option's error names the command and the option, says what was expected,
and suggests the nearest option, value or file name (`--stpe` gets
`--steps`, `Examples/job.toml` gets `examples/job.toml`). Sizes keep binary
prefixes binary and decimal ones decimal (`64KiB` is 65,536 bytes, `64K` and
`64KB` are 64,000); `--days` takes a number of days or a duration (`30d`,
`12h`, `2w`).
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
