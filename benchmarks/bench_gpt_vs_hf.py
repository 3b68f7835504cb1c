"""Training throughput: lmsci GPT vs Hugging Face GPT2LMHeadModel at the same GPT-2-shaped configuration.

Both models start from the *same weights* (the HF model is :func:`lmsci.models.hf_convert.to_hf` of the lmsci
one: learned positions, exact GELU, LayerNorm, biases, untied embeddings, no dropout), train on the
*same batches* with the same optimizer, and are timed in interleaved windows (lmsci, HF, HF, lmsci, ...)
so that load changes on a shared machine hit both alike. Each side runs its library's own training step:

* lmsci: what :func:`lmsci.train.trainer.train` does -- ``GPT.sum_nll`` (the fused, chunked
  linear + cross-entropy head of :mod:`lmsci.models.loss`, which never materialises the logits),
  backward, clip the gradient norm at 1, step.
* HF: what a Hugging Face training loop does -- ``model(input_ids=x, labels=x).loss`` (logits
  ``[B, T, vocab_size]``, then ``ForCausalLMLoss``), backward, clip at 1, step.
* Optimizer (both): :func:`lmsci.train.trainer.make_optimizer`, i.e. fused AdamW with decay on
  matrices only -- the same as HF Trainer's default ``adamw_torch_fused`` with its no-decay rule for
  biases and LayerNorm weights. The loss covers the same ``T - 1`` targets per row on both sides.

Prints, per size, tokens/s of each, the ratio lmsci/HF (total and median over windows), MFU against the
fp32 matmul peak, and both losses after the shared steps (same math: they agree to float rounding).
MFU uses training FLOPs/token = 6 N + 12 n_layers d_model T (Kaplan et al. 2020, arXiv 2001.08361,
Table 1), N = non-embedding parameters plus the unembedding, PEAK_GFLOPS default 170 (this machine class).

Sizes: ``tiny``/``small``/``medium`` are GPT-2-shaped models at the sizes lmsci's quick presets train,
with the small vocabularies of its synthetic worlds (128-2048 tokens); ``gpt2-vocab`` is GPT-2's own
tokenizer size (50257) on Pythia-14M's trunk (6 layers, d_model 128, 4 heads; Biderman et al. 2023,
arXiv 2304.01373, Table 1), the regime of small models trained on real text with a BPE vocabulary.

Usage::

    python benchmarks/bench_gpt_vs_hf.py                       # all sizes, one table at the end
    python benchmarks/bench_gpt_vs_hf.py --size small --threads 1
    python benchmarks/bench_gpt_vs_hf.py --size small --d-model 192 --windows 4
    python benchmarks/bench_gpt_vs_hf.py --size small --compile   # lmsci trunk under torch.compile
    python benchmarks/bench_gpt_vs_hf.py --size small --profile   # top operators of one step of each
    python benchmarks/bench_gpt_vs_hf.py --size medium --bf16     # lmsci trunk in bf16 (not equal precision)

Measured (2 threads, quiet 2-core machine, 2026-11-22; total tokens/s ratio lmsci/HF):
tiny 1.04x, small 1.05x, medium 1.00x -- with small vocabularies both sides run the same kernels
(matmuls about 60% of a step, SDPA flash attention about 22%); gpt2-vocab 1.77x, and with d_model 256 /
512 (``--d-model 256 --n-heads 4``) 1.54x / 1.25x -- the unembedding dominates and the fused head is
the difference; GPT-2 small's full shape (``--n-layers 12 --d-model 768 --n-heads 12 --seq-len 256
--batch-size 4``) 0.99-1.05x: there matmuls and attention are ~80% of HF's step (profile), so even
removing all other work could give at most ~1.26x. Not at equal precision, ``--bf16`` (this CPU has
AVX512-BF16): small 1.05x, medium 1.58x, GPT-2 small's shape 1.43x, losses within 3e-5 of fp32 HF's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.hf_convert import to_hf
from lmsci.models.loss import linear_cross_entropy
from lmsci.train.trainer import IGNORE_INDEX, TrainConfig, make_optimizer

SIZES = {
    # GPT-2 shape (learned positions, GELU, LayerNorm, biases, d_mlp = 4 d_model)
    "tiny": dict(n_layers=2, d_model=64, n_heads=2, seq_len=64, vocab_size=128, batch_size=32),
    "small": dict(n_layers=4, d_model=128, n_heads=4, seq_len=128, vocab_size=512, batch_size=16),
    "medium": dict(n_layers=6, d_model=256, n_heads=4, seq_len=256, vocab_size=2048, batch_size=8),
    "gpt2-vocab": dict(n_layers=6, d_model=128, n_heads=4, seq_len=256, vocab_size=50257, batch_size=8),
}


def bench(shape: dict, args: argparse.Namespace) -> dict:
    """Time one size; returns the summary row."""
    shape = dict(shape)
    B, T, V = shape.pop("batch_size"), shape["seq_len"], shape["vocab_size"]
    cfg = GPTConfig(**shape, pos="learned", mlp="gelu", norm="layernorm", bias=True, tie_embeddings=False)
    ours = GPT(cfg, seed=args.seed).train()
    theirs = to_hf(ours).train()  # same weights, GPT2LMHeadModel(activation "gelu", dropout 0)
    n_ours = ours.num_params()
    assert n_ours == sum(p.numel() for p in theirs.parameters())

    n_batches = args.warmup + args.windows * args.steps
    g = torch.Generator().manual_seed(args.seed)
    data = torch.randint(0, V, (n_batches, B, T + 1), generator=g)
    tcfg = TrainConfig(lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, grad_clip=1.0)
    trunk = torch.compile(ours.final_hidden) if args.compile else ours.final_hidden

    def ours_loss(i: int) -> torch.Tensor:
        x, y = data[i, :, :-1], data[i, :, 1:].clone()
        y[:, -1] = IGNORE_INDEX  # HF's shift leaves the last position without a target
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):  # TrainConfig(precision="bf16")
            hidden = trunk(x)
        return linear_cross_entropy(hidden, ours.lm_head.weight, y) / int((y != IGNORE_INDEX).sum())

    def hf_loss(i: int) -> torch.Tensor:
        x = data[i, :, :-1]
        return theirs(input_ids=x, labels=x, use_cache=False).loss

    def make_step(model, loss_fn):
        opt = make_optimizer(model, tcfg)

        def step(i: int) -> float:
            loss = loss_fn(i)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), tcfg.grad_clip)
            opt.step()
            return loss.item()
        return step

    runs = {"lmsci": make_step(ours, ours_loss), "hf": make_step(theirs, hf_loss)}
    last, warm = {}, {}
    for name, step in runs.items():
        t0 = time.perf_counter()
        for i in range(args.warmup):
            last[name] = step(i)
        warm[name] = time.perf_counter() - t0
    times: dict[str, list[float]] = {"lmsci": [], "hf": []}
    for w in range(args.windows):
        for name in (["lmsci", "hf"] if w % 2 == 0 else ["hf", "lmsci"]):
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

    tok_window = args.steps * B * (T - 1)
    tps = {k: [tok_window / t for t in v] for k, v in times.items()}
    total = {k: args.windows * tok_window / sum(v) for k, v in times.items()}
    per_window = [a / b for a, b in zip(tps["lmsci"], tps["hf"])]
    fpt = ours.flops_per_token(T)
    print(f"\nconfig {args.size_name}{' (lmsci trunk compiled)' if args.compile else ''}{' (lmsci bf16 autocast)' if args.bf16 else ''}: {dict(shape, batch_size=B)}  "
          f"params={n_ours:,} (non-embedding {ours.num_params(non_embedding=True):,})  threads={args.threads}  "
          f"HF attn={theirs.config._attn_implementation}")
    print(f"{'model':8s} {'tokens/s (total)':>17s} {'median window':>14s} {'MFU':>7s} {'loss after':>11s} {'warm-up s':>10s}")
    for k in ("lmsci", "hf"):
        mfu = total[k] * fpt / (args.peak_gflops * 1e9)
        print(f"{k:8s} {total[k]:17,.0f} {statistics.median(tps[k]):14,.0f} {mfu:7.1%} {last[k]:11.5f} {warm[k]:10.1f}")
    row = {"size": args.size_name, "params": n_ours, "vocab": V, "lmsci_tok_s": total["lmsci"], "hf_tok_s": total["hf"],
           "ratio_total": total["lmsci"] / total["hf"], "ratio_median": statistics.median(per_window),
           "ratio_min": min(per_window), "ratio_max": max(per_window), "loss_diff": abs(last["lmsci"] - last["hf"])}
    print(f"ratio lmsci/HF: total {row['ratio_total']:.2f}x, median over windows {row['ratio_median']:.2f}x "
          f"(min {row['ratio_min']:.2f}, max {row['ratio_max']:.2f}); loss difference after {n_batches} identical "
          f"steps {row['loss_diff']:.1e}")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=[*SIZES, "all"], default="all")
    for k in ("n_layers", "d_model", "n_heads", "seq_len", "vocab_size", "batch_size"):
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=None)
    ap.add_argument("--windows", type=int, default=6, help="timing windows per model (interleaved)")
    ap.add_argument("--steps", type=int, default=8, help="optimizer steps per window")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per model first")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("BENCH_THREADS", "0")) or torch.get_num_threads())
    ap.add_argument("--peak-gflops", type=float, default=170.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile", action="store_true", help="torch.compile lmsci's trunk (HF stays eager)")
    ap.add_argument("--bf16", action="store_true", help="lmsci's trunk under CPU bf16 autocast, as "
                    "TrainConfig(precision='bf16') (not equal precision: a separate measurement, HF stays fp32)")
    ap.add_argument("--profile", action="store_true", help="print the top operators of one step of each model")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for name in (SIZES if args.size == "all" else [args.size]):
        shape = dict(SIZES[name])
        for k in shape:
            if getattr(args, k) is not None:
                shape[k] = getattr(args, k)
        args.size_name = name
        rows.append(bench(shape, args))
    if len(rows) > 1:
        print(f"\n{'size':12s} {'params':>11s} {'vocab':>6s} {'lmsci tok/s':>12s} {'HF tok/s':>10s} {'total':>7s} {'median':>7s} {'windows':>11s}")
        for r in rows:
            print(f"{r['size']:12s} {r['params']:11,} {r['vocab']:6d} {r['lmsci_tok_s']:12,.0f} {r['hf_tok_s']:10,.0f} "
                  f"{r['ratio_total']:6.2f}x {r['ratio_median']:6.2f}x {r['ratio_min']:5.2f}-{r['ratio_max']:.2f}")


if __name__ == "__main__":
    main()
