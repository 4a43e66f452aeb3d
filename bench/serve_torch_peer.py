"""The PyTorch peer of `fmstack bench serve`: the same GPT-2-shaped model
with the same weights (the raw float32 buffer fmstack wrote with
--weights-out, in gpt/layout.h's order), generating with a KV cache and
static batching, as Hugging Face transformers' generate() does: requests
are taken in arrival order in batches of --batch, each batch prefilled at
once and then decoded greedily one token per step for every sequence
until its longest request is done. All requests arrive at time 0, so a
request's time to first token includes the batches before its own.

Written from the architecture (pre-LayerNorm blocks, tanh GELU, learned
positions, tied head), not from fmstack's code. Prints one JSON object.

    python3 bench/serve_torch_peer.py --weights W.bin --shape SHAPE.json \
        --requests 64 --batch 32 --input-len 128 --output-len 128 --threads 2
"""
import argparse
import json
import math
import time

import numpy as np
import torch
import torch.nn.functional as F


def load(path, s):
    L, C, Fh, V, T = s["layers"], s["hidden"], s["ffn_hidden"], s["vocab"], s["seq_len"]
    flat = torch.from_numpy(np.fromfile(path, dtype=np.float32))
    sizes = [("wte", (V, C)), ("wpe", (T, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
             ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)),
             ("attprojb", (L, C)), ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, Fh, C)),
             ("fcb", (L, Fh)), ("fcprojw", (L, C, Fh)), ("fcprojb", (L, C)), ("lnfw", (C,)),
             ("lnfb", (C,))]
    w, at = {}, 0
    for name, shape in sizes:
        n = math.prod(shape)
        w[name] = flat[at:at + n].view(shape)
        at += n
    assert at == flat.numel(), f"{path}: {flat.numel()} floats, the shape needs {at}"
    return w


class Gpt2:
    def __init__(self, w, heads):
        self.w, self.nh = w, heads
        self.L = w["ln1w"].shape[0]
        self.C = w["wte"].shape[1]
        T = w["wpe"].shape[0]
        self.mask = torch.ones(T, T, dtype=torch.bool).triu(1)

    def forward(self, tokens, pos0, cache_k, cache_v):
        """tokens (B, n) at positions pos0..pos0+n-1; caches (L, B, NH, Tmax, hd) filled below pos0.
        Returns the last position's logits (B, V)."""
        w, B, n = self.w, tokens.shape[0], tokens.shape[1]
        C, nh = self.C, self.nh
        hd = C // nh
        x = w["wte"][tokens] + w["wpe"][pos0:pos0 + n]
        for l in range(self.L):
            h = F.layer_norm(x, (C,), w["ln1w"][l], w["ln1b"][l], 1e-5)
            qkv = F.linear(h, w["qkvw"][l], w["qkvb"][l])
            q, k, v = qkv.split(C, dim=2)
            q = q.view(B, n, nh, hd).transpose(1, 2)
            cache_k[l, :, :, pos0:pos0 + n] = k.view(B, n, nh, hd).transpose(1, 2)
            cache_v[l, :, :, pos0:pos0 + n] = v.view(B, n, nh, hd).transpose(1, 2)
            keys, values = cache_k[l, :, :, :pos0 + n], cache_v[l, :, :, :pos0 + n]
            # Eager attention, as transformers' GPT-2 computes it (torch 1.13 has no SDPA).
            att = (q @ keys.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            if n > 1:  # prefill: causal within the chunk (pos0 == 0 here)
                att = att.masked_fill(self.mask[:n, :n], float("-inf"))
            y = att.softmax(dim=-1) @ values
            y = y.transpose(1, 2).reshape(B, n, C)
            x = x + F.linear(y, w["attprojw"][l], w["attprojb"][l])
            h = F.layer_norm(x, (C,), w["ln2w"][l], w["ln2b"][l], 1e-5)
            h = F.gelu(F.linear(h, w["fcw"][l], w["fcb"][l]), approximate="tanh")
            x = x + F.linear(h, w["fcprojw"][l], w["fcprojb"][l])
        x = F.layer_norm(x[:, -1], (C,), w["lnfw"], w["lnfb"], 1e-5)
        return F.linear(x, w["wte"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", required=True)
    ap.add_argument("--shape", required=True)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    shape = json.load(open(a.shape))
    model = Gpt2(load(a.weights, shape), shape["heads"])
    L, C, nh = shape["layers"], shape["hidden"], shape["heads"]
    g = torch.Generator().manual_seed(a.seed)
    prompts = torch.randint(0, shape["vocab"], (a.requests, a.input_len), generator=g)
    total = a.input_len + a.output_len
    with torch.inference_mode():
        # Warm: one small batch through prefill and a few decode steps.
        ck = torch.zeros(L, 1, nh, total, C // nh)
        cv = torch.zeros_like(ck)
        model.forward(prompts[:1], 0, ck, cv)
        ttft, start = [], time.perf_counter()
        out_tokens = 0
        for b0 in range(0, a.requests, a.batch):
            batch = prompts[b0:b0 + a.batch]
            B = batch.shape[0]
            ck = torch.zeros(L, B, nh, total, C // nh)
            cv = torch.zeros_like(ck)
            logits = model.forward(batch, 0, ck, cv)
            nxt = logits.argmax(-1, keepdim=True)
            ttft += [time.perf_counter() - start] * B
            out_tokens += B
            for t in range(1, a.output_len):
                logits = model.forward(nxt, a.input_len + t - 1, ck, cv)
                nxt = logits.argmax(-1, keepdim=True)
                out_tokens += B
        seconds = time.perf_counter() - start
    ttft.sort()
    p99 = ttft[min(len(ttft) - 1, math.ceil(0.99 * len(ttft)) - 1)]
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                      "seconds": seconds, "output_tokens": out_tokens,
                      "output_rate": out_tokens / seconds, "ttft_p50": ttft[len(ttft) // 2],
                      "ttft_p99": p99}))


main()
