"""Stacked training of one-layer associative-memory transformers (many sizes, worlds and learning rates).

:func:`train_stack` trains M members -- each a task, a model size (:class:`OneLayerSpec`), a learning rate
and an initialisation seed -- as *one* :class:`~lmsci.models.associative.OneLayerTransformer` stack (the
leading dimension of every weight is the member; members of different sizes are padded and masked, so
each computes exactly its own model). One hand-written Adam step updates all members (weight decay 0,
per-member learning rates, an optional cosine schedule); members leave the stack as soon as they reach
the accuracy threshold. Where the members are same-shaped GPTs, :mod:`lmsci.train.stacked` is the
general tool; this one exists because the associative models differ in size inside one stack.

Moved here from ``lmsci.experiments.knowledge.factual_recall`` (issue 12, item 6) without a change in arithmetic:
the factual-recall results are identical before and after the move.

Source: Nichani, Lee, Bietti, "Understanding Factual Recall in Transformers via Associative Memories",
arXiv 2412.06538, experiments / the official ``run.py`` (AdamW with weight decay 0, fresh batches every
step, early stop once the test accuracy reaches the threshold).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from lmsci.errors import ConfigError, DivergedError
from lmsci.models.associative import OneLayerSpec, OneLayerTransformer
from lmsci.runs import derive_seed


class AssocTask(Protocol):
    """What a member's task offers: ``vocab_size`` and ``n_answers`` (ints) and
    ``eval_set(n, seed)`` returning an object with ``input_ids [n, seq]`` long and ``targets [n]`` long
    (e.g. :class:`lmsci.worlds.factual_recall.FactualRecallWorld`)."""

    vocab_size: int
    n_answers: int

    def eval_set(self, n: int, seed: int) -> Any:
        """``n`` test sequences drawn from ``seed``: ``.input_ids [n, seq]`` long, ``.targets [n]`` long (answer ids)."""
        ...


# sample(worlds, batch_size, generator) -> batch with input_ids [M, batch, seq], targets [M, batch]
SampleStack = Callable[[Sequence[Any], int, torch.Generator], Any]


class StackMember:
    """One training run inside a stack: a task (``world``), a model size, a learning rate, a seed.

    Results are written on it by :func:`train_stack`: ``best_acc`` (max test accuracy over the
    evaluations), ``reached_at`` (first evaluation step at which ``best_acc >= threshold``, or None),
    ``steps_run``, ``final_loss`` (train cross-entropy at the last evaluation, nats).
    ``key`` is the caller's label (any hashable).
    """

    def __init__(self, key: Any, world: AssocTask, spec: OneLayerSpec, lr: float, seed: int):
        self.key, self.world, self.spec, self.lr, self.seed = key, world, spec, lr, seed
        self.best_acc, self.steps_run, self.final_loss = 0.0, 0, float("nan")
        self.reached_at: int | None = None


def _build_stack(members: list[StackMember], d_model: int, device: str | torch.device) -> tuple[OneLayerTransformer, int]:
    """The stacked model of ``members`` (padded to the largest vocabulary and answer set) on ``device``,
    and ``A``, the stack's number of answer logits."""
    V = max(m.world.vocab_size for m in members)
    A = max(m.world.n_answers for m in members)
    specs = [OneLayerSpec(m.spec.n_heads, m.spec.d_head, m.spec.d_mlp, m.world.n_answers, m.world.vocab_size)
             for m in members]
    return OneLayerTransformer(d_model, V, A, specs, seed=[m.seed for m in members]).to(device), A


