"""Per-step time of grokking's training: K models one after another vs K models stacked, side by side.

Arms (the same K members: seeds with weight decay and wd = 0 controls alternating, each on its own split of
(x + y) mod p; full-batch AdamW; the run's protocol of ``grokking``):

* ``single``: :func:`lmsci.train.modular.train_modular` for each member in turn (one GPT through
  ``answer_logits``, torch AdamW), the reference the experiments used before;
* ``stacked``: :func:`lmsci.train.modular.train_modular_stacked` with all K members (per-token tables,
  every weight with a leading member dimension, batched matmuls, fused AdamW), what the experiments run now;
* ``vmap``: :class:`lmsci.train.stacked.StackedModels` (torch.func ``vmap`` over ``functional_call`` of the
  same answer-position GPT) with fused AdamW: training steps only (no evaluation), for comparison.

Each arm runs ``--steps`` steps per window; windows are interleaved (single, stacked, vmap, single, ...) and the
fastest window of each arm is reported (the machine is shared: the minimum is the least disturbed). Also printed:
the largest relative difference of the training losses of stacked and single training over the same steps.

Usage::

    python benchmarks/bench_grokking.py --p 59 --frac 0.4 --members 6 --steps 20 --windows 3 --threads 1
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn as nn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--p", type=int, default=59)
    ap.add_argument("--frac", type=float, default=0.4)
    ap.add_argument("--members", type=int, default=6)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--d-mlp", type=int, default=512)
    ap.add_argument("--no-vmap", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from lmsci.config import resolve_config
    from lmsci.experiments.dynamics.grokking import GrokkingConfig
    from lmsci.models.modular import answer_logits, grokking_model
    from lmsci.train.modular import ModularMember, train_modular, train_modular_stacked
    from lmsci.runs import derive_seed
    from lmsci.train.stacked import StackedModels
    from lmsci.worlds.modular import modular_data

    K, S = args.members, args.steps
    cfg = resolve_config(GrokkingConfig, "quick", {"p": args.p, "train_frac": args.frac, "d_model": args.d_model,
                                                   "n_heads": args.n_heads, "d_mlp": args.d_mlp, "threads": args.threads})
    wds = [cfg.weight_decay if k % 2 == 0 else 0.0 for k in range(K)]

    def members():
        return [ModularMember(modular_data(args.p, "add", args.frac, seed=derive_seed(k, "split")), wds[k],
                              derive_seed(k, "init")) for k in range(K)]

    def run_single():
        return [train_modular(cfg, p=args.p, op="add", train_frac=args.frac, weight_decay=wds[k], steps=S, seed=k)
                for k in range(K)]

    def run_stacked():
        return train_modular_stacked(cfg, members(), S)

    class AnswerOnly(nn.Module):  # the answer-position GPT as a module vmap can call
        def __init__(self, gpt):
            super().__init__()
            self.gpt = gpt

        def forward(self, x):
            return answer_logits(self.gpt, x)

    def run_vmap():
        ms = members()
        stack = StackedModels([AnswerOnly(grokking_model(args.p, args.d_model, args.n_heads, args.d_mlp, seed=m.init_seed))
                               for m in ms])
        x = torch.stack([m.data.train()[0] for m in ms])
        y = torch.stack([m.data.train()[1] for m in ms])
        opt = torch.optim.AdamW(list(stack.params.values()), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=0.0,
                                fused=True)
        for _ in range(S):
            for w in stack.params.values():
                w.grad = None
            (stack.sum_nll(x, y) / y.shape[1]).sum().backward()
            opt.step()

    arms = {"single": run_single, "stacked": run_stacked}
    if not args.no_vmap:
        arms["vmap"] = run_vmap
    times: dict[str, list[float]] = {a: [] for a in arms}
    out: dict[str, object] = {}
    run_stacked()  # first-call costs (optimizer kernels, lazy imports) outside the windows
    for _ in range(args.windows):
        for a, f in arms.items():
            t0 = time.perf_counter()
            out[a] = f()
            times[a].append((time.perf_counter() - t0) / S)
    print(f"(x + y) mod {args.p}, fraction {args.frac}: {K} models (d_model {args.d_model}, {args.n_heads} heads, d_mlp "
          f"{args.d_mlp}), {S} full-batch steps per window, {args.windows} windows, {args.threads} thread(s)")
    desc = {"single": f"{K} x single (train_modular, one after another)",
            "stacked": f"stacked-{K} (train_modular_stacked)", "vmap": f"vmap-{K} (StackedModels, train steps only)"}
    for a in arms:
        print(f"{a:8s} {min(times[a]) * 1e3:8.1f} ms/step for all {K}  (windows: "
              f"{', '.join(f'{t * 1e3:.0f}' for t in times[a])})  {desc[a]}")
    best = {a: min(v) for a, v in times.items()}
    print(f"ratio {K} x single / stacked: {best['single'] / best['stacked']:.2f}x")
    if "vmap" in best:
        print(f"ratio {K} x single / vmap: {best['single'] / best['vmap']:.2f}x")
    diff = max(float(np.max(np.abs(st["curve"]["train_loss"].values - si["curve"]["train_loss"].values)
                            / si["curve"]["train_loss"].values)) for st, si in zip(out["stacked"], out["single"]))
    print(f"max rel. loss difference stacked vs single over {S} steps: {diff:.2e}")


if __name__ == "__main__":
    main()
