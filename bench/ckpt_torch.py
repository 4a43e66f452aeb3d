"""Blocking time of saving a ~1 GB PyTorch state_dict: fmstack's Python
module (the engine copies into its staging pool and returns; files,
checksums and the commit run behind) vs torch.save to a path on the same
disk, as PyTorch documents it. Both warm (one untimed save first), median
of 3, in this one run; the durable commit of ours is printed beside. Then
the module's live save (save(live=True), nothing copied), released after
its commit, as a training step that outlasts the write would release it:
the save's and the release's time together.

    PYTHONPATH=python FMSTACK_LIB=build/libfmstack.so.1 python3 bench/ckpt_torch.py [--gb 1] [--dir D]
"""
import argparse
import os
import shutil
import statistics
import tempfile
import time

import numpy as np
import torch

import fmstack

p = argparse.ArgumentParser()
p.add_argument("--gb", type=float, default=1.0)
p.add_argument("--dir", default=None, help="where both write (default: a temporary directory)")
p.add_argument("--repeats", type=int, default=3)
args = p.parse_args()

root = tempfile.mkdtemp(dir=args.dir, prefix="ckpt_torch.")
torch.manual_seed(0)
# A GPT-like state: a few large matrices and their AdamW moments.
per = int(args.gb * (1 << 30) / 4 / 24)
model = {f"h.{i}.weight": torch.randn(per) for i in range(8)}
state = {"model": model,
         "optim": {"state": {i: {"exp_avg": torch.randn(per), "exp_avg_sq": torch.rand(per),
                                 "step": torch.tensor(10.0)} for i in range(8)},
                   "param_groups": [{"lr": 1e-3, "params": list(range(8))}]}}
nbytes = sum(t.numel() * 4 for t in model.values()) * 3
print(f"state: {nbytes / 2**30:.2f} GiB in {len(model) * 3} tensors; torch {torch.__version__}, "
      f"numpy {np.__version__}, libfmstack C API {fmstack.API_VERSION}, "
      f"threads {torch.get_num_threads()}, dir {root}")

path = os.path.join(root, "state.pt")
ckpt = fmstack.Checkpointer(os.path.join(root, "fmstack"), rank=0, world=1, keep=2)


def torch_save():
    t0 = time.perf_counter()
    torch.save(state, path)
    return time.perf_counter() - t0


def ours(step):
    blocking = ckpt.save(step, state)
    t0 = time.perf_counter()
    ckpt.wait()
    return blocking, blocking + time.perf_counter() - t0


src = [t for t in model.values()] + [s[k] for s in state["optim"]["state"].values()
                                     for k in ("exp_avg", "exp_avg_sq")]
dst = [torch.empty_like(t) for t in src]


def copy_time():  # the memcpy floor of the same bytes, into memory touched before
    t0 = time.perf_counter()
    for d, s in zip(dst, src):
        d.copy_(s)
    return time.perf_counter() - t0


def ours_live(step):
    blocking = ckpt.save(step, state, live=True)
    t0 = time.perf_counter()
    ckpt.wait()
    committed = blocking + time.perf_counter() - t0
    return blocking + ckpt.release(), committed


torch_save()
ours(1)  # warm: pool allocated, files created once
copy_time()
ours_live(2)
t_torch, t_block, t_commit, t_copy, t_live, t_live_commit = [], [], [], [], [], []
for r in range(args.repeats):
    t_torch.append(torch_save())
    b, c = ours(3 + 2 * r)
    t_block.append(b)
    t_commit.append(c)
    b, c = ours_live(4 + 2 * r)
    t_live.append(b)
    t_live_commit.append(c)
    t_copy.append(copy_time())
    print(f"  repeat {r + 1}/{args.repeats}: torch.save {t_torch[-1]:.3f} s, fmstack blocking "
          f"{t_block[-1]:.3f} s (committed after {t_commit[-1]:.3f} s), live "
          f"{t_live[-1]:.4f} s (committed after {t_live_commit[-1]:.3f} s), copy "
          f"{t_copy[-1]:.3f} s", flush=True)
m_torch, m_block = statistics.median(t_torch), statistics.median(t_block)
m_commit, m_copy = statistics.median(t_commit), statistics.median(t_copy)
m_live, m_live_commit = statistics.median(t_live), statistics.median(t_live_commit)
print()
print(f"{'':40}{'median s':>10}{'GB/s':>8}")
for name, t in [("torch.save (blocking)", m_torch), ("fmstack save (blocking)", m_block),
                ("fmstack durable commit", m_commit),
                ("fmstack live save + release (blocking)", m_live),
                ("fmstack live save's durable commit", m_live_commit),
                ("memcpy of the same bytes", m_copy)]:
    print(f"{name:40}{t:10.4f}{nbytes / t / 1e9:8.2f}")
print(f"\nratio: torch.save blocking / fmstack blocking = {m_torch / m_block:.1f}x "
      f"(target >= 5x); fmstack blocking / memcpy = {m_block / m_copy:.2f}; "
      f"torch.save blocking / fmstack live save's = {m_torch / m_live:.0f}x")
ckpt.close()
shutil.rmtree(root)
