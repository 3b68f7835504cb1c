"""Attribution patching: the first-order (gradient) estimate of activation patching for every attention head and
position from one clean forward + backward and one corrupted forward, checked against exact activation patching.

Source: Nanda 2023, "Attribution Patching: Activation Patching At Industrial Scale" (neelnanda.io); Syed, Rager &
Conmy 2023, "Attribution Patching Outperforms Automated Circuit Discovery", arXiv 2310.10348, eq. 1-2. For a metric
``M`` (here the IOI logit difference, Wang et al. arXiv 2211.00593 sec. 2: logit of IO minus logit of S at END, mean
over prompts, nats) and a head's output ``z`` (``[d_head]`` at one position, before ``W_O``), patching the corrupted
value into the clean run changes ``M`` by

    ``M(z_corrupt) - M(z_clean) ~= (z_corrupt - z_clean) . dM/dz |_clean``

(a first-order Taylor expansion around the clean run). The estimate is exact when ``M`` is affine in ``z`` (e.g. the
last layer's heads of a model without a final norm, tested), and degrades where attention softmaxes, norms and MLPs
after ``z`` bend the map.

Exact activation patching (:func:`exact_patching`) replaces one head's output (at every position, ``per="head"``, as
:func:`lmsci.measure.patching.head_patching`; or at one position, ``per="head_position"``) with its corrupted value and
recomputes the rest of the network: ``n_layers * n_heads`` (times ``seq``) forwards, each started at the patched
layer from the clean run's residual stream where the model allows it (:mod:`lmsci.models.resume`).
:func:`attribution_vs_exact` runs both, times them, and reports their Pearson correlation and top-k agreement with a
permutation null (the estimates shuffled across heads/positions).

Head outputs are read and replaced at ``blocks.{l}.attn.z`` (``[batch, seq, n_heads, d_head]``) on an lmsci
:class:`~lmsci.models.gpt.GPT` (the hook :mod:`lmsci.measure.patching` patches), and on Hugging Face models at the input
of the attention output projection (``o_proj`` / GPT-2 ``c_proj`` / ... from the architecture map), reshaped to
``[batch, seq, n_heads, d_head]``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from lmsci.errors import ConfigError

ZFn = Callable[[int, Tensor], "Tensor | None"]
PER = ("head", "head_position")


def _is_gpt(model: Any) -> bool:
    from lmsci.models.gpt import GPT

    return isinstance(model, GPT)


def _hf_module(model: Any) -> nn.Module:
    return model.model if type(model).__name__ == "HFModel" else model


def head_shape(model: Any) -> tuple[int, int]:
    """``(n_layers, n_heads)`` of an lmsci GPT, an HFModel or a ``transformers`` causal LM (architecture map)."""
    if _is_gpt(model):
        return model.cfg.n_layers, model.cfg.n_heads
    from lmsci.models.arch import arch_of

    cfg = _hf_module(model).config
    H = getattr(cfg, "num_attention_heads", None) or getattr(cfg, "n_head", None)
    if H is None:
        raise ConfigError("model.config", type(cfg).__name__, "a config with num_attention_heads (or n_head)")
    return arch_of(model).n_layers, int(H)


@contextlib.contextmanager
def head_outputs(model: Any, fn: ZFn) -> Iterator[None]:
    """Inside the block, every layer's per-head attention output ``z [batch, seq, n_heads, d_head]`` goes through
    ``fn(layer, z)``, which returns ``None`` (read) or a same-shape replacement. Hooks removed on exit.

    Raises:
        ConfigError: a model that is neither an lmsci GPT nor a Hugging Face family of the architecture map.
    """
    L, H = head_shape(model)
    if _is_gpt(model):
        hooks = [(f"blocks.{l}.attn.z", (lambda z, hook, l=l: fn(l, z))) for l in range(L)]
        with model.hooks(hooks):
            yield
        return
    from lmsci.models.arch import arch_of

    arch = arch_of(model)
    handles = []

    def make(l: int):
        def pre(module: nn.Module, args: tuple) -> Any:
            x = args[0]
            z = x.reshape(*x.shape[:-1], H, x.shape[-1] // H)
            new = fn(l, z)
            return None if new is None else (new.reshape(x.shape), *args[1:])
        return pre

    try:
        for l in range(L):
            handles.append(arch.projections(l)["o"].register_forward_pre_hook(make(l)))
        yield
    finally:
        for h in handles:
            h.remove()


def _logits(model: Any, ids: Tensor) -> Tensor:
    if _is_gpt(model) or type(model).__name__ == "HFModel":
        return model(ids)
    return model(input_ids=ids, use_cache=False).logits


def _metric(logits: Tensor, end: Tensor, io: Tensor, s: Tensor) -> Tensor:
    rows = torch.arange(logits.shape[0], device=logits.device)
    last = logits[rows, end.to(logits.device)]
    return (last[rows, io.to(logits.device)] - last[rows, s.to(logits.device)]).float()


def _check(model: Any, clean: Tensor, corrupt: Tensor, end: Tensor, io: Tensor, s: Tensor) -> None:
    if clean.shape != corrupt.shape or clean.dim() != 2:
        raise ConfigError("corrupt", tuple(corrupt.shape), f"aligned prompts of the clean shape {tuple(clean.shape)}")
    n = clean.shape[0]
    for name, t in (("end", end), ("io", io), ("s", s)):
        if tuple(t.shape) != (n,):
            raise ConfigError(name, tuple(t.shape), f"one entry per prompt ([{n}])")
    if (end < 0).any() or (end >= clean.shape[1]).any():
        raise ConfigError("end", end.tolist(), f"positions in [0, {clean.shape[1]})")


@contextlib.contextmanager
def _no_param_grad(model: Any) -> Iterator[None]:
    params = list(_hf_module(model).parameters()) if not _is_gpt(model) else list(model.parameters())
    flags = [p.requires_grad for p in params]
    try:
        for p in params:
            p.requires_grad_(False)
        yield
    finally:
        for p, f in zip(params, flags):
            p.requires_grad_(f)


def attribution_patching(model: Any, clean: Tensor, corrupt: Tensor, end: Tensor, io: Tensor, s: Tensor) -> Tensor:
    """First-order estimate of patching each head's corrupted output into the clean run, per head and position.

    Args:
        model: an lmsci GPT, an HFModel or a ``transformers`` causal LM (eval mode; its parameters get no gradient).
        clean, corrupt: ``[n, seq]`` aligned prompts; end: ``[n]`` END index; io, s: ``[n]`` token ids.

    Returns:
        ``[n_layers, n_heads, seq]``: the estimated change of the mean logit difference (nats) when that head's
        output at that position alone is patched; ``.sum(-1)`` estimates patching the head at every position.

    Raises:
        ConfigError: unaligned prompts, wrongly shaped ``end``/``io``/``s``, an unsupported model.
    """
    _check(model, clean, corrupt, end, io, s)
    L, H = head_shape(model)
    zx: dict[int, Tensor] = {}

    def grab(l: int, z: Tensor) -> None:
        zx[l] = z.detach().clone()

    with torch.no_grad(), head_outputs(model, grab):
        _logits(model, corrupt)
    leaves: dict[int, Tensor] = {}

    def leaf(l: int, z: Tensor) -> Tensor:
        leaves[l] = z.detach().clone().requires_grad_(True)
        return leaves[l]

    with torch.enable_grad(), _no_param_grad(model), head_outputs(model, leaf):
        metric = _metric(_logits(model, clean), end, io, s).mean()
        grads = torch.autograd.grad(metric, [leaves[l] for l in range(L)], allow_unused=True)
    out = torch.zeros(L, H, clean.shape[1])
    for l in range(L):
        if grads[l] is not None:
            # the metric is the mean over prompts, so its gradient already carries 1/n: sum over prompts
            est = ((zx[l] - leaves[l].detach()) * grads[l]).sum(-1).sum(0)  # [seq, n_heads]
            out[l] = est.T.float().cpu()
    return out


def _end_metric(model: Any, hidden: Tensor, end: Tensor, io: Tensor, s: Tensor) -> float:
    """Mean over prompts of logit(IO) - logit(S) at END, the output head applied at END only."""
    from lmsci.models.resume import unembed

    rows = torch.arange(hidden.shape[0], device=hidden.device)
    logits = unembed(model, hidden[rows, end.to(hidden.device)])  # [n, vocab]
    return float((logits[rows, io.to(logits.device)] - logits[rows, s.to(logits.device)]).float().mean())


@torch.no_grad()
def exact_patching(model: Any, clean: Tensor, corrupt: Tensor, end: Tensor, io: Tensor, s: Tensor,
                   per: str = "head") -> Tensor:
    """Exact activation patching of one head's corrupted output into the clean run: the change of the mean logit
    difference (nats), ``[n_layers, n_heads]`` (``per="head"``: every position patched, as
    :func:`lmsci.measure.patching.head_patching`) or ``[n_layers, n_heads, seq]`` (``per="head_position"``).

    Patching a head of layer ``l`` leaves the layers below ``l`` as in the clean run, so where the model allows it
    (:func:`lmsci.models.resume.resumable`: an lmsci GPT or a ``transformers`` Llama, in eval mode) each patched run
    starts at layer ``l`` from the clean run's residual stream there (recorded once) and applies the output head at
    END only; the values are those of the full forward to float rounding (tested, atol 1e-5). Any other model runs
    the full forward for every patch.

    Raises:
        ConfigError: as :func:`attribution_patching`; ``per`` not in ``("head", "head_position")``.
    """
    from lmsci.models.resume import block_inputs, resumable, resume_from

    if per not in PER:
        raise ConfigError("per", per, ", ".join(PER))
    _check(model, clean, corrupt, end, io, s)
    L, H = head_shape(model)
    fast = resumable(model)
    zx: dict[int, Tensor] = {}
    with head_outputs(model, lambda l, z: zx.__setitem__(l, z.clone())):
        block_inputs(model, corrupt) if fast else _logits(model, corrupt)
    if fast:
        resid, final = block_inputs(model, clean)
        base = _end_metric(model, final, end, io, s)

        def run(l: int) -> float:
            return _end_metric(model, resume_from(model, l, resid[l]), end, io, s)
    else:
        base = float(_metric(_logits(model, clean), end, io, s).mean())

        def run(l: int) -> float:
            return float(_metric(_logits(model, clean), end, io, s).mean())
    T = clean.shape[1]
    positions = [None] if per == "head" else list(range(T))
    out = torch.zeros(L, H, len(positions))
    for l in range(L):
        for h in range(H):
            for j, t in enumerate(positions):
                def patch(layer: int, z: Tensor, l=l, h=h, t=t) -> Tensor | None:
                    if layer != l:
                        return None
                    z = z.clone()
                    if t is None:
                        z[:, :, h] = zx[l][:, :, h]
                    else:
                        z[:, t, h] = zx[l][:, t, h]
                    return z
                with head_outputs(model, patch):
                    out[l, h, j] = run(l) - base
    return out[..., 0] if per == "head" else out


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    if a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def _topk(a: np.ndarray, b: np.ndarray, k: int) -> float:
    ta, tb = np.argsort(-np.abs(a))[:k], np.argsort(-np.abs(b))[:k]
    return len(set(ta.tolist()) & set(tb.tolist())) / k


def agreement(estimate: Tensor | np.ndarray, exact: Tensor | np.ndarray, *, top_k: int = 5, n_perm: int = 1000,
              seed: int = 0) -> dict[str, float]:
    """Pearson correlation and top-k agreement (share of the ``k`` largest ``|exact|`` among the ``k`` largest
    ``|estimate|``) of two same-shape effect maps, with a permutation null (the estimate shuffled ``n_perm`` times with
    ``seed``): ``{"pearson", "pearson_null_mean", "pearson_null_q95", "pearson_p", "top_k", "top_k_null_mean",
    "top_k_p", "k"}``; p-values one-sided, ``(1 + #{null >= observed}) / (1 + n_perm)``.

    Raises:
        ConfigError: shapes differ; fewer than 2 entries; ``top_k`` out of range; ``n_perm < 1``.
    """
    a = np.asarray(estimate, dtype=np.float64).ravel()
    b = np.asarray(exact, dtype=np.float64).ravel()
    if a.shape != b.shape or a.size < 2:
        raise ConfigError("estimate/exact", (np.shape(estimate), np.shape(exact)), "two maps of one shape, >= 2 entries")
    if not 1 <= int(top_k) <= a.size:
        raise ConfigError("top_k", top_k, f"1..{a.size}")
    if int(n_perm) < 1:
        raise ConfigError("n_perm", n_perm, ">= 1")
    g = np.random.default_rng(seed)
    r, tk = _pearson(a, b), _topk(a, b, int(top_k))
    null_r, null_t = np.empty(int(n_perm)), np.empty(int(n_perm))
    for i in range(int(n_perm)):
        p = g.permutation(a)
        null_r[i], null_t[i] = _pearson(p, b), _topk(p, b, int(top_k))
    return {"pearson": r, "pearson_null_mean": float(np.nanmean(null_r)),
            "pearson_null_q95": float(np.nanquantile(null_r, 0.95)),
            "pearson_p": float((1 + np.sum(null_r >= r)) / (1 + n_perm)), "top_k": tk,
            "top_k_null_mean": float(null_t.mean()), "top_k_p": float((1 + np.sum(null_t >= tk)) / (1 + n_perm)),
            "k": int(top_k)}


def attribution_vs_exact(model: Any, clean: Tensor, corrupt: Tensor, end: Tensor, io: Tensor, s: Tensor, *,
                         per: str = "head", top_k: int = 5, n_perm: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Attribution patching beside exact activation patching, timed, with their agreement (:func:`agreement`).

    Args:
        per: ``"head"`` (``[n_layers, n_heads]``, every position patched; the estimate summed over positions) or
            ``"head_position"`` (``[n_layers, n_heads, seq]``; ``n_layers * n_heads * seq`` exact forwards).

    Returns:
        ``{"attribution", "exact"}`` (tensors), ``"time_attribution_s"``, ``"time_exact_s"``, ``"speedup"`` (exact
        time / attribution time, wall clock), and the :func:`agreement` entries.

    Raises:
        ConfigError: as :func:`attribution_patching` and :func:`agreement`.
    """
    if per not in PER:
        raise ConfigError("per", per, ", ".join(PER))
    t0 = time.perf_counter()
    est = attribution_patching(model, clean, corrupt, end, io, s)
    t1 = time.perf_counter()
    exact = exact_patching(model, clean, corrupt, end, io, s, per=per)
    t2 = time.perf_counter()
    if per == "head":
        est = est.sum(-1)
    return {"attribution": est, "exact": exact, "time_attribution_s": t1 - t0, "time_exact_s": t2 - t1,
            "speedup": (t2 - t1) / max(t1 - t0, 1e-12), **agreement(est, exact, top_k=top_k, n_perm=n_perm, seed=seed)}


__all__ = ["PER", "head_shape", "head_outputs", "attribution_patching", "exact_patching", "agreement",
           "attribution_vs_exact"]
