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

# tiny_job NAME STEPS [EXTRA-TOML]: a whole job of the tiny GPT on the local
# backend, 2 nodes x 2 processes, data in ./data (vocabulary 256), a
# checkpoint every 5 steps; EXTRA-TOML is appended to its [resilience] table.
tiny_job() {
  printf 'name = "%s"\n' "$1"
  tiny_model
  cat <<TOML
[cluster]
backend = "local"
nodes = 2
procs_per_node = 2
[parallel]
zero_stage = 1
[train]
micro_batch = 2
global_batch = 8
steps = $2
eval_interval = 0
threads = 1
[optim]
lr = 3e-3
warmup_steps = 3
[data]
dir = "data"
[checkpoint]
every = 5
keep = 3
[resilience]
heartbeat_interval = "0.5s"
heartbeat_timeout = "10s"
collective_timeout = "20s"
restart_backoff = "0s"
straggler_steps = 1000
${3:-}
TOML
}
