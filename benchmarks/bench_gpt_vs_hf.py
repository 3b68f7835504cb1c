"""Training throughput: lmsci GPT vs Hugging Face GPT2LMHeadModel at the same GPT-2-shaped configuration.

Both models start from the *same weights* (the HF model is :func:`lmsci.models.hf.to_hf` of the lmsci
one: learned positions, exact GELU, LayerNorm, biases, untied embeddings, no dropout), train with the
same AdamW settings on the *same batches*, and are timed in interleaved windows (lmsci, HF, HF, lmsci,
...) so that load changes on a shared machine hit both alike. Prints tokens/s of each, the ratio
lmsci/HF (median over windows and total), MFU against the fp32 matmul peak, and the loss of both after
the shared steps (they should agree closely: same math).

MFU uses training FLOPs/token = 6 N + 12 n_layers d_model T (Kaplan et al. 2020, arXiv 2001.08361,
Table 1), with N the non-embedding parameters plus the unembedding matrix, and PEAK_GFLOPS (default
170, the fp32 matmul peak of this machine class, see DESIGN.md).

Usage::

    python benchmarks/bench_gpt_vs_hf.py                     # the "small" config (about 1M parameters)
    python benchmarks/bench_gpt_vs_hf.py --size medium       # about 5M parameters
    python benchmarks/bench_gpt_vs_hf.py --d-model 192 --n-layers 6 --windows 6
    python benchmarks/bench_gpt_vs_hf.py --threads 1 --compile   # lmsci under torch.compile vs HF eager

Measured on the shared 2-core machine (load 7-14 from other jobs, --threads 1; only ratios are
meaningful, absolute tokens/s drift with the load): eager vs eager both run the same computation
(identical kernels: matmuls ~65% of a step, SDPA flash attention ~15%; the losses agree bit for bit),
and the ratio is 1.00x (small; windows 0.80-1.14), 0.98x (medium), 1.02x (tiny). With --compile two runs
gave 1.21x and 1.04x (window spread 0.87-1.61), i.e. not a reliable gain at this noise level. The 1.2x
target is not met: at equal configuration and precision there is no wasted work in HF's GPT-2 to remove.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.hf import to_hf

SIZES = {
    # GPT-2 shape (d_head 32..64, d_mlp = 4 d_model), scaled down to the sizes lmsci's quick presets use
    "tiny": dict(n_layers=2, d_model=64, n_heads=2, seq_len=64, vocab_size=128, batch_size=32),
    "small": dict(n_layers=4, d_model=128, n_heads=4, seq_len=128, vocab_size=512, batch_size=16),
    "medium": dict(n_layers=6, d_model=256, n_heads=4, seq_len=256, vocab_size=2048, batch_size=8),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=list(SIZES), default="small")
    for k in ("n_layers", "d_model", "n_heads", "seq_len", "vocab_size", "batch_size"):
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=None)
    ap.add_argument("--windows", type=int, default=6, help="timing windows per model (interleaved)")
    ap.add_argument("--steps", type=int, default=8, help="optimizer steps per window")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per model first")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("BENCH_THREADS", "0")) or torch.get_num_threads())
    ap.add_argument("--peak-gflops", type=float, default=170.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile", action="store_true", help="torch.compile the lmsci model (HF stays eager)")
    ap.add_argument("--profile", action="store_true", help="print the top operators of one step of each model")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    shape = dict(SIZES[args.size])
    for k in shape:
        if getattr(args, k) is not None:
            shape[k] = getattr(args, k)
    B, T, V = shape.pop("batch_size"), shape["seq_len"], shape["vocab_size"]

    cfg = GPTConfig(**shape, pos="learned", mlp="gelu", norm="layernorm", bias=True, tie_embeddings=False)
    ours = GPT(cfg, seed=args.seed).train()
    theirs = to_hf(ours).train()  # same weights, GPT2LMHeadModel(activation "gelu", dropout 0)
    hf_impl = theirs.config._attn_implementation
    n_ours = ours.num_params()
    n_theirs = sum(p.numel() for p in theirs.parameters())
    assert n_ours == n_theirs, (n_ours, n_theirs)

    n_batches = args.warmup + args.windows * args.steps
    g = torch.Generator().manual_seed(args.seed)
    data = torch.randint(0, V, (n_batches, B, T + 1), generator=g)

    def make_step(model, is_hf):
        opt = torch.optim.AdamW((theirs if is_hf else ours).parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)

        def step(i: int) -> float:
            x, y = data[i, :, :-1], data[i, :, 1:]
            logits = model(input_ids=x, use_cache=False).logits if is_hf else model(x)
            loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss.item()

        return step

    ours_run = torch.compile(ours) if args.compile else ours
    runs = {"lmsci": make_step(ours_run, False), "hf": make_step(theirs, True)}
    last, warm = {}, {}
    for name, step in runs.items():
        t0 = time.perf_counter()
        for i in range(args.warmup):
            last[name] = step(i)
        warm[name] = time.perf_counter() - t0
    times: dict[str, list[float]] = {"lmsci": [], "hf": []}
    for w in range(args.windows):
        order = ["lmsci", "hf"] if w % 2 == 0 else ["hf", "lmsci"]
        for name in order:
            t0 = time.perf_counter()
            for s in range(args.steps):
                last[name] = runs[name](args.warmup + w * args.steps + s)
            times[name].append(time.perf_counter() - t0)

    if args.profile:
        from torch.profiler import profile

        for name in ("lmsci", "hf"):
            with profile() as prof:
                runs[name](0)
            print(f"--- {name}: top operators of one training step (self CPU time)")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))

    tok_window = args.steps * B * T
    tps = {k: [tok_window / t for t in v] for k, v in times.items()}
    total = {k: args.windows * tok_window / sum(v) for k, v in times.items()}
    per_window_ratio = [a / b for a, b in zip(tps["lmsci"], tps["hf"])]
    fpt = ours.flops_per_token(T)

    print(f"config: {args.size}{' (lmsci compiled)' if args.compile else ''} {dict(shape, batch_size=B)}  params={n_ours:,} "
          f"(non-embedding {ours.num_params(non_embedding=True):,})  threads={args.threads}  HF attn={hf_impl}")
    print(f"FLOPs/token (6N + 12 L d T) = {fpt / 1e6:.2f} MFLOP; peak {args.peak_gflops:.0f} GFLOP/s")
    print(f"{'model':8s} {'tokens/s (total)':>17s} {'median window':>14s} {'MFU':>7s} {'loss after':>11s} {'warm-up s':>10s}")
    for k in ("lmsci", "hf"):
        mfu = total[k] * fpt / (args.peak_gflops * 1e9)
        print(f"{k:8s} {total[k]:17,.0f} {statistics.median(tps[k]):14,.0f} {mfu:7.1%} {last[k]:11.4f} {warm[k]:10.1f}")
    print(f"ratio lmsci/HF: total {total['lmsci'] / total['hf']:.2f}x, median over windows "
          f"{statistics.median(per_window_ratio):.2f}x (min {min(per_window_ratio):.2f}, max {max(per_window_ratio):.2f})")
    print(f"loss difference after {n_batches} identical steps: {abs(last['lmsci'] - last['hf']):.2e}")


if __name__ == "__main__":
    main()
