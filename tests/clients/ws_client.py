"""Python `websockets` (Debian python3-websockets) against fmstack serve's
/v1/stream: a conversation in two turns, a cancel, a refused message, and
a peer that never answers pings being dropped.
Usage: python3 ws_client.py ws://127.0.0.1:PORT/v1/stream PING_INTERVAL_S"""
import asyncio
import base64
import json
import os
import socket
import sys
import time

import websockets


async def generate(ws, **params):
    await ws.send(json.dumps({"type": "generate", **params}))
    text = ""
    while True:
        m = json.loads(await ws.recv())
        if m["type"] == "token":
            text += m["text"]
        elif m["type"] == "done":
            return text, m
        else:
            raise AssertionError(f"unexpected message {m}")


async def main(url, ping_interval):
    async with websockets.connect(url, ping_interval=None) as ws:
        await ws.send(json.dumps({"type": "append", "text": (
            "In the beginning God created the heaven and the earth. And the earth was without "
            "form, and void; and darkness was upon the face of the deep.")}))
        text, done = await generate(ws, max_tokens=10, temperature=0)
        assert done["finish_reason"] == "length", done
        assert done["usage"]["completion_tokens"] == 10, done
        first_prompt = done["usage"]["prompt_tokens"]
        print(f"turn 1: {text!r}")
        await ws.send(json.dumps({"type": "append", "text": " And"}))
        text2, done2 = await generate(ws, max_tokens=5, temperature=0)
        # The second turn's prompt is the first's, its 10 tokens and the new input.
        assert done2["usage"]["prompt_tokens"] > first_prompt + 10, (done, done2)
        assert done2["usage"]["cached_tokens"] >= 16, done2  # the first turn's blocks are reused
        print(f"turn 2: {text2!r} (prompt {done2['usage']['prompt_tokens']}, cached {done2['usage']['cached_tokens']})")

        await ws.send(json.dumps({"type": "generate", "max_tokens": 60, "temperature": 0.8, "seed": 1}))
        m = json.loads(await ws.recv())
        assert m["type"] == "token", m
        await ws.send(json.dumps({"type": "cancel"}))
        while m["type"] != "done":
            m = json.loads(await ws.recv())
        assert m["finish_reason"] == "abort", m
        assert m["usage"]["completion_tokens"] < 60, m
        print(f"cancel: stopped after {m['usage']['completion_tokens']} tokens")

        await ws.send(json.dumps({"type": "generate", "max_tokens": 5, "temperature": -1}))
        m = json.loads(await ws.recv())
        assert m["type"] == "error" and m["param"] == "temperature", m
        await ws.send("not json")
        m = json.loads(await ws.recv())
        assert m["type"] == "error", m
        # The session survives its errors.
        _, done3 = await generate(ws, max_tokens=2, temperature=0)
        assert done3["finish_reason"] == "length"
        print("refusals: named, session kept")

    # A peer that completes the handshake and then never answers a ping.
    host, port = url.split("//")[1].split("/")[0].split(":")
    s = socket.create_connection((host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET /v1/stream HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
               f"Sec-WebSocket-Version: 13\r\n\r\n").encode())
    start = time.monotonic()
    s.settimeout(10 * ping_interval + 5)
    while True:
        data = s.recv(4096)
        if not data:
            break
    waited = time.monotonic() - start
    assert waited < 4 * ping_interval + 2, f"dropped after {waited:.1f} s"
    assert waited > 1.5 * ping_interval, f"dropped too early: {waited:.1f} s"
    print(f"silent peer: dropped after {waited:.1f} s (ping every {ping_interval} s)")
    print("websocket client: ok")


asyncio.run(main(sys.argv[1], float(sys.argv[2])))
