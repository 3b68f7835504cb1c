"""Stacked training: K same-shaped models trained as one computation.

``train_stacked(models, get_batch, cfg, seeds=[...])`` trains K models of one architecture (lmsci's
:class:`~lmsci.models.gpt.GPT` or any ``nn.Module`` mapping ``[batch, seq]`` ids to logits) with the
recipe of :func:`lmsci.train.trainer.train`, but with one step for all of them:

* the K parameter sets are stacked along a new leading dimension (``[K, *shape]``) with
  :func:`torch.func.stack_module_state`, and one forward/backward runs the K models at once through
  :func:`torch.func.vmap` over :func:`torch.func.functional_call` of a copy of the model -- every
  matmul becomes one batched matmul over the K members (lmsci GPT attention switches to its explicit
  matmul/softmax path, ``Attention.explicit``: on CPU, scaled_dot_product_attention has no batching rule
  and vmap would loop over the members there);
* one optimizer step updates the stack: AdamW is element-wise, so AdamW over the stacked tensors is
  K independent AdamWs; the weight-decay grouping is decided on each member's own shape (decay for
  ``ndim >= 2``, none for biases and norm gains: :func:`lmsci.train.trainer.make_optimizer`);
* gradient clipping is by each member's own global norm (not the stack's), with the arithmetic of
  :func:`torch.nn.utils.clip_grad_norm_` (``coef = min(1, max_norm / (norm + 1e-6))``);
* the learning rate follows :func:`lmsci.train.trainer.lr_at` (warmup + cosine), the same for all;
* member k draws its batches through ``get_batch(step, generator_k)`` with its own
  ``torch.Generator`` seeded from ``seeds[k]``, exactly as ``train(model_k, ..., seed=seeds[k])``;
* every member gets its own history (step, loss, lr, grad_norm, tokens_seen, tokens_per_s).

Member k's losses and weights equal those of ``train(models[k], get_batch, cfg, seed=seeds[k])`` to
float rounding (tested: relative 1e-5 on every loss over 20 steps). Differences are rounding only:
batched and single matmuls sum in different orders, and the loss is computed from the logits with
``F.cross_entropy`` rather than the trainer's fused head (:mod:`lmsci.models.loss`, whose custom
autograd function has no vmap rule).

Divergence: a non-finite loss of member k marks that member diverged at that step
(``StackedResult.diverged[k] = DivergedError(step, loss)``); its weights are copied out as they are
after that step (what ``train`` leaves behind when it raises), its history ends there, and the other
members train on unaffected (every operation is per member, so a NaN cannot cross members). Training
stops early only when every member has diverged. :func:`train_stacked` never raises DivergedError
itself; the caller decides (``StackedResult.raise_for(k)`` raises member k's error).

Not supported: dropout (``ConfigError``: vmap would draw other random masks than K separate runs);
checkpoints (there is no ``checkpoint_dir``: an interrupted stack reruns from step 0, to the same
results). Tested on CPU only; the code path is device-agnostic (``cfg.device``).

Source: the technique of PyTorch's "Model ensembling" tutorial (torch.func: ``stack_module_state``
+ ``vmap`` over ``functional_call``, https://pytorch.org/tutorials/intermediate/ensembling.html)
and the torch.func API docs (https://pytorch.org/docs/stable/func.html), applied here to training.
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state, vmap

from lmsci.errors import ConfigError, DivergedError
from lmsci.models.loss import IGNORE_INDEX
from lmsci.train.compile import maybe_compile
from lmsci.train.trainer import GetBatch, TrainConfig, TrainResult, _autocast, _logits, lr_at

EvalFn = Callable[[nn.Module], dict[str, float]]
LogFn = Callable[[dict[str, Any]], None]


@dataclass
class StackedResult:
    """What :func:`train_stacked` returns.

    Attributes:
        members: one :class:`~lmsci.train.trainer.TrainResult` per member, in input order (a
            diverged member's history ends at its diverging step).
        diverged: ``{k: DivergedError(step, loss)}`` for each member whose loss became non-finite.
        steps: optimizer steps the stack ran.
        tokens_per_s: all members' target tokens per second of training steps (the stack's throughput).
        seconds: wall time of the call.
    """

    members: list[TrainResult] = field(default_factory=list)
    diverged: dict[int, DivergedError] = field(default_factory=dict)
    steps: int = 0
    tokens_per_s: float = 0.0
    seconds: float = 0.0

    def raise_for(self, k: int) -> None:
        """Raise member ``k``'s :class:`DivergedError` if it diverged; otherwise do nothing."""
        if k in self.diverged:
            raise self.diverged[k]

    def raise_first(self) -> None:
        """Raise the :class:`DivergedError` of the first member (lowest index) that diverged; otherwise do
        nothing (for a caller in which any divergence fails the whole group)."""
        if self.diverged:
            raise self.diverged[min(self.diverged)]


