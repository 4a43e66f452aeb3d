# Helpers for scripts that read `fmstack run` directories (tests, benches).
# Source it; it defines functions only.

# run_hash RUN_DIR: the parameter hash in rank 0's last "done" event, or ""
# when the run did not finish.
run_hash() {
  grep -a '^@fmstack ' "$1/logs/rank0.log" | sed 's/^@fmstack //' |
    /usr/bin/python3 -c 'import sys, json
h = ""
for l in sys.stdin:
    e = json.loads(l)
    if e["ev"] == "done": h = e["param_hash"]
print(h)'
}
