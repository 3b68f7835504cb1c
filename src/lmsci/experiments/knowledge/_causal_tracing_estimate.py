"""The H100 time of ``causal-tracing``'s gpu preset (session 52: every gpu preset within 10 minutes of one H100).

Per seed: pretraining (:func:`lmsci.experiments.knowledge._estimates.model_seconds`: tokens at the achieved bf16
rate, per-step overhead, the host's data work, the memorisation checks), then on each arm (the trained GPT and its
initialisation) the causal traces, ROME edits and their evaluation, counted as forwards of at most
``TRACE_MAX_ROWS`` rows at :mod:`lmsci.train.estimate`'s per-step overhead of the model's depth (the prompts are
short: the FLOPs are negligible beside the launches). Assumptions: a traced prompt of ``PROMPT_TOKENS`` tokens
(a bioS name and relation prefix: 15-20 tokens), every ``(kind, token, layer)`` cell restored (3 kinds, ``samples``
noise draws); an edit costs ``v_steps`` forward + backward steps plus ``EDIT_EVAL_FORWARDS`` evaluation forwards
(rewrite, paraphrase prefixes, neighbours, before and after); ROME's covariance one forward per 64 windows.
"""

from __future__ import annotations

import math
from typing import Any

from lmsci.experiments.knowledge._estimates import mean_tokens, model_seconds
from lmsci.experiments.knowledge._specs import SINGLE
from lmsci.train.estimate import STEP_OVERHEAD_S

TRACE_MAX_ROWS = 2048
PROMPT_TOKENS = 24
EDIT_EVAL_FORWARDS = 4
ARMS = 2


def estimate_h100_seconds(cfg: Any) -> dict[str, float]:
    """Estimated seconds of a run of ``cfg`` (a ``CausalTracingConfig``) on one H100: ``pretrain``, ``trace_edit``
    and ``total``, summed over ``cfg.n_seeds`` seeds."""
    L = cfg.model.n_layers
    step = STEP_OVERHEAD_S[0] + STEP_OVERHEAD_S[1] * L
    b = mean_tokens("bio", SINGLE)
    pre = model_seconds(cfg, bio_tokens=cfg.n_people * cfg.exposures * b, bio_docs=cfg.n_people * cfg.exposures,
                        eval_docs=cfg.n_people * 2)
    rows = 3 * PROMPT_TOKENS * L * cfg.samples
    trace = cfg.n_trace * math.ceil(rows / TRACE_MAX_ROWS) * step
    edits = cfg.n_edits * (cfg.v_steps * 3 + EDIT_EVAL_FORWARDS + cfg.n_prefixes + cfg.n_neighbours) * step
    cov = math.ceil(cfg.cov_windows / 64) * step
    te = ARMS * (trace + edits + cov)
    return {"pretrain": cfg.n_seeds * pre, "trace_edit": cfg.n_seeds * te, "total": cfg.n_seeds * (pre + te)}
