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

from typing import Any, Sequence

from torch import nn

from lmsci.errors import ConfigError, DivergedError
from lmsci.train import stacked, trainer
from lmsci.train.stacked import LogFn, StackedResult
from lmsci.train.trainer import GetBatch, TrainConfig


def train_seeds(models: Sequence[nn.Module], get_batch: GetBatch, cfg: TrainConfig, *, seeds: Sequence[int],
                stack: bool, log: Sequence[LogFn | None] | None = None, progress: Any = None) -> StackedResult:
    """Train ``models`` (one per seed, same shape) in place, stacked or one after another.

    Args:
        models: K modules mapping input ids ``[batch, seq]`` to logits ``[batch, seq, vocab_size]``.
        get_batch: ``get_batch(step, generator) -> (input_ids, targets)``, shared by the members.
        cfg: the :class:`~lmsci.train.trainer.TrainConfig` of every member.
        seeds: K seeds of the members' batch generators.
        stack: train as one stacked computation (:func:`~lmsci.train.stacked.train_stacked`) when K > 1.
        log: one callable per member (or None).
        progress: a tqdm-like bar: one update per stacked step, or per step of each member in turn.

    Returns:
        :class:`~lmsci.train.stacked.StackedResult`: ``members`` in input order; a member whose loss became
        non-finite is in ``diverged`` (sequential mode: its :class:`~lmsci.errors.DivergedError`, caught), and its
        ``members`` entry is None in sequential mode.

    Raises:
        ConfigError: ``seeds`` (or ``log``) not of the models' length.

    Both trainers are looked up on their modules at call time, so a wrapper or a test's spy on
    ``lmsci.train.trainer.train`` / ``lmsci.train.stacked.train_stacked`` sees these calls too.
    """
    k = len(models)
    if len(seeds) != k:
        raise ConfigError("seeds", len(seeds), f"one seed per model ({k})")
    logs = list(log) if log is not None else [None] * k
    if len(logs) != k:
        raise ConfigError("log", len(logs), f"one log callable per model ({k})")
    if stack and k > 1:
        return stacked.train_stacked(models, get_batch, cfg, seeds=seeds, log=logs, progress=progress)
    out = StackedResult()
    for i, (m, s, lg) in enumerate(zip(models, seeds, logs)):
        try:
            out.members.append(trainer.train(m, get_batch, cfg, seed=s, log=lg, progress=progress))
        except DivergedError as err:
            out.diverged[i] = err
            out.members.append(None)
    out.steps = cfg.steps
    return out
