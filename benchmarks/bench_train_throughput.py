"""Training throughput: eager fp32, bf16 autocast, torch.compile and stacked training, side by side.

For each model shape (``--shapes``, ``d_model x n_layers``; heads = d_model / 32, vocab ``--vocab``, context
``--seq-len``), trains a GPT (:mod:`lmsci.models.gpt`) with :func:`lmsci.train.trainer.train` in four arms:

* ``eager``: fp32, no compilation (today's path);
* ``bf16``: bf16 autocast (``TrainConfig.precision="bf16"``);
* ``compiled``: ``TrainConfig.compile="on"`` (:mod:`lmsci.train.compile`; fp32, or bf16 autocast with ``--compile-bf16``);
* ``stacked``: ``--k`` models of the shape as one batched computation (:func:`lmsci.train.stacked.train_stacked`;
  compiled with ``--stacked-compile on``).

Each arm first runs ``--warmup`` steps (compilation happens there and is not timed), then ``--steps`` timed
steps; the arms alternate in ``--windows`` windows so load drift on a shared machine hits all alike. Printed per
shape and arm: tokens/s, MFU (FLOPs per token ``6 N + 12 n_layers d_model T``, Kaplan et al. 2020, Table 1, via
:meth:`GPT.flops_per_token`, over ``--peak`` TFLOP/s), the ratio to eager, and, for the compiled arm, the largest
relative difference of its per-step losses from the eager arm's on the same batches (compiled equals eager to
float tolerance). Issue 32's target on one H100/H200: >= 5x the 0.85M tokens/s measured eager at d_model 256 x 4.

On a CPU, compilation buys little (one-thread steps at d_model 32-128 gain 1.0-1.15x): there the benchmark's job is
to show that compiled equals eager and to keep the CPU numbers honest.

Usage::

    python benchmarks/bench_train_throughput.py                               # CPU: quick shapes
    python benchmarks/bench_train_throughput.py --device cuda --shapes 128x2 256x4 512x8 768x12 \\
        --batch-size 32 --seq-len 512 --peak 989
    python benchmarks/bench_train_throughput.py --shapes 32x1 --steps 2 --warmup 1 --windows 1   # smallest
"""

from __future__ import annotations

import argparse
import time

import torch

from lmsci.models.gpt import GPT, GPTConfig
from lmsci.train.stacked import train_stacked
from lmsci.train.trainer import TrainConfig, train


def _shape(s: str) -> tuple[int, int]:
    d, n = s.lower().split("x")
    return int(d), int(n)


def _get_batch(vocab: int, batch: int, seq: int):
    def get_batch(step: int, g: torch.Generator):
        x = torch.randint(0, vocab, (batch, seq + 1), generator=g)
        return x[:, :-1], x[:, 1:]
    return get_batch


def _model(d_model: int, n_layers: int, vocab: int, seq: int, seed: int) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=vocab, seq_len=seq, n_layers=n_layers, n_heads=max(1, d_model // 32),
                         d_model=d_model))


def _cfg(a: argparse.Namespace, steps: int, precision: str, compile: str = "off") -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=a.batch_size, lr=1e-3, warmup_steps=0, log_every=1,
                       device=a.device, precision=precision, compile=compile)


def _losses(res) -> list[float]:
    return [r["loss"] for r in res.history if "loss" in r]


def _timed(fn) -> tuple[float, object]:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t, out


def bench_shape(a: argparse.Namespace, d_model: int, n_layers: int) -> list[str]:
    """Time the four arms at one shape; return printed lines."""
    tokens = a.batch_size * a.seq_len * a.steps
    gb = _get_batch(a.vocab, a.batch_size, a.seq_len)
    eager = _model(d_model, n_layers, a.vocab, a.seq_len, 0)
    compiled = _model(d_model, n_layers, a.vocab, a.seq_len, 0)
    bf16 = _model(d_model, n_layers, a.vocab, a.seq_len, 0)
    stack = [_model(d_model, n_layers, a.vocab, a.seq_len, k) for k in range(a.k)]
    fpt = eager.flops_per_token(a.seq_len)
    arms = {
        "eager": lambda n, s: train(eager, gb, _cfg(a, n, "fp32"), seed=s),
        "bf16": lambda n, s: train(bf16, gb, _cfg(a, n, "bf16"), seed=s),
        "compiled": lambda n, s: train(compiled, gb, _cfg(a, n, "bf16" if a.compile_bf16 else "fp32", "on"), seed=s),
        "stacked": lambda n, s: train_stacked(stack, gb, _cfg(a, n, "fp32", a.stacked_compile),
                                              seeds=[s + k for k in range(a.k)]),
    }
    for name, fn in arms.items():  # warm-up (compilation) untimed
        fn(a.warmup, 10_000)
    secs = {k: 0.0 for k in arms}
    for w in range(a.windows):
        for name, fn in arms.items():
            dt, _ = _timed(lambda: fn(a.steps, w))
            secs[name] += dt
    # equality: fresh eager and compiled copies of one init, the same batches, the same steps
    e2, c2 = _model(d_model, n_layers, a.vocab, a.seq_len, 1), _model(d_model, n_layers, a.vocab, a.seq_len, 1)
    le = _losses(train(e2, gb, _cfg(a, a.steps, "fp32"), seed=7))
    lc = _losses(train(c2, gb, _cfg(a, a.steps, "fp32", "on"), seed=7))
    diff = max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(le, lc))
    lines = []
    base = tokens * a.windows / secs["eager"]
    for name in arms:
        mult = a.k if name == "stacked" else 1
        tps = mult * tokens * a.windows / secs[name]
        mfu = 100 * tps * fpt / (a.peak * 1e12)
        lines.append(f"d_model {d_model:4d} x {n_layers:2d} layers  {name:9s} {tps:12,.0f} tok/s  "
                     f"(MFU {mfu:.3g}%)  ratio {name}/eager {tps / base:.2f}x")
    lines.append(f"d_model {d_model:4d} x {n_layers:2d} layers  compiled vs eager: max rel. loss difference "
                 f"{diff:.2e} over {len(le)} steps")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=["64x2", "128x4"], help="d_model x n_layers")
    ap.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per window and arm")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per arm first (compilation)")
    ap.add_argument("--windows", type=int, default=2)
    ap.add_argument("--k", type=int, default=4, help="models in the stacked arm")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compile-bf16", action="store_true", help="compiled arm under bf16 autocast")
    ap.add_argument("--stacked-compile", default="off", choices=["auto", "on", "off"],
                    help="TrainConfig.compile of the stacked arm")
    ap.add_argument("--peak", type=float, default=0.0,
                    help="peak TFLOP/s for MFU (default: 989 on CUDA, H100 dense bf16; 0.17 on CPU)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if not a.peak:
        a.peak = 989.0 if a.device.startswith("cuda") else 0.17
    print(f"device {a.device}  torch {torch.__version__}  batch {a.batch_size} x seq {a.seq_len}  "
          f"steps {a.steps} x windows {a.windows}  peak {a.peak} TFLOP/s")
    for s in a.shapes:
        for line in bench_shape(a, *_shape(s)):
            print(line, flush=True)


if __name__ == "__main__":
    main()
