#!/usr/bin/python3
"""The peer programs for bench/ckpt: torch.save and torch.distributed.checkpoint
(Debian python3-torch) saving a state of the same size and shape as fmstack's,
each made durable with fsync before the clock stops. torch.save is given a
path, as its documentation shows, saved once to warm up and then timed three
times; the median counts, as for fmstack.

Prints one JSON line: {"torch_save_s": median, "torch_save_rounds": [...],
"dcp_save_s": ..., "torch": version}.
"""
import argparse, json, os, statistics, time

import torch


def state_of(nbytes, tensors):
    """`tensors` float32 tensors of equal size totalling about nbytes."""
    n = max(1, nbytes // 4 // tensors)
    g = torch.Generator().manual_seed(1)
    return {f"t{i:03d}": torch.rand(n, generator=g) for i in range(tensors)}


def fsync_tree(path):
    for root, _, files in os.walk(path):
        for f in files:
            fd = os.open(os.path.join(root, f), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        fd = os.open(root, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)


def timed_torch_save(state, path):
    t = time.perf_counter()
    torch.save(state, path)
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    seconds = time.perf_counter() - t
    os.remove(path)
    return seconds


def timed_dcp_save(state, path):
    try:
        import torch.distributed.checkpoint as dcp
    except ImportError:  # torch 1.13 ships it as a private module
        import torch.distributed._shard.checkpoint as dcp
    os.makedirs(path, exist_ok=True)
    t = time.perf_counter()
    dcp.save_state_dict(state, storage_writer=dcp.FileSystemWriter(path), no_dist=True)
    fsync_tree(path)
    return time.perf_counter() - t


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bytes", type=int, required=True)
    p.add_argument("--tensors", type=int, default=64)
    p.add_argument("--dir", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    state = state_of(a.bytes, a.tensors)
    out = {"torch": torch.__version__}
    path = os.path.join(a.dir, "torch_save.pt")
    timed_torch_save(state, path)  # warm-up
    rounds = [timed_torch_save(state, path) for _ in range(3)]
    out["torch_save_s"] = statistics.median(rounds)
    out["torch_save_rounds"] = [round(r, 3) for r in rounds]
    try:
        out["dcp_save_s"] = timed_dcp_save(state, os.path.join(a.dir, "dcp"))
    except Exception as e:  # torch.distributed.checkpoint is young in 1.13
        out["dcp_error"] = repr(e)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
