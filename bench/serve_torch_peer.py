"""The PyTorch peer of `fmstack bench serve`: the same GPT-2-shaped model
with the same weights (the raw float32 buffer fmstack wrote with
--weights-out, in gpt/layout.h's order), generating with a KV cache and
static batching, as Hugging Face transformers' generate() does: the same
requests (prompt and output lengths read from fmstack's --json report) are
taken in order in batches of --batch, each batch left-padded to its longest
prompt (the padding masked), prefilled at once, then decoded greedily one
token per step for every sequence until its longest request is done; a
request's tokens past its max_tokens are dropped, not counted. All requests arrive at time 0, so a
request's time to first token includes the batches before its own.

Written from the architecture (pre-LayerNorm blocks, tanh GELU, learned
positions, tied head), not from fmstack's code. Prints one JSON object.

    python3 bench/serve_torch_peer.py --weights W.bin --shape W.bin.json \
        --lengths-from OURS.json --batch 32 --threads 2
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

    def forward(self, tokens, pos0, cache_k, cache_v, pad=None):
        """tokens (B, n) at positions pos0..pos0+n-1; caches (L, B, NH, Tmax, hd) filled below pos0.
        pad (B, Tmax) marks left-padding keys to mask out. Returns the last position's logits (B, V)."""
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
            if pad is not None:  # left padding of shorter prompts, as generate() masks it
                att = att.masked_fill(pad[:, None, None, :pos0 + n], float("-inf"))
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
    ap.add_argument("--lengths-from", required=True,
                    help="`fmstack bench serve --json` output: replay its requests' lengths")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    shape = json.load(open(a.shape))
    lengths = json.load(open(a.lengths_from))["lengths"]
    model = Gpt2(load(a.weights, shape), shape["heads"])
    L, C, nh = shape["layers"], shape["hidden"], shape["heads"]
    hd = C // nh
    g = torch.Generator().manual_seed(a.seed)
    with torch.inference_mode():
        # Warm: one request through prefill and a decode step.
        ck = torch.zeros(L, 1, nh, 32, hd)
        cv = torch.zeros_like(ck)
        model.forward(torch.zeros(1, 8, dtype=torch.long), 0, ck, cv)
        model.forward(torch.zeros(1, 1, dtype=torch.long), 8, ck, cv)
        ttft, start, useful = [], time.perf_counter(), 0
        for b0 in range(0, len(lengths), a.batch):
            batch = lengths[b0:b0 + a.batch]
            B = len(batch)
            longest_in = max(n for n, _ in batch)
            steps = max(m for _, m in batch)  # a static batch runs to its longest request
            total = longest_in + steps
            tokens = torch.randint(0, shape["vocab"], (B, longest_in), generator=g)
            pad = torch.zeros(B, total, dtype=torch.bool)
            for i, (n, _) in enumerate(batch):
                pad[i, :longest_in - n] = True  # left padding
            ck = torch.zeros(L, B, nh, total, hd)
            cv = torch.zeros_like(ck)
            logits = model.forward(tokens, 0, ck, cv, pad)
            nxt = logits.argmax(-1, keepdim=True)
            ttft += [time.perf_counter() - start] * B
            for t in range(1, steps):
                logits = model.forward(nxt, longest_in + t - 1, ck, cv, pad)
                nxt = logits.argmax(-1, keepdim=True)
            useful += sum(m for _, m in batch)  # tokens past a request's max_tokens are dropped
        seconds = time.perf_counter() - start
    ttft.sort()
    p99 = ttft[min(len(ttft) - 1, math.ceil(0.99 * len(ttft)) - 1)]
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                      "batch": a.batch, "seconds": seconds, "output_tokens": useful,
                      "output_rate": useful / seconds, "ttft_p50": ttft[len(ttft) // 2],
                      "ttft_p99": p99}))


main()
