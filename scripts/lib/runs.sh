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

# tiny_model [VOCAB]: the [model] section of the tests' tiny GPT (2 layers,
# hidden 64, sequences of 64), for job files written by test scripts.
tiny_model() {
  printf '[model]\npreset = "gpt-mini"\nlayers = 2\nhidden = 64\nheads = 2\nffn_hidden = 256\nvocab = %s\nseq_len = 64\n' "${1:-256}"
}
