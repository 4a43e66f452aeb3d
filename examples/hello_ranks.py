#!/usr/bin/env python3
"""Any program can run under `fmstack run -- ...`; this one uses only the
standard library. Every rank prints the torchrun-style environment it got;
rank 0 also shows that MASTER_ADDR:MASTER_PORT (the supervisor's rendezvous
store) accepts a TCP connection.

    fmstack run --nodes 2 --procs-per-node 2 -- python3 examples/hello_ranks.py
"""
import os
import socket

keys = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
        "MASTER_PORT"]
env = {k: os.environ[k] for k in keys}
print(" ".join(f"{k}={v}" for k, v in env.items()), flush=True)
if env["RANK"] == "0":
    with socket.create_connection((env["MASTER_ADDR"], int(env["MASTER_PORT"])), timeout=5):
        print("rendezvous store reachable", flush=True)
