#!/usr/bin/env python3
"""A program that heartbeats through examples/fmstack_client.py and, on rank
HANG_RANK, stops dead (SIGSTOP) after a few steps: the supervisor names it
as hung after --heartbeat-timeout, not the ranks that wait for it.

    fmstack run --nodes 1 --procs-per-node 2 --heartbeat-timeout 2 -- \
        python3 examples/hang_demo.py
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fmstack_client  # noqa: E402

hb = fmstack_client.Heartbeat(interval=0.2)
rank = int(os.environ["RANK"])
for step in range(1, 50):
    hb.beat(step)
    time.sleep(0.05)
    if step == 5 and rank == int(os.environ.get("HANG_RANK", "1")):
        os.kill(os.getpid(), signal.SIGSTOP)
print(f"rank {rank} done", flush=True)
