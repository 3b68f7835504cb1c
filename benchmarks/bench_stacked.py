"""Stacked training speed: K same-shaped GPTs as one computation vs the same K trained one after another.

For each model size (``--sizes``: ``0.1M`` = d_model 64, 2 layers, vocab 128, seq 64; ``1M`` =
d_model 128, 4 layers, vocab 256, seq 128) and stack size (``--ks``), trains the K models
``--steps`` steps with :func:`lmsci.train.trainer.train` one after another and with
:func:`lmsci.train.stacked.train_stacked` at once, in alternating timed windows in one process (so
load drift on a shared machine hits both arms alike), and prints tokens/s of both arms, their
ratio (of wall time, and of process CPU time, which load on a shared machine disturbs less), the
MFU of each (FLOPs/token = ``6 N + 12 n_layers d_model T``, Kaplan et al. 2020, Table 1, from
:meth:`GPT.flops_per_token`; peak ``--peak`` GFLOP/s) and the largest relative difference between the
two arms' final losses (the arms train the same models on the same batches).

On a CPU, stacking saves per-step overhead (Python, dispatch, optimizer launches), not arithmetic: a
batched matmul over K members is no faster than K matmuls. The gain is therefore large when a step
has few tokens and shrinks as the matmuls grow (measured on a loaded 2-core machine, see README:
0.1M parameters, 2 x 32 tokens per step, 1 thread, K = 4: 1.50x; 8 x 64 tokens, 2 threads, K = 8: 2.39x;
1M parameters, 8 x 128 tokens, K = 4: 0.68x, K = 8: 1.33x).

Usage::

    nice -n 19 python benchmarks/bench_stacked.py                     # 0.1M and 1M, K = 4 and 8
    python benchmarks/bench_stacked.py --sizes 0.1M --ks 4 --steps 20 --windows 3 --threads 2
"""

from __future__ import annotations

import argparse
import time

import torch

from lmsci.models.gpt import GPT, GPTConfig
from lmsci.train.stacked import train_stacked
from lmsci.train.trainer import TrainConfig, train

SIZES = {
    "tiny": dict(vocab_size=32, seq_len=16, n_layers=1, n_heads=2, d_model=16),
    "0.1M": dict(vocab_size=128, seq_len=64, n_layers=2, n_heads=4, d_model=64),
    "1M": dict(vocab_size=256, seq_len=128, n_layers=4, n_heads=4, d_model=128),
}


def _get_batch(vocab: int, batch: int, seq: int):
    def get_batch(step: int, g: torch.Generator):
        x = torch.randint(0, vocab, (batch, seq + 1), generator=g)
        return x[:, :-1], x[:, 1:]
    return get_batch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["0.1M", "1M"], choices=list(SIZES))
    ap.add_argument("--ks", nargs="+", type=int, default=[4, 8])
    ap.add_argument("--steps", type=int, default=20, help="optimizer steps per window and arm")
    ap.add_argument("--windows", type=int, default=3, help="alternating timed windows per arm")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=0, help="override the size's seq_len (0: keep)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peak", type=float, default=170.0, help="peak GFLOP/s of the machine (fp32)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, {args.steps} steps x {args.windows} windows per arm, "
          f"batch {args.batch_size}, peak {args.peak:g} GFLOP/s")
    for size in args.sizes:
        gc = GPTConfig(**{**SIZES[size], **({"seq_len": args.seq_len} if args.seq_len else {})})
        n_params = GPT(gc).num_params()
        fpt = GPT(gc).flops_per_token()
        gb = _get_batch(gc.vocab_size, args.batch_size, gc.seq_len)
        tc = TrainConfig(steps=args.steps, batch_size=args.batch_size, lr=1e-3, warmup_steps=2, device="cpu",
                         log_every=args.steps)
        for K in args.ks:
            seeds = list(range(K))
            tokens = K * args.steps * args.batch_size * gc.seq_len
            # warm-up of both arms (allocator, thread pool, first-call overheads)
            train(GPT(gc, seed=0), gb, tc.model_copy(update={"steps": 2}), seed=0)
            train_stacked([GPT(gc, seed=s) for s in seeds], gb, tc.model_copy(update={"steps": 2}), seeds=seeds)
            t_seq = t_stk = c_seq = c_stk = 0.0
            diff = 0.0
            for _ in range(args.windows):
                models = [GPT(gc, seed=s) for s in seeds]
                t0, c0 = time.perf_counter(), time.process_time()
                seq_losses = [train(m, gb, tc, seed=s).final["loss"] for m, s in zip(models, seeds)]
                t_seq += time.perf_counter() - t0
                c_seq += time.process_time() - c0
                models = [GPT(gc, seed=s) for s in seeds]
                t0, c0 = time.perf_counter(), time.process_time()
                res = train_stacked(models, gb, tc, seeds=seeds)
                t_stk += time.perf_counter() - t0
                c_stk += time.process_time() - c0
                stk_losses = [r.final["loss"] for r in res.members]
                diff = max([diff] + [abs(a - b) / abs(a) for a, b in zip(seq_losses, stk_losses)])
            tps_seq = tokens * args.windows / t_seq
            tps_stk = tokens * args.windows / t_stk
            mfu_seq = tps_seq * fpt / (args.peak * 1e9)
            mfu_stk = tps_stk * fpt / (args.peak * 1e9)
            print(f"size={size:>5} params={n_params:>9,} K={K:>2}  sequential {tps_seq:>10,.0f} tok/s "
                  f"(MFU {100 * mfu_seq:.3g}%)  stacked {tps_stk:>10,.0f} tok/s (MFU {100 * mfu_stk:.3g}%)  "
                  f"ratio stacked/sequential {tps_stk / tps_seq:.2f}x  (per CPU second: {c_seq / c_stk:.2f}x)  "
                  f"max rel. loss difference {diff:.1e}")


if __name__ == "__main__":
    main()
