#!/usr/bin/env python3
"""The whole client of fmstack's control channel, for any program run under
`fmstack run -- ...`: heartbeats with the step and phase, so that the
supervisor can tell a busy rank from a hung one, and commands back
("stop": save and exit at the next step boundary).

    import fmstack_client
    hb = fmstack_client.Heartbeat()      # does nothing outside `fmstack run`
    for step in range(steps):
        hb.beat(step, "train")
        if hb.stop_requested(): save(); break

Each message is one line of JSON on the descriptor FMSTACK_CONTROL_FD.
"""
import json
import os
import socket
import threading


class Heartbeat:
    def __init__(self, interval=1.0):
        fd = os.environ.get("FMSTACK_CONTROL_FD")
        self._sock = socket.socket(fileno=int(fd)) if fd else None
        self._lock = threading.Lock()
        self._step, self._phase, self._stop = 0, "start", False
        if self._sock is None:
            return
        self._interval = interval
        threading.Thread(target=self._loop, daemon=True).start()

    def beat(self, step, phase="train"):
        self._step, self._phase = step, phase

    def send(self, event):
        if self._sock is not None:
            with self._lock:
                self._sock.sendall((json.dumps(event) + "\n").encode())

    def stop_requested(self):
        return self._stop

    def _loop(self):
        self._sock.settimeout(self._interval)
        pending = b""
        while True:
            self.send({"ev": "hb", "step": self._step, "phase": self._phase})
            try:
                data = self._sock.recv(4096)
            except socket.timeout:
                continue
            if not data:
                return
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                if json.loads(line).get("cmd") == "stop":
                    self._stop = True
