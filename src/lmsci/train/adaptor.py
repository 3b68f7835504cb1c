"""Train a language model on batches a world samples, with the point's device, logging and progress.

Experiments used to write the same dozen lines in every ``run_point``: a ``get_batch`` closure that samples
``[batch, seq_len + 1]`` tokens and shifts them into inputs and next-token targets, a ``TrainConfig`` built
from the spec with the point's device and a log interval, a progress bar opened and closed by hand, and the
metrics sent to the run directory. :func:`train_lm` is those lines once::

    model = GPT(cfg.model.gpt_config(V, T), seed=derive_seed(ctx.seed, "init"))
    train_lm(model, lambda n, gen: world.sample(n, T + 1, gen), cfg.train, ctx)

:func:`train_point` is the same with a ready ``get_batch`` (targets that are not a plain next-token shift:
answer-only targets, masked positions, a data stream), :func:`train_group` the form over K models of a group
(the seeds of a point, or several points): one stacked computation or one after another
(:func:`lmsci.train.seeds.train_seeds`, ``stack=cfg.stack_seeds``), per-context logs and checkpoints under one
progress bar, and :func:`numpy_rng` the NumPy generator a sampler seeds from the batch generator (one draw of it
per batch).

``ctx`` is the point's :class:`lmsci.contract.PointContext` (or anything with ``device``, ``seed``, ``log`` and
``progress``); the sampler draws all its randomness from the generator it is given, so a point stays a pure
function of (config, point, seed). The trainers are called through their modules (``trainer.train``,
``stacked.train_stacked``, ``seeds.train_seeds``), so a test that patches them there sees every call.

Source: the stacked trainer follows PyTorch's "Model ensembling" tutorial (``torch.func.stack_module_state`` and
``vmap``); the trainer's recipe is :mod:`lmsci.train.trainer`'s (AdamW, warmup + cosine).
"""

from __future__ import annotations

from typing import Any, Callable, Literal, Sequence

import numpy as np
import torch

from lmsci.train import seeds as seeds_mod
from lmsci.train import trainer
from lmsci.train.stacked import StackedResult
from lmsci.train.trainer import GetBatch, TrainResult, TrainSpec

Sampler = Callable[[int, torch.Generator], torch.Tensor]


def numpy_rng(gen: torch.Generator, high: int = 2 ** 62) -> np.random.Generator:
    """A NumPy generator seeded by one draw ``torch.randint(0, high, (1,))`` of ``gen`` (a sampler written with
    NumPy then takes all its randomness from the trainer's batch generator)."""
    return np.random.default_rng(int(torch.randint(0, high, (1,), generator=gen)))


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


