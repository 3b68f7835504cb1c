"""The H100 time of ``factual-recall``'s gpu preset (session 52: every gpu preset within 10 minutes of one H100).

The models are tiny one-layer transformers, so the GPU's arithmetic is negligible; the run is bound by the host,
which draws every batch on the CPU (:func:`lmsci.worlds.factual_recall.sample_stack`, moved to the device:
:func:`lmsci.train.stacked_assoc.train_stack`), plus a fixed launch overhead per stacked optimizer step.
Rates, measured on the quick run of 2026-12 (``/work/runs/s51/factual-recall``, one thread on the 2-core Xeon):

* ``HOST_S_PER_SEQ``: the d_model = 8 capacity group (the cheapest model: its CPU compute is small, so the wall is
  mostly batch sampling) took 44.8 s for 101.2k member-steps of 256 sequences: 1.73 us per sequence (an upper bound
  of the host's share, CPU compute included; the GPU machine's host is assumed no faster).
* ``CAPACITY_FRACTION``: the search ran 741k member-steps over the 7 capacity groups, 0.276 of its upper bound
  ``max_rounds x steps x lrs x probes_per_round x families x seeds`` per group (early stop and converged searches).
* ``TRADEOFF_FRACTION``: 1.0 (the trade-off map counted without early stop; the quick map, 100 facts, stopped at
  0.53; the gpu map stores 256 facts).
* ``STEP_S``: :mod:`lmsci.train.estimate`'s per-step overhead of a one-layer model, per sequential stacked step
  (the learning rates of a search round run one after the other).
"""

from __future__ import annotations

import math
from typing import Any

from lmsci.train.estimate import STEP_OVERHEAD_S

HOST_S_PER_SEQ = 1.73e-6
CAPACITY_FRACTION = 0.276
TRADEOFF_FRACTION = 1.0
STEP_S = STEP_OVERHEAD_S[0] + STEP_OVERHEAD_S[1] * 1


def estimate_h100_seconds(cfg: Any) -> dict[str, float]:
    """Estimated seconds of a whole run of ``cfg`` (a ``FactualRecallConfig``) on one H100: ``host`` (batches drawn
    on the CPU), ``steps`` (launch overhead of the sequential stacked steps) and ``total``."""
    n_fam = len(cfg.attn_only_alphas) + len(cfg.mlp_alphas) * len(cfg.mlp_betas)
    rounds = cfg.max_rounds * cfg.steps * CAPACITY_FRACTION  # sequential steps of one learning rate, per group
    cap_member_steps = rounds * len(cfg.lrs) * cfg.probes_per_round * n_fam * cfg.n_seeds * len(cfg.d_models)
    cap_seq_steps = rounds * len(cfg.lrs) * len(cfg.d_models)
    cells = len(cfg.tradeoff_heads) * len(cfg.tradeoff_mlps) * cfg.n_seeds if cfg.tradeoff else 0
    tr_member_steps = cells * cfg.tradeoff_steps * TRADEOFF_FRACTION
    per_head = len(cfg.tradeoff_mlps) * cfg.n_seeds
    tr_seq_steps = (len(cfg.tradeoff_heads) * math.ceil(per_head / cfg.stack_size) * cfg.tradeoff_steps
                    * TRADEOFF_FRACTION if cfg.tradeoff else 0.0)
    host = (cap_member_steps + tr_member_steps) * cfg.batch_size * HOST_S_PER_SEQ
    steps = (cap_seq_steps + tr_seq_steps) * STEP_S
    return {"host": host, "steps": steps, "total": host + steps}
