"""Integrated gradients of every MLP neuron at the answer position, with the prompt's earlier positions cached
(the cost of :mod:`lmsci.experiments.knowledge.knowledge_neurons_lm`).

Dai et al. (ACL 2022, arXiv 2104.08696, Sec. 3.1, Eq. 2-3) scale one layer's neuron activations ``w`` at the
position that predicts the answer, ``alpha w`` for ``alpha = k/m``, and integrate the gradient of
``P(answer | prompt)``. In a causal LM nothing at an earlier position depends on the last position, so the
earlier positions' keys and values are the same in every scaled row: :func:`cached_integrated_gradients` runs the
prompt's first ``T - 1`` tokens once (``past_key_values``), then pushes only the last token through the model for
the ``m x len(layers)`` scaled rows (one batched forward/backward). It returns what
:func:`lmsci.measure.attribution.integrated_gradients` returns (the test compares them) at about ``1 / T`` of its
cost. Models that are not Hugging Face causal LMs (lmsci GPTs), or return no ``transformers`` cache, go through the
library function unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from lmsci.errors import ConfigError
from lmsci.measure.attribution import integrated_gradients
from lmsci.measure.kv_memories import check_layers


def cached_integrated_gradients(model: Any, prompt: Sequence[int], answer: int, *, steps: int = 20,
                                layers: Sequence[int] | None = None) -> Tensor:
    """Integrated-gradients attribution of every MLP neuron (hook ``blocks.{l}.mlp.post``) at the prompt's last
    position to ``P(answer | prompt)`` (Dai et al. Eq. 2-3, Riemann sum over ``alpha = k / steps``).

    Args:
        model: an :class:`lmsci.models.hf.HFModel` (other models: :func:`integrated_gradients`).
        prompt: token ids (the answer is predicted at the last one). answer: the answer token id.
        steps: ``m`` (the paper: 20). layers: the layers attributed (default all).

    Returns:
        ``[len(layers), d_mlp]`` float32 attributions (units of probability), on the CPU.

    Raises:
        ConfigError: an empty prompt, ``steps < 1``, a layer the model lacks.
    """
    if type(model).__name__ != "HFModel" or len(prompt) < 2:
        return integrated_gradients(model, prompt, answer, steps=steps, layers=layers)
    prompt = [int(t) for t in prompt]
    if steps < 1:
        raise ConfigError("steps", steps, "an integer >= 1 (the paper uses 20)")
    layers = check_layers(model, layers)
    dev = next(model.parameters()).device
    ids = torch.tensor([prompt], dtype=torch.long, device=dev)
    names = [f"blocks.{l}.mlp.post" for l in layers]
    m, n = steps, len(layers)
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            _, cache = model.run_with_cache(ids, names)
            base = torch.stack([cache[k][0, -1].float() for k in names])  # [L, d_mlp]
            past = model.model(input_ids=ids[:, :-1], use_cache=True).past_key_values
            if not hasattr(past, "batch_repeat_interleave"):  # a model without a transformers Cache: the library
                return integrated_gradients(model, prompt, answer, steps=steps, layers=layers)
            past.batch_repeat_interleave(m * n)
        alphas = torch.arange(1, m + 1, device=dev, dtype=torch.float32)[:, None] / m
        scaled = [(alphas * base[j][None, :]).requires_grad_(True) for j in range(n)]

        def hook_for(j: int):
            def fn(x: Tensor, hook: Any) -> Tensor:
                x = x.clone()
                x[j * m:(j + 1) * m, -1, :] = scaled[j].to(x.dtype)
                return x
            return fn

        with torch.enable_grad():
            with model.hooks([(k, hook_for(j)) for j, k in enumerate(names)]):
                out = model.model(input_ids=ids[:, -1:].expand(m * n, 1), past_key_values=past, use_cache=True)
            p = torch.softmax(out.logits[:, -1].float(), -1)[:, int(answer)]
            grads = torch.autograd.grad(p.sum(), scaled)
        attr = torch.stack([base[j] * grads[j].mean(0) for j in range(n)])
    finally:
        model.train(was)
    return attr.detach().cpu()


__all__ = ["cached_integrated_gradients"]