def row_batches(inputs: torch.Tensor, targets: torch.Tensor,
                batch_size: int) -> Callable[[int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]:
    """A trainer ``get_batch`` over a fixed data set: ``batch_size`` rows drawn uniformly with replacement.

    Args:
        inputs: ``[N, seq]`` token ids (on any device).
        targets: ``[N, seq]`` targets of the same rows (``-100`` ignored), on the same device.
        batch_size: rows per batch.

    Returns:
        ``get_batch(step, generator) -> (inputs[idx], targets[idx])``, ``idx = torch.randint(N, (batch_size,),
        generator=generator)`` (one draw of the CPU generator per batch, moved to the data's device).

    Raises:
        ValueError: ``inputs`` and ``targets`` have different numbers of rows, or none.
    """
    if inputs.shape[0] != targets.shape[0] or inputs.shape[0] == 0:
        raise ValueError(f"inputs {tuple(inputs.shape)} and targets {tuple(targets.shape)}: expected the same "
                         "number of rows, at least one")

    def get_batch(step: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.randint(inputs.shape[0], (batch_size,), generator=gen).to(inputs.device)
        return inputs[idx], targets[idx]

    return get_batch


def _config(spec: TrainSpec, device: str, log_points: int, config_changes: dict) -> trainer.TrainConfig:
    steps = int(config_changes.get("steps", spec.steps))
    config_changes.setdefault("log_every", max(1, steps // max(1, log_points)))
    config_changes.setdefault("device", device)
    return spec.train_config(**config_changes)


def train_point(model: torch.nn.Module, get_batch: GetBatch, spec: TrainSpec, ctx: Any, *, seed: int | None = None,
                desc: str = "train", log_points: int = 20, log_fields: dict[str, Any] | None = None,
                eval_fn: Callable | None = None, checkpoint_dir: Any = None, **config_changes: Any) -> TrainResult:
    """Train ``model`` on ``get_batch`` with the spec's optimizer and schedule, on the point's device.

    Args:
        model: an lmsci GPT or any module mapping ``[batch, seq]`` ids to ``[batch, seq, vocab_size]`` logits.
        get_batch: ``get_batch(step, generator) -> (inputs [batch, seq], targets [batch, seq])``, targets ``-100``
            ignored.
        spec: the experiment's :class:`~lmsci.train.trainer.TrainSpec` (steps, batch_size, lr, schedule).
        ctx: the point context: ``device``, ``seed``, ``log(**metrics)``, ``progress(total, desc)``.
        seed: the batch generator's seed (default ``ctx.seed``).
        desc: the progress bar's label.
        log_points: about how many training records are logged (``log_every = steps // log_points``; a
            ``log_every`` in ``config_changes`` wins).
        log_fields: fields written before each record's own (``ctx.log(**log_fields, **record)``).
        eval_fn, checkpoint_dir: passed to :func:`~lmsci.train.trainer.train`.
        config_changes: further :class:`~lmsci.train.trainer.TrainConfig` fields (``steps``, ``warmup_steps``,
            ``compile``, ``precision``, ``log_every``, ``checkpoint_every``, ``device`` (default ``ctx.device``)...).

    Returns:
        the trainer's :class:`~lmsci.train.trainer.TrainResult` (final loss, tokens/s, ...).

    Raises:
        ConfigError: a change is not a TrainConfig field or out of range.
        DivergedError: a non-finite training loss (the executor records the point as diverged).
    """
    tcfg = _config(spec, ctx.device, log_points, config_changes)
    fields = log_fields or {}
    bar = ctx.progress(tcfg.steps, desc)
    try:
        return trainer.train(model, get_batch, tcfg, seed=ctx.seed if seed is None else seed,
                             log=lambda rec: ctx.log(**fields, **rec), progress=bar, eval_fn=eval_fn,
                             checkpoint_dir=checkpoint_dir)
    finally:
        bar.close()


def train_lm(model: torch.nn.Module, sample: Sampler, spec: TrainSpec, ctx: Any, **kwargs: Any) -> TrainResult:
    """:func:`train_point` on next-token batches of ``sample`` (:func:`lm_batches`).

    Args:
        model: as in :func:`train_point`.
        sample: ``sample(n, generator) -> [n, seq_len + 1]`` token ids.
        spec, ctx: as in :func:`train_point`; ``spec.batch_size`` sequences per batch.
        kwargs: :func:`train_point`'s keywords (``seed``, ``desc``, ``log_points``, TrainConfig changes...).

    Returns:
        the trainer's :class:`~lmsci.train.trainer.TrainResult`.

    Raises:
        DivergedError: a non-finite training loss (the executor records the point as diverged).
    """
    return train_point(model, lm_batches(sample, spec.batch_size), spec, ctx, **kwargs)


def train_group(models: Sequence[torch.nn.Module], get_batch: GetBatch | Sequence[GetBatch], spec: TrainSpec,
                ctxs: Sequence[Any], *, stack: bool | Literal["always"] = "always", seeds: Sequence[int] | None = None,
                desc: str = "train", log_points: int = 20, checkpoint: str | None = None,
                **config_changes: Any) -> StackedResult:
    """Train one model per context (the seeds of a point, or the points of a group), stacked or one after another
    (:func:`lmsci.train.seeds.train_seeds`), each logging to its own context, under one progress bar.

    An experiment with a ``stack_seeds`` setting passes ``stack=cfg.stack_seeds``: the two modes give each member
    the same losses and weights up to float rounding (``tests/train/test_stacked.py``), so the setting is a
    performance one (:data:`lmsci.config.NON_SCIENCE_FIELDS`).

    Args:
        models: K same-shaped modules, one per context, each mapping ids ``[batch, seq]`` to logits
            ``[batch, seq, vocab_size]``; trained in place.
        get_batch: one ``get_batch(step, generator)`` shared by the members (as in :func:`train_point`), or K of
            them, one per context; member k draws from its own generator either way.
        spec: the shared :class:`~lmsci.train.trainer.TrainSpec`.
        ctxs: K point contexts; the first gives the device and the progress bar (over ``steps`` stacked,
            ``K * steps`` one after another).
        stack: ``"always"`` (default): one stacked computation (:func:`~lmsci.train.stacked.train_stacked`),
            one model included; True: stacked when K > 1, the trainer for one model; False: one after another
            with :func:`~lmsci.train.trainer.train`.
        seeds: the K batch generators' seeds (default each context's ``seed``).
        desc, log_points, config_changes: as in :func:`train_point`.
        checkpoint: a folder name: when the members train one after another, member k checkpoints and resumes in
            ``ctxs[k].artifact_dir / checkpoint`` (``checkpoint_every`` in ``config_changes``); a stack keeps none
            (and creates no folder).

    Returns:
        :class:`~lmsci.train.stacked.StackedResult`: ``members`` in input order; ``diverged`` ``{k:
        DivergedError}`` (one after another, a diverged member's entry in ``members`` is None and the next
        member still trains; ``result.raise_for(k)`` raises it).

    Raises:
        ConfigError: a change is not a TrainConfig field or out of range; ``seeds`` or ``get_batch`` not one per
            model; models the stacked trainer refuses (different shapes, dropout > 0).
    """
    tcfg = _config(spec, ctxs[0].device, log_points, config_changes)
    stacks = seeds_mod.stacks(stack, len(models))
    ckpts = None if checkpoint is None or stacks else [c.artifact_dir / checkpoint for c in ctxs]
    with ctxs[0].progress(tcfg.steps * (1 if stacks else len(models)), desc) as bar:
        return seeds_mod.train_seeds(models, get_batch, tcfg, stack=stack,
                                     seeds=[c.seed for c in ctxs] if seeds is None else list(seeds),
                                     log=[(lambda rec, c=c: c.log(**rec)) for c in ctxs], progress=bar,
                                     checkpoint_dirs=ckpts)
