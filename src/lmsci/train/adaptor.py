"""Train a language model on sequences a world samples, with the point's device, logging and progress.

Experiments used to write the same dozen lines in every ``run_point``: a ``get_batch`` closure that samples
``[batch, seq_len + 1]`` tokens and shifts them into inputs and next-token targets, a ``TrainConfig`` built
from the spec with the point's device and a log interval, a progress bar opened and closed by hand, and the
metrics sent to the run directory. :func:`train_lm` is those lines once::

    model = GPT(cfg.model.gpt_config(V, T), seed=derive_seed(ctx.seed, "init"))
    train_lm(model, lambda n, gen: world.sample(n, T + 1, gen), cfg.train, ctx)

``ctx`` is the point's :class:`lmsci.contract.PointContext` (or anything with ``device``, ``seed``, ``log`` and
``progress``); the sampler draws all its randomness from the generator it is given, so a point stays a pure
function of (config, point, seed).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from lmsci.train.trainer import TrainResult, TrainSpec, train

Sampler = Callable[[int, torch.Generator], torch.Tensor]


def lm_batches(sample: Sampler, batch_size: int) -> Callable[[int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]:
    """A trainer ``get_batch`` from a sampler of token sequences.

    Args:
        sample: ``sample(n, generator) -> [n, seq_len + 1]`` long token ids (all randomness from the generator).
        batch_size: sequences per batch.

    Returns:
        ``get_batch(step, generator) -> (inputs [batch, seq_len], targets [batch, seq_len])``: next-token targets.

    Raises:
        ValueError (when called): the sampler returned something other than a 2-d tensor of >= 2 columns.
    """
    def get_batch(step: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = sample(batch_size, gen)
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] < 2:
            raise ValueError(f"sampler returned {type(x).__name__} of shape {getattr(x, 'shape', None)}; "
                             "expected [batch, seq_len + 1] token ids")
        return x[:, :-1], x[:, 1:]

    return get_batch


def train_lm(model: torch.nn.Module, sample: Sampler, spec: TrainSpec, ctx: Any, *, seed: int | None = None,
             desc: str = "train", log_points: int = 20, eval_fn: Callable | None = None,
             checkpoint_dir: Any = None, **config_changes: Any) -> TrainResult:
    """Train ``model`` on sequences from ``sample`` with the spec's optimizer and schedule, on the point's device.

    Args:
        model: an lmsci GPT or any module mapping ``[batch, seq]`` ids to ``[batch, seq, vocab_size]`` logits.
        sample: ``sample(n, generator) -> [n, seq_len + 1]`` token ids.
        spec: the experiment's :class:`~lmsci.train.trainer.TrainSpec` (steps, batch_size, lr, schedule).
        ctx: the point context: ``device``, ``seed``, ``log(**metrics)``, ``progress(total, desc)``.
        seed: the batch generator's seed (default ``ctx.seed``).
        desc: the progress bar's label.
        log_points: about how many training records are logged (``log_every = steps // log_points``).
        eval_fn, checkpoint_dir: passed to :func:`~lmsci.train.trainer.train`.
        config_changes: further :class:`~lmsci.train.trainer.TrainConfig` execution fields (``compile``, ...).

    Returns:
        the trainer's :class:`~lmsci.train.trainer.TrainResult` (final loss, tokens/s, ...).

    Raises:
        DivergedError: a non-finite training loss (the executor records the point as diverged).
    """
    tcfg = spec.train_config(device=ctx.device, log_every=max(1, spec.steps // max(1, log_points)), **config_changes)
    bar = ctx.progress(spec.steps, desc)
    try:
        return train(model, lm_batches(sample, spec.batch_size), tcfg, seed=ctx.seed if seed is None else seed,
                     log=lambda rec: ctx.log(**rec), progress=bar, eval_fn=eval_fn, checkpoint_dir=checkpoint_dir)
    finally:
        bar.close()
