"""ROME: rank-one model editing of one MLP layer's output projection.

Source: Meng, Bau, Andonian, Belinkov, "Locating and Editing Factual Associations in GPT", NeurIPS 2022,
arXiv 2202.05262, Section 3 (eq. 2-4) and the released code ``kmeng01/rome`` (``rome/compute_u.py``,
``rome/compute_v.py``, ``hparams/ROME/gpt2-xl.json``).

The MLP's output projection ``W`` (``[d_model, d_mlp]``) is read as a linear associative memory from keys
``k`` (the MLP's hidden activation, the projection's input) to values ``v = W k (+ b)``. To make the subject's
key ``k*`` recall a new value ``v*`` while disturbing the other keys least (under their second moment
``C = E[k k^T]``), the edit is the rank-one update

    W' = W + Lambda (C^-1 k*)^T,    Lambda = (v* - W k*) / ((C^-1 k*)^T k*)          (eq. 2)

* ``k*``: the key at the subject's last token, averaged over the prompt with a few prefixes (``compute_u``);
  the direction is ``u = C^-1 k*``.
* ``v*``: found by gradient descent on a vector ``delta`` added to the MLP output at the subject's last token
  (``compute_v``): minimise the NLL of the new object after the rewriting prompts
  ``+ kl_factor * KL(P_after || P_before)`` of the next token after the subject in "essence" prompts
  ``+ weight_decay * ||delta|| / ||v_init||^2``, with ``||delta|| <= clamp_norm_factor * ||v_init||``
  (gpt2-xl hyper-parameters: Adam lr 0.5, 20 steps, KL factor 0.0625, weight decay 0.5, clamp 4).
* As in the released code, ``Lambda`` is scaled at the unprefixed prompt: ``Lambda = (v* - v(k_0)) / (u . k_0)``
  where ``k_0`` is the unprefixed prompt's key, so that the edited layer outputs exactly ``v*`` there.

Works on lmsci GPT (``blocks[l].mlp.proj``) and on Hugging Face causal LMs through the architecture map
(:func:`lmsci.models.arch.arch_of`; ``down_proj`` for Llama-like families, ``dense_4h_to_h`` for GPT-NeoX,
``c_proj`` (a ``Conv1D``, transposed) for GPT-2).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lmsci.errors import ConfigError, UnknownNameError

DOWN_PROJ_NAMES = ("proj", "down_proj", "dense_4h_to_h", "c_proj", "fc_out", "fc2", "w2")
"""Attribute names of an MLP's output (down) projection, tried in order."""


@dataclass(frozen=True)
class RomeHParams:
    """ROME's hyper-parameters (defaults: ``hparams/ROME/gpt2-xl.json`` of the released code; the loop stops
    early at ``loss < 0.05``).

    Attributes:
        v_lr: Adam learning rate of ``delta``. v_steps: at most this many steps.
        kl_factor: weight of the essence KL term. weight_decay: weight of ``||delta|| / ||v_init||^2``.
        clamp_norm_factor: ``||delta|| <= clamp_norm_factor * ||v_init||``.
        ridge: added to ``C``'s diagonal as a fraction of its mean diagonal (numerical safety).
    """

    v_lr: float = 0.5
    v_steps: int = 20
    kl_factor: float = 0.0625
    weight_decay: float = 0.5
    clamp_norm_factor: float = 4.0
    ridge: float = 1e-4


@dataclass
class RomeEdit:
    """A computed rank-one edit of layer ``layer``: ``W += outer(Lambda, u)`` (Linear layout).

    Attributes:
        u: ``[d_mlp]`` key direction ``C^-1 k*``. lam: ``[d_model]`` the value change ``Lambda``.
        v_star: ``[d_model]`` the value the edited layer outputs at the unprefixed prompt's subject token.
        info: optimisation record (``nll_start``, ``nll_end``, ``steps``, ``delta_norm``, ``v_init_norm``).
    """

    layer: int
    u: Tensor
    lam: Tensor
    v_star: Tensor | None = None
    info: dict[str, Any] = field(default_factory=dict)


def _base(model: Any) -> nn.Module:
    return model.model if type(model).__name__ == "HFModel" else model


