"""Attention kernels and one training step of the quick CFG model, side by side on CPU (issue 46 item 3).

Is there waste left in ``cfg-learning`` / ``cfg-probing``'s quick training step (a 4-layer, d_model 64, 4-head GPT_rot
over windows of 128 tokens, batch 16)? Two measurements in one run, CPU seconds (``time.process_time``, so a shared
machine inflates them less than wall time), one thread by default:

1. **Attention, forward + backward, per layer** at the model's shape (``[batch, n_heads, seq_len, d_head]``, causal):
   PyTorch's fused SDPA with the flash kernel (what :mod:`lmsci.models.blocks` uses), SDPA's math kernel, and the
   explicit ``softmax(q k^T / sqrt(d_head) + mask) v``; ratios to flash, and the largest absolute difference of their
   outputs from flash's (the three compute the same function).
2. **The training step's CPU time by operator** (``torch.profiler``): the experiment's own model
   (:func:`lmsci.experiments.syntax._common.make_model`) and batches (``make_get_batch``), AdamW with the preset's betas
   and weight decay, clipping at 1; the top operators and their share.

Usage::

    python benchmarks/bench_cfg_attention.py                    # the quick shape, 30 timed steps
    python benchmarks/bench_cfg_attention.py --steps 2 --reps 2 # a fast check
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def attention_ms(kind: str, batch: int, n_heads: int, seq_len: int, d_head: int, reps: int,
                 seed: int = 0) -> tuple[float, torch.Tensor]:
    """CPU milliseconds of one causal attention forward + backward (mean over ``reps`` after 3 warm-up calls) and its
    output ``[batch, n_heads, seq_len, d_head]``; ``kind``: flash | math | explicit."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(batch, n_heads, seq_len, d_head, generator=g).requires_grad_() for _ in range(3))
    mask = torch.ones(seq_len, seq_len, dtype=torch.bool).triu(1)

    def step() -> torch.Tensor:
        if kind == "explicit":
            s = (q @ k.transpose(-1, -2)) / d_head ** 0.5
            o = torch.softmax(s.masked_fill(mask, float("-inf")), -1) @ v
        else:
            backend = SDPBackend.FLASH_ATTENTION if kind == "flash" else SDPBackend.MATH
            with sdpa_kernel(backend):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o.sum().backward()
        return o.detach()

    for _ in range(3):
        out = step()
    t = time.process_time()
    for _ in range(reps):
        step()
    return (time.process_time() - t) / reps * 1e3, out


def step_profile(steps: int, top: int) -> tuple[float, list[tuple[str, float]]]:
    """CPU ms per training step of the quick cfg-learning GPT_rot and the ``top`` operators' shares of the profiled
    steps' self CPU time."""
    from torch.profiler import ProfilerActivity, profile

    from lmsci.experiments.syntax._common import build_grammar, make_get_batch, make_model
    from lmsci.experiments.syntax.cfg_learning import CFGLearningConfig

    cfg = CFGLearningConfig()
    g = build_grammar(cfg)
    model = make_model(cfg, g, "rope", 0)
    get_batch = make_get_batch(g, cfg.train.batch_size, cfg.seq_len)
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr, betas=tuple(cfg.train.betas),
                            weight_decay=cfg.train.weight_decay)
    batches = [get_batch(i, gen) for i in range(5 + 2 * steps)]

    def one(x: torch.Tensor, y: torch.Tensor) -> None:
        loss = model.sum_nll(x, y) / y.numel()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for x, y in batches[:5]:
        one(x, y)
    t = time.process_time()
    for x, y in batches[5:5 + steps]:
        one(x, y)
    ms = (time.process_time() - t) / steps * 1e3
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for x, y in batches[5 + steps:]:
            one(x, y)
    ev = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in ev)
    ev.sort(key=lambda e: -e.self_cpu_time_total)
    return ms, [(e.key, e.self_cpu_time_total / total) for e in ev[:top]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=50, help="timed attention calls per kernel")
    ap.add_argument("--steps", type=int, default=30, help="timed (and as many profiled) training steps")
    ap.add_argument("--top", type=int, default=8)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {a.threads} thread(s)")
    print("attention forward + backward per layer, CPU ms (ratio to flash; max |output - flash|):")
    for shape in ((16, 4, 128, 16), (16, 4, 128, 32), (64, 4, 32, 16)):
        ms = {}
        outs = {}
        for kind in ("flash", "math", "explicit"):
            ms[kind], outs[kind] = attention_ms(kind, *shape, reps=a.reps)
        cells = ", ".join(f"{k} {ms[k]:.2f} ({ms[k] / ms['flash']:.2f}x; "
                          f"{float((outs[k] - outs['flash']).abs().max()):.1e})" for k in ms)
        print(f"  batch {shape[0]} x heads {shape[1]} x seq_len {shape[2]} x d_head {shape[3]}: {cells}")
    ms, ops = step_profile(a.steps, a.top)
    print(f"cfg-learning quick training step (GPT_rot 4 x d64, seq_len 128, batch 16): {ms:.1f} CPU ms per step")
    for name, share in ops:
        print(f"  {share:6.1%}  {name}")


if __name__ == "__main__":
    main()
