"""Runs the shell examples of README.md and docs/*.md and compares their output.

A fenced block whose first line starts with "$ " is a transcript: each
"$ command" (continued by a trailing backslash or by lines starting with
"> ") runs in bash, and the lines after it, up to the next "$ ", are its
expected output. Expected lines must equal the actual ones (trailing spaces
ignored), in order; a line "..." stands for any number of lines (abridged
output). A line ending in " (re)" is a regular expression (output
that varies, such as a port or a hash). A transcript ending in "[N]"
expects exit status N (default 0). The output compared is stdout: a doc
that shows an error message runs the command with 2>&1.

A ```usage block is a synopsis: each option it names must exist in the
`--help` of the fmstack command on its line.

Every other fenced block that holds shell commands (sh, bash, console, or
an unlabeled block whose first line runs fmstack, a script or a tool) must
be a transcript, or be preceded by
    <!-- doctest: skip REASON -->
naming why it cannot run in the test suite (root, a cluster, a GPU, hours
of training). A new shell example therefore cannot land untested and
unexplained.

Commands run in a scratch directory holding links to the repository's
examples/, data/, scripts/, python/, tests/ and bench/, with ./build
linking to the build directory and fmstack on PATH; files they write stay
there. Blocks of one file share the directory, in order.

    python3 tests/docs/doctest.py REPO BUILD [FILE.md ...]
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

SHELL_LANGS = {"sh", "bash", "console", "shell"}
VERBS = "plan|sim|run|serve|data|train|generate|bench|ckpt|fault|report|agent|node|burnin|slurm|catalog|help"
COMMAND_START = re.compile(
    r"^(\$ |(\./build/)?fmstack (" + VERBS + r")( |$)|bash |sudo |\.?/?scripts/|PYTHONPATH=|"
    r"python3 |promtool |curl |export )")
SKIP = re.compile(r"<!--\s*doctest:\s*skip\s+(.+?)\s*-->")
TIMEOUT = 300


class Block:
    def __init__(self, path, line, lang, lines, skip):
        self.path, self.line, self.lang, self.lines, self.skip = path, line, lang, lines, skip


def blocks(path):
    text = open(path, encoding="utf-8").read().split("\n")
    i, skip = 0, None
    while i < len(text):
        m = re.match(r"^```(\S*)\s*$", text[i])
        if not m:
            s = SKIP.search(text[i])
            if s:
                skip = s.group(1)
            elif text[i].strip():
                skip = None if not text[i].startswith("<!--") else skip
            i += 1
            continue
        start, lang, body = i + 1, m.group(1), []
        i += 1
        while i < len(text) and not text[i].startswith("```"):
            body.append(text[i])
            i += 1
        yield Block(path, start, lang, body, skip)
        skip = None
        i += 1


def is_shell(b):
    first = next((l for l in b.lines if l.strip()), "")
    if b.lang in SHELL_LANGS:
        return True
    return b.lang == "" and bool(COMMAND_START.match(first))


def transcript(b):
    """[(command, expected lines, status)]"""
    steps, cmd, out = [], None, []
    lines = list(b.lines)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            if cmd is not None:
                steps.append((cmd, out))
            cmd, out = line[2:], []
            while (cmd.endswith("\\") or (i + 1 < len(lines) and lines[i + 1].startswith("> "))) \
                    and i + 1 < len(lines):
                i += 1
                nxt = lines[i][2:] if lines[i].startswith("> ") else lines[i]
                cmd = cmd + "\n" + nxt
        else:
            out.append(line.rstrip())
        i += 1
    if cmd is not None:
        steps.append((cmd, out))
    result = []
    for cmd, out in steps:
        status = 0
        while out and not out[-1]:
            out.pop()
        if out and re.fullmatch(r"\[\d+\]", out[-1]):
            status = int(out.pop()[1:-1])
        result.append((cmd, out, status))
    return result


def line_matches(expected, actual):
    if expected.endswith(" (re)"):  # cram's spelling: the line is a regular expression
        return re.fullmatch(expected[:-5], actual) is not None
    return expected == actual


def matches(expected, actual):
    """Expected lines in order; "..." matches any run of lines."""
    def go(e, a):
        if e == len(expected):
            return a == len(actual)
        if expected[e] == "...":
            return any(go(e + 1, k) for k in range(a, len(actual) + 1))
        return a < len(actual) and line_matches(expected[e], actual[a]) and go(e + 1, a + 1)
    return go(0, 0)


def check_usage(b, where, env, failures):
    """A ```usage block: every --option it names exists in that command's --help."""
    checked, words, help_text = 0, [], ""
    for line in b.lines:
        m = re.match(r"^\s*(?:\./build/)?fmstack ((?:[a-z]+ ?){1,2})", line)
        if not m and not (line.startswith(" ") and words):
            continue  # an indented line continues the command above
        if m:
            words = [w for w in m.group(1).split() if w.isalpha() and w.islower()]
            help_text = ""
            while words:
                p = subprocess.run(["fmstack", *words, "--help"], env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
                if p.returncode == 0:
                    help_text = p.stdout
                    break
                words.pop()
        for opt in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-z])\b", line):
            checked += 1
            if not re.search(r"(?<![\w-])" + re.escape(opt) + r"\b", help_text):
                failures.append(f"{where}: `fmstack {' '.join(words)}` has no option {opt} "
                                f"(the usage line: {line.strip()})")
    return checked


def scratch(repo, build):
    d = tempfile.mkdtemp(prefix="fmstack-doctest.")
    for name in ("examples", "data", "scripts", "python", "tests", "bench", "deploy", "docs"):
        os.symlink(os.path.join(repo, name), os.path.join(d, name))
    os.symlink(build, os.path.join(d, "build"))
    return d


def main():
    repo, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    files = sys.argv[3:] or ["README.md"] + sorted(
        os.path.join("docs", f) for f in os.listdir(os.path.join(repo, "docs")) if f.endswith(".md"))
    # Debian's python3 (with python3-torch) ahead of any other on PATH.
    env = dict(os.environ, PATH=os.pathsep.join([build, "/usr/bin", os.environ["PATH"]]),
               PYTHONPATH=os.path.join(repo, "python"), COLUMNS="200",
               FMSTACK_LIB=os.path.join(build, "libfmstack.so.1"))
    failures, ran, skipped = [], 0, 0
    for name in files:
        path = os.path.join(repo, name)
        work = scratch(repo, build)
        for b in blocks(path):
            where = f"{name}:{b.line}"
            if b.lang == "usage":
                n = check_usage(b, where, env, failures)
                print(f"ok   {where}: usage, {n} options found in --help", flush=True)
                continue
            if not is_shell(b):
                continue
            first = next((l for l in b.lines if l.strip()), "")
            if not first.startswith("$ "):
                if b.skip is None:
                    failures.append(f"{where}: a shell example that is neither a transcript "
                                    "(\"$ command\" then its output) nor marked "
                                    "<!-- doctest: skip REASON -->")
                else:
                    skipped += 1
                continue
            if b.skip is not None:
                skipped += 1
                continue
            for cmd, expected, status in transcript(b):
                ran += 1
                if os.environ.get("DOCTEST_LIST"):
                    print(f"run  {where}: {cmd.splitlines()[0]}")
                    continue
                try:
                    p = subprocess.run(["bash", "-c", cmd], cwd=work, env=env, text=True,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       timeout=TIMEOUT)
                except subprocess.TimeoutExpired:
                    failures.append(f"{where}: `{cmd}` did not finish in {TIMEOUT} s")
                    continue
                actual = [l.rstrip() for l in p.stdout.rstrip("\n").split("\n")] \
                    if p.stdout.strip() else []
                if p.returncode != status:
                    tail = (actual + p.stderr.rstrip("\n").split("\n"))[-15:]
                    failures.append(f"{where}: `{cmd}` exited {p.returncode}, the doc says "
                                    f"{status}\n    output:\n      " + "\n      ".join(tail))
                elif not matches(expected, actual):
                    failures.append(f"{where}: `{cmd}` printed other output than the doc shows\n"
                                    + "\n".join(diff(expected, actual)))
                else:
                    print(f"ok   {where}: {cmd.splitlines()[0]}", flush=True)
        shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print("FAIL " + f)
    print(f"{ran} commands run, {skipped} blocks skipped with a reason, {len(failures)} failures")
    sys.exit(1 if failures else 0)


def diff(expected, actual):
    import difflib
    lines = list(difflib.unified_diff(expected, actual, "doc", "actual", lineterm="", n=1))
    return ["    " + l for l in lines[:40]] + (["    ..."] if len(lines) > 40 else [])


main()
