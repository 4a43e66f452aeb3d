#!/usr/bin/env python3
"""Any program can run under `fmstack run -- ...`; this one uses only the
standard library. Every rank prints the torchrun-style environment it got.
As under torchrun, MASTER_ADDR:MASTER_PORT is free for the program's own
store: rank 0 listens there and every other rank connects to it, the way
torch.distributed's env:// rendezvous starts.

    fmstack run --nodes 2 --procs-per-node 2 -- python3 examples/hello_ranks.py
"""
import os
import socket
import time

keys = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
        "MASTER_PORT"]
env = {k: os.environ[k] for k in keys}
print(" ".join(f"{k}={v}" for k, v in env.items()), flush=True)
addr = (env["MASTER_ADDR"], int(env["MASTER_PORT"]))
world = int(env["WORLD_SIZE"])
if env["RANK"] == "0":
    with socket.create_server(addr) as server:
        server.settimeout(30)
        for _ in range(world - 1):
            server.accept()[0].close()
    print(f"rendezvous: rank 0 served MASTER_PORT, {world - 1} ranks connected", flush=True)
else:
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(addr, timeout=5).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
