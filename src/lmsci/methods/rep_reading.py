"""Representation reading (RepE): a reading vector from contrast pairs, its accuracy as a linear read-out, and its use
as a steering direction.

Source: Zou et al. 2023, "Representation Engineering: A Top-Down Approach to AI Transparency", arXiv 2310.01405,
sec. 3.1 (Linear Artificial Tomography): stimuli in contrast pairs (the concept present / absent, otherwise alike);
the neural activity of each stimulus at one token and layer; the *reading vector* is the first principal component of
the differences of paired activations (the pair order randomly flipped, the differences centred, as the official
``repe/rep_readers.py`` ``PCARepReader``), its sign chosen so that the concept-present member projects higher in most
pairs (``get_signs``); the read-out scores a stimulus by its projection on the vector (sec. 3.1 step 3, and the
pairwise accuracy of their Table/Fig. evaluations). ``method="mean_diff"`` is the difference of class means (the
"mean difference" baseline in Zou et al. sec. 3.1 and the direction of
:meth:`lmsci.methods.steering.ActAdd.from_contrast`). As a control (sec. 3.2 / 5), the vector is added to the residual
stream: :func:`as_steer` wraps it into an :class:`~lmsci.methods.steering.ActAdd` (activation addition, Turner et al.
2023, arXiv 2308.10248) at ``blocks.{layer}.resid_post``, every position, so :func:`lmsci.methods.steering.steering`
and everything of that harness (scores, generation) apply to it.

Shapes: ``n`` pairs, ``d`` = ``d_model``. Activations are read at hook ``blocks.{layer}.resid_post`` of an lmsci GPT or
of a Hugging Face model through the architecture map (an :class:`~lmsci.models.hf.HFModel` or a raw ``transformers``
causal LM, wrapped as :func:`lmsci.methods.steerable.as_steerable` does).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lmsci.errors import ConfigError
from lmsci.methods.steerable import as_steerable, as_token_lists, logits_of, n_layers, pad_batch
from lmsci.methods.steering import ActAdd, steering
from lmsci.models.device import device_of

METHODS = ("pca", "mean_diff")


@dataclass
class ReadingVector:
    """A concept direction.

    Attributes:
        direction: ``[d]`` unit vector; the concept-present member of a pair projects higher on it.
        threshold: projection that separates the classes for an unpaired read-out (midpoint of the class means
            of the fitting data).
        explained_variance: share of the (centred, sign-randomised) pair differences' variance along ``direction``
            (``"pca"``; NaN for ``"mean_diff"``).
        method: ``"pca"`` or ``"mean_diff"``. layer: the block whose output it reads (None when fitted on given
            activations).
    """

    direction: Tensor
    threshold: float
    explained_variance: float
    method: str
    layer: int | None = None

    def project(self, acts: Tensor) -> Tensor:
        """Projections ``[n]`` of activations ``[n, d]`` on the direction."""
        return acts.float() @ self.direction.to(acts.device)


def _check_pairs(pos: Tensor, neg: Tensor) -> None:
    for name, x in (("pos", pos), ("neg", neg)):
        if not isinstance(x, Tensor) or x.dim() != 2 or not x.is_floating_point():
            raise ConfigError(name, getattr(x, "shape", type(x).__name__), "a float tensor [n_pairs, d]")
    if pos.shape != neg.shape or pos.shape[0] < 2:
        raise ConfigError("pos/neg", (tuple(pos.shape), tuple(neg.shape)), "paired activations of one shape, >= 2 pairs")


def reading_vector(pos: Tensor, neg: Tensor, method: str = "pca", seed: int = 0, layer: int | None = None) -> ReadingVector:
    """The reading vector of paired activations (Zou et al. arXiv 2310.01405 sec. 3.1).

    Args:
        pos, neg: ``[n, d]`` activations of the concept-present and concept-absent member of each pair.
        method: ``"pca"`` (first principal component of the pair differences, each difference's sign flipped at
            random with ``seed``, then centred) or ``"mean_diff"`` (``mean(pos) - mean(neg)``, normalised).
        layer: recorded in the result.

    Raises:
        ConfigError: unpaired or non-2-d inputs, fewer than 2 pairs, an unknown method.
    """
    if method not in METHODS:
        raise ConfigError("method", method, ", ".join(METHODS))
    _check_pairs(pos, neg)
    p, q = pos.double(), neg.double()
    ev = float("nan")
    if method == "pca":
        g = torch.Generator().manual_seed(int(seed))
        flip = (torch.randint(0, 2, (len(p),), generator=g) * 2 - 1).double().to(p.device)
        diff = (p - q) * flip[:, None]
        diff = diff - diff.mean(0)
        _, S, Vh = torch.linalg.svd(diff, full_matrices=False)
        v = Vh[0]
        ev = float(S[0] ** 2 / (S ** 2).sum().clamp_min(1e-30))
        if float(((p - q) @ v > 0).double().mean()) < 0.5:
            v = -v
    else:
        v = p.mean(0) - q.mean(0)
        if float(v.norm()) == 0:
            raise ConfigError("pos/neg", "equal class means", "activations whose classes differ")
        v = v / v.norm()
    thr = float(((p @ v).mean() + (q @ v).mean()) / 2)
    return ReadingVector(v.float(), thr, ev, method, layer)


def read_accuracy(rv: ReadingVector, pos: Tensor, neg: Tensor) -> dict[str, float]:
    """Accuracy of ``rv`` as a linear read-out on paired activations ``[n, d]`` (use held-out pairs).

    Returns:
        ``{"pair_acc"}`` share of pairs whose concept-present member projects higher (chance 0.5; RepE's pairwise
        evaluation), ``{"acc"}`` share of the ``2n`` single activations on the right side of ``rv.threshold``,
        ``{"separation"}`` mean projection gap ``mean(pos) - mean(neg)`` (activation units).
    """
    _check_pairs(pos, neg)
    a, b = rv.project(pos), rv.project(neg)
    return {"pair_acc": float((a > b).float().mean()),
            "acc": float(torch.cat([a > rv.threshold, b <= rv.threshold]).float().mean()),
            "separation": float(a.mean() - b.mean())}


@torch.no_grad()
def contrast_activations(model: Any, pos: Any, neg: Any, layer: int, *, position: str = "last", pad_id: int = 0,
                         batch_size: int = 64, tokenizer: Any = None) -> tuple[Tensor, Tensor]:
    """Activations ``([n, d], [n, d])`` of paired stimuli at ``blocks.{layer}.resid_post``.

    Args:
        model: an lmsci GPT, an HFModel or a ``transformers`` causal LM.
        pos, neg: ``n`` paired stimuli each: token lists, ``[n, T]`` tensors, or strings with ``tokenizer``.
        position: ``"last"`` (the last real token; RepE reads the last token) or ``"mean"`` (mean over real tokens).

    Raises:
        ConfigError: different numbers of positive and negative stimuli; an empty set; a layer out of range; an
            unknown position.
    """
    if position not in ("last", "mean"):
        raise ConfigError("position", position, "'last' or 'mean'")
    m = as_steerable(model)
    L = n_layers(m)
    if not 0 <= int(layer) < L:
        raise ConfigError("layer", layer, f"a block index in 0..{L - 1}")
    name = f"blocks.{int(layer)}.resid_post"
    out = []
    sets = [as_token_lists(x, tokenizer) for x in (pos, neg)]
    if len(sets[0]) != len(sets[1]) or not sets[0] or any(len(s) == 0 for s in sets[0] + sets[1]):
        raise ConfigError("pos/neg", (len(sets[0]), len(sets[1])), "the same number (>= 1) of non-empty stimuli")
    for seqs in sets:
        acts = []
        for i in range(0, len(seqs), batch_size):
            ids, mask = pad_batch(seqs[i:i + batch_size], pad_id, device_of(m))
            with m.hooks(cache=name) as cache:
                logits_of(m, ids, mask)
            h = cache[name].float()
            if position == "last":
                acts.append(h[torch.arange(len(ids)), mask.sum(1) - 1])
            else:
                acts.append((h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True))
        out.append(torch.cat(acts))
    return out[0], out[1]


def reading_by_layer(model: Any, pos: Any, neg: Any, *, layers: Sequence[int] | None = None, method: str = "pca",
                     train_fraction: float = 0.5, seed: int = 0, **kw: Any) -> list[dict[str, Any]]:
    """Fit a reading vector at each layer on the first ``train_fraction`` of the pairs (in a permutation drawn with
    ``seed``) and score it on the rest: one ``{"layer", "vector", "train", "test"}`` per layer (``train``/``test``
    from :func:`read_accuracy`). ``kw`` go to :func:`contrast_activations`.

    Raises:
        ConfigError: ``train_fraction`` leaving fewer than 2 pairs on either side; as :func:`contrast_activations`.
    """
    m = as_steerable(model)
    layers = list(range(n_layers(m))) if layers is None else [int(l) for l in layers]
    out = []
    perm = None
    for l in layers:
        P, N = contrast_activations(m, pos, neg, l, **kw)
        if perm is None:
            perm = torch.randperm(len(P), generator=torch.Generator().manual_seed(int(seed)))
            k = int(round(train_fraction * len(P)))
            if k < 2 or len(P) - k < 2:
                raise ConfigError("train_fraction", train_fraction, f"a split leaving >= 2 of the {len(P)} pairs each side")
        tr, te = perm[:k].to(P.device), perm[k:].to(P.device)
        rv = reading_vector(P[tr], N[tr], method, seed, layer=l)
        out.append({"layer": l, "vector": rv, "train": read_accuracy(rv, P[tr], N[tr]),
                    "test": read_accuracy(rv, P[te], N[te])})
    return out


def as_steer(rv: ReadingVector, layer: int | None = None, scale: float = 1.0, name: str = "rep") -> ActAdd:
    """An :class:`~lmsci.methods.steering.ActAdd` (no dummy steer) whose vector is ``scale * rv.direction`` at
    ``blocks.{layer}.resid_post`` (default ``rv.layer``); steer value ``s`` adds ``s * scale * direction`` at every
    position.

    Raises:
        ConfigError: no layer given or recorded.
    """
    layer = rv.layer if layer is None else layer
    if layer is None:
        raise ConfigError("layer", None, "a block index (the reading vector records none)")
    steer = ActAdd(int(rv.direction.numel()), int(layer), names=(name,), dummy=False)
    with torch.no_grad():
        steer.vectors[0] = float(scale) * rv.direction.float()
    return steer


@torch.no_grad()
def steering_effect(model: Any, rv: ReadingVector, ids: Tensor, alphas: Sequence[float],
                    score: Callable[[Tensor], Tensor], *, layer: int | None = None) -> np.ndarray:
    """``score(logits [B, T, V]) -> scalar`` of the model steered by ``alpha * rv.direction`` (added at
    ``blocks.{layer}.resid_post``, every position) for each ``alpha``: ``[len(alphas)]``. ``alpha = 0`` is the
    unsteered model.

    Raises:
        ConfigError: as :func:`as_steer`; a layer the model lacks (from ``ActAdd.check_model``).
    """
    m = as_steerable(model)
    steer = as_steer(rv, layer).to(device_of(m))
    out = []
    ids = ids.to(device_of(m))
    for a in alphas:
        with steering(m, steer, torch.tensor([float(a)], device=device_of(m))):
            out.append(float(score(logits_of(m, ids))))
    return np.asarray(out)


__all__ = ["METHODS", "ReadingVector", "reading_vector", "read_accuracy", "contrast_activations", "reading_by_layer",
           "as_steer", "steering_effect"]
