"""Full-batch AdamW on modular arithmetic: one model at a time (:func:`train_modular`, the reference) and K models as
one stack (:func:`train_modular_stacked`, what the grokking experiments train with).

Source: Nanda, Chan, Lieberum, Smith, Steinhardt, "Progress measures for grokking via mechanistic
interpretability", arXiv 2301.05217 (ICLR 2023), sec. 3 and their code: Nanda et al.'s one-layer transformer
(:func:`lmsci.models.modular.grokking_model`), full-batch AdamW lr 1e-3, weight decay 1, betas (0.9, 0.98), linear
warmup over 10 steps; the loss is the cross-entropy over the ``p + 1`` output logits computed in float64
(``loss_dtype``; as Nanda's ``cross_entropy_high_precision``; the model runs in float32), and accuracy reads the
``p`` residue logits. Power, Burda, Edwards, Babuschkin, Misra, arXiv 2201.02177, sec. 3 (training until
validation accuracy 99%).

Stacked training: every member of a stack (for example the seeds of weight-decay runs and of wd = 0 controls, or
the fractions of a sweep) is one model with its own data, init and weight decay; the step computes
:func:`lmsci.models.modular.stacked_answer_logits` (per-token key/value/score tables, every weight with a leading
member dimension) and AdamW runs over the stacked tensors with each member's own decoupled weight decay. Seeds,
splits and inits are those of :func:`train_modular`, whose curves it reproduces to float rounding (tested). On one
CPU thread the per-step cost is the MLP's GEMMs: stacking itself saves little there; the tables halve the FLOPs a
step (``benchmarks/bench_grokking.py``). On a GPU the stack turns K small launches into one.

The trainers read their hyperparameters from a :class:`ModularSpec` (or any object with its fields, such as an
experiment's configuration: :meth:`ModularSpec.of`); they import no experiment.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from lmsci.errors import ConfigError, DivergedError
from lmsci.models.modular import answer_logits, grokking_model, stacked_answer_logits
from lmsci.runs import derive_seed
from lmsci.worlds.modular import ModularData, modular_data

__all__ = ["ModularSpec", "ModularMember", "train_modular", "train_modular_stacked", "modular_member",
           "checkpoint_steps"]


@dataclass(frozen=True)
class ModularSpec:
    """Model and optimiser of modular training (defaults: Nanda et al.'s code, arXiv 2301.05217 sec. 3).

    Attributes:
        d_model, n_heads, d_mlp: the one-layer transformer's widths (:func:`~lmsci.models.modular.grokking_model`).
        lr: AdamW learning rate; beta1, beta2: its betas; warmup_steps: linear warmup of the learning rate.
        loss_dtype: dtype of the logits in the training loss (``"float64"`` or ``"float32"``).
        eval_every: test loss/accuracy every this many steps (and at the last step).
        reach_acc: the accuracy that counts as reached (training: ``t_mem``; test: a member that stops at
            generalisation stops at the first evaluation at or above it).
    """

    d_model: int = 128
    n_heads: int = 4
    d_mlp: int = 512
    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.98
    warmup_steps: int = 10
    loss_dtype: str = "float64"
    eval_every: int = 10
    reach_acc: float = 0.99

    @classmethod
    def of(cls, cfg: Any, **override: Any) -> ModularSpec:
        """The spec of ``cfg``: a :class:`ModularSpec` as it is, or any object (an experiment configuration) whose
        attributes of the same names are read (missing ones keep their defaults); ``override`` sets fields.

        Raises:
            ConfigError: ``loss_dtype`` is not float64 or float32.
        """
        if isinstance(cfg, cls) and not override:
            return cfg
        vals = {f.name: getattr(cfg, f.name) for f in fields(cls) if hasattr(cfg, f.name)}
        spec = cls(**{**vals, **override})
        if spec.loss_dtype not in ("float64", "float32"):
            raise ConfigError("loss_dtype", spec.loss_dtype, "float64 or float32")
        return spec

    @property
    def torch_loss_dtype(self) -> torch.dtype:
        """``loss_dtype`` as a torch dtype."""
        return torch.float64 if self.loss_dtype == "float64" else torch.float32


def train_modular(cfg: ModularSpec | Any, *, p: int, op: str, train_frac: float, weight_decay: float, steps: int,
                  seed: int, checkpoints: list[int] | None = None, stop_at_gen: bool = False, ctx: Any = None
                  ) -> dict:
    """Full-batch AdamW on one modular task: the single-model reference.

    One :class:`~lmsci.models.gpt.GPT` through :func:`~lmsci.models.modular.answer_logits`,
    ``torch.optim.AdamW`` with the decay in its update and a ``LambdaLR`` warmup. The experiments train with
    :func:`train_modular_stacked` (all points of a run as one stack); this function is what that is tested
    against (same seeds -> same curves to float rounding) and what ``benchmarks/bench_grokking.py`` times as
    "K x single".

    Args:
        cfg: a :class:`ModularSpec` or an object with its fields (:meth:`ModularSpec.of`).
        p, op, train_frac: the task (:func:`lmsci.worlds.modular.modular_data`); its split seed is
            ``derive_seed(seed, "split")``, the init seed ``derive_seed(seed, "init")``.
        weight_decay: decoupled AdamW weight decay; steps: full-batch steps.
        checkpoints: steps at which the state dict is kept.
        stop_at_gen: stop at the first evaluation with test accuracy >= ``reach_acc``.
        ctx: an optional point context (``device``, ``progress(total, desc)``, ``log(**row)``; e.g.
            :class:`lmsci.contract.PointContext`); without it the CPU, no progress and no log.

    Returns:
        ``{"data", "model", "curve" (DataFrame: step, train_loss, train_acc, test_loss, test_acc, weight_norm),
        "t_mem" (first step with training accuracy >= ``reach_acc``, measured every step), "checkpoints"
        ({step: state}), "steps_run"}``.

    Raises:
        DivergedError: a non-finite training loss.
    """
    spec = ModularSpec.of(cfg)
    data = modular_data(p, op, train_frac, seed=derive_seed(seed, "split"))
    dev = torch.device(ctx.device) if ctx is not None else torch.device("cpu")
    # initialised on the CPU (nanda_init's generator, identical on every device), then moved
    model = grokking_model(p, spec.d_model, spec.n_heads, spec.d_mlp, seed=derive_seed(seed, "init")).to(dev)
    x_tr, y_tr = (t.to(dev) for t in data.train())
    x_te, y_te = (t.to(dev) for t in data.test())
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=weight_decay, betas=(spec.beta1, spec.beta2))
    warm = spec.warmup_steps
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warm, 1.0) if warm else 1.0)
    ldt = spec.torch_loss_dtype
    ck = set(checkpoints or [])
    saved: dict[int, dict] = {}
    rows, t_mem = [], None
    bar = ctx.progress(steps, f"wd={weight_decay:g} frac={train_frac:g}") if ctx else None
    step = 0
    for step in range(steps + 1):
        logits = answer_logits(model, x_tr)
        loss = F.cross_entropy(logits.to(ldt), y_tr)
        if not torch.isfinite(loss):
            raise DivergedError(step, float(loss.detach()))
        tr_acc = float((logits[:, :p].argmax(-1) == y_tr).float().mean())
        if t_mem is None and tr_acc >= spec.reach_acc:
            t_mem = step
        if step in ck:
            saved[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if step % spec.eval_every == 0 or step == steps:
            with torch.no_grad():
                lt = answer_logits(model, x_te)
                te_loss = float(F.cross_entropy(lt.float(), y_te))
                te_acc = float((lt[:, :p].argmax(-1) == y_te).float().mean())
                wn = float(torch.sqrt(sum((w.detach() ** 2).sum() for w in model.parameters())))
            row = {"step": step, "train_loss": float(loss.detach()), "train_acc": tr_acc, "test_loss": te_loss,
                   "test_acc": te_acc, "weight_norm": wn}
            rows.append(row)
            if ctx is not None:
                ctx.log(**row)
            if stop_at_gen and te_acc >= spec.reach_acc:
                break
        if step == steps:
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return {"data": data, "model": model, "curve": pd.DataFrame(rows), "t_mem": t_mem, "checkpoints": saved,
            "steps_run": step}


# ------------------------------------------------------------------------------------------ stacked training


@dataclass
class ModularMember:
    """One model of a stack trained by :func:`train_modular_stacked`.

    Attributes:
        data: its task and train/test split.
        weight_decay: its decoupled AdamW weight decay.
        init_seed: the seed of :func:`~lmsci.models.modular.grokking_model` (``nanda_init``).
        checkpoints: steps at which its parameters are kept (for :func:`lmsci.measure.progress.progress_measures`).
        stop_at_gen: stop this member at the first evaluation with test accuracy >= ``reach_acc`` (0.99).
        log: receives its evaluation rows (``log(**row)``), e.g. ``PointContext.log``.
    """

    data: ModularData
    weight_decay: float
    init_seed: int
    checkpoints: frozenset[int] = frozenset()
    stop_at_gen: bool = False
    log: Callable[..., None] | None = None


def modular_member(prm: dict, ctx: Any, checkpoints: frozenset[int] = frozenset(),
                   stop_at_gen: bool = False) -> ModularMember:
    """A point's member of a stack: its task ``prm["p"], prm["op"], prm["train_frac"]``, its split from
    ``derive_seed(ctx.seed, "split")``, its init from ``derive_seed(ctx.seed, "init")`` (the seeds of
    :func:`train_modular`), its weight decay ``prm["weight_decay"]``, and ``ctx.log`` (``ctx``: a
    :class:`lmsci.contract.PointContext` or anything with ``seed`` and ``log``)."""
    return ModularMember(modular_data(prm["p"], prm["op"], prm["train_frac"], seed=derive_seed(ctx.seed, "split")),
                         weight_decay=float(prm["weight_decay"]), init_seed=derive_seed(ctx.seed, "init"),
                         checkpoints=checkpoints, stop_at_gen=stop_at_gen, log=ctx.log)


def checkpoint_steps(steps: int, n_log: int) -> list[int]:
    """Log-spaced steps in ``[1, steps]`` (``n_log`` of them, deduplicated) plus 0, every ``steps // 40`` and
    ``steps``; sorted."""
    log = np.unique(np.round(np.logspace(0, math.log10(max(steps, 1)), n_log)).astype(int))
    reg = np.arange(0, steps + 1, max(1, steps // 40))
    return sorted(set(int(s) for s in np.concatenate([[0, steps], log, reg]) if 0 <= s <= steps))


def _pad_rows(xs: list[torch.Tensor], ys: list[torch.Tensor], device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
    """Member row sets of different sizes as ``[K, N_max, T]`` ids, ``[K, N_max]`` targets and a ``[K, N_max]``
    validity mask (padding repeats each member's first row, masked out), plus the sizes."""
    n = [int(x.shape[0]) for x in xs]
    N = max(n)
    X = torch.stack([torch.cat([x, x[:1].expand(N - len(x), -1)]) for x in xs]).to(device)
    Y = torch.stack([torch.cat([y, y[:1].expand(N - len(y))]) for y in ys]).to(device)
    mask = (torch.arange(N)[None, :] < torch.tensor(n)[:, None]).to(device)
    return X, Y, mask, n


def _masked_mean(v: torch.Tensor, mask: torch.Tensor, n: list[int]) -> torch.Tensor:
    """Row means over the valid entries, ``[K]`` (a plain mean when nothing is padded)."""
    if all(k == v.shape[1] for k in n):
        return v.mean(1)
    return (v * mask).sum(1) / torch.tensor(n, dtype=v.dtype, device=v.device)


@dataclass
class _Stack:
    """The state of a stack being trained: the members still in it (``alive``: stack slot -> member), their
    stacked parameters, optimizer and padded data, and what each member has recorded so far."""

    spec: ModularSpec
    members: list[ModularMember]
    models: list[Any]
    params: dict[str, torch.Tensor]
    opt: torch.optim.Optimizer
    device: torch.device
    alive: list[int]
    rows: list[list[dict]]
    t_mem: list[int | None]
    saved: list[dict[int, dict]]
    steps_run: list[int]
    diverged: dict[int, DivergedError] = field(default_factory=dict)
    data: tuple = ()

    @property
    def names(self) -> list[str]:
        """The stacked parameters' names (GPT parameter names)."""
        return list(self.params)

    def load_data(self) -> None:
        """The alive members' padded training and test rows and their weight decays (``self.data``)."""
        tr = [self.members[i].data.train() for i in self.alive]
        te = [self.members[i].data.test() for i in self.alive]
        self.data = (_pad_rows([x for x, _ in tr], [y for _, y in tr], self.device),
                     _pad_rows([x for x, _ in te], [y for _, y in te], self.device),
                     torch.tensor([self.members[i].weight_decay for i in self.alive], dtype=torch.float64,
                                  device=self.device))

    def train_loss(self, eq: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits [A, N, V], loss [A])`` of the alive members on their training rows."""
        x_tr, y_tr, m_tr, n_tr = self.data[0]
        logits = stacked_answer_logits(self.params, x_tr, self.spec.n_heads, eq)
        A, N, V = logits.shape
        ce = F.cross_entropy(logits.to(self.spec.torch_loss_dtype).reshape(A * N, V), y_tr.reshape(-1),
                             reduction="none").view(A, N)
        return logits, _masked_mean(ce, m_tr, n_tr)

    def copy_out(self, slot_members: list[int], step: int) -> None:
        """Copy finished members' weights from the stack into their models."""
        with torch.no_grad():
            for i in slot_members:
                j = self.alive.index(i)
                for n, w in self.models[i].named_parameters():
                    w.copy_(self.params[n][j])
                self.steps_run[i] = step


def _new_stack(spec: ModularSpec, members: list[ModularMember], device: str | torch.device) -> _Stack:
    """Build the members' models (on the CPU, then moved), stack their parameters, and a fused AdamW over them
    (``weight_decay=0``: the per-member decay is applied by :func:`lmsci.train.stacked_params.decay_members`)."""
    dev = torch.device(device)
    K = len(members)
    p = members[0].data.p
    models = [grokking_model(p, spec.d_model, spec.n_heads, spec.d_mlp, seed=m.init_seed).to(dev) for m in members]
    names = [n for n, _ in models[0].named_parameters()]
    params = {n: torch.stack([dict(m.named_parameters())[n].detach() for m in models]).requires_grad_(True)
              for n in names}
    opt = torch.optim.AdamW(list(params.values()), lr=spec.lr, betas=(spec.beta1, spec.beta2), weight_decay=0.0,
                            fused=True)
    st = _Stack(spec, members, models, params, opt, dev, list(range(K)), [[] for _ in range(K)], [None] * K,
                [{} for _ in range(K)], [0] * K)
    st.load_data()
    return st


def _record_train(st: _Stack, step: int, logits: torch.Tensor, loss: torch.Tensor, p: int) -> tuple[list, list, list]:
    """Each alive member's training accuracy, ``t_mem`` and checkpoint at ``step``; returns the host copies
    ``(loss_h, correct_h, bad)`` (``bad``: members whose loss is non-finite, recorded as diverged)."""
    _, y_tr, m_tr, n_tr = st.data[0]
    with torch.no_grad():
        correct = ((logits[..., :p].argmax(-1) == y_tr) & m_tr).sum(1)
    loss_h, correct_h = loss.detach().tolist(), correct.tolist()
    bad = [i for j, i in enumerate(st.alive) if not math.isfinite(loss_h[j])]
    for j, i in enumerate(st.alive):
        if i in bad:
            st.diverged[i] = DivergedError(step, loss_h[j])
            continue
        tr_acc = correct_h[j] / n_tr[j]
        if st.t_mem[i] is None and tr_acc >= st.spec.reach_acc:
            st.t_mem[i] = step
        if step in st.members[i].checkpoints:
            st.saved[i][step] = {n: st.params[n][j].detach().clone() for n in st.names}
    return loss_h, correct_h, bad


def _evaluate(st: _Stack, step: int, p: int, eq: int, loss_h: list, correct_h: list, bad: list) -> list[int]:
    """Test loss/accuracy and weight norm of the alive members, a curve row each (logged); returns the members
    that stop here (test accuracy reached with ``stop_at_gen``)."""
    (_, _, _, n_tr), (x_te, y_te, m_te, n_te), _ = st.data
    A = len(st.alive)
    with torch.no_grad():
        lt = stacked_answer_logits(st.params, x_te, st.spec.n_heads, eq)
        Ae, Ne, Ve = lt.shape
        te_loss = _masked_mean(F.cross_entropy(lt.float().reshape(Ae * Ne, Ve), y_te.reshape(-1),
                                               reduction="none").view(Ae, Ne), m_te, n_te).tolist()
        te_correct = ((lt[..., :p].argmax(-1) == y_te) & m_te).sum(1).tolist()
        wn = torch.sqrt(sum(w.detach().pow(2).reshape(A, -1).sum(1) for w in st.params.values())).tolist()
    stop = []
    for j, i in enumerate(st.alive):
        if i in bad:
            continue
        row = {"step": step, "train_loss": loss_h[j], "train_acc": correct_h[j] / n_tr[j],
               "test_loss": te_loss[j], "test_acc": te_correct[j] / n_te[j], "weight_norm": wn[j]}
        st.rows[i].append(row)
        if st.members[i].log is not None:
            st.members[i].log(**row)
        if st.members[i].stop_at_gen and row["test_acc"] >= st.spec.reach_acc:
            stop.append(i)
    return stop


def _check_members(members: list[ModularMember]) -> None:
    """Refuse an empty stack, mixed moduli and rows whose last token is not "=" (ConfigError)."""
    if not members:
        raise ConfigError("members", [], "at least one member")
    p = members[0].data.p
    if any(m.data.p != p for m in members):
        raise ConfigError("members", sorted({m.data.p for m in members}), "one modulus p for every member")
    eq = members[0].data.eq_token
    if any(not bool((m.data.input_ids[:, -1] == eq).all()) for m in members):
        raise ConfigError("members", "rows without '=' last", f"every row ending in the '=' token ({eq})")


def train_modular_stacked(cfg: ModularSpec | Any, members: list[ModularMember], steps: int,
                          device: str | torch.device = "cpu", progress=None) -> list[dict]:
    """Full-batch AdamW on K modular tasks at once: the recipe of :func:`train_modular` for every member, one
    stacked computation per step (the models, optimizer state and data carry a leading member dimension).

    Every member is Nanda et al.'s one-layer transformer (:func:`~lmsci.models.modular.grokking_model` with its
    ``init_seed``, built on the CPU and moved to ``device``) trained on its own training set (sizes may differ:
    shorter sets are padded and masked, so each member's loss is the mean over its own rows), with its own weight
    decay (:func:`lmsci.train.stacked_params.decay_members`; AdamW itself runs with ``weight_decay=0``), the shared
    learning rate, betas and linear warmup. Each step, for every member: the training loss (``loss_dtype``) and
    accuracy from the training logits; its checkpoints; every ``eval_every`` steps and at the last step the test
    loss/accuracy and weight norm; then one AdamW update. A member that stops (``stop_at_gen``) or whose loss is
    non-finite leaves the stack (:func:`lmsci.train.stacked_params.select_members`); the others go on unchanged. Member
    k's curve equals ``train_modular`` on the same data and seeds to float rounding (tested).

    Args:
        cfg: a :class:`ModularSpec` or an object with its fields (:meth:`ModularSpec.of`).
        members: the K members (one modulus ``p``).
        steps: full-batch steps (at most).
        device: torch device of the stack.
        progress: an optional progress bar (``update(1)`` a step, ``close()``).

    Returns:
        one dict per member, as :func:`train_modular`'s (``data``, ``model`` (a GPT holding the final weights),
        ``curve``, ``t_mem``, ``checkpoints``, ``steps_run``) plus ``diverged``: the :class:`DivergedError` of a
        member whose training loss became non-finite (its curve ends there), or None.

    Raises:
        ConfigError: no members, members of different moduli/operations' vocabularies, or rows whose last token
            is not the "=" token.
    """
    from lmsci.train.stacked_params import decay_members, select_members

    spec = ModularSpec.of(cfg)
    _check_members(members)
    p, eq = members[0].data.p, members[0].data.eq_token
    st = _new_stack(spec, members, device)
    warm = spec.warmup_steps
    step = 0
    for step in range(steps + 1):
        logits, loss = st.train_loss(eq)                                               # [A, N, V], [A]
        loss_h, correct_h, bad = _record_train(st, step, logits, loss, p)
        done = list(bad)
        if step % spec.eval_every == 0 or step == steps:
            done += _evaluate(st, step, p, eq, loss_h, correct_h, bad)
        if step == steps:
            break
        if done:
            st.copy_out(done, step)
            keep = [j for j, i in enumerate(st.alive) if i not in done]
            if not keep:
                st.alive = []
                break
            st.params, st.opt = select_members(st.params, st.opt, keep)
            st.alive = [st.alive[j] for j in keep]
            st.load_data()
            # the loss of the kept members, recomputed on the smaller stack (same values; the graph of the old one
            # holds the dropped members' parameters)
            logits, loss = st.train_loss(eq)
        for w in st.params.values():
            w.grad = None
        loss.sum().backward()
        lr = spec.lr * (min((step + 1) / warm, 1.0) if warm else 1.0)  # LambdaLR of train_modular
        decay_members(st.params, lr, st.data[2])
        for g in st.opt.param_groups:
            g["lr"] = lr
        st.opt.step()
        if progress is not None:
            progress.update(1)
    if st.alive:
        st.copy_out(list(st.alive), step)
    if progress is not None:
        progress.close()
    return [{"data": m.data, "model": st.models[i], "curve": pd.DataFrame(st.rows[i]), "t_mem": st.t_mem[i],
             "checkpoints": st.saved[i], "steps_run": st.steps_run[i], "diverged": st.diverged.get(i)}
            for i, m in enumerate(members)]
