"""Knowledge attribution to MLP neurons and knowledge-neuron interventions (Dai et al., ACL 2022, arXiv 2104.08696).

* :func:`integrated_gradients` (Sec. 3.1, Eq. 2-3): the attribution of neuron ``i`` of layer ``l`` to the
  probability of a fact's answer given a prompt is ``w_i * integral_0^1 dP(alpha w)/dw_i d alpha``, where
  ``w`` is the layer's neuron activations (hook ``blocks.{l}.mlp.post``) at the position that predicts the answer
  and the rest of the network runs as usual; approximated by the Riemann sum over ``alpha = k/m``,
  ``k = 1..m`` (the paper: ``m = 20``). Each layer is scaled on its own; all layers of one prompt go through
  one batched forward/backward pass (``m`` rows per layer).
* :func:`coarse_neurons` / :func:`refine` / :func:`adaptive_share` (Sec. 3.2): per prompt keep the neurons
  whose attribution exceeds ``t`` times the prompt's largest attribution (``t = 0.2``), then keep the neurons
  shared by more than ``p`` of the fact's prompts; the paper starts at ``p = 0.7`` and moves it by 0.05 until
  the average number of knowledge neurons per fact lies in ``[2, 5]``.
* :func:`answer_probs` with a :class:`NeuronEdit` (Sec. 4.1): *suppress* sets the neurons' activations to 0,
  *amplify* doubles them, at the answer-predicting position; the paper reports the answer probability falling by
  29.03% on average under suppression (random neurons: 1.47%) and rising by 31.17% under amplification
  (BERT-base, PARAREL).

The answer is one token: the first token of the fact's value, predicted at the prompt's last position (the
causal-LM counterpart of the paper's ``[MASK]``). Works on lmsci GPTs and Hugging Face models through the hook
names ``blocks.{l}.mlp.post`` (:mod:`lmsci.models.hf`), on the model's device.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lmsci.errors import ConfigError
from lmsci.measure.kv_memories import check_layers

MODES = ("suppress", "amplify")


def _device(model: Any) -> torch.device:
    return next(model.parameters()).device


def _d_mlp(model: Any, layer: int) -> int:
    from lmsci.models.arch import arch_of

    return int(arch_of(model).mlp_values(layer).shape[0])


def _check_prompt(prompt: Sequence[int], answer: int) -> list[int]:
    p = [int(t) for t in prompt]
    if not p:
        raise ConfigError("prompt", prompt, "a non-empty list of token ids")
    return p


@dataclass(frozen=True)
class NeuronEdit:
    """An intervention on MLP neurons at the answer position.

    Attributes:
        neurons: ``[(layer, neuron), ...]``.
        mode: ``"suppress"`` (activation set to 0) or ``"amplify"`` (activation times ``factor``).
        factor: the amplification factor (the paper doubles: 2.0).
    """

    neurons: tuple[tuple[int, int], ...]
    mode: str = "suppress"
    factor: float = 2.0
    by_layer: dict[int, list[int]] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ConfigError("mode", self.mode, " or ".join(MODES))
        d: dict[int, list[int]] = {}
        for l, i in self.neurons:
            d.setdefault(int(l), []).append(int(i))
        self.by_layer.update(d)

    def check(self, model: Any) -> None:
        """Raise ConfigError for a layer or neuron index the model does not have (names the range)."""
        check_layers(model, list(self.by_layer))
        for l, idx in self.by_layer.items():
            d = _d_mlp(model, l)
            bad = [i for i in idx if not 0 <= i < d]
            if bad:
                raise ConfigError("neuron", bad[0], f"an index in [0, {d - 1}] (layer {l} has d_mlp = {d})")


def _pad(prompts: Sequence[Sequence[int]], dev: torch.device) -> tuple[Tensor, Tensor]:
    """Right-padded ``[B, T]`` ids (pad = the prompt's own last token; causal models never look right) and the
    last real position of each row ``[B]``."""
    T = max(len(p) for p in prompts)
    ids = torch.tensor([list(p) + [p[-1]] * (T - len(p)) for p in prompts], dtype=torch.long, device=dev)
    last = torch.tensor([len(p) - 1 for p in prompts], dtype=torch.long, device=dev)
    return ids, last


def _edit_hooks(edit: NeuronEdit | None, last: Tensor) -> list[tuple[str, Any]]:
    if edit is None or not edit.neurons:
        return []
    hooks = []
    for l, idx in edit.by_layer.items():
        cols = torch.tensor(idx, dtype=torch.long, device=last.device)

        def fn(x: Tensor, hook: Any, cols: Tensor = cols) -> Tensor:
            x = x.clone()
            rows = torch.arange(x.shape[0], device=x.device)[:, None]
            at = last[:x.shape[0], None]
            c = cols.to(x.device)[None, :]
            x[rows, at, c] = 0.0 if edit.mode == "suppress" else x[rows, at, c] * edit.factor
            return x

        hooks.append((f"blocks.{l}.mlp.post", fn))
    return hooks


def answer_probs(model: Any, prompts: Sequence[Sequence[int]], answers: Sequence[int], *,
                 edit: NeuronEdit | None = None, batch_size: int = 64) -> Tensor:
    """Probability of each prompt's answer token at its last position, ``[n]`` (float32, on the CPU).

    Args:
        prompts: token-id lists (of different lengths). answers: one token id per prompt.
        edit: a :class:`NeuronEdit` applied at each prompt's last position (None: the clean model).

    Raises:
        ConfigError: empty prompts, mismatched lengths, a layer or neuron index the model lacks.
    """
    if len(prompts) != len(answers):
        raise ConfigError("answers", len(answers), f"one per prompt ({len(prompts)})")
    prompts = [_check_prompt(p, a) for p, a in zip(prompts, answers)]
    if edit is not None:
        edit.check(model)
    dev = _device(model)
    out = []
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            for s in range(0, len(prompts), batch_size):
                ids, last = _pad(prompts[s:s + batch_size], dev)
                with model.hooks(_edit_hooks(edit, last)):
                    logits = model(ids)
                lp = torch.log_softmax(logits[torch.arange(ids.shape[0], device=dev), last].float(), -1)
                a = torch.tensor([int(x) for x in answers[s:s + batch_size]], device=dev)
                out.append(lp.gather(1, a[:, None])[:, 0].exp().cpu())
    finally:
        model.train(was)
    return torch.cat(out) if out else torch.zeros(0)


def integrated_gradients(model: Any, prompt: Sequence[int], answer: int, *, steps: int = 20,
                         layers: Sequence[int] | None = None) -> Tensor:
    """Integrated-gradients attribution of every MLP neuron to ``P(answer | prompt)`` (Dai et al. Eq. 2-3).

    Args:
        prompt: token ids; the answer is predicted at the last position. answer: the answer token id.
        steps: ``m``, Riemann steps (the paper: 20). layers: which layers (default all).

    Returns:
        ``[len(layers), d_mlp]`` float32 attributions (units of probability), on the CPU.

    Raises:
        ConfigError: an empty prompt, ``steps < 1``, a layer the model lacks.
    """
    prompt = _check_prompt(prompt, answer)
    if steps < 1:
        raise ConfigError("steps", steps, "an integer >= 1 (the paper uses 20)")
    layers = check_layers(model, layers)
    dev = _device(model)
    ids = torch.tensor([prompt], dtype=torch.long, device=dev)
    pos = len(prompt) - 1
    names = [f"blocks.{l}.mlp.post" for l in layers]
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            _, cache = model.run_with_cache(ids, names)
        base = torch.stack([cache[n][0, pos].float() for n in names])  # [L, d_mlp]
        alphas = torch.arange(1, steps + 1, device=dev, dtype=torch.float32)[:, None] / steps
        scaled = [(alphas * base[j][None, :]).requires_grad_(True) for j in range(len(layers))]
        m = steps

        def hook_for(j: int):
            def fn(x: Tensor, hook: Any) -> Tensor:
                x = x.clone()
                x[j * m:(j + 1) * m, pos, :] = scaled[j].to(x.dtype)
                return x
            return fn

        with torch.enable_grad():
            with model.hooks([(n, hook_for(j)) for j, n in enumerate(names)]):
                logits = model(ids.expand(m * len(layers), -1))
            p = torch.softmax(logits[:, pos].float(), -1)[:, int(answer)]
            grads = torch.autograd.grad(p.sum(), scaled)
        attr = torch.stack([base[j] * grads[j].mean(0) for j in range(len(layers))])
    finally:
        model.train(was)
    return attr.detach().cpu()


def coarse_neurons(attr: Tensor, threshold: float = 0.2, layers: Sequence[int] | None = None) -> set[tuple[int, int]]:
    """``{(layer, neuron)}`` whose attribution exceeds ``threshold`` times the largest one (Dai et al. Sec. 3.2).

    Args:
        attr: ``[L, d_mlp]`` from :func:`integrated_gradients`. layers: the layer index of each row (default 0..L-1).
    """
    if not 0 < threshold <= 1:
        raise ConfigError("threshold", threshold, "a fraction in (0, 1] of the largest attribution (the paper: 0.2)")
    layers = list(range(attr.shape[0])) if layers is None else list(layers)
    mx = float(attr.max())
    if mx <= 0:
        return set()
    rows, cols = torch.nonzero(attr > threshold * mx, as_tuple=True)
    return {(layers[int(r)], int(c)) for r, c in zip(rows, cols)}


def refine(coarse: Sequence[set[tuple[int, int]]], share: float) -> list[tuple[int, int]]:
    """Neurons in more than ``share`` of the prompts' coarse sets (Dai et al. Sec. 3.2), sorted."""
    if not 0 <= share < 1:
        raise ConfigError("share", share, "a fraction in [0, 1) of the prompts")
    counts: dict[tuple[int, int], int] = {}
    for s in coarse:
        for n in s:
            counts[n] = counts.get(n, 0) + 1
    need = share * len(coarse)
    return sorted(n for n, c in counts.items() if c > need)


def adaptive_share(coarse_per_fact: Sequence[Sequence[set[tuple[int, int]]]], start: float = 0.7,
                   step: float = 0.05, lo: float = 2.0, hi: float = 5.0) -> float:
    """The paper's sharing threshold: start at ``p = start`` and move it by ``step`` (down when facts have too
    few neurons on average, up when too many) until the mean number of refined neurons per fact lies in
    ``[lo, hi]``; the closest ``p`` in ``[0, 1)`` when no value gets there."""
    def mean_n(p: float) -> float:
        return float(np.mean([len(refine(c, p)) for c in coarse_per_fact])) if coarse_per_fact else 0.0

    grid = [round(x, 6) for x in np.arange(0.0, 1.0, step)]
    p = min(grid, key=lambda g: abs(g - start))
    seen = set()
    while p not in seen:
        seen.add(p)
        n = mean_n(p)
        if lo <= n <= hi:
            return p
        nxt = round(p - step, 6) if n < lo else round(p + step, 6)
        if not 0 <= nxt < 1:
            return p
        p = nxt
    cands = sorted(seen, key=lambda g: min(abs(mean_n(g) - lo), abs(mean_n(g) - hi)))
    return cands[0]


def knowledge_neurons(model: Any, prompts: Sequence[Sequence[int]], answer: int, *, steps: int = 20,
                      threshold: float = 0.2, share: float = 0.7,
                      layers: Sequence[int] | None = None) -> tuple[list[tuple[int, int]], list[set[tuple[int, int]]]]:
    """A fact's knowledge neurons from its prompts (Dai et al. 2022, arXiv 2104.08696, Sec. 3).

    For each prompt (token ids), :func:`integrated_gradients` attributes ``P(answer | prompt)`` to every MLP neuron
    (``steps`` Riemann steps); neurons above ``threshold`` x the prompt's largest attribution form its coarse set;
    neurons in at least ``share`` of the coarse sets are the fact's knowledge neurons.

    Returns:
        ``(refined, coarse)``: ``refined`` a list of ``(layer, neuron)``; ``coarse`` one set of ``(layer, neuron)``
        per prompt.

    Raises:
        ConfigError / UnknownNameError: a layer the model does not have; an answer outside the vocabulary."""
    layers = check_layers(model, layers)
    coarse = [coarse_neurons(integrated_gradients(model, p, answer, steps=steps, layers=layers), threshold, layers)
              for p in prompts]
    return refine(coarse, share), coarse


def relative_change(before: Tensor, after: Tensor) -> Tensor:
    """``(after - before) / before`` elementwise (the paper's change ratio of the answer probability)."""
    return (after - before) / before.clamp_min(1e-12)


def random_neurons(model: Any, n: int, layers: Iterable[int], rng: np.random.Generator) -> list[tuple[int, int]]:
    """``n`` distinct (layer, neuron) pairs drawn uniformly from ``layers`` (the paper's random-neuron control)."""
    pool = [(l, i) for l in check_layers(model, list(layers)) for i in range(_d_mlp(model, l))]
    pick = rng.choice(len(pool), size=min(n, len(pool)), replace=False)
    return sorted(pool[int(k)] for k in pick)


__all__ = ["NeuronEdit", "MODES", "answer_probs", "integrated_gradients", "coarse_neurons", "refine",
           "adaptive_share", "knowledge_neurons", "relative_change", "random_neurons"]
