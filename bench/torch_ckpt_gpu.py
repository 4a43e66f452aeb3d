#!/usr/bin/python3
"""The PyTorch peers of `bench_gpu --checkpoint`: the GPT-2-style model of
bench/torch_gpt.py with fused AdamW on a GPU, one training step taken so
that both moments exist, then its state (parameters and moments, what
fmstack's save holds) saved the ways PyTorch documents:

- torch.save(state_dict, path), as the saving-and-loading tutorial shows:
  training waits for all of it (copy to the host, pickle, write; fsync'd);
- torch.distributed.checkpoint.async_save, as the DCP async recipe shows:
  training waits only for the state's copy into host memory ("staging");
  serialization and the write run in the background;
- the same with the recipe's pinned-memory staging, whose buffer is kept
  between saves (FileSystemWriter(cache_staged_state_dict=True), or
  DefaultStager(StagingOptions(use_pinned_memory=True)) where that is the API).

Each: one warm-up save, then --rounds timed ones, median; the clock starts
after torch.cuda.synchronize() and a save's background part finishes
before the next save starts. Prints one JSON line: {"bytes", "torch",
"torch_save_s", "dcp_async_block_s", "dcp_async_pinned_block_s", the
"<name>_api" each DCP variant used, and "<name>_error" for a variant this
PyTorch could not run}.
"""
import argparse, json, os, shutil, statistics, tempfile, time

import torch

from torch_ckpt import fsync_tree, timed_torch_save
from torch_gpt import GPT


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def staged(response):
    """Waits for the staging of an async_save response; returns the upload future."""
    staging = getattr(response, "staging_completion", None)
    if staging is not None:  # newer DCP: staging itself may be asynchronous
        staging.result()
        return response.upload_completion
    return response


def timed_async_save(dcp, state, path, device, **kwargs):
    sync(device)
    t = time.perf_counter()
    upload = staged(dcp.async_save(state, checkpoint_id=path, **kwargs))
    seconds = time.perf_counter() - t
    upload.result()
    fsync_tree(path)
    shutil.rmtree(path)
    return seconds


def pinned_writer_kwargs(dcp, path):
    """The async recipe's pinned staging, in this PyTorch's spelling."""
    try:
        writer = dcp.FileSystemWriter(path, cache_staged_state_dict=True)
        return "FileSystemWriter(cache_staged_state_dict=True)", {"storage_writer": writer}
    except TypeError:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

        stager = DefaultStager(StagingOptions(use_pinned_memory=True))
        return "DefaultStager(StagingOptions(use_pinned_memory=True))", {"async_stager": stager}


def rounds(fn, n):
    fn()  # warm-up
    return statistics.median(fn() for _ in range(n))


def main():
    p = argparse.ArgumentParser()
    for name in ("layers", "hidden", "heads", "ffn", "vocab", "batch", "seq"):
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    p.add_argument("--dir", default=tempfile.gettempdir())
    a, _ = p.parse_known_args()  # bench/torch_peer.h passes --steps, --threads too
    torch.manual_seed(1)
    model = GPT(a.layers, a.hidden, a.heads, a.ffn, a.vocab, a.seq).to(a.device)
    fused = {"fused": True} if a.device == "cuda" else {}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **fused)
    idx = torch.randint(0, a.vocab, (a.batch, a.seq), device=a.device)
    model(idx, idx).backward()
    opt.step()
    state = {"model": model.state_dict(), "optim": opt.state_dict()}
    tensors = [t for t in model.state_dict().values()]
    for s in opt.state_dict()["state"].values():
        tensors += [t for t in s.values() if torch.is_tensor(t) and t.dim() > 0]
    out = {"torch": torch.__version__, "bytes": sum(t.numel() * t.element_size() for t in tensors)}
    root = tempfile.mkdtemp(prefix="torch_ckpt_gpu_", dir=a.dir)
    try:
        def torch_save():
            sync(a.device)
            return timed_torch_save(state, os.path.join(root, "state.pt"))

        out["torch_save_s"] = rounds(torch_save, a.rounds)
        try:
            import torch.distributed as dist
            import torch.distributed.checkpoint as dcp

            dist.init_process_group("gloo", init_method="file://" + os.path.join(root, "pg"),
                                    rank=0, world_size=1)
        except Exception as e:  # no DCP in this PyTorch (Debian's 1.13)
            out["dcp_error"] = repr(e)[:300]
        else:
            counter = iter(range(1 << 30))
            step_dir = lambda: os.path.join(root, f"dcp_{next(counter)}")
            for name, kwargs in (("dcp_async", lambda: ("default", {})),
                                 ("dcp_async_pinned", lambda: pinned_writer_kwargs(dcp, root))):
                try:
                    # One writer or stager for every save: it keeps its buffer.
                    out[name + "_api"], kw = kwargs()
                    out[name + "_block_s"] = rounds(
                        lambda: timed_async_save(dcp, state, step_dir(), a.device, **kw),
                        a.rounds)
                except Exception as e:  # an API this PyTorch spells differently
                    out[name + "_error"] = repr(e)[:300]
            dist.destroy_process_group()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
