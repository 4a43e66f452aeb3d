#!/usr/bin/env bash
# What the Prometheus endpoint costs a run: the same 2 node x 2 process
# ZeRO-1 job of gpt-mini with metrics off (--metrics-listen off) and on,
# with a scraper asking for /metrics every SCRAPE seconds (0.5; Prometheus's
# default is 60 s, so this is 120x harsher), runs interleaved, REPS of each;
# the median step time (steps 3 and on) side by side and the overhead
# against off. The registry is updated from the step events the supervisor
# reads anyway, and the gauges at most 4 times a second.
#   bash bench/metrics_overhead.sh [REPS] [STEPS] [SCRAPE]   (defaults: 5, 40, 0.5)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/scripts/lib/runs.sh"
FMSTACK=${FMSTACK:-$root/build/fmstack}
reps=${1:-5}
steps=${2:-40}
scrape=${3:-0.5}
work=$(mktemp -d)
scraper=""
trap '[ -n "$scraper" ] && kill "$scraper" 2>/dev/null; rm -rf "$work"' EXIT
cd "$work"
bible -f gen1:1-gen20:18 > corpus.txt
"$FMSTACK" data prepare --corpus corpus.txt --vocab 256 --held-out-every 50 --out data >/dev/null 2>&1
cat > job.toml <<TOML
name = "overhead"
[model]
preset = "gpt-mini"
vocab = 256
seq_len = 64
[cluster]
backend = "local"
nodes = 2
procs_per_node = 2
[parallel]
zero_stage = 1
[train]
micro_batch = 2
global_batch = 8
steps = $steps
eval_interval = 0
eval_batches = 1
threads = 1
[data]
dir = "data"
[checkpoint]
every = 1000
TOML
echo "fmstack $("$FMSTACK" --version | awk '{print $2}'), $(nproc) cores, gpt-mini (10.8M parameters)," \
  "2 x 2 ranks ZeRO-1, 1 thread each, $steps steps, a scrape every $scrape s, $reps runs each"
median_step() {  # run dir -> median step seconds, steps 3 and on
  cat "$1"/logs/rank*.log | grep -a '^@fmstack ' | sed 's/^@fmstack //' | python3 -c '
import json, statistics, sys
steps = [e for e in map(json.loads, sys.stdin) if e["ev"] == "step" and e["rank"] == 0][2:]
print(statistics.median(e["step_s"] for e in steps))'
}
scrapes=0
for i in $(seq "$reps"); do
  for c in off on; do
    rm -rf run
    if [ "$c" = off ]; then
      "$FMSTACK" run job.toml --out run --metrics-listen off > /dev/null 2> err.txt || { tail err.txt; exit 1; }
    else
      "$FMSTACK" run job.toml --out run > /dev/null 2> err.txt &
      pid=$!
      for _ in $(seq 100); do [ -s run/metrics/targets.json ] && break; sleep 0.05; done
      target=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[0]["targets"][0])' run/metrics/targets.json)
      # One process for all scrapes, as Prometheus is: no fork per scrape
      # stealing the workers' cores.
      python3 - "$target" run/metrics/token "$scrape" >> scrapes.txt <<'PY' &
import sys, time, urllib.request
target, token, every = sys.argv[1], open(sys.argv[2]).read(), float(sys.argv[3])
while True:
    req = urllib.request.Request(f"http://{target}/metrics", headers={"Authorization": "Bearer " + token})
    try:
        urllib.request.urlopen(req, timeout=2).read()
        print(flush=True)
    except OSError:
        pass
    time.sleep(every)
PY
      scraper=$!
      wait "$pid" || { tail err.txt; exit 1; }
      kill "$scraper" 2>/dev/null || true
      wait "$scraper" 2>/dev/null || true
      scraper=""
    fi
    median_step run >> "$c.txt"
    printf '\r  run %d/%d %s' "$i" "$reps" "$c" >&2
  done
done
printf '\r\033[K' >&2
python3 - "$(wc -l < scrapes.txt)" <<'PY'
import statistics, sys
off = statistics.median(float(l) for l in open("off.txt"))
on = statistics.median(float(l) for l in open("on.txt"))
over = on / off - 1
print(f"{'metrics':<30} {'step p50':>9} {'overhead':>9}")
print(f"{'off':<30} {off:8.3f}s")
print(f"{'on, scraped ' + sys.argv[1] + ' times':<30} {on:8.3f}s {100 * over:8.1f}%  "
      f"(target <= 1%: {'met' if over <= 0.01 else 'NOT met'})")
PY
