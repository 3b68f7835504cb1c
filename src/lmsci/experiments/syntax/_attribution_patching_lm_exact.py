"""Exact per-head activation patching for ``attribution-patching-lm`` (experiment-private): the same measurement as
:func:`lmsci.measure.attribution_patching.exact_patching` (``per="head"``), computed without the work whose result
the patch cannot change.

Patching head ``h`` of layer ``l`` leaves every layer below ``l`` exactly as in the clean run, so each patched run
starts from the clean run's residual stream at the input of layer ``l`` (recorded once) and runs layers ``l ..
n_layers - 1`` only; and the metric (IOI logit difference at END, Wang et al., arXiv 2211.00593) reads one position
per prompt, so the output head is applied at END only. The reference (unpatched) metric goes through the same
path. For a Llama-family ``transformers`` causal LM (rotary positions, no embedding scale: the residual stream
enters the decoder as ``inputs_embeds`` unchanged); any other model falls back to the shared
:func:`~lmsci.measure.attribution_patching.exact_patching`.

Source: Nanda 2023, "Attribution Patching" (exact activation patching, ``n_layers * n_heads`` patched forwards);
Syed, Rager & Conmy, arXiv 2310.10348, sec. 3.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from lmsci.measure.attribution_patching import _check, exact_patching, head_outputs, head_shape

_FAST = ("LlamaForCausalLM",)


def _causal_lm(lm: Any) -> Any:
    return lm.model if type(lm).__name__ == "HFModel" else lm


def _end_metric(causal: Any, hidden: Tensor, end: Tensor, io: Tensor, s: Tensor) -> float:
    """Mean over prompts of logit(IO) - logit(S) at END from the decoder's final (normed) hidden states."""
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    logits = causal.lm_head(hidden[rows, end.to(hidden.device)])  # [n, vocab]
    return float((logits[rows, io.to(logits.device)] - logits[rows, s.to(logits.device)]).float().mean())


@torch.no_grad()
def exact_head_patching(lm: Any, clean: Tensor, corrupt: Tensor, end: Tensor, io: Tensor, s: Tensor) -> Tensor:
    """``[n_layers, n_heads]``: the change of the mean logit difference (nats) when one head's corrupted output
    (every position) replaces its clean output, as ``exact_patching(..., per="head")``.

    Args:
        lm: an HFModel or a ``transformers`` causal LM; clean, corrupt: ``[n, seq]`` aligned prompts; end: ``[n]``
            END index; io, s: ``[n]`` token ids.

    Raises:
        ConfigError: as :func:`~lmsci.measure.attribution_patching.exact_patching`.
    """
    causal = _causal_lm(lm)
    if type(causal).__name__ not in _FAST:
        return exact_patching(lm, clean, corrupt, end, io, s, per="head")
    _check(lm, clean, corrupt, end, io, s)
    L, H = head_shape(lm)
    dev = next(causal.parameters()).device
    clean, corrupt = clean.to(dev), corrupt.to(dev)
    decoder = causal.model
    layers = decoder.layers
    zx: dict[int, Tensor] = {}
    with head_outputs(lm, lambda l, z: zx.__setitem__(l, z.clone())):
        decoder(input_ids=corrupt, use_cache=False)
    resid: dict[int, Tensor] = {}

    def grab(l: int):
        def pre(module: nn.Module, args: tuple, kwargs: dict) -> None:
            resid[l] = (args[0] if args else kwargs["hidden_states"]).clone()
        return pre

    handles = [layers[l].register_forward_pre_hook(grab(l), with_kwargs=True) for l in range(L)]
    try:
        base = _end_metric(causal, decoder(input_ids=clean, use_cache=False).last_hidden_state, end, io, s)
    finally:
        for h in handles:
            h.remove()
    out = torch.zeros(L, H)
    for l in range(L):
        for h in range(H):
            def patch(layer: int, z: Tensor, l=l, h=h) -> Tensor | None:
                if layer != l:
                    return None
                z = z.clone()
                z[:, :, h] = zx[l][:, :, h]
                return z
            with head_outputs(lm, patch):  # hooks on the original modules, before the stack is cut
                try:
                    decoder.layers = nn.ModuleList(list(layers)[l:])
                    hid = decoder(inputs_embeds=resid[l], use_cache=False).last_hidden_state
                finally:
                    decoder.layers = layers
            out[l, h] = _end_metric(causal, hid, end, io, s) - base
    return out

