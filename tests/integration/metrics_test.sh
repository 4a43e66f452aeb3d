#!/usr/bin/env bash
# Prometheus scrapes a live `fmstack run`: Debian's Prometheus on loopback
# finds the run through its file_sd target file, authenticates with the
# run's bearer token, and its HTTP API then returns each of the run's
# series, a crash counted among the incidents. A scrape without the token is
# refused, the exposition passes `promtool check metrics`, and the crash
# fires its alert from deploy/prometheus/fmstack.rules.yml; every query of
# the Grafana dashboards in deploy/grafana/ returns data. With health agents,
# each node's agent serves its devices (dcgm-exporter's names), host and
# checks, scraped through the same target file; an Xid fires its alert.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/scripts/lib/runs.sh"
: "${FMSTACK:?path to the fmstack binary}"
command -v prometheus > /dev/null || { echo "FAIL: prometheus is not installed (scripts/bootstrap.sh)"; exit 1; }
command -v promtool > /dev/null || { echo "FAIL: promtool is not installed (scripts/bootstrap.sh)"; exit 1; }
PY=/usr/bin/python3
work=$(mktemp -d)
prom="" run=""
cleanup() {
  [ -n "$prom" ] && kill "$prom" 2>/dev/null || true
  [ -n "$run" ] && kill "$run" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
fail() { echo "FAIL: $*"; [ -f prom.log ] && tail -5 prom.log; exit 1; }

bible -f gen1:1-gen20:18 > corpus.txt
"$FMSTACK" data prepare --corpus corpus.txt --vocab 256 --held-out-every 50 --out data >/dev/null 2>&1
cat > job.toml <<TOML
name = "scraped"
$(tiny_model 256)
[cluster]
backend = "local"
nodes = 2
procs_per_node = 2
[parallel]
zero_stage = 1
[train]
micro_batch = 2
global_batch = 8
steps = 100000
eval_interval = 0
eval_batches = 2
threads = 1
[data]
dir = "data"
[checkpoint]
every = 20
[resilience]
policy = "checkpointless"
heartbeat_interval = "0.5s"
heartbeat_timeout = "4s"
collective_timeout = "20s"
restart_backoff = "0s"
straggler_steps = 100000
[health]
devices = "fake"
TOML

"$FMSTACK" run job.toml --out runs/scraped --peak-gflops 100 > run.out 2> run.err &
run=$!
for _ in $(seq 100); do [ -s runs/scraped/metrics/targets.json ] && break; sleep 0.1; done
target=$($PY -c 'import json, sys; print(json.load(open(sys.argv[1]))[0]["targets"][0])' runs/scraped/metrics/targets.json)
grep -q "metrics: http://$target/metrics" run.err || fail "the endpoint was not announced"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://$target/metrics")
[ "$code" = 401 ] || fail "a scrape without the token got HTTP $code, not 401"
curl -sf --max-time 5 -H "Authorization: Bearer $(cat runs/scraped/metrics/token)" \
  "http://$target/metrics" > exposition.txt || fail "a scrape with the token failed"
promtool check metrics < exposition.txt || fail "promtool check metrics rejects the exposition"

# Prometheus, once the run has written its token: it scrapes through the
# run's file_sd target file, with the token as its credentials.
port=$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > prometheus.yml <<YML
global:
  scrape_interval: 500ms
  scrape_timeout: 400ms
  evaluation_interval: 500ms
rule_files:
  - $root/deploy/prometheus/fmstack.rules.yml
scrape_configs:
  - job_name: fmstack
    authorization:
      credentials_file: $work/runs/scraped/metrics/token
    file_sd_configs:
      - files: [$work/runs/scraped/metrics/targets.json]
        refresh_interval: 1s
YML
promtool check config prometheus.yml > /dev/null || fail "promtool rejects the scrape config"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$port" > prom.log 2>&1 &
prom=$!
api() { curl -sf --max-time 5 "http://127.0.0.1:$port/api/v1/$1"; }
for _ in $(seq 100); do curl -sf --max-time 1 "http://127.0.0.1:$port/-/ready" > /dev/null && break; sleep 0.1; done
curl -sf --max-time 1 "http://127.0.0.1:$port/-/ready" > /dev/null || fail "prometheus did not become ready"


# Until Prometheus holds the crash and steps after it, then every series.
query() {  # PromQL -> the first value, or ""
  api "query?query=$($PY -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$1")" |
    $PY -c 'import json, sys; r = json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")'
}
# Once Prometheus holds the run's counters, a crash from outside, as an
# operator would inject it: its increase fires the alert.
for _ in $(seq 60); do [ -n "$(query 'fmstack_incidents_total{kind="crash"}')" ] && break; sleep 0.5; done
[ "$(query 'fmstack_incidents_total{kind="crash"}')" = 0 ] || fail "no zero crash counter before the crash"
"$FMSTACK" fault inject runs/scraped --rank 1 --kind crash > /dev/null
ok=""
for _ in $(seq 120); do
  kill -0 "$run" 2>/dev/null || { tail -20 run.err; fail "the run ended early"; }
  crashes=$(query 'fmstack_incidents_total{kind="crash"}')
  recovered=$(query 'fmstack_recovery_seconds_count{kind="crash"}')
  if [ "$crashes" = 1 ] && [ "$recovered" = 1 ]; then ok=1; break; fi
  sleep 0.5
