"""The H100 time of ``knowledge-neurons``' gpu preset (session 52: every gpu preset within 10 minutes of one H100).

Per seed: pretraining the bioS GPT (:func:`lmsci.experiments.knowledge._estimates.h100_seconds`: tokens at the
achieved bf16 rate, per-step overhead, the host's vectorised biography stream) for the whole ``exposures`` budget (an
upper bound: training stops at the first recall check at ``stop_at``), a recall check of every training biography
every ``check_every`` steps (teacher-forced forwards of ``CHECK_BATCH`` biographies), then the attribution and the
edits, counted as launches at :mod:`lmsci.train.estimate`'s per-step overhead of the model's depth (the prompts are
short: their FLOPs are negligible): per prompt of a fact one forward and one forward + backward of the ``ig_steps``
scaled activations (integrated gradients), and per fact ``EDIT_FORWARDS`` forwards (before, suppressed, amplified,
two random draws, the other facts before and after).
"""

from __future__ import annotations

import math
from typing import Any

from lmsci.experiments.knowledge._estimates import h100_seconds, mean_tokens, vocab_size
from lmsci.experiments.knowledge._specs import DataSpec
from lmsci.train.estimate import STEP_OVERHEAD_S

CHECK_BATCH = 256  # forward_in_batches' default (recall_of_docs)
EDIT_FORWARDS = 12


def pretrain_seconds(b: Any) -> float:
    """Estimated H100 seconds of :func:`lmsci.experiments.knowledge.common.train_bios_model` for the
    ``BiosModelSpec`` ``b``: the whole ``exposures`` budget and every recall check (the module docstring)."""
    doc = mean_tokens("bio", DataSpec(multiplicity=b.multiplicity, permute=b.permute, fullname=b.fullname))
    tokens = b.n_people * b.exposures * doc
    steps = tokens / (b.pretrain.batch_size * b.seq_len * (1 - doc / (2 * b.seq_len)))
    n_docs = b.n_people * b.multiplicity
    checks = steps / b.check_every + 1 if b.check_every else 1.0
    step = STEP_OVERHEAD_S[0] + STEP_OVERHEAD_S[1] * b.model.n_layers
    pre = h100_seconds(b.model, vocab_size(), b.seq_len, tokens=tokens, steps=steps, eval_tokens=checks * n_docs * doc,
                       host_docs=b.n_people * b.exposures)
    return float(pre + checks * math.ceil(n_docs / CHECK_BATCH) * step)


def estimate_h100_seconds(cfg: Any) -> dict[str, float]:
    """Estimated seconds of a run of ``cfg`` (a ``KnowledgeNeuronsConfig``) on one H100, summed over ``cfg.n_seeds``
    seeds: ``pretrain`` (training and recall checks), ``attribute`` (integrated gradients and edits) and ``total``."""
    b = cfg.bios
    pre = pretrain_seconds(b)
    step = STEP_OVERHEAD_S[0] + STEP_OVERHEAD_S[1] * b.model.n_layers
    attribute = cfg.n_facts * (3 * b.multiplicity + EDIT_FORWARDS) * step
    return {"pretrain": cfg.n_seeds * pre, "attribute": cfg.n_seeds * attribute,
            "total": cfg.n_seeds * (pre + attribute)}
