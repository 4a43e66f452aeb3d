"""Golden test: fmstack's GPT against the PyTorch reference (gpt_reference.py).

gpt_golden (C++) writes, through fmstack's torch writer and Hugging Face
name mapping, a small GPT's initial weights and, for three batches, the
tokens, our loss, our gradients and our weights after one AdamW step, plus
the first batch's logits. Here the reference loads those weights with
load_state_dict(strict=True) and recomputes everything with its own
forward, autograd and torch.optim.AdamW (given our gradients, see below).

Tolerances (docs/pytorch.md, "Golden tests"): float32 throughout, the
largest difference of a tensor divided by its largest magnitude:
logits and gradients <= 1e-5, weights after AdamW <= 1e-6; loss <= 1e-6
relative.
"""
import subprocess
import sys
import tempfile
import os

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_reference import GPT  # noqa: E402

TOL, LOSS_TOL, ADAMW_TOL = 1e-5, 1e-6, 1e-6
torch.set_num_threads(1)


def rel(ours, ref):
    scale = max(ref.abs().max().item(), 1e-12)
    return (ours - ref).abs().max().item() / scale


def pick(state, prefix):
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def main():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "golden.pt")
        subprocess.run([sys.argv[1], path], check=True)
        golden = torch.load(path)
    lr, wd, b1, b2, eps = golden["adamw_hyper"].tolist()
    init = pick(golden, "init.")
    model = GPT.like(init, heads=4)
    model.load_state_dict(init, strict=True)
    opt = torch.optim.AdamW(model.param_groups(wd), lr=lr, betas=(b1, b2), eps=eps)
    worst = {"logits": 0.0, "loss": 0.0, "grad": 0.0, "after": 0.0}
    failures = []

    def check(kind, what, err, tol):
        worst[kind] = max(worst[kind], err)
        if err > tol:
            failures.append(f"{what}: {err:.2e} > {tol:.0e}")

    for step in range(3):
        p = f"step{step}."
        seq = golden[p + "tokens"]
        idx, targets = seq[:, :-1], seq[:, 1:]
        if step == 0:
            with torch.no_grad():
                check("logits", "logits", rel(golden["logits"], model(idx)), TOL)
        opt.zero_grad()
        _, loss = model(idx, targets)
        loss.backward()
        ours_loss = golden[p + "loss"].item()
        check("loss", f"step {step} loss", abs(ours_loss - loss.item()) / abs(loss.item()),
              LOSS_TOL)
        grads = pick(golden, p + "grad.")
        named = dict(model.named_parameters())  # lm_head.weight is wte's: listed once
        for name, param in named.items():
            check("grad", f"step {step} grad {name}", rel(grads[name], param.grad), TOL)
        # AdamW on our gradients: where a gradient is ~0 in exact arithmetic
        # (the key bias: softmax ignores it), Adam's first steps amplify the
        # rounding noise of either side to a full lr-sized move, so each
        # optimizer must see the same gradients to be compared.
        for name, param in named.items():
            param.grad = grads[name].clone()
        opt.step()
        after = pick(golden, p + "after.")
        with torch.no_grad():
            for name, param in model.state_dict().items():
                check("after", f"step {step} AdamW {name}", rel(after[name], param), ADAMW_TOL)
        print(f"step {step}: loss ours {ours_loss:.6f} torch {loss.item():.6f}")
    print("worst relative differences: " + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures[:20]))
        sys.exit(1)
    print("PASS")


main()