def down_projection(model: Any, layer: int) -> tuple[nn.Module, bool]:
    """The output projection of layer ``layer``'s MLP and whether its weight is stored transposed
    (``[d_mlp, d_model]``, GPT-2's ``Conv1D``).

    Raises:
        UnknownNameError: ``layer`` out of range (names the layers that exist).
        ConfigError: the family is not in the architecture map, or its MLP has none of
            :data:`DOWN_PROJ_NAMES` (names the MLP's children).
    """
    from lmsci.models.arch import arch_of

    arch = arch_of(model)
    if not isinstance(layer, (int, np.integer)) or not 0 <= int(layer) < arch.n_layers:
        raise UnknownNameError("layer", str(layer), [str(i) for i in range(arch.n_layers)])
    try:
        mlp = arch.mlp(int(layer))
    except AttributeError:
        raise ConfigError("model", type(model).__name__, f"blocks with an MLP ({arch.family.mlp}); block {layer} has "
                          f"{[n for n, _ in arch.blocks()[int(layer)].named_children()]}") from None
    for name in DOWN_PROJ_NAMES:
        mod = getattr(mlp, name, None)
        if isinstance(mod, nn.Module) and hasattr(mod, "weight"):
            return mod, type(mod).__name__ == "Conv1D"
    raise ConfigError("model", type(mlp).__name__,
                      f"an MLP with an output projection named one of {DOWN_PROJ_NAMES}; it has "
                      f"{[n for n, _ in mlp.named_children()]}")


def _logits(model: Any, ids: Tensor) -> Tensor:
    out = model(ids)
    return out.logits if hasattr(out, "logits") else out


def _device(model: Any) -> torch.device:
    return next(iter(model.parameters())).device


