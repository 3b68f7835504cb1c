"""Sizing pilot of the iGSM quick presets: greedy in-distribution full-solution accuracy against training steps.

    .venv/bin/python scripts/igsm_sizing_pilot.py --steps 4000 --shape 4,4,64 --every 500 --batch 8

Trains one GPT of the quick shape on igsm-tiny with the lmsci trainer (seed 777, used by no verdict; AdamW betas
(0.9, 0.98), cosine to 0.01x, lr 2e-3, wd 0.05, 100 warmup steps, as the quick presets) and scores 48 fresh
test-hash problems of the training op distribution every ``--every`` steps with the full-solution checker; prints
one JSON line per evaluation and, at the end, three generated solutions beside the reference. Its 2026-11-26 result
is in the docstring of :mod:`lmsci.experiments.reasoning.igsm_common`.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from lmsci.experiments.reasoning.igsm_common import (IGSMCommonConfig, build_gpt, check_all, solve, summarize, test_set,
                                           tokenizer_of, world_of)
from lmsci.config import resolve_config
from lmsci.train import trainer
from lmsci.train.trainer import TrainConfig
from lmsci.worlds.igsm.tokenizer import get_batch_fn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--shape", default="4,4,64", help="n_layers,n_heads,d_model")
    ap.add_argument("--every", type=int, default=500)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    L, H, D = map(int, a.shape.split(","))
    cfg = resolve_config(IGSMCommonConfig, "quick", {"train.steps": a.steps, "train.batch_size": a.batch,
                                                     "model.n_layers": L, "model.n_heads": H, "model.d_model": D}, seed=777)
    world = world_of(cfg)
    tok = tokenizer_of(cfg, world)
    model = build_gpt(cfg, tok, (L, H, D), 777)
    probs = test_set(cfg, world, None, 48)
    t0 = time.time()

    def evaluate(step: int) -> None:
        model.eval()
        texts = solve(model, tok, [p.prompt() for p in probs], beam=1, max_new_tokens=224, batch_size=48)
        s = summarize(check_all(probs, texts))
        model.train()
        print(json.dumps({"step": step, "seconds": round(time.time() - t0), **{k: round(v, 3) for k, v in s.items()}}),
              flush=True)
        if step == a.steps:
            for p, t in list(zip(probs, texts))[:3]:
                print("reference:", p.solution, "\ngenerated:", t, flush=True)

    def log(rec: dict) -> None:
        if rec.get("step", 0) % a.every == 0 and rec.get("step", 0) > 0 and "loss" in rec:
            print(json.dumps({"step": rec["step"], "loss": round(rec["loss"], 4)}), flush=True)
            evaluate(rec["step"])

    tc = TrainConfig(steps=a.steps, batch_size=a.batch, lr=a.lr, warmup_steps=100, weight_decay=0.05,
                     min_lr_ratio=0.01, betas=(0.9, 0.98), device="cpu", log_every=a.every,
                     checkpoint_every=10 ** 9)
    trainer.train(model, get_batch_fn(world, tok, cfg.seq_len, a.batch), tc, seed=778, log=log)


if __name__ == "__main__":
    main()