@torch.no_grad()
def _adam_update(model: OneLayerTransformer, state: dict[str, tuple[torch.Tensor, torch.Tensor]], lr: torch.Tensor,
                 step: int, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> None:
    """One bias-corrected Adam update (weight decay 0) in place, member ``k``'s parameters at learning rate
    ``lr[k]`` (``lr [M]``); ``state`` holds each parameter's first and second moments (updated in place);
    ``step`` is 1-based. Source: Kingma & Ba, arXiv 1412.6980, Algorithm 1."""
    for n, p in model.named_parameters():
        m1, m2 = state[n]
        g = p.grad
        m1.mul_(b1).add_(g, alpha=1 - b1)
        m2.mul_(b2).addcmul_(g, g, value=1 - b2)
        upd = (m1 / (1 - b1**step)) / ((m2 / (1 - b2**step)).sqrt_().add_(eps))
        p.sub_(upd * lr.view(-1, *[1] * (p.dim() - 1)))


def _record_eval(model: OneLayerTransformer, live: list[StackMember], ev_x: torch.Tensor, ev_y: torch.Tensor,
                 losses: torch.Tensor, step: int, threshold: float, log: Any, ex_y: torch.Tensor | None = None) -> None:
    """Test accuracy of every live member (``ev_x [M, n_eval, seq]``, ``ev_y [M, n_eval]``) written on the
    members (``best_acc``, ``steps_run``, ``final_loss`` from ``losses [M]`` nats, ``reached_at``), then ``log``;
    with ``ex_y [M, n_eval]``, the same predictions scored against those targets too (``extra_best_acc``,
    ``extra_reached_at``)."""
    with torch.no_grad():
        pred = model(ev_x).argmax(-1)
        acc = (pred == ev_y).float().mean(1)
        ex_acc = None if ex_y is None else (pred == ex_y).float().mean(1).tolist()
    loss_list = losses.detach().tolist()
    for i, m in enumerate(live):
        m.best_acc = max(m.best_acc, float(acc[i]))
        m.steps_run, m.final_loss = step, loss_list[i]
        if m.best_acc >= threshold and m.reached_at is None:
            m.reached_at = step
        if ex_acc is not None:
            m.extra_best_acc = max(m.extra_best_acc, ex_acc[i])
            if m.extra_best_acc >= threshold and m.extra_reached_at is None:
                m.extra_reached_at = step
    if log is not None:
        log(step, live, acc.tolist(), loss_list)


def train_stack(members: list[StackMember], d_model: int, *, sample: SampleStack, steps: int, batch_size: int,
                eval_every: int, n_eval: int, threshold: float, schedule: str, seed: int, done_key=None, log=None,
                progress=None, device: str | torch.device = "cpu",
                extra_targets: Sequence[torch.Tensor] | None = None) -> None:
    """Train every member with AdamW (weight decay 0) as one stacked computation.

    A member stops (and leaves the stack) as soon as its test accuracy reaches ``threshold``; if
    ``done_key(member)`` is given, all members sharing that key stop together (the LR retry rule:
    one learning rate storing the facts is enough). Results are written on the members:
    ``best_acc`` (max test accuracy over evaluations, as in the official ``run.py``),
    ``reached_at`` (step or None), ``steps_run``, ``final_loss`` (train CE, nats).

    Args:
        members: the runs; every member's ``world.eval_set(n_eval, derive_seed(member.seed, "eval"))``
            is its test set.
        d_model: the shared residual width of the stack.
        sample: ``sample(worlds, batch_size, generator)`` -> a batch with ``input_ids [M, batch, seq]``
            long and ``targets [M, batch]`` long, one slice per live member (e.g.
            :func:`lmsci.worlds.factual_recall.sample_stack`); its randomness only from ``generator``.
        steps, batch_size: optimizer steps and sequences per member per step.
        eval_every: evaluate (test accuracy, early stop, ``log``) every this many steps and at the last.
        n_eval: test sequences per member. threshold: test accuracy that counts as stored.
        schedule: ``"cosine"`` (to 0 over ``steps``) or anything else for a constant learning rate.
        seed: seeds the one batch generator of the stack.
        done_key: see above. log: ``log(step, live_members, accs, losses)`` after each evaluation.
        progress: a tqdm-like bar (``update``, ``close``).
        device: where the stack, its optimizer state and every batch live (``ctx.device``; the batches
            and the initial weights are drawn on the CPU from their seeds, so a run does not depend
            on the device beyond float rounding).
        extra_targets: optional, one ``[n_eval]`` long tensor per member: other answers for the member's own test
            sequences (e.g. a null arm's independently drawn fact table). Each evaluation scores the same
            predictions against them too and writes ``extra_best_acc`` and ``extra_reached_at`` on every member;
            training, early stop and ``done_key`` follow the member's own targets only.

    Source: arXiv 2412.06538 experiments / official ``run.py`` (AdamW, fresh batches, early stop).

    Raises:
        DivergedError: the summed training loss of the stack became non-finite (the whole stack is
            recorded as diverged).
        ConfigError: ``extra_targets`` does not give one ``[n_eval]`` tensor per member.
    """
    if extra_targets is not None:
        if len(extra_targets) != len(members) or any(tuple(t.shape) != (n_eval,) for t in extra_targets):
            raise ConfigError("extra_targets", [tuple(t.shape) for t in extra_targets],
                              f"one [n_eval] = [{n_eval}] tensor per member ({len(members)})")
        for m in members:
            m.extra_best_acc, m.extra_reached_at = 0.0, None
    if not members:
        return
    model, A = _build_stack(members, d_model, device)
    live = list(members)
    gen = torch.Generator().manual_seed(int(seed))  # batches are drawn on the CPU, then moved
    evals = [m.world.eval_set(n_eval, derive_seed(m.seed, "eval")) for m in live]
    ev_x = torch.stack([e.input_ids for e in evals]).to(device)
    ev_y = torch.stack([e.targets for e in evals]).to(device)
    ex_y = None if extra_targets is None else torch.stack(list(extra_targets)).to(device)
    state = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p in model.named_parameters()}
    base_lr = torch.tensor([m.lr for m in live], device=device)
    done_key = done_key or (lambda m: id(m))
    for step in range(1, steps + 1):
        if schedule == "cosine":
            lr = base_lr * 0.5 * (1 + math.cos(math.pi * (step - 1) / steps))
        else:
            lr = base_lr
        batch = sample([m.world for m in live], batch_size, gen)
        logits = model(batch.input_ids.to(device))  # [M, B, A]
        M = len(live)
        losses = torch.nn.functional.cross_entropy(logits.reshape(M * batch_size, A), batch.targets.to(device).reshape(-1),
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
        _record_eval(model, live, ev_x, ev_y, losses, step, threshold, log, ex_y)
        finished = {done_key(m) for m in live if m.reached_at is not None}
        keep = [i for i, m in enumerate(live) if done_key(m) not in finished]
        if not keep:
            break
        if len(keep) < len(live):
            model.keep(keep)
            idx = torch.tensor(keep, device=device)
            state = {n: (a[idx].clone(), b[idx].clone()) for n, (a, b) in state.items()}
            live = [live[i] for i in keep]
            base_lr, ev_x, ev_y = base_lr[idx], ev_x[idx], ev_y[idx]
            ex_y = None if ex_y is None else ex_y[idx]
    if progress is not None:
        progress.close()