def _pad(seqs: Sequence[Sequence[int]], pad: int, device: torch.device) -> Tensor:
    T = max(len(s) for s in seqs)
    x = torch.full((len(seqs), T), pad, dtype=torch.long)
    for i, s in enumerate(seqs):
        x[i, :len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return x.to(device)


def mlp_keys(model: Any, layer: int, seqs: Sequence[Sequence[int]], positions: Sequence[int]) -> Tensor:
    """The MLP key (the output projection's input, ``[d_mlp]``) at ``positions[i]`` of ``seqs[i]``:
    ``[len(seqs), d_mlp]`` (right-padded batch; causal models are unaffected by the padding)."""
    mod, _ = down_projection(model, layer)
    got: list[Tensor] = []
    h = mod.register_forward_pre_hook(lambda m, args: got.append(args[0].detach()))
    try:
        with torch.no_grad():
            _logits(model, _pad(seqs, 0, _device(model)))
    finally:
        h.remove()
    k = got[0]
    return k[torch.arange(len(seqs), device=k.device), torch.as_tensor(list(positions), device=k.device)]


def key_second_moment(model: Any, layer: int, windows: Tensor, mask: Tensor | None = None,
                      batch_size: int = 32) -> Tensor:
    """``C = E[k k^T]`` (``[d_mlp, d_mlp]``, float64) of layer ``layer``'s MLP keys over the tokens of
    ``windows`` (``[n, seq]`` token ids; ``mask`` ``[n, seq]`` bool selects the tokens counted, e.g. not padding).
    ROME estimates it on 100k Wikipedia samples; here on the world's own text."""
    mod, _ = down_projection(model, layer)
    dev = _device(model)
    acc: Tensor | None = None
    n = 0
    store: list[Tensor] = []
    h = mod.register_forward_pre_hook(lambda m, args: store.append(args[0].detach()))
    try:
        with torch.no_grad():
            for i in range(0, windows.shape[0], batch_size):
                store.clear()
                _logits(model, windows[i:i + batch_size].to(dev))
                k = store[0].double()
                if mask is not None:
                    k = k[mask[i:i + batch_size].to(dev)]
                else:
                    k = k.reshape(-1, k.shape[-1])
                acc = k.T @ k if acc is None else acc + k.T @ k
                n += k.shape[0]
    finally:
        h.remove()
    if acc is None or n == 0:
        raise ConfigError("windows", 0, "at least one token to estimate the key second moment")
    return acc / n


def _check_rome_args(prompts: Sequence[Sequence[int]], subject_last: Sequence[int], target: Sequence[int],
                     kl_prompts: Sequence[Sequence[int]], kl_positions: Sequence[int]) -> None:
    """Refuse what :func:`compute_rome` cannot edit with (before any work).

    Raises:
        ConfigError: no prompt, empty target, mismatched lengths, a position outside its prompt.
    """
    if not prompts or len(prompts) != len(subject_last):
        raise ConfigError("prompts", len(prompts), f"one or more prompts, one subject position each ({len(subject_last)})")
    if not len(target):
        raise ConfigError("target", list(target), "at least one token")
    if len(kl_prompts) != len(kl_positions):
        raise ConfigError("kl_positions", len(kl_positions), f"one per KL prompt ({len(kl_prompts)})")
    for p, j in list(zip(prompts, subject_last)) + list(zip(kl_prompts, kl_positions)):
        if not 0 <= int(j) < len(p):
            raise ConfigError("subject_last", int(j), f"a position inside its prompt of {len(p)} tokens")


@contextmanager
def _frozen(model: Any) -> Iterator[None]:
    """Eval mode and ``requires_grad=False`` on every parameter inside the block; both restored after."""
    was_training = model.training
    model.eval()
    params = list(model.parameters())
    req = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, r in zip(params, req):
            p.requires_grad_(r)
        model.train(was_training)


def _optimise_v(model: Any, mod: nn.Module, prompts: Sequence[Sequence[int]], subject_last: Sequence[int],
                target: Sequence[int], kl_prompts: Sequence[Sequence[int]], kl_positions: Sequence[int],
                hparams: RomeHParams, d_model: int, dtype: torch.dtype) -> tuple[Tensor, Tensor, dict[str, Any]]:
    """ROME's ``v*`` search (Meng et al. 2022, Section 3, eq. 4; the official ``compute_v``): Adam on a
    ``delta [d_model]`` added to ``mod``'s output at the subject's last token of every prompt, minimising the
    target's NLL (nats/token, teacher forcing) + ``kl_factor`` * KL(after || before) at the essence prompts +
    ``weight_decay * |delta| / |v_init|^2``, with ``|delta|`` clamped to ``clamp_norm_factor * |v_init|``.

    Returns:
        ``(v_init [d_model], delta [d_model], info)``: the unedited output at the first prompt's subject token,
        the optimised delta, and ``nll_start``, ``nll_end``, ``steps``.
    """
    dev = _device(model)
    tgt = [int(t) for t in target]
    rows = [list(p) + tgt[:-1] for p in prompts]
    n_rw = len(rows)
    x = _pad(rows + [list(p) for p in kl_prompts], 0, dev)
    pos = torch.as_tensor(list(subject_last) + list(kl_positions), device=dev)
    tgt_pos = torch.as_tensor([[len(p) - 1 + j for j in range(len(tgt))] for p in prompts], device=dev)
    tgt_ids = torch.as_tensor(tgt, device=dev)
    kl_pos = torch.as_tensor(list(kl_positions), device=dev)
    delta = torch.zeros(d_model, device=dev, dtype=dtype, requires_grad=True)
    opt = torch.optim.Adam([delta], lr=hparams.v_lr)
    v_init: list[Tensor] = []

    def add_delta(m: nn.Module, args: Any, out: Tensor) -> Tensor:
        if not v_init:
            v_init.append(out[0, pos[0]].detach().clone())
        out = out.clone()
        out[torch.arange(out.shape[0], device=dev), pos] = out[torch.arange(out.shape[0], device=dev), pos] + delta
        return out

    h = mod.register_forward_hook(add_delta)
    kl_init = None
    info: dict[str, Any] = {}
    try:
        for step in range(hparams.v_steps):
            opt.zero_grad()
            logits = _logits(model, x).float()
            lp = torch.log_softmax(logits[:n_rw], -1)
            nll_each = -lp[torch.arange(n_rw, device=dev)[:, None], tgt_pos, tgt_ids[None, :]]  # [rows, len]
            nll = nll_each.mean()
            loss = nll
            if len(kl_prompts):
                kl_lp = torch.log_softmax(logits[n_rw:][torch.arange(len(kl_prompts), device=dev), kl_pos], -1)
                if kl_init is None:
                    kl_init = kl_lp.detach()
                # KL(P_after || P_before), the paper's eq. 4 and the official compute_v (parity: tests/parity)
                loss = loss + hparams.kl_factor * F.kl_div(kl_init, kl_lp, log_target=True, reduction="batchmean")
            vn = v_init[0].norm()
            loss = loss + hparams.weight_decay * delta.norm() / vn ** 2
            if step == 0:
                info["nll_start"] = float(nll.detach())
            info["nll_end"], info["steps"] = float(nll.detach()), step + 1
            if float(loss.detach()) < 5e-2 or step == hparams.v_steps - 1:
                break
            loss.backward()
            opt.step()
            with torch.no_grad():
                mx = hparams.clamp_norm_factor * vn
                if delta.norm() > mx:
                    delta.mul_(mx / delta.norm())
    finally:
        h.remove()
    return v_init[0], delta, info


def compute_rome(model: Any, layer: int, *, prompts: Sequence[Sequence[int]], subject_last: Sequence[int],
                 target: Sequence[int], cov: Tensor, kl_prompts: Sequence[Sequence[int]] = (),
                 kl_positions: Sequence[int] = (), hparams: RomeHParams = RomeHParams(), seed: int = 0) -> RomeEdit:
    """Compute (not apply) the ROME edit making the subject recall ``target`` (Meng et al. 2022, Section 3).

    Args:
        model: lmsci GPT, :class:`~lmsci.models.hf.HFModel` or a ``transformers`` causal LM (frozen here).
        layer: the edited MLP layer.
        prompts: rewriting prompts (token ids ending right before the new object); ``prompts[0]`` is the
            unprefixed prompt, the others the same prompt after prefixes (ROME's context templates).
        subject_last: the subject's last-token position in each prompt.
        target: the new object's token ids (predicted after each prompt, teacher forcing).
        cov: ``C = E[k k^T]`` of this layer (:func:`key_second_moment`), ``[d_mlp, d_mlp]``.
        kl_prompts, kl_positions: essence prompts and the subject's last token in them; the next-token
            distribution there is kept close to the unedited one.
        hparams: :class:`RomeHParams`.

    Returns:
        :class:`RomeEdit` (apply with :func:`apply_edit` or :func:`edited`).

    Raises:
        ConfigError: no prompt, empty target, mismatched lengths, a position outside its prompt, ``cov`` of the
            wrong shape.
        UnknownNameError: ``layer`` out of range.
    """
    _check_rome_args(prompts, subject_last, target, kl_prompts, kl_positions)
    mod, transposed = down_projection(model, layer)
    dev = _device(model)
    W = mod.weight.detach()
    W_lin = W.T if transposed else W  # [d_model, d_mlp]
    d_model, d_mlp = W_lin.shape
    if tuple(cov.shape) != (d_mlp, d_mlp):
        raise ConfigError("cov", tuple(cov.shape), f"a [{d_mlp}, {d_mlp}] second-moment matrix of layer {layer}'s keys")
    with _frozen(model):
        # keys: the direction from prefix-averaged keys, the scale at the unprefixed prompt
        keys = mlp_keys(model, layer, prompts, subject_last).double()
        k_star = keys.mean(0)
        C = cov.to(dev).double()
        C = C + hparams.ridge * C.diagonal().mean() * torch.eye(d_mlp, dtype=C.dtype, device=dev)
        u = torch.linalg.solve(C, k_star)
        k0 = keys[0]
        # v*: optimise delta on the MLP output at the subject's last token
        v_init, delta, info = _optimise_v(model, mod, prompts, subject_last, target, kl_prompts, kl_positions,
                                          hparams, d_model, W.dtype)
        v_star = (v_init + delta.detach()).double()
        with torch.no_grad():
            b = mod.bias.detach().double() if getattr(mod, "bias", None) is not None else 0.0
            v_k0 = W_lin.double() @ k0 + b
            lam = (v_star - v_k0) / torch.dot(u, k0)
        info.update(delta_norm=float(delta.detach().norm()), v_init_norm=float(v_init.norm()))
    return RomeEdit(int(layer), u.to(W.dtype), lam.to(W.dtype), v_star.to(W.dtype), info)


def apply_edit(model: Any, edit: RomeEdit) -> Tensor:
    """Add the rank-one update to the layer's output projection in place; returns the previous weight (to
    restore with :func:`restore`)."""
    mod, transposed = down_projection(model, edit.layer)
    old = mod.weight.detach().clone()
    upd = torch.outer(edit.lam, edit.u)
    with torch.no_grad():
        mod.weight.add_(upd.T if transposed else upd)
    return old


def restore(model: Any, layer: int, weight: Tensor) -> None:
    """Put back the output projection weight returned by :func:`apply_edit`."""
    mod, _ = down_projection(model, layer)
    with torch.no_grad():
        mod.weight.copy_(weight)


@contextmanager
def edited(model: Any, edit: RomeEdit) -> Iterator[Any]:
    """``with edited(model, edit): ...``: the model with a ROME edit (:func:`compute_rome`; Meng et al. 2022, arXiv
    2202.05262, Sec. 3, eq. 2: ``W += Lambda u^T`` on layer ``edit.layer``'s MLP down projection) applied, and the
    original weight restored on exit (also on errors). Works on lmsci GPTs and the Hugging Face families whose down
    projection :func:`down_projection` finds.

    Raises:
        ConfigError: the model has no MLP down projection at ``edit.layer``, or its shape differs from the edit's."""
    old = apply_edit(model, edit)
    try:
        yield model
    finally:
        restore(model, edit.layer, old)


__all__ = ["RomeHParams", "RomeEdit", "compute_rome", "apply_edit", "restore", "edited", "down_projection",
           "mlp_keys", "key_second_moment", "DOWN_PROJ_NAMES"]
