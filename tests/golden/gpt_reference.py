"""A PyTorch GPT-2, written here from the published architecture (Radford et
al. 2019, and the GPT-2 code's layout that Hugging Face keeps): learned
token and position embeddings, pre-LayerNorm blocks of causal multi-head
attention and a tanh-GELU MLP, a final LayerNorm and a head tied to the
token embedding. Parameter names are GPT2LMHeadModel's, Conv1D weights
(in, out), so `load_state_dict` takes `fmstack ckpt export --format torch`
output as it is. Independent of fmstack's code: it is the yardstick.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Conv1D(nn.Module):
    """GPT-2's linear layer: y = x @ W + b with W stored (in, out)."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


class Attention(nn.Module):
    def __init__(self, C, heads):
        super().__init__()
        self.heads = heads
        self.c_attn, self.c_proj = Conv1D(C, 3 * C), Conv1D(C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, C, F_):
        super().__init__()
        self.c_fc, self.c_proj = Conv1D(C, F_), Conv1D(F_, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, heads, F_):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(C, eps=1e-5), Attention(C, heads)
        self.ln_2, self.mlp = nn.LayerNorm(C, eps=1e-5), MLP(C, F_)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, V, maxT, C, L, heads, F_):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(maxT, C)
        self.h = nn.ModuleList(Block(C, heads, F_) for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)


class GPT(nn.Module):
    def __init__(self, V, maxT, C, L, heads, F_):
        super().__init__()
        self.transformer = Transformer(V, maxT, C, L, heads, F_)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    @staticmethod
    def like(state, heads):
        """A model shaped as `state` (GPT2LMHeadModel names) describes."""
        V, C = state["transformer.wte.weight"].shape
        maxT = state["transformer.wpe.weight"].shape[0]
        L = 1 + max(int(k.split(".")[2]) for k in state if k.startswith("transformer.h."))
        F_ = state["transformer.h.0.mlp.c_fc.weight"].shape[1]
        return GPT(V, maxT, C, L, heads, F_)

    def forward(self, idx, targets=None):
        t = self.transformer
        pos = torch.arange(idx.shape[1])
        x = t.wte(idx) + t.wpe(pos)
        for block in t.h:
            x = block(x)
        logits = self.lm_head(t.ln_f(x))
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def param_groups(self, weight_decay):
        """GPT-2's convention: decay matrices and embeddings, not biases or gains."""
        decay = [p for p in self.parameters() if p.dim() >= 2]
        rest = [p for p in self.parameters() if p.dim() < 2]
        return [{"params": decay, "weight_decay": weight_decay},
                {"params": rest, "weight_decay": 0.0}]