done
[ -n "$ok" ] || fail "prometheus never saw the crash and its recovery (crashes '$crashes', recovered '$recovered')"
api targets | $PY -c '
import json, sys
t = json.load(sys.stdin)["data"]["activeTargets"]
assert t and all(x["health"] == "up" for x in t), t' || fail "the target is not up"
for series in fmstack_step fmstack_step_seconds_count fmstack_tokens_per_second fmstack_loss \
  fmstack_grad_norm fmstack_learning_rate fmstack_checkpoint_blocking_seconds_count \
  fmstack_checkpoint_last_timestamp_seconds fmstack_restarts 'fmstack_goodput_seconds{bucket="productive"}' \
  fmstack_goodput_ratio fmstack_ranks_up fmstack_world_size fmstack_recovery_seconds_count \
  fmstack_up 'fmstack_incidents_total{kind="crash"}' fmstack_model_flops_per_second fmstack_mfu \
  'fmstack_checkpoint_commit_seconds_count{tier="local"}' 'fmstack_checkpoint_restore_seconds_count{source="peers"}'; do
  v=$(query "$series")
  [ -n "$v" ] || fail "prometheus has no $series"
  echo "$series = $v"
done
[ "$(query fmstack_world_size)" = 4 ] || fail "world size $(query fmstack_world_size), expected 4"
# The crash fires its alert in Prometheus, from the shipped rules.
for _ in $(seq 40); do
  firing=$(api alerts | $PY -c '
import json, sys
a = json.load(sys.stdin)["data"]["alerts"]
print(" ".join(x["labels"]["alertname"] + ":" + x["labels"].get("kind", "") for x in a if x["state"] == "firing"))')
  case " $firing " in *" FmstackFault:crash "*) break;; esac
  sleep 0.5
done
case " $firing " in *" FmstackFault:crash "*) echo "alert firing: FmstackFault (crash)";;
  *) fail "the crash did not fire FmstackFault (firing: $firing)";; esac
[ "$(query fmstack_ranks_up)" = 4 ] || fail "ranks up $(query fmstack_ranks_up), expected 4"
# The health agents' device readings under dcgm-exporter's names; an Xid
# (13, an application error: no node action) fires FmstackGpuXid.
# Each node agent serves its own /metrics, found through the same file_sd.
[ "$(query 'count(up{job="fmstack-node"} == 1)')" = 2 ] || fail "the two node agents are not scraped"
agent=$($PY -c 'import json, sys
print([g for g in json.load(open(sys.argv[1])) if g["labels"]["job"] == "fmstack-node"][0]["targets"][0])' \
  runs/scraped/metrics/targets.json)
curl -sf --max-time 5 -H "Authorization: Bearer $(cat runs/scraped/metrics/token)" \
  "http://$agent/metrics" > agent.txt || fail "a scrape of the agent at $agent failed"
promtool check metrics < agent.txt || fail "promtool check metrics rejects the agent's exposition"
for series in 'DCGM_FI_DEV_GPU_TEMP{Hostname="node1",gpu="1"}' DCGM_FI_DEV_FB_FREE \
  DCGM_FI_DEV_POWER_USAGE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL 'fmstack_node_state{state="allocated"}' \
  fmstack_health_agent_up 'fmstack_host_memory_available_bytes{node="node0"}' fmstack_host_load1 \
  'fmstack_health_check_ok{check="nic-link"}'; do
  v=$(query "$series")
  [ -n "$v" ] || fail "prometheus has no $series"
  echo "$series = $v"
done
"$FMSTACK" fault inject runs/scraped --rank 3 --kind xid-13 > /dev/null
for _ in $(seq 40); do
  firing=$(api alerts | $PY -c '
import json, sys
a = json.load(sys.stdin)["data"]["alerts"]
print(" ".join(x["labels"]["alertname"] + ":" + x["labels"].get("Hostname", "") + "/" + x["labels"].get("gpu", "") for x in a if x["state"] == "firing"))')
  case " $firing " in *" FmstackGpuXid:node1/1 "*) break;; esac
  sleep 0.5
done
case " $firing " in *" FmstackGpuXid:node1/1 "*) echo "alert firing: FmstackGpuXid (node1 gpu 1)";;
  *) fail "the Xid did not fire FmstackGpuXid (firing: $firing)";; esac
# Every Grafana panel's query returns data for this run.
$PY - "$root"/deploy/grafana/*.json <<PY || fail "a Grafana panel's query returned no data"
import json, math, sys, urllib.parse, urllib.request
bad = 0
for path in sys.argv[1:]:
    board = json.load(open(path))
    for p in board["panels"]:
        for t in p["targets"]:
            expr = t["expr"].replace("\$run", "scraped")
            url = "http://127.0.0.1:$port/api/v1/query?query=" + urllib.parse.quote(expr)
            r = json.load(urllib.request.urlopen(url, timeout=5))["data"]["result"]
            values = [float(x["value"][1]) for x in r]
            ok = any(math.isfinite(v) for v in values)
            bad += not ok
            print(f"{'ok ' if ok else 'BAD'} {board['title']} / {p['title']}: {len(r)} series")
sys.exit(1 if bad else 0)
PY
echo "metrics: prometheus scraped every series of a live run"
