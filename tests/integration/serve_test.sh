#!/usr/bin/env bash
# fmstack serve end to end on a model trained here: the official OpenAI
# client (npm), a WebSocket client (python3-websockets), a gRPC client
# (python3-grpcio), curl; bad input
# answered 4xx with the field named while the server keeps serving; a
# client that disconnects mid-stream has its KV blocks freed; slow and
# idle clients are cut by their deadlines; 2,000 connections at once; the
# metrics parse with promtool; RSS stays flat over many requests; SIGTERM
# drains in-flight work.
set -euo pipefail
: "${FMSTACK:?path to the fmstack binary}"
: "${SRC:?source tree}"
tmp=$(mktemp -d)
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill -9 "$server_pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
clients="$SRC/tests/clients"
[ -d "$clients/node_modules/openai" ] || { echo "npm clients missing: run scripts/bootstrap.sh"; exit 1; }

"$FMSTACK" data prepare --out "$tmp/kjv" >/dev/null
cat >"$tmp/job.toml" <<TOML
name = "kjv-serve"
model = "gpt-mini"
[train]
micro_batch = 2
global_batch = 2
steps = 2
[data]
dir = "$tmp/kjv"
[serve]
kv_cache = "64MiB"
max_batch_tokens = 512
max_seqs = 32
request_timeout = "2s"
idle_timeout = "3s"
ping_interval = "1s"
max_body = "64KiB"
drain_timeout = "20s"
TOML
"$FMSTACK" train "$tmp/job.toml" --out "$tmp/run" >/dev/null 2>&1

start_server() {
  "$FMSTACK" serve "$tmp/job.toml" --ckpt "$tmp/run" --port 0 --grpc-port 0 2>"$tmp/serve.log" &
  server_pid=$!
  for _ in $(seq 200); do
    port=$(sed -n 's|.*on http://127.0.0.1:\([0-9]*\).*|\1|p' "$tmp/serve.log")
    [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0
    sleep 0.1
  done
  cat "$tmp/serve.log"; echo "server did not start"; exit 1
}
ulimit -n 8192
start_server
base="http://127.0.0.1:$port"
cat "$tmp/serve.log"

# Real clients.
node "$clients/openai_client.mjs" "$base/v1"
/usr/bin/python3 "$clients/ws_client.py" "ws://127.0.0.1:$port/v1/stream" 1
grpc_port=$(sed -n 's|.*Generation/Stream on 127.0.0.1:\([0-9]*\).*|\1|p' "$tmp/serve.log")
protoc -I"$SRC/src/serve/proto" --python_out="$tmp" "$SRC/src/serve/proto/stream.proto"
/usr/bin/python3 "$clients/grpc_client.py" "127.0.0.1:$grpc_port" "$tmp"

# curl, as docs/serve.md shows it.
curl -sf "$base/v1/models" | /usr/bin/python3 -c 'import json,sys; m=json.load(sys.stdin); assert m["data"][0]["id"]=="kjv-serve", m'
curl -sfN "$base/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model": "kjv-serve", "prompt": "And God said", "max_tokens": 5, "stream": true}' >"$tmp/sse.txt"
[ "$(grep -c '^data: {' "$tmp/sse.txt")" = 5 ] || { cat "$tmp/sse.txt"; exit 1; }
tail -2 "$tmp/sse.txt" | grep -q '^data: \[DONE\]' || { cat "$tmp/sse.txt"; exit 1; }

# Bad input: a 4xx with an OpenAI-style error naming the field, each.
expect() {  # status param body...
  local want=$1 param=$2; shift 2
  code=$(curl -s -o "$tmp/err.json" -w '%{http_code}' "$base/v1/completions" -H 'Content-Type: application/json' "$@")
  [ "$code" = "$want" ] || { echo "expected $want for $*, got $code"; cat "$tmp/err.json"; exit 1; }
  /usr/bin/python3 - "$tmp/err.json" "$param" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))["error"]
assert e["message"] and e["type"], e
assert sys.argv[2] == "-" or e["param"] == sys.argv[2], (e, sys.argv[2])
PY
}
expect 400 body -d '{"prompt": "x", "max_tokens": '
/usr/bin/python3 -c 'import json; print(json.dumps({"prompt": [1] * 300, "max_tokens": 1}))' >"$tmp/long.json"
expect 400 prompt --data-binary "@$tmp/long.json"
expect 400 max_tokens -d '{"prompt": "x", "max_tokens": 0}'
expect 400 max_tokens -d '{"prompt": "x", "max_tokens": 100000}'
expect 400 temperature -d '{"prompt": "x", "temperature": -0.5}'
expect 400 body -d '{"prompt": "x", "temperature": NaN}'
expect 400 top_p -d '{"prompt": "x", "top_p": 0}'
expect 400 top_p -d '{"prompt": "x", "top_p": 1.5}'
expect 404 model -d '{"model": "gpt-5", "prompt": "x"}'
printf '{"prompt": "\xff\xfe"}' >"$tmp/bad_utf8.json"
expect 400 body --data-binary "@$tmp/bad_utf8.json"
head -c 70000 /dev/zero | tr '\0' 'a' | sed 's/^/{"prompt": "/; s/$/"}/' >"$tmp/big.json"
expect 413 body --data-binary "@$tmp/big.json"
curl -sf "$base/health" >/dev/null

