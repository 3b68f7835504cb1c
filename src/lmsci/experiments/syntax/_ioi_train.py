"""The toy IOI GPT's training, shared by ``ioi-circuit`` (its ``ioi`` and ``no-ioi`` arms) and
``attribution-patching`` (trained exactly as ``ioi-circuit``'s ``ioi`` arm).

Task: Wang et al., "Interpretability in the Wild: a Circuit for Indirect Object Identification in GPT-2 small",
arXiv 2211.00593 (the IOI templates of :mod:`lmsci.worlds.ioi`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lmsci.contract import PointContext
from lmsci.models.gpt import GPT
from lmsci.runs import derive_seed
from lmsci.train.adaptor import train_point
from lmsci.worlds.ioi import IOIWorld, make_get_batch


def train_ioi_gpt(cfg: Any, world: IOIWorld, ioi_fraction: float, ctx: PointContext,
                  label: str = "train") -> tuple[GPT, dict]:
    """Train a GPT (``cfg.model``, a :class:`~lmsci.models.gpt.GPTSpec`; ``cfg.train``, a
    :class:`~lmsci.train.trainer.TrainSpec`) from ``ctx.seed`` on ``cfg.stream_tokens`` tokens of ``world``'s stream
    with ``ioi_fraction`` IOI sentences, in windows of ``cfg.seq_len`` tokens: its own init, stream and batches (seed
    keys ``init``, ``stream``, ``data``), logging into ``ctx`` (every ``steps // 50``; checkpoints every
    ``steps // 4`` under ``ctx.artifact_dir / "ckpt"``; progress bar ``label``).

    Returns:
        (the model in eval mode on ``ctx.device``, the trainer's final record).
    """
    ids = world.stream(cfg.stream_tokens, ioi_fraction, np.random.default_rng(derive_seed(ctx.seed, "stream")))
    model = GPT(cfg.model.gpt_config(world.vocab_size, cfg.seq_len), seed=derive_seed(ctx.seed, "init")).to(ctx.device)
    res = train_point(model, make_get_batch(ids, cfg.train.batch_size, cfg.seq_len), cfg.train, ctx,
                      seed=derive_seed(ctx.seed, "data"), desc=label, log_points=50,
                      checkpoint_dir=ctx.artifact_dir / "ckpt", checkpoint_every=max(cfg.train.steps // 4, 1))
    return model.eval(), res.final
