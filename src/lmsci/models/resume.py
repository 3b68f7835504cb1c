"""Resuming a forward pass at a block: record the residual stream entering every block of a run once, then run
blocks ``layer .. n_layers - 1`` (and the final norm) from the recorded stream at ``layer``, without recomputing the
blocks below.

An intervention inside block ``layer`` (activation patching of a head, Nanda 2023 "Attribution Patching";
Syed, Rager & Conmy, arXiv 2310.10348, sec. 3: ``n_layers * n_heads`` patched forwards) leaves every block below it
as in the unpatched run, so the resumed run computes the same hidden states as a full forward with the same
intervention, from ``n_layers - layer`` blocks instead of ``n_layers``. Supported (:func:`resumable`):

* an lmsci :class:`~lmsci.models.gpt.GPT` (every position scheme: learned positions are added before block 0,
  rotary / relative / ALiBi ones inside attention from the positions ``0 .. seq - 1``);
* a ``transformers`` ``LlamaForCausalLM`` (or an :class:`~lmsci.models.hf.HFModel` around one): the decoder takes the
  recorded stream as ``inputs_embeds`` (Llama neither scales nor shifts it) with its layer list cut to
  ``layers[layer:]`` for the call, so rotary positions and the causal mask are built as in the full forward.

Both only in eval mode (dropout would make the two runs differ). Anything else is not resumable; callers fall back
to the full forward.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from lmsci.errors import ConfigError

#: ``transformers`` causal-LM classes whose decoder forward leaves ``inputs_embeds`` unchanged before layer 0 and
#: builds positions and masks from its length alone (tested: tests/measure/test_attribution_patching_fast.py).
HF_RESUMABLE = ("LlamaForCausalLM",)


def _is_gpt(model: Any) -> bool:
    from lmsci.models.gpt import GPT

    return isinstance(model, GPT)


def _causal(model: Any) -> Any:
    return model.model if type(model).__name__ == "HFModel" else model


def resumable(model: Any) -> bool:
    """Whether :func:`block_inputs` / :func:`resume_from` support ``model``: an lmsci GPT or a ``transformers``
    causal LM of :data:`HF_RESUMABLE` (bare or in an HFModel), in eval mode."""
    if _is_gpt(model):
        return not model.training
    causal = _causal(model)
    return type(causal).__name__ in HF_RESUMABLE and not causal.training


def _blocks(model: Any) -> nn.ModuleList:
    return model.blocks if _is_gpt(model) else _causal(model).model.layers


def _require(model: Any) -> None:
    if not resumable(model):
        raise ConfigError("model", type(model).__name__,
                          f"an lmsci GPT or one of {', '.join(HF_RESUMABLE)}, in eval mode")


def _device(model: Any) -> torch.device:
    return next(_causal(model).parameters()).device


@torch.no_grad()
def block_inputs(model: Any, input_ids: Tensor) -> tuple[list[Tensor], Tensor]:
    """One forward of ``input_ids [batch, seq]`` (moved to the model's device), recording the residual stream entering
    each block: ``([n_layers] x [batch, seq, d_model], final)``, ``final`` the hidden states after the final norm
    ``[batch, seq, d_model]`` (:func:`unembed` gives the logits). Hooks attached to the model fire as in a forward.

    Raises:
        ConfigError: a model that is not :func:`resumable`.
    """
    _require(model)
    blocks = _blocks(model)
    resid: list[Tensor | None] = [None] * len(blocks)

    def grab(i: int):
        def pre(module: nn.Module, args: tuple, kwargs: dict) -> None:
            resid[i] = (args[0] if args else kwargs["hidden_states"]).clone()
        return pre

    handles = [b.register_forward_pre_hook(grab(i), with_kwargs=True) for i, b in enumerate(blocks)]
    try:
        ids = input_ids.to(_device(model))
        final = (model.final_hidden(ids) if _is_gpt(model)
                 else _causal(model).model(input_ids=ids, use_cache=False).last_hidden_state)
    finally:
        for h in handles:
            h.remove()
    return resid, final  # type: ignore[return-value]


@torch.no_grad()
def resume_from(model: Any, layer: int, resid: Tensor) -> Tensor:
    """The hidden states after the final norm ``[batch, seq, d_model]`` of a forward started at block ``layer`` from
    ``resid`` (the residual stream entering it, ``[batch, seq, d_model]``, as :func:`block_inputs` records), positions
    ``0 .. seq - 1``. Hooks attached to blocks ``>= layer`` and to the final norm fire; those below do not.

    Raises:
        ConfigError: a model that is not :func:`resumable`; ``layer`` outside ``[0, n_layers)``.
    """
    _require(model)
    blocks = _blocks(model)
    if not 0 <= int(layer) < len(blocks):
        raise ConfigError("layer", layer, f"0..{len(blocks) - 1}")
    if _is_gpt(model):
        pos = torch.arange(resid.shape[1], device=resid.device)
        x = resid
        for block in list(blocks)[layer:]:
            x = block(x, pos, None)
        return model.hook_final(model.ln_f(x))
    decoder = _causal(model).model
    try:
        decoder.layers = nn.ModuleList(list(blocks)[layer:])
        return decoder(inputs_embeds=resid, use_cache=False).last_hidden_state
    finally:
        decoder.layers = blocks


def unembed(model: Any, hidden: Tensor) -> Tensor:
    """Logits ``[..., vocab]`` of final (normed) hidden states ``[..., d_model]``: the model's ``lm_head``.

    Raises:
        ConfigError: a model that is not :func:`resumable`.
    """
    _require(model)
    return model.lm_head(hidden) if _is_gpt(model) else _causal(model).lm_head(hidden)


__all__ = ["HF_RESUMABLE", "resumable", "block_inputs", "resume_from", "unembed"]
