"""Operations on a hand-written stack: K members' parameters as ``{name: tensor [K, *shape]}`` trained by one
optimizer (as :func:`lmsci.train.modular.train_modular_stacked` keeps them), where every member must go on exactly
as if it trained alone: :func:`decay_members` (decoupled weight decay with one coefficient per member) and
:func:`select_members` (drop members mid-training, slicing the optimizer state with them).

The stacks of same-shaped ``nn.Module`` s built with ``torch.func`` are :mod:`lmsci.train.stacked`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lmsci.errors import ConfigError


@torch.no_grad()
def decay_members(params: dict[str, torch.Tensor] | Sequence[torch.Tensor], lr: float,
                  weight_decay: torch.Tensor) -> None:
    """Decoupled weight decay with one coefficient per member, in place: ``p[k] *= 1 - lr * weight_decay[k]``.

    What :class:`torch.optim.AdamW` does to each parameter before its Adam update (Loshchilov & Hutter,
    "Decoupled Weight Decay Regularization", arXiv 1711.05101, Algorithm 2), for a stack whose members decay
    differently (e.g. a weight-decay arm and a wd = 0 control): call it after ``backward`` and before the
    step of an AdamW built with ``weight_decay=0``; the result equals K AdamWs with their own decay (the
    factor is rounded to the parameter dtype as AdamW's Python-float factor is).

    Args:
        params: stacked tensors ``[K, *shape]`` (a dict's values or a sequence).
        lr: the learning rate of this step.
        weight_decay: ``[K]`` coefficients (any float dtype/device; moved to each parameter's).
    """
    tensors = list(params.values()) if isinstance(params, dict) else list(params)
    for p in tensors:
        f = (1.0 - lr * weight_decay.double()).to(device=p.device, dtype=p.dtype)
        p.mul_(f.view(-1, *[1] * (p.dim() - 1)))


def select_members(params: dict[str, torch.Tensor], opt: torch.optim.Optimizer,
                   keep: Sequence[int]) -> tuple[dict[str, torch.Tensor], torch.optim.Optimizer]:
    """Drop members from a stack that is being trained: keep members ``keep`` (in that order).

    Args:
        params: ``{name: leaf tensor [K, *shape]}``, the tensors ``opt`` updates.
        opt: the optimizer over them (any torch optimizer whose per-parameter state holds tensors with the
            leading member dimension, or 0-d tensors / Python scalars shared by all members, as Adam/AdamW/SGD).
        keep: member indices to keep (non-empty).

    Returns:
        ``(params, opt)``: new leaf tensors ``params[name][keep]`` (``requires_grad``) and an optimizer of the
        same class, param groups and hyperparameters whose state is sliced the same way: the kept members
        continue exactly as if nothing had been dropped (every update is per member).

    Raises:
        ConfigError: ``keep`` is empty or out of range.
    """
    K = next(iter(params.values())).shape[0]
    if not keep or min(keep) < 0 or max(keep) >= K:
        raise ConfigError("keep", list(keep), f"a non-empty list of member indices in [0, {K})")
    idx = torch.as_tensor(list(keep), dtype=torch.long, device=next(iter(params.values())).device)
    new = {n: p.detach().index_select(0, idx).requires_grad_(p.requires_grad) for n, p in params.items()}
    old_to_new = {id(p): new[n] for n, p in params.items()}
    groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [old_to_new[id(p)] for p in g["params"]]}
              for g in opt.param_groups]
    import inspect

    accepted = inspect.signature(type(opt).__init__).parameters  # AdamW's defaults hold keys it does not take
    new_opt = type(opt)(groups, **{k: v for k, v in opt.defaults.items() if k in accepted and k != "params"})
    for n, p in params.items():
        st = opt.state.get(p)
        if not st:
            continue
        new_opt.state[new[n]] = {
            k: (v.index_select(0, idx.to(v.device)).clone() if torch.is_tensor(v) and v.dim() > 0 and v.shape[0] == K
                else (v.clone() if torch.is_tensor(v) else v))
            for k, v in st.items()}
    return new, new_opt
