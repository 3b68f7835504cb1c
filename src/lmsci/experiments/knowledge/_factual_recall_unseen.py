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

import math
from collections.abc import Sequence
from typing import Any

import torch

from lmsci.errors import ConfigError, DivergedError
from lmsci.runs import derive_seed
from lmsci.train.stacked_assoc import SampleStack, StackMember, _adam_update, _build_stack
from lmsci.worlds.factual_recall import FactualRecallWorld


def unseen_world(world: FactualRecallWorld, seed: int) -> FactualRecallWorld:
    """A world of ``world``'s shape (S, R, D, n_noise, seq_len: the same vocabulary and format) whose fact table is
    drawn independently from ``seed``."""
    return FactualRecallWorld(world.S, world.R, world.D, n_noise=world.n_noise, seq_len=world.T, seed=seed)


def _evaluate(model, live: list[StackMember], ev_x: torch.Tensor, ev_y: torch.Tensor, un_y: torch.Tensor,
              losses: torch.Tensor, step: int, threshold: float, log: Any) -> None:
    """As ``stacked_assoc._record_eval`` (``best_acc``, ``steps_run``, ``final_loss``, ``reached_at``, ``log``),
    from one forward pass whose predictions ``[M, n_eval]`` are also scored against the unseen targets ``un_y``."""
    with torch.no_grad():
        pred = model(ev_x).argmax(-1)
        acc = (pred == ev_y).float().mean(1)
        un_acc = (pred == un_y).float().mean(1).tolist()
    loss_list = losses.detach().tolist()
    for i, m in enumerate(live):
        m.best_acc = max(m.best_acc, float(acc[i]))
        m.steps_run, m.final_loss = step, loss_list[i]
        if m.best_acc >= threshold and m.reached_at is None:
            m.reached_at = step
        m.unseen_best_acc = max(m.unseen_best_acc, un_acc[i])
        if m.unseen_best_acc >= threshold and m.unseen_reached_at is None:
            m.unseen_reached_at = step
    if log is not None:
        log(step, live, acc.tolist(), loss_list)


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
    if not members:
        return
    model, A = _build_stack(members, d_model, device)
    live = list(members)
    gen = torch.Generator().manual_seed(int(seed))  # batches are drawn on the CPU, then moved
    evals = [m.world.eval_set(n_eval, derive_seed(m.seed, "eval")) for m in live]
    ev_x = torch.stack([e.input_ids for e in evals]).to(device)
    ev_y = torch.stack([e.targets for e in evals]).to(device)
    un_y = torch.stack([u.fact_table[e.subjects, e.relations] for u, e in zip(unseen, evals)]).to(device)
    state = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p in model.named_parameters()}
    base_lr = torch.tensor([m.lr for m in live], device=device)
    done_key = done_key or (lambda m: id(m))
    for step in range(1, steps + 1):
        lr = base_lr * 0.5 * (1 + math.cos(math.pi * (step - 1) / steps)) if schedule == "cosine" else base_lr
        batch = sample([m.world for m in live], batch_size, gen)
        logits = model(batch.input_ids.to(device))  # [M, B, A]
        M = len(live)
        losses = torch.nn.functional.cross_entropy(logits.reshape(M * batch_size, A),
                                                   batch.targets.to(device).reshape(-1),
                                                   reduction="none").view(M, batch_size).mean(1)
        total = losses.sum()
        if not torch.isfinite(total):
            raise DivergedError(step, float(total.detach()))
        for p in model.parameters():
            p.grad = None
        total.backward()
        _adam_update(model, state, lr, step)
        if progress is not None:
            progress.update(1)
        if step % eval_every and step != steps:
            continue
        _evaluate(model, live, ev_x, ev_y, un_y, losses, step, threshold, log)
        finished = {done_key(m) for m in live if m.reached_at is not None}
        keep = [i for i, m in enumerate(live) if done_key(m) not in finished]
        if not keep:
            break
        if len(keep) < len(live):
            model.keep(keep)
            idx = torch.tensor(keep, device=device)
            state = {n: (a[idx].clone(), b[idx].clone()) for n, (a, b) in state.items()}
            live = [live[i] for i in keep]
            base_lr, ev_x, ev_y, un_y = base_lr[idx], ev_x[idx], ev_y[idx], un_y[idx]
    if progress is not None:
        progress.close()