# A client that sends its headers a byte a second is cut by request_timeout
# (2 s); one that sends nothing by idle_timeout (3 s); the server serves on.
/usr/bin/python3 - "$port" <<'PY'
import socket, sys, time
port = int(sys.argv[1])
slow = socket.create_connection(("127.0.0.1", port))
idle = socket.create_connection(("127.0.0.1", port))
start = time.monotonic()
closed_at = None
for ch in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 100:
    try:
        slow.send(bytes([ch]))
    except OSError:
        closed_at = time.monotonic() - start
        break
    slow.settimeout(1.0)
    try:
        if slow.recv(1) == b"":
            closed_at = time.monotonic() - start
            break
    except socket.timeout:
        pass
assert closed_at is not None and closed_at < 5, f"slow client kept for {closed_at}"
idle.settimeout(6)
assert idle.recv(1) == b"", "idle client got bytes"
idle_closed = time.monotonic() - start
assert 2.5 < idle_closed < 5, f"idle client closed after {idle_closed:.1f} s"
print(f"slow client cut after {closed_at:.1f} s, idle one after {idle_closed:.1f} s")
PY

# A client that disconnects mid-stream: its blocks are freed within a step.
/usr/bin/python3 - "$port" <<'PY'
import json, socket, sys, time, urllib.request
port = int(sys.argv[1])
def gauge(name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    return float(next(l.split()[1] for l in text.splitlines() if l.startswith(name + " ")))
s = socket.create_connection(("127.0.0.1", port))
body = json.dumps({"prompt": "And the LORD said unto Moses", "max_tokens": 200, "stream": True})
s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode())
got = b""
while got.count(b"data: ") < 3:
    got += s.recv(4096)
assert gauge("fmstack_serve_kv_blocks_used") > 0
s.close()
for _ in range(100):
    if gauge("fmstack_serve_kv_blocks_used") == 0 and gauge("fmstack_serve_requests_running") == 0:
        break
    time.sleep(0.05)
else:
    raise AssertionError("blocks still held after the client left")
print("disconnected client: blocks freed")
PY

# 2,000 concurrent connections, each answered.
/usr/bin/python3 - "$port" <<'PY'
import selectors, socket, sys
port = int(sys.argv[1])
conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(2000)]
for c in conns:
    c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
ok = 0
for c in conns:
    c.settimeout(20)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = c.recv(4096)
        if not chunk:
            break
        data += chunk
    ok += data.startswith(b"HTTP/1.1 200")
    c.close()
assert ok == 2000, f"{ok} of 2000 answered"
print("2000 concurrent connections: all answered")
PY

# Metrics parse; the series the docs name are there.
curl -sf "$base/metrics" >"$tmp/metrics.txt"
promtool check metrics <"$tmp/metrics.txt" || { echo "promtool rejects /metrics"; exit 1; }
for m in fmstack_serve_time_to_first_token_seconds_bucket fmstack_serve_inter_token_latency_seconds_count \
         fmstack_serve_requests_running fmstack_serve_requests_waiting fmstack_serve_kv_blocks_used \
         fmstack_serve_kv_blocks_free fmstack_serve_prefix_cache_hit_tokens_total fmstack_serve_preemptions_total; do
  grep -q "^$m" "$tmp/metrics.txt" || { echo "metric $m missing"; exit 1; }
done

# Resident memory stays flat: 1,500 more requests after a warm-up of 300.
rss() { awk '/VmRSS/ {print $2}' "/proc/$server_pid/status"; }
"$FMSTACK" bench serve --url "$base" --vocab 2000 --requests 300 --concurrency 16 --input-len 8:64 --output-len 1:8 >/dev/null 2>&1
before=$(rss)
"$FMSTACK" bench serve --url "$base" --vocab 2000 --requests 1500 --concurrency 16 --input-len 8:64 --output-len 1:8 >"$tmp/load.txt" 2>&1
after=$(rss)
cat "$tmp/load.txt"
echo "RSS $before kB -> $after kB over 1500 requests"
[ $((after - before)) -lt 20480 ] || { echo "RSS grew by $((after - before)) kB"; exit 1; }
# And it stays within the weights + serve.kv_cache + 160 MB (docs/serve.md): the
# process's code and libraries, the tokenizer, the step's activations and logits.
weights_mb=$(sed -n 's/.*(\([0-9]*\) MB of weights).*/\1/p' "$tmp/serve.log")
kv_mb=$(sed -n 's/.*KV pool [0-9]* blocks of [0-9]* tokens (\([0-9]*\)\.[0-9] MB).*/\1/p' "$tmp/serve.log")
bound=$(( (weights_mb + kv_mb + 160) * 1000000 / 1024 ))
echo "RSS $after kB against weights $weights_mb MB + KV $kv_mb MB + 160 MB = $bound kB"
[ "$after" -lt "$bound" ] || { echo "RSS over its bound"; exit 1; }
curl -sf "$base/metrics" | grep -q '^fmstack_serve_kv_blocks_used 0$' || { echo "KV blocks left in use"; exit 1; }

# SIGTERM: the in-flight generation finishes, new requests are refused, exit 0.
curl -sN "$base/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "In the beginning", "max_tokens": 150, "stream": true}' >"$tmp/drain.txt" &
curl_pid=$!
sleep 0.5
kill -TERM "$server_pid"
sleep 0.2
code=$(curl -s -o /dev/null -w '%{http_code}' "$base/v1/models" || true)
[ "$code" = "503" ] || [ "$code" = "000" ] || { echo "a request during drain got $code"; exit 1; }
wait "$curl_pid"
grep -q '"finish_reason":"length"' "$tmp/drain.txt" || { echo "in-flight stream cut at drain"; tail -3 "$tmp/drain.txt"; exit 1; }
wait "$server_pid"
server_pid=""
grep -q "serve: stopped after" "$tmp/serve.log"
echo "serve: ok"
