#!/usr/bin/env python3
"""throttle.py DUTY PID...: let the processes run DUTY of the wall time (0.25:
10 ms running, 30 ms stopped), as a thermally throttled device would, until
they exit. Used by tests to slow a node's burn-in for real."""
import os, signal, sys, time

duty = float(sys.argv[1])
pids = [int(p) for p in sys.argv[2:]]
on = 0.010
off = on * (1 - duty) / duty
while pids:
    time.sleep(on)
    for p in list(pids):
        try:
            os.kill(p, signal.SIGSTOP)
        except ProcessLookupError:
            pids.remove(p)
    time.sleep(off)
    for p in list(pids):
        try:
            os.kill(p, signal.SIGCONT)
        except ProcessLookupError:
            pids.remove(p)
