"""The H100 time of ``messy-knowledge``'s gpu preset (session 52: every gpu preset within 10 minutes of one H100).

Per seed (:mod:`lmsci.train.estimate`: achieved bf16 rate and per-step overhead): pretraining on the padded training
statements for the whole ``epochs`` budget (an upper bound: training stops once recall reaches ``memorise_stop``;
the quick runs stopped at 40-47% of it), a recall check of every statement every ``memorise_check_every`` steps (a
forward per statement, ``CHECK_BATCH`` at a time), the per-statement gradients of the overlap pairs (6 blocks of
``n_pairs`` statements, one forward + backward each) and the ripple fine-tunings (``ripple_steps`` + 4 evaluation
forwards per fact). The statements are built on the host once (seconds).
"""

from __future__ import annotations

import math
from typing import Any

from lmsci.train.estimate import STEP_OVERHEAD_S, gpu_seconds
from lmsci.worlds.bios_messy import MessyBiosWorld, statement_batch

CHECK_BATCH = 256
PAIR_BLOCKS = 6


def estimate_h100_seconds(cfg: Any) -> dict[str, float]:
    """Estimated seconds of a run of ``cfg`` (a ``MessyKnowledgeConfig``) on one H100, summed over ``cfg.n_seeds``
    seeds: ``pretrain`` (training and recall checks), ``measure`` (gradients and ripple edits) and ``total``."""
    world = MessyBiosWorld(cfg.n_people, seed=0)
    st = world.training_statements(seed=0)
    x, _ = statement_batch(st, world.vocab.pad_id)
    n, T = x.shape
    m, V = cfg.model, len(world.vocab)
    steps = math.ceil(n * cfg.epochs / cfg.pretrain.batch_size)
    checks = steps / cfg.memorise_check_every + 1 if cfg.memorise_check_every else 1.0
    pre = gpu_seconds(m.d_model, m.n_layers, V, T, tokens=steps * cfg.pretrain.batch_size * T, steps=steps,
                      eval_tokens=checks * n * T)
    step = STEP_OVERHEAD_S[0] + STEP_OVERHEAD_S[1] * m.n_layers
    pre += checks * math.ceil(n / CHECK_BATCH) * step
    measure = (PAIR_BLOCKS * cfg.n_pairs + cfg.n_ripple * (cfg.ripple_steps + 4)) * step
    return {"pretrain": cfg.n_seeds * pre, "measure": cfg.n_seeds * measure,
            "total": cfg.n_seeds * (pre + measure)}
