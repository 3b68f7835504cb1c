"""The H100 time of ``sae-bios``' gpu preset (session 52: every gpu preset within 10 minutes of one H100).

Per seed: pretraining the bioS GPT for the whole ``exposures`` budget with every recall check (an upper bound:
training stops at ``stop_at``; :func:`~lmsci.experiments.knowledge._knowledge_neurons_estimate.pretrain_seconds`),
then on each of the two arms (the trained GPT; its initialisation) the recall of every biography, the residual
stream of every person's biography (forwards of 256 biographies), the TopK SAE's ``sae_steps`` Adam steps (encoder
and decoder matmuls of ``sae_batch x d_model x d_sae`` at the achieved rate of :mod:`lmsci.train.estimate`, plus
the one-layer step overhead), the spliced NLL of ``n_nll`` biographies (two forwards each), and ``HOST_ARM_S`` of
host work per arm (PCA, random directions, the best-latent F1 of every kept feature: an allowance, not measured).
"""

from __future__ import annotations

import math
from typing import Any

from lmsci.experiments.knowledge._knowledge_neurons_estimate import CHECK_BATCH, pretrain_seconds
from lmsci.train.estimate import GPU_ACHIEVED_FLOPS, STEP_OVERHEAD_S

HOST_ARM_S = 30.0
ARMS = 2


def estimate_h100_seconds(cfg: Any) -> dict[str, float]:
    """Estimated seconds of a run of ``cfg`` (an ``SAEBiosConfig``) on one H100, summed over ``cfg.n_seeds`` seeds:
    ``pretrain``, ``sae`` (both arms' activations, SAE, dictionaries and NLL) and ``total``."""
    b = cfg.bios
    fwd = STEP_OVERHEAD_S[0] + STEP_OVERHEAD_S[1] * b.model.n_layers
    n_docs = b.n_people * b.multiplicity
    reads = 2 * math.ceil(n_docs / CHECK_BATCH) + 2 * cfg.n_nll  # recall + activations; spliced NLL (clean, spliced)
    sae_step = STEP_OVERHEAD_S[0] + STEP_OVERHEAD_S[1] + 3 * 2 * 2 * cfg.sae_batch * b.model.d_model * cfg.d_sae / \
        GPU_ACHIEVED_FLOPS
    arm = reads * fwd + cfg.sae_steps * sae_step + HOST_ARM_S
    pre = pretrain_seconds(b)
    return {"pretrain": cfg.n_seeds * pre, "sae": cfg.n_seeds * ARMS * arm,
            "total": cfg.n_seeds * (pre + ARMS * arm)}
