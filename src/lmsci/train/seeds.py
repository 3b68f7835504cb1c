"""Train the seeds of one point: as one stacked computation or one after another, to the same results.

:func:`train_seeds` is what an experiment calls when it trains K same-shaped models that differ only by seed
(initialisation and batch stream). With ``stack=True`` (and K > 1) it is :func:`lmsci.train.stacked.train_stacked`;
otherwise each member trains with :func:`lmsci.train.trainer.train` on the same batches (member k's generator seeded
with ``seeds[k]`` either way). Member k's losses and weights are the same in both modes up to float rounding
(``tests/train/test_stacked.py``), so the choice is a performance setting, not science: experiments expose it as a
``stack_seeds`` configuration field, which :data:`lmsci.config.NON_SCIENCE_FIELDS` leaves out of the preset digest.

Which mode is faster depends on the device and the model's size (issue 46, ``benchmarks/bench_compile.py``): on one
CPU thread, stacking (``torch.func.vmap``, explicit attention, unfused loss) cost 1.5-3x more per model than the
trainer for the quick presets' 0.1-0.3M-parameter GPTs (model-shape L2 0.63x, icl-kernel-regression 0.66x,
transformer-vs-lstm 0.49x and 0.35x the trainer's tokens/s per model), while on a GPU it fills the device.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Sequence

from torch import nn

from lmsci.errors import ConfigError, DivergedError
from lmsci.train import stacked, trainer
from lmsci.train.stacked import LogFn, StackedResult
from lmsci.train.trainer import GetBatch, TrainConfig


def stacks(stack: bool | Literal["always"], k: int) -> bool:
    """Whether :func:`train_seeds` trains ``k`` models as one stacked computation under ``stack`` (``"always"``:
    yes; True: when ``k > 1``; False: no)."""
    return stack == "always" or bool(stack and k > 1)


def train_seeds(models: Sequence[nn.Module], get_batch: GetBatch | Sequence[GetBatch], cfg: TrainConfig, *,
                seeds: Sequence[int], stack: bool | Literal["always"], log: Sequence[LogFn | None] | None = None,
                progress: Any = None, checkpoint_dirs: Sequence[str | Path | None] | None = None) -> StackedResult:
    """Train ``models`` (one per seed, same shape) in place, stacked or one after another.

    Args:
        models: K modules mapping input ids ``[batch, seq]`` to logits ``[batch, seq, vocab_size]``.
        get_batch: ``get_batch(step, generator) -> (input_ids [batch, seq], targets [batch, seq])``, one shared by
            the members or one per member (member k draws from its own generator either way).
        cfg: the :class:`~lmsci.train.trainer.TrainConfig` of every member.
        seeds: K seeds of the members' batch generators.
        stack: True: one stacked computation (:func:`~lmsci.train.stacked.train_stacked`) when K > 1, the trainer
            for one model; ``"always"``: the stacked computation for any K (one model included); False: one member
            after another with :func:`~lmsci.train.trainer.train`.
        log: one callable per member (or None).
        progress: a tqdm-like bar: one update per stacked step, or per step of each member in turn (a bar over
            ``cfg.steps`` stacked, ``K * cfg.steps`` one after another).
        checkpoint_dirs: one directory (or None) per member, where the trainer checkpoints and resumes member k when
            the members train one after another; a stack keeps no checkpoints (a cut stack retrains from step 0).

    Returns:
        :class:`~lmsci.train.stacked.StackedResult`: ``members`` in input order; a member whose loss became
        non-finite is in ``diverged`` (sequential mode: its :class:`~lmsci.errors.DivergedError`, caught, and the
        next member still trains), and its ``members`` entry is None in sequential mode.

    Raises:
        ConfigError: ``seeds`` (or ``log``, ``checkpoint_dirs``, a sequence of ``get_batch``) not of the models'
            length; the stacked trainer's refusals (models of different shapes, dropout > 0).

    Both trainers are looked up on their modules at call time, so a wrapper or a test's spy on
    ``lmsci.train.trainer.train`` / ``lmsci.train.stacked.train_stacked`` sees these calls too.
    """
    k = len(models)
    if len(seeds) != k:
        raise ConfigError("seeds", len(seeds), f"one seed per model ({k})")
    logs = list(log) if log is not None else [None] * k
    if len(logs) != k:
        raise ConfigError("log", len(logs), f"one log callable per model ({k})")
    get_batches = stacked._per_member(get_batch, "get_batch", k)
    ckpts = list(checkpoint_dirs) if checkpoint_dirs is not None else [None] * k
    if len(ckpts) != k:
        raise ConfigError("checkpoint_dirs", len(ckpts), f"one directory (or None) per model ({k})")
    if stacks(stack, k):
        return stacked.train_stacked(models, get_batch, cfg, seeds=seeds, log=logs, progress=progress)
    out = StackedResult()
    for i, (m, gb, s, lg, ck) in enumerate(zip(models, get_batches, seeds, logs, ckpts)):
        try:
            out.members.append(trainer.train(m, gb, cfg, seed=s, log=lg, progress=progress, checkpoint_dir=ck))
        except DivergedError as err:
            out.diverged[i] = err
            out.members.append(None)
    out.steps = cfg.steps
    return out
