"""A standard PyTorch DDP script, as a user would write it for torchrun:
gloo process group from env://, a small GPT-like model, AdamW. The only
fmstack parts are optional: --ckpt saves and resumes through fmstack's
Python module, and the step marks feed `fmstack run`'s goodput ledger.

Every step's batch is a function of (step, rank), so a run resumed from a
checkpoint at step k trains exactly what the uninterrupted run trained.
Rank 0 writes the final weights (--out, raw float32 in state_dict order)
and prints their SHA-256.
"""
import argparse
import hashlib
import os
import signal
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import fmstack

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=24)
p.add_argument("--ckpt", help="fmstack checkpoint directory (resume from it when it has one)")
p.add_argument("--every", type=int, default=5, help="checkpoint interval, steps")
p.add_argument("--live", action="store_true",
               help="live saves: nothing copied, released before the next optimizer.step()")
p.add_argument("--out", required=True)
p.add_argument("--kill-rank", type=int, default=-1,
               help="this rank SIGKILLs itself after --kill-step, on the first attempt only")
p.add_argument("--kill-step", type=int, default=-1)
p.add_argument("--width", type=int, default=128)
p.add_argument("--batch", type=int, default=8)
args = p.parse_args()

dist.init_process_group("gloo")  # MASTER_ADDR/MASTER_PORT, RANK, WORLD_SIZE from the launcher
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(1234)
V, T, C = 256, 32, args.width


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.attn = nn.MultiheadAttention(C, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C))

    def forward(self, x):
        h = self.ln1(x)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)  # causal
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


model = nn.Sequential(nn.Embedding(V, C), Block(), Block(), nn.LayerNorm(C), nn.Linear(C, V))
# Bitwise-equal resume under DDP needs a fixed bucket layout: an element's
# place in its bucket decides the order in which the ring all-reduce sums it.
# By default DDP's first iteration reduces everything in one bucket and then
# rebuilds the buckets, so a resumed run's first step would sum in another
# order than the uninterrupted run's. Here: one parameter per bucket, always
# (the first-bucket limit applies with find_unused_parameters=True).
dist._DEFAULT_FIRST_BUCKET_BYTES = 1
ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1e-6, find_unused_parameters=True)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
run = fmstack.Run()
ckpt = fmstack.Checkpointer(args.ckpt, run=run) if args.ckpt else None


def state():
    return {"model": model.state_dict(), "optim": opt.state_dict()}


start = 0
if ckpt is not None:
    found = ckpt.load(like=state())
    if found is not None:
        start, saved = found
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optim"])
        print(f"rank {rank}: resumed from step {start}", flush=True)

restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
print(f"rank {rank}: attempt {restarts} of at most {os.environ.get('TORCHELASTIC_MAX_RESTARTS')}"
      f" more, run {os.environ.get('TORCHELASTIC_RUN_ID')}", flush=True)
timed = []  # step seconds after the first two (warm-up)
for step in range(start, args.steps):
    t0 = time.perf_counter()
    g = torch.Generator().manual_seed(1000 * step + rank)
    tokens = torch.randint(0, V, (args.batch, T + 1), generator=g)
    logits = ddp(tokens[:, :-1])
    loss = nn.functional.cross_entropy(logits.reshape(-1, V), tokens[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if ckpt is not None and args.live:
        ckpt.release()  # a live save reads the weights and moments that step() rewrites
    opt.step()
    done = step + 1
    if rank == args.kill_rank and done == args.kill_step and restarts == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    if ckpt is not None and done % args.every == 0:
        ckpt.save(done, state(), live=args.live)
    seconds = time.perf_counter() - t0
    if step >= start + 2:
        timed.append(seconds)
    run.step(done, seconds, args.batch * T)
    if rank == 0 and done % 8 == 0:
        print(f"step {done} loss {loss.item():.4f}", flush=True)

if ckpt is not None:
    ckpt.wait()
dist.barrier()
if rank == 0:
    digest = hashlib.sha256()
    with open(args.out, "wb") as f:
        for t in model.state_dict().values():
            b = t.detach().contiguous().numpy().tobytes()
            f.write(b)
            digest.update(b)
    print(f"weights {digest.hexdigest()}", flush=True)
    if timed:
        print(f"step_ms {1e3 * sorted(timed)[len(timed) // 2]:.3f}", flush=True)
dist.destroy_process_group()
