# Helpers for scripts that read `fmstack run` directories (tests, benches).
# Source it; it defines functions only.

# run_hash RUN_DIR: the parameter hash in the last "done" event (the group's
# rank 0 sends it: rank0.log, or another slot's after an elastic shrink
# dropped node 0), or "" when the run did not finish.
run_hash() {
  cat "$1"/logs/rank*.log | grep -a '^@fmstack ' | sed 's/^@fmstack //' |
    /usr/bin/python3 -c 'import sys, json
h = ""
for l in sys.stdin:
    e = json.loads(l)
    if e["ev"] == "done": h = e["param_hash"]
print(h)'
}
