#!/usr/bin/python3
"""The peer program for bench/train (CPU) and bench/gpu: the same GPT-2-style
model, batch and sequence length trained in PyTorch, on the CPU (Debian
python3-torch) or, with --device cuda, on a GPU.

Run as PyTorch's CPU performance guide recommends: threads set to the cores
given (torch.set_num_threads and OMP_NUM_THREADS), TCMalloc as the allocator
(bench_train preloads it; the JSON says which allocator the process has),
gradients set to None rather than zeroed, one warm-up step, then --rounds
rounds of --steps steps.
On the CPU denormal floats are flushed to zero (torch.set_flush_denormal), as
fmstack's CPU passes do, and every step trains on a fresh random batch, as
bench_train's do: trained over and over on one batch, the model fits it, its
gradients sink below 1.2e-38 within ten steps, and every instruction that
touches one takes a microcode assist (a round of 5 steps fell from 934 to 311
tokens/s on the Intel VM).
Prints one JSON line: {"tokens_per_s": median round, "rounds": [...],
"allocator": TCMalloc, jemalloc or glibc malloc, "torch": version, "blas":
the BLAS library libblas.so.3 resolves to, "threads": n}.

With --serve it stays up after the warm-up step instead, so that the bench
can alternate short rounds of both sides many times (bench/torch_server.h):
it prints that JSON line without the rounds, with "ready": true, then for
each line "N" it reads on stdin trains N steps on N fresh batches (drawn
before the clock starts) and prints {"seconds": s, "steps": N}; it exits at
end of input.

On a GPU (--device cuda) it runs as PyTorch's CUDA notes recommend for fp32
training: fused AdamW, TF32 matmuls only with --matmul tf32, bf16 autocast
(PyTorch's AMP recipe for bf16, no gradient scaler) with --matmul bf16, rounds timed between
torch.cuda.synchronize() calls; --sdpa swaps the explicit attention for
F.scaled_dot_product_attention (PyTorch's fused attention kernels), which is
PyTorch at its best rather than the same algorithm as ours.

On the CPU, --matmul bf16 runs the same autocast: PyTorch's CPU tuning guide
recommends bf16 mixed precision on CPUs with bf16 dot products (AVX-512 BF16,
AMX), where its matmuls go to oneDNN's bf16 kernels. fmstack's CPU trainer
computes in fp32 only, so bench_train shows this peer beside the fp32 one, as
PyTorch's fastest setting, without a target.
"""
import argparse, contextlib, ctypes, json, math, os, statistics, sys, time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH, Fh):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, Fh), nn.Linear(Fh, C)
        self.NH = NH

    def forward(self, x, mask, sdpa):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        if sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.NH)
            y = F.softmax(att.masked_fill(mask[:T, :T] == 0, float("-inf")), dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, Fh, V, T, sdpa=False):
        super().__init__()
        self.sdpa = sdpa
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, NH, Fh) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)))

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x, self.mask, self.sdpa)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied LM head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    for name in ("layers", "hidden", "heads", "ffn", "vocab", "batch", "seq", "steps", "threads"):
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--matmul", choices=("fp32", "tf32", "bf16"), default="fp32",
                   help="fp32; TF32 tensor cores (cuda); bf16 autocast (PyTorch's AMP recipe, "
                        "on the CPU where it has bf16 dot products)")
    p.add_argument("--sdpa", action="store_true", help="F.scaled_dot_product_attention")
    p.add_argument("--serve", action="store_true", help="rounds on request, read from stdin")
    a = p.parse_args()
    if a.sdpa and not hasattr(F, "scaled_dot_product_attention"):
        p.error(f"--sdpa: torch {torch.__version__} has no F.scaled_dot_product_attention (2.0+)")
    if a.matmul == "tf32" and a.device != "cuda":
        p.error("--matmul tf32: for --device cuda only")
    cuda = a.device == "cuda"
    # First, before any thread exists: the flag is per thread, and the intra-op
    # pool's threads inherit it from this one when they start.
    if not cuda:
        assert torch.set_flush_denormal(True), "this CPU cannot flush denormals"
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = a.matmul == "tf32"
        torch.backends.cudnn.allow_tf32 = a.matmul == "tf32"
    # bf16 as PyTorch's AMP recipe has it: autocast around the forward pass
    # and the loss (no gradient scaler: bf16 has fp32's exponent range).
    autocast = (lambda: torch.autocast(a.device, dtype=torch.bfloat16)) if a.matmul == "bf16" \
        else contextlib.nullcontext
    model = GPT(a.layers, a.hidden, a.heads, a.ffn, a.vocab, a.seq, a.sdpa).to(a.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            **({"fused": True} if cuda else {}))
    # Every step's batch drawn before the clock starts: warm-up plus the rounds.
    def draw(n):
        return [(torch.randint(0, a.vocab, (a.batch, a.seq), device=a.device),
                 torch.randint(0, a.vocab, (a.batch, a.seq), device=a.device))
                for _ in range(n)]

    batches = draw(1 if a.serve else 1 + a.rounds * a.steps)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def step():
        idx, targets = batches.pop()
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = model(idx, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    step()  # warm-up
    sync()
    about = describe(a, cuda)
    if a.serve:
        print(json.dumps({"ready": True, **about}), flush=True)
        for line in sys.stdin:
            n = int(line)
            if not 1 <= n <= 1000:
                raise SystemExit(f"torch_gpt.py --serve: steps per round must be 1-1000, got {n}")
            batches = draw(n)
            start = time.perf_counter()
            for _ in range(n):
                step()
            sync()
            print(json.dumps({"seconds": time.perf_counter() - start, "steps": n}), flush=True)
        return
    rounds = []
    for _ in range(a.rounds):
        start = time.perf_counter()
        for _ in range(a.steps):
            step()
        sync()
        rounds.append(round(a.steps * a.batch * a.seq / (time.perf_counter() - start)))
    print(json.dumps({"tokens_per_s": statistics.median(rounds), "rounds": rounds, **about}))


def describe(a, cuda):
    """What the comparison needs to name: versions, BLAS, threads, allocator."""
    lib = os.path.realpath("/lib/x86_64-linux-gnu/libblas.so.3")
    blas = lib.split("/")[-2]
    try:  # the kernels OpenBLAS picked in this process (OPENBLAS_CORETYPE, inherited)
        get = ctypes.CDLL(lib).openblas_get_corename
        get.restype = ctypes.c_char_p
        blas += " " + get().decode()
    except (OSError, AttributeError):
        pass
    if cuda:
        blas = "cuBLAS " + str(torch.backends.cuda.preferred_blas_library())
    with open("/proc/self/maps") as maps:
        allocator = next((name for lib, name in (("tcmalloc", "TCMalloc"), ("jemalloc", "jemalloc"))
                          if lib in maps.read()), "glibc malloc")
    return {"allocator": allocator, "torch": torch.__version__, "blas": blas,
            "threads": torch.get_num_threads(), "device": a.device, "matmul": a.matmul,
            "sdpa": a.sdpa}


if __name__ == "__main__":
    main()
