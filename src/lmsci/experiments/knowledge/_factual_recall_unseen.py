"""The null arm of ``factual-recall/facts-per-param``: each trained model scored on facts it never saw.

:func:`train_stack_scoring_unseen` is :func:`lmsci.train.stacked_assoc.train_stack` (same members, same batches,
same Adam steps, same evaluations, same early stop: the real arm's results are identical, tested) that at each
evaluation also scores every live member's predictions on its *unseen* table: a fact table of the same shape
(S, R, D, the same vocabulary and sequence format) drawn independently, on the same test sequences. The member
trained on its own table stores none of the unseen table's facts, so its accuracy there is about 1/D; it reaches
the threshold only where the accuracy measurement credits something other than stored facts (answers fixed by the
format, D = 1, or chance agreement of a tiny table). Results on each member: ``unseen_best_acc`` (max over the
evaluations, as ``best_acc``) and ``unseen_reached_at`` (first evaluation step at which it reached the threshold,
or None). Only ``factual-recall`` uses this module.

Source of the training: Nichani, Lee, Bietti, arXiv 2412.06538, official ``run.py`` (AdamW, fresh batches,
early stop); the null arm is this project's (issue 44 item 4).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lmsci.errors import ConfigError
from lmsci.runs import derive_seed
from lmsci.train.stacked_assoc import SampleStack, StackMember, train_stack
from lmsci.worlds.factual_recall import FactualRecallWorld


def unseen_world(world: FactualRecallWorld, seed: int) -> FactualRecallWorld:
    """A world of ``world``'s shape (S, R, D, n_noise, seq_len: the same vocabulary and format) whose fact table is
    drawn independently from ``seed``."""
    return FactualRecallWorld(world.S, world.R, world.D, n_noise=world.n_noise, seq_len=world.T, seed=seed)


def train_stack_scoring_unseen(members: list[StackMember], unseen: Sequence[FactualRecallWorld], d_model: int, *,
                               sample: SampleStack, steps: int, batch_size: int, eval_every: int, n_eval: int,
                               threshold: float, schedule: str, seed: int, done_key=None, log=None, progress=None,
                               device: str | torch.device = "cpu") -> None:
    """:func:`lmsci.train.stacked_assoc.train_stack` (arguments and results as there) that also scores each member
    on ``unseen[i]``, a :class:`FactualRecallWorld` of member ``i``'s shape with an independently drawn fact table:
    its targets on the member's own test sequences (``world.eval_set(n_eval, derive_seed(member.seed, "eval"))``)
    are ``unseen.fact_table[subject, relation]``. Writes ``unseen_best_acc`` and ``unseen_reached_at`` on every
    member (module docstring). Training, early stop and the LR retry rule follow the member's own table only.

    Raises:
        ConfigError: ``unseen`` does not give one world of its member's shape (S, R, D) per member.
        DivergedError: the summed training loss became non-finite.
    """
    if len(unseen) != len(members) or any((u.S, u.R, u.D) != (m.world.S, m.world.R, m.world.D)
                                          for u, m in zip(unseen, members)):
        raise ConfigError("unseen", [repr(u) for u in unseen], "one world of its member's (S, R, D) per member")
    for m in members:
        m.unseen_best_acc, m.unseen_reached_at = 0.0, None
    targets = [u.fact_table[e.subjects, e.relations]
               for u, e in zip(unseen, (m.world.eval_set(n_eval, derive_seed(m.seed, "eval")) for m in members))]
    train_stack(members, d_model, sample=sample, steps=steps, batch_size=batch_size, eval_every=eval_every,
                n_eval=n_eval, threshold=threshold, schedule=schedule, seed=seed, done_key=done_key, log=log,
                progress=progress, device=device, extra_targets=targets)
    for m in members:
        m.unseen_best_acc, m.unseen_reached_at = m.extra_best_acc, m.extra_reached_at