def _check_same_shape(models: Sequence[nn.Module]) -> None:
    ref = [(n, tuple(p.shape)) for n, p in models[0].named_parameters()]
    for i, m in enumerate(models[1:], 1):
        mine = [(n, tuple(p.shape)) for n, p in m.named_parameters()]
        if mine != ref:
            raise ConfigError(f"models[{i}]", "a different architecture",
                              "models of one shape (same parameter names and shapes as models[0])")
    if type(models[0]) is not type(models[-1]) or any(type(m) is not type(models[0]) for m in models):
        raise ConfigError("models", "mixed module classes", "K instances of one class")


def _dropout_of(model: nn.Module) -> float:
    cfg = getattr(model, "cfg", None)
    p = float(getattr(cfg, "dropout", 0.0) or 0.0)
    return max([p] + [float(m.p) for m in model.modules() if isinstance(m, nn.Dropout)])


class StackedModels:
    """K same-shaped models as one stacked function (the ensembling recipe of torch.func).

    Args:
        models: K modules of one class and parameter layout (tied weights are kept tied: the
            stacked dict holds a tied tensor once, and ``functional_call`` re-ties it).
        device: where the stacked parameters live (default: where ``models[0]``'s parameters are).

    Attributes:
        params: ``{name: tensor [K, *shape]}``, leaf tensors with ``requires_grad``.
        buffers: ``{name: tensor [K, *shape]}``.
        base: a copy of ``models[0]`` whose code (not values) runs every member.
    """

    def __init__(self, models: Sequence[nn.Module], device: str | torch.device | None = None):
        if len(models) == 0:
            raise ConfigError("models", "[]", "at least one model")
        _check_same_shape(models)
        self.models = list(models)
        self.k = len(models)
        if device is None:
            device = next(iter(models[0].parameters())).device
        params, buffers = stack_module_state(list(models))
        self.params = {n: p.detach().to(device).requires_grad_(True) for n, p in params.items()}
        self.buffers = {n: b.to(device) for n, b in buffers.items()}
        # a copy whose own values are never read (functional_call swaps in the stacked ones); not moved
        # to "meta" as in the tutorial, because Module.to("meta") unties tied weights (tie_embeddings)
        self.base = copy.deepcopy(models[0]).to(device)
        self.base.train()
        for m in self.base.modules():  # batchable attention under vmap (lmsci GPT: Attention.explicit)
            if hasattr(m, "explicit") and hasattr(m, "hook_scores"):
                m.explicit = True

    def _member_nll(self, params: dict, buffers: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = _logits(functional_call(self.base, (params, buffers), (x,)))
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1),
                               ignore_index=IGNORE_INDEX, reduction="sum")

    def sum_nll(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Summed next-token cross-entropy (nats) per member.

        Args:
            x: input ids ``[K, batch, seq]`` long (member k's batch is ``x[k]``).
            y: targets ``[K, batch, seq]`` long, ``-100`` ignored.

        Returns:
            ``[K]`` float tensor, member k's loss summed over its non-ignored targets.
        """
        with warnings.catch_warnings():  # CPU SDPA has no batching rule: vmap loops over K there
            warnings.filterwarnings("ignore", message=".*batching rule.*")
            return vmap(self._member_nll)(self.params, self.buffers, x, y)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """``x [K, batch, seq]`` -> logits ``[K, batch, seq, vocab_size]`` (member k on ``x[k]``)."""
        def one(params, buffers, xi):
            return _logits(functional_call(self.base, (params, buffers), (xi,)))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*batching rule.*")
            return vmap(one)(self.params, self.buffers, x)

    def member_norms(self) -> torch.Tensor:
        """Each member's global gradient norm ``[K]`` (L2 over all its parameters' gradients)."""
        sq = [p.grad.detach().float().pow(2).reshape(self.k, -1).sum(1)
              for p in self.params.values() if p.grad is not None]
        return torch.stack(sq).sum(0).sqrt()

    @torch.no_grad()
    def write_back(self, k: int, model: nn.Module | None = None) -> nn.Module:
        """Copy member ``k``'s stacked parameters and buffers into ``model`` (default ``models[k]``)."""
        model = self.models[k] if model is None else model
        for n, p in model.named_parameters():
            p.copy_(self.params[n][k])
        for n, b in model.named_buffers():
            if n in self.buffers:
                b.copy_(self.buffers[n][k])
        return model


def make_stacked_optimizer(stack: StackedModels, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW over the stacked tensors with :func:`lmsci.train.trainer.make_optimizer`'s grouping,
    decided on the member shape (``ndim - 1 >= 2``: decay; biases and norm gains: none). Fused, as
    the single-model trainer. Element-wise, so it equals K separate AdamWs."""
    params = list(stack.params.values())
    decay = [p for p in params if p.dim() - 1 >= 2]
    no_decay = [p for p in params if p.dim() - 1 < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), fused=True)


@dataclass
class _StackRun:
    """The state one :func:`train_stacked` call shares between its phases (K members)."""

    stack: StackedModels
    opt: torch.optim.AdamW
    cfg: TrainConfig
    device: str
    gens: list[torch.Generator]
    get_batches: list[GetBatch]
    eval_fns: list[EvalFn | None]
    logs: list[LogFn | None]
    shared_log: bool
    result: StackedResult
    alive: list[bool]
    tokens_seen: list[int]
    step: int = 0
    sum_nll: Any = None  # ``stack.sum_nll`` or its torch.compile wrapper (``TrainConfig.compile``; set by _start_stack)

    def emit(self, k: int, rec: dict[str, Any]) -> None:
        """Append ``rec`` to member ``k``'s history and pass it to its log (with ``member`` on a shared log)."""
        self.result.members[k].history.append(rec)
        if self.logs[k] is not None:
            self.logs[k]({**rec, "member": k} if self.shared_log else dict(rec))

    def evaluate(self) -> None:
        """Write each live member with an ``eval_fn`` back into its model and emit its metrics (eval mode,
        no gradients)."""
        for k in range(self.stack.k):
            if not self.alive[k] or self.eval_fns[k] is None:
                continue
            model = self.stack.write_back(k)
            model.eval()
            with torch.no_grad(), _autocast(self.device, self.cfg.precision):
                metrics = self.eval_fns[k](model)
            model.train()
            self.emit(k, {"step": self.step, **{n: float(v) if isinstance(v, (int, float)) else v
                                                for n, v in metrics.items()}})


def _per_member(obj: Any, name: str, K: int) -> list:
    """``obj`` repeated K times when it is None or one callable, else its K items.

    Raises:
        ConfigError: a sequence whose length is not K (named ``name``).
    """
    if obj is None or callable(obj):
        return [obj] * K
    if len(obj) != K:
        raise ConfigError(name, len(obj), f"one callable or one per model ({K})")
    return list(obj)


def _start_stack(models: Sequence[nn.Module], get_batch: Any, cfg: TrainConfig, seeds: Sequence[int],
                 eval_fn: Any, log: Any) -> _StackRun:
    """Check the arguments, move the models to ``cfg.device``, stack them, build the optimizer and the K
    batch generators (``torch.Generator().manual_seed(seeds[k])``).

    Raises:
        ConfigError: as :func:`train_stacked` (seeds, callables per member, dropout > 0, shapes).
    """
    from lmsci.runs import resolve_device

    K = len(models)
    if len(seeds) != K:
        raise ConfigError("seeds", len(seeds), f"one seed per model ({K})")
    get_batches = _per_member(get_batch, "get_batch", K)
    eval_fns = _per_member(eval_fn, "eval_fn", K)
    shared_log = callable(log)
    logs = _per_member(log, "log", K)
    drop = max(_dropout_of(m) for m in models)
    if drop > 0:
        raise ConfigError("dropout", drop, "0.0 (stacked training would draw other dropout masks than "
                          "separate runs; train such models with lmsci.train.trainer.train)")
    device = resolve_device(cfg.device)
    for m in models:
        m.to(device)
    stack = StackedModels(models, device)
    opt = make_stacked_optimizer(stack, cfg)
    gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
    result = StackedResult(members=[TrainResult() for _ in range(K)])
    return _StackRun(stack, opt, cfg, device, gens, get_batches, eval_fns, logs, shared_log, result,
                     alive=[True] * K, tokens_seen=[0] * K, sum_nll=maybe_compile(stack.sum_nll, cfg.compile, device))


def _stacked_step(run: _StackRun, lr: float) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """One optimizer step of the whole stack at ``run.step`` (not advanced here): draw every member's
    micro-batches in ``train``'s order, accumulate token-weighted gradients, clip per member, step.

    Returns:
        ``(loss_sum [K] float64 nats summed over targets, per-member gradient norms [K], target tokens per member)``.

    Raises:
        ConfigError: the members' batches differ in shape.
    """
    stack, cfg, device, K = run.stack, run.cfg, run.device, run.stack.k
    for group in run.opt.param_groups:
        group["lr"] = lr
    # member k's micro-batches, drawn in the order train() draws them
    micro = [[run.get_batches[k](run.step, run.gens[k]) for _ in range(cfg.grad_accum)] for k in range(K)]
    n_tok = [sum(int((y != IGNORE_INDEX).sum()) for _, y in micro[k]) for k in range(K)]
    denom = torch.tensor([max(n, 1) for n in n_tok], dtype=torch.float32, device=device)
    for p in stack.params.values():
        p.grad = None
    loss_sum = torch.zeros(K, dtype=torch.float64)
    for a in range(cfg.grad_accum):
        xs, ys = [micro[k][a][0] for k in range(K)], [micro[k][a][1] for k in range(K)]
        if any(x.shape != xs[0].shape for x in xs) or any(y.shape != ys[0].shape for y in ys):
            raise ConfigError("get_batch", [tuple(x.shape) for x in xs],
                              "batches of one shape for every member of a stack")
        x = torch.stack(xs).to(device, non_blocking=True)
        y = torch.stack(ys).to(device, non_blocking=True)
        with _autocast(device, cfg.precision):
            s = run.sum_nll(x, y)  # [K]
        (s / denom).sum().backward()
        loss_sum += s.detach().double().cpu()
    norms = stack.member_norms()  # [K]
    if cfg.grad_clip > 0:
        coef = torch.clamp(cfg.grad_clip / (norms + 1e-6), max=1.0)
        with torch.no_grad():
            for p in stack.params.values():
                if p.grad is not None:
                    p.grad.mul_(coef.to(p.grad.dtype).view(-1, *[1] * (p.dim() - 1)))
    run.opt.step()
    return loss_sum, norms, n_tok


def _record_members(run: _StackRun, lr: float, loss_sum: torch.Tensor, norms: torch.Tensor, n_tok: list[int],
                    tok_window: list[int], t_window: float) -> int:
    """After step ``run.step``: count each live member's tokens, mark a member with a non-finite loss diverged
    (weights written back, history ended), and emit the live members' training records on the log schedule.

    Returns:
        the target tokens the live members trained on in this step (for the stack's throughput).
    """
    cfg, step = run.cfg, run.step
    norm_list = norms.tolist()
    tok_train = 0
    for k in range(run.stack.k):
        if not run.alive[k]:
            continue
        run.tokens_seen[k] += n_tok[k]
        tok_window[k] += n_tok[k]
        tok_train += n_tok[k]
        loss = float(loss_sum[k]) / max(n_tok[k], 1)
        if not math.isfinite(loss):
            run.alive[k] = False
            run.result.diverged[k] = DivergedError(step, loss)
            run.stack.write_back(k)
            run.result.members[k].steps, run.result.members[k].tokens_seen = step, run.tokens_seen[k]
            continue
        if step % cfg.log_every == 0 or step == cfg.steps:
            run.emit(k, {"step": step, "loss": loss, "lr": lr, "grad_norm": norm_list[k],
                         "tokens_seen": run.tokens_seen[k], "tokens_per_s": tok_window[k] / max(t_window, 1e-9)})
    return tok_train


def _finish_stack(run: _StackRun, t_train: float, tok_train: int, t_start: float) -> StackedResult:
    """Write the live members back into their models and fill each member's ``steps``, ``tokens_seen``,
    ``final`` and the stack's ``steps``, ``tokens_per_s`` (tokens/s of training steps) and ``seconds``."""
    result = run.result
    for k in range(run.stack.k):
        r = result.members[k]
        if run.alive[k]:
            run.stack.write_back(k)
            r.steps, r.tokens_seen = run.step, run.tokens_seen[k]
        train_recs = [h for h in r.history if "grad_norm" in h]
        eval_recs = [h for h in r.history if "grad_norm" not in h]
        r.final = {**(train_recs[-1] if train_recs else {}), **(eval_recs[-1] if eval_recs else {})}
    result.steps = run.step
    result.tokens_per_s = tok_train / max(t_train, 1e-9)
    result.seconds = time.perf_counter() - t_start
    for r in result.members:
        r.seconds = result.seconds
    return result


def train_stacked(
    models: Sequence[nn.Module],
    get_batch: GetBatch | Sequence[GetBatch],
    cfg: TrainConfig,
    *,
    seeds: Sequence[int],
    eval_fn: EvalFn | Sequence[EvalFn] | None = None,
    log: LogFn | Sequence[LogFn | None] | None = None,
    progress: Any = None,
) -> StackedResult:
    """Train K same-shaped models in place as one stacked computation (see the module docstring).

    Args:
        models: K modules of one class and parameter layout, each mapping input ids
            ``[batch, seq]`` long to logits ``[batch, seq, vocab_size]`` (or ``.logits``); moved to
            ``cfg.device``; their weights are the trained ones on return.
        get_batch: one ``get_batch(step, generator) -> (input_ids [batch, seq], targets [batch, seq])``
            for all members, or one per member; every member's batches must have the same shape.
        cfg: the :class:`~lmsci.train.trainer.TrainConfig`, shared by all members. ``eval_every``,
            ``log_every``, ``grad_accum``, ``precision`` act as in ``train``; ``checkpoint_every``
            and ``tensorboard`` are ignored.
        seeds: K seeds; member k's batch generator is ``torch.Generator().manual_seed(seeds[k])``.
        eval_fn: ``eval_fn(model) -> dict`` (one for all, or one per member), called with member
            k's weights written into ``models[k]``, in eval mode without gradients, every
            ``cfg.eval_every`` steps and after the last step.
        log: receives member k's records (one callable gets every member's records with an added
            ``member`` key; a sequence gives each member its own, records as ``train`` emits them).
        progress: a tqdm-like bar, updated once per stacked step.

    Returns:
        :class:`StackedResult`.

    Raises:
        ConfigError: fewer seeds (or batch functions, eval functions, logs) than models, models of
            different shapes, dropout > 0, or batches of different shapes across members.
    """
    t_start = time.perf_counter()
    run = _start_stack(models, get_batch, cfg, seeds, eval_fn, log)
    K = run.stack.k
    t_window, tok_window, t_train, tok_train = 0.0, [0] * K, 0.0, 0
    while run.step < cfg.steps and any(run.alive):
        t_step = time.perf_counter()
        lr = lr_at(run.step, cfg)
        loss_sum, norms, n_tok = _stacked_step(run, lr)
        run.step += 1
        dt = time.perf_counter() - t_step
        t_window += dt
        t_train += dt
        tok_train += _record_members(run, lr, loss_sum, norms, n_tok, tok_window, t_window)
        if run.step % cfg.log_every == 0 or run.step == cfg.steps:
            t_window, tok_window = 0.0, [0] * K
            if progress is not None:
                losses = [r.history[-1]["loss"] for r in run.result.members if r.history and "loss" in r.history[-1]]
                if losses:
                    progress.set_postfix(loss=f"{sum(losses) / len(losses):.4f}", refresh=False)
        if progress is not None:
            progress.update(1)
        if run.step == cfg.steps or (cfg.eval_every and run.step % cfg.eval_every == 0):
            run.evaluate()
    return _finish_stack(run, t_train, tok_train, t_start)
