"""The trained world of :mod:`lmsci.experiments.theory.alignment_attack`: a GPT fitted to persona documents
(mixtures and persona proxies) and attack prompts sampled from the bad persona's proxy.

Source: Wolf, Wies, Avnery, Levine, Shashua, "Fundamental Limitations of Alignment in Large Language Models",
ICML 2024, arXiv 2304.11082, sec. 5 and App. H (misaligning prompts written by a P- proxy).
"""

from __future__ import annotations

from typing import Any

import torch

from lmsci.models.gpt import GPT
from lmsci.runs import derive_seed
from lmsci.train.adaptor import numpy_rng, train_lm
from lmsci.worlds.personas import PersonaWorld


def _model(cfg: Any, w: PersonaWorld, seed: int) -> GPT:
    return GPT(cfg.model.gpt_config(w.vocab_size, w.doc_len), seed=seed)


def fit_model(cfg: Any, w: PersonaWorld, kind: str, steps: int, seed: int, device: str, ctx: Any,
              tag: str | None = None) -> GPT:
    """Train a GPT on fresh documents of ``w``: ``kind`` "mixture", "bad" or "good" (``tag``: its name in the log);
    ``cfg``: the experiment's ``AlignmentConfig`` (its ``model``, ``train`` and ``precision``)."""
    model = _model(cfg, w, derive_seed(seed, kind, "init"))

    def docs(n: int, gen: torch.Generator) -> torch.Tensor:
        rng = numpy_rng(gen, 2 ** 31 - 1)
        toks = w.sample_docs(n, rng)[0] if kind == "mixture" else w.persona_docs(kind == "bad", n, rng)
        return torch.as_tensor(toks, device=device)

    # each model (mixture: train.steps, proxies: proxy_steps) warms up for at most a tenth of its steps
    train_lm(model, docs, cfg.train, ctx, seed=derive_seed(seed, kind, "train"), desc=f"train {tag or kind}",
             log_fields={"model": tag or kind, "alpha": w.alpha if kind == "mixture" else None}, steps=steps,
             warmup_steps=min(cfg.train.warmup_steps, steps // 10), device=device, log_every=50,
             precision=cfg.precision)
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


#: host seconds per document drawn for training (numpy, one thread of the 2-core Xeon, gpu shapes: 256 x 32-token
#: mixture documents in 1.008 ms, persona documents in 0.515 ms; 2026-12-06, master seed 1000001, timing only)
HOST_S_PER_MIXTURE_DOC = 1.008e-3 / 256
HOST_S_PER_PERSONA_DOC = 0.515e-3 / 256
#: the exact world per seed (numpy on the host): the quick run measured 4-16 s per seed; the larger value
EXACT_WORLD_S = 16.0


def estimate_h100_seconds(cfg: Any) -> dict[str, float]:
    """Estimated seconds of a run of ``cfg`` (an ``AlignmentConfig``) on one H100, summed over ``cfg.n_seeds`` seeds:
    ``train`` (2 persona proxies of ``proxy_steps`` and a mixture per trained alpha plus the null arm's second
    mixture, ``train.steps`` each, at :mod:`lmsci.train.estimate`'s rate and step overhead), ``host`` (their
    documents drawn serially on the host), ``eval`` (attack prompts sampled token by token, scored on every model,
    held-out documents) and ``exact`` (the exact world), and ``total``."""
    from lmsci.train.estimate import STEP_OVERHEAD_S, gpu_seconds

    w = PersonaWorld(cfg.n_pos, cfg.n_neg, cfg.neg_bad, cfg.neg_good, cfg.trained_alphas[0], cfg.doc_len)
    m, V, T, B = cfg.model, w.vocab_size, cfg.doc_len, cfg.train.batch_size
    n_mix = len(cfg.trained_alphas) + 1

    def fit(steps: int) -> float:
        return gpu_seconds(m.d_model, m.n_layers, V, T, tokens=steps * B * T, steps=steps)

    train = 2 * fit(cfg.proxy_steps) + n_mix * fit(cfg.train.steps)
    host = B * (2 * cfg.proxy_steps * HOST_S_PER_PERSONA_DOC + n_mix * cfg.train.steps * HOST_S_PER_MIXTURE_DOC)
    ev_tokens = (cfg.n_attack * T * (n_mix + 2) + cfg.n_heldout * T * n_mix) * T / 2  # no KV cache: prefix re-read
    ev = gpu_seconds(m.d_model, m.n_layers, V, T, tokens=0, steps=T * (n_mix + 2), eval_tokens=ev_tokens)
    ev += T * STEP_OVERHEAD_S[1] * m.n_layers  # sampling the attack prompts: one forward per token
    out = {"train": train, "host": host, "eval": ev, "exact": EXACT_WORLD_S}
    out = {k: v * cfg.n_seeds for k, v in out.items()}
    return {**out, "total": sum(out.values())}
