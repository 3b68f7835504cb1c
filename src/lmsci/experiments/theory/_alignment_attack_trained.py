"""The trained world of :mod:`lmsci.experiments.theory.alignment_attack`: a GPT fitted to persona documents
(mixtures and persona proxies) and attack prompts sampled from the bad persona's proxy.

Source: Wolf, Wies, Avnery, Levine, Shashua, "Fundamental Limitations of Alignment in Large Language Models",
ICML 2024, arXiv 2304.11082, sec. 5 and App. H (misaligning prompts written by a P- proxy).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from lmsci.models.gpt import GPT
from lmsci.runs import derive_seed
from lmsci.train.trainer import train
from lmsci.worlds.personas import PersonaWorld


def _model(cfg: Any, w: PersonaWorld, seed: int) -> GPT:
    return GPT(cfg.model.gpt_config(w.vocab_size, w.doc_len), seed=seed)


def fit_model(cfg: Any, w: PersonaWorld, kind: str, steps: int, seed: int, device: str, ctx: Any,
              tag: str | None = None) -> GPT:
    """Train a GPT on fresh documents of ``w``: ``kind`` "mixture", "bad" or "good" (``tag``: its name in the log);
    ``cfg``: the experiment's ``AlignmentConfig`` (its ``model``, ``train`` and ``precision``)."""
    model = _model(cfg, w, derive_seed(seed, kind, "init"))

    def get_batch(step: int, gen: torch.Generator):
        rng = np.random.default_rng(int(torch.randint(2 ** 31 - 1, (1,), generator=gen)))
        if kind == "mixture":
            toks, _ = w.sample_docs(cfg.train.batch_size, rng)
        else:
            toks = w.persona_docs(kind == "bad", cfg.train.batch_size, rng)
        t = torch.as_tensor(toks, device=device)
        return t[:, :-1], t[:, 1:]

    # each model (mixture: train.steps, proxies: proxy_steps) warms up for at most a tenth of its steps
    tcfg = cfg.train.train_config(steps=steps, warmup_steps=min(cfg.train.warmup_steps, steps // 10),
                                  device=device, log_every=50, precision=cfg.precision)
    train(model, get_batch, tcfg, seed=derive_seed(seed, kind, "train"),
          log=lambda r: ctx.log(model=tag or kind, alpha=w.alpha if kind == "mixture" else None, **r))
    return model.eval()


@torch.no_grad()
def sample_prompts(model: GPT, n: int, length: int, seed: int, device: str) -> torch.Tensor:
    """``[n, 1 + length]`` token rows ``[BOS, ...]`` sampled from ``model`` at temperature 1."""
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.zeros((n, 1), dtype=torch.long, device=device)
    for _ in range(length):
        p = torch.softmax(model(x)[:, -1].float(), -1)
        x = torch.cat([x, torch.multinomial(p, 1, generator=gen)], 1)
    return x
