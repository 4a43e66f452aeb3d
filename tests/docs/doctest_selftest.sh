#!/usr/bin/env bash
# The docs runner itself: a transcript that matches passes; one whose output,
# exit status or option drifted from the program fails and says where; an
# untested shell example without a reason fails.
set -euo pipefail
: "${SRC:?source tree}" "${BUILD:?build directory}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/docs"
run() { /usr/bin/python3 "$SRC/tests/docs/doctest.py" "$work" "$BUILD" "$1" > "$work/out.txt" 2>&1; }
expect_fail() {  # file, text the failure must contain
  if run "$1"; then cat "$work/out.txt"; echo "FAIL: $1 passed"; exit 1; fi
  grep -qF "$2" "$work/out.txt" || { cat "$work/out.txt"; echo "FAIL: no '$2'"; exit 1; }
  echo "caught: $(grep -m1 '^FAIL' "$work/out.txt" | cut -c1-120)"
}
fence='```'
{
  echo "${fence}console"
  echo '$ echo one; echo two; echo three'
  printf '%s\n' one ... three
  echo '$ fmstack plan no-such.toml 2>&1 | head -1'
  echo "fmstack plan: error: job: no file 'no-such.toml'.* (re)"
  echo "$fence"
  echo "${fence}usage"
  echo 'fmstack plan JOB.toml [--days D]'
  echo "$fence"
} > "$work/docs/good.md"
run docs/good.md || { cat "$work/out.txt"; echo "FAIL: a matching transcript failed"; exit 1; }
printf '%s\n' "${fence}console" '$ echo 2' '3' "$fence" > "$work/docs/output.md"
expect_fail docs/output.md "docs/output.md:1: \`echo 2\` printed other output"
printf '%s\n' "${fence}console" '$ false' "$fence" > "$work/docs/status.md"
expect_fail docs/status.md "exited 1, the doc says 0"
printf '%s\n' "${fence}usage" 'fmstack plan JOB.toml [--no-such-flag]' "$fence" > "$work/docs/usage.md"
expect_fail docs/usage.md "has no option --no-such-flag"
printf '%s\n' "${fence}sh" 'fmstack plan examples/x.toml' "$fence" > "$work/docs/untested.md"
expect_fail docs/untested.md "neither a transcript"
echo PASS
