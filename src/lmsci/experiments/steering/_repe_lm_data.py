"""Stimuli, activations and the reading pipeline of :mod:`lmsci.experiments.steering.repe_lm` (representation reading
on a real LM).

* :func:`build_pools`: VADER-labelled Shakespeare dialogue lines, split by play per genre as ``lm-steer-lm`` does
  (:func:`lmsci.worlds.shakespeare.split_plays_by_genre`): positive and negative lines of the *fit plays* (the
  training pairs), of the *held-out plays* (the test pairs) and the held-out plays' VADER-neutral lines (prompts).
* :func:`sample_pairs`: a seed's contrast pairs (a positive and a negative line matched at random).
* :func:`layer_activations`: the last-token residual stream leaving every candidate block, one forward per batch.
* :func:`select_layer`: the reading pipeline of one direction estimator (the RepE reading vector, the mean
  difference, or a random direction with its sign fitted): 2-fold cross-validation on the training pairs picks the
  layer, the direction is refitted on all training pairs there and scored on the held-out pairs.

Source: Zou et al. 2023, "Representation Engineering", arXiv 2310.01405, sec. 3.1 (LAT: a task template around each
stimulus, the representation at its last token, the reading vector from contrast pairs, pairwise accuracy).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lmsci.errors import ConfigError
from lmsci.measure import text_scores as ts
from lmsci.methods.rep_reading import ReadingVector, read_accuracy, reading_vector
from lmsci.methods.steerable import as_steerable, logits_of, masked_nll, pad_batch
from lmsci.models.device import device_of
from lmsci.runs import derive_seed

_POOLS: dict[tuple, dict[str, list[str]]] = {}
ESTIMATORS = ("pca", "mean_diff", "random")


def build_pools(cfg: Any) -> dict[str, list[str]]:
    """The run's line pools (fixed by ``cfg.seed`` and ``play_split_seed``; cached per process).

    Returns:
        ``fit_pos``/``fit_neg`` (fit plays, VADER compound >= ``vader_threshold`` / <= -threshold), ``test_pos``/
        ``test_neg`` (held-out plays, same labels), ``neutral`` (held-out plays, compound exactly 0).
    """
    key = (cfg.seed, cfg.play_split_seed, cfg.scorer_fraction, cfg.min_words, cfg.max_words, cfg.lines_per_play,
           cfg.vader_threshold)
    if key in _POOLS:
        return _POOLS[key]
    from lmsci.worlds import shakespeare as sh

    works = sh.load_works()
    held, fit = sh.split_plays_by_genre(works, ("comedy", "tragedy"), cfg.scorer_fraction, cfg.play_split_seed)
    rng = np.random.default_rng(derive_seed(cfg.seed, "lines"))
    out: dict[str, list[str]] = {}
    for name, ws in (("fit", fit), ("test", held)):
        lines = []
        for w in ws:
            ls = sh.dialogue_lines(w, cfg.min_words, cfg.max_words)
            if cfg.lines_per_play is not None and len(ls) > cfg.lines_per_play:
                ls = [ls[i] for i in sorted(rng.permutation(len(ls))[: cfg.lines_per_play])]
            lines += ls
        comp = ts.vader_compound(lines)
        out[f"{name}_pos"] = [s for s, c in zip(lines, comp) if c >= cfg.vader_threshold]
        out[f"{name}_neg"] = [s for s, c in zip(lines, comp) if c <= -cfg.vader_threshold]
        if name == "test":
            out["neutral"] = [s for s, c in zip(lines, comp) if c == 0.0]
    _POOLS.clear()
    _POOLS[key] = out
    return out


def sample_pairs(pools: dict[str, list[str]], split: str, n: int, seed: int) -> tuple[list[str], list[str]]:
    """``n`` contrast pairs of ``split`` (``"fit"`` or ``"test"``): ``n`` positive and ``n`` negative lines drawn
    without replacement with ``seed`` and matched in draw order (pair ``i`` = ``(pos[i], neg[i])``).

    Raises:
        ConfigError: ``n`` above the lines of either class in the pool (field ``n_train_pairs``/``n_test_pairs``).
    """
    rng = np.random.default_rng(int(seed))
    field = "n_train_pairs" if split == "fit" else "n_test_pairs"
    out = []
    for cls in ("pos", "neg"):
        pool = pools[f"{split}_{cls}"]
        if len(pool) < n:
            raise ConfigError(field, n, f"<= {len(pool)} ({cls} lines of the {split} plays)")
        out.append([pool[i] for i in rng.permutation(len(pool))[:n]])
    return out[0], out[1]


def stimulus_ids(tok: Any, template: str, lines: Sequence[str], max_length: int) -> list[list[int]]:
    """Token ids of ``template.format(line=...)`` for each line (no special tokens; cut to the last
    ``max_length`` tokens so that the read-out token, the last, is kept)."""
    return [list(tok.encode(template.format(line=s), add_special_tokens=False))[-max_length:] for s in lines]


@torch.no_grad()
def layer_activations(model: Any, seqs: list[list[int]], layers: Sequence[int], pad_id: int,
                      batch_size: int) -> dict[int, Tensor]:
    """The residual stream leaving each block of ``layers`` (hook ``blocks.{l}.resid_post``) at the last real
    token of each sequence: ``{l: [n, d_model]}`` float32 on the model's device (one forward per batch for every
    layer; right padding with an attention mask)."""
    m = as_steerable(model)
    names = {int(l): f"blocks.{int(l)}.resid_post" for l in layers}
    parts: dict[int, list[Tensor]] = {l: [] for l in names}
    for i in range(0, len(seqs), batch_size):
        ids, mask = pad_batch(seqs[i:i + batch_size], pad_id, device_of(m))
        with m.hooks(cache=list(names.values())) as cache:
            logits_of(m, ids, mask)
        last = mask.sum(1) - 1
        for l, name in names.items():
            parts[l].append(cache[name].float()[torch.arange(len(ids), device=ids.device), last])
    return {l: torch.cat(p) for l, p in parts.items()}


def random_direction(d: int, seed: int, device: Any) -> Tensor:
    """A unit vector ``[d]`` uniform on the sphere (a Gaussian draw with ``seed``, normalised)."""
    v = torch.randn(int(d), generator=torch.Generator().manual_seed(int(seed)), dtype=torch.float64)
    return (v / v.norm()).float().to(device)


def fit_direction(kind: str, pos: Tensor, neg: Tensor, seed: int, layer: int, rand: Tensor | None = None
                  ) -> ReadingVector:
    """A direction fitted on paired activations ``[n, d]``: ``"pca"`` / ``"mean_diff"``
    (:func:`lmsci.methods.rep_reading.reading_vector`), or ``"random"``: the unit vector ``rand`` with the
    reading vector's sign rule (flipped when the concept-present member projects higher in fewer than half of the
    pairs, RepE ``get_signs``) and threshold (midpoint of the class means)."""
    if kind != "random":
        return reading_vector(pos, neg, kind, seed, layer=layer)
    v = rand.to(pos.device)
    if float(((pos - neg) @ v > 0).float().mean()) < 0.5:
        v = -v
    thr = float(((pos @ v).mean() + (neg @ v).mean()) / 2)
    return ReadingVector(v, thr, float("nan"), "random", layer)


def select_layer(kind: str, fit: dict[int, tuple[Tensor, Tensor]], test: dict[int, tuple[Tensor, Tensor]],
                 seed: int) -> dict[str, Any]:
    """The reading pipeline of one estimator (``kind`` in :data:`ESTIMATORS`) over the candidate layers.

    Args:
        fit, test: ``{layer: (pos [n, d], neg [n, d])}`` activations of the training and the held-out pairs.
        seed: the 2-fold split of the training pairs, the PCA sign flips and the random directions (one per layer,
            ``derive_seed(seed, "random", layer)``).

    Returns:
        ``layer`` (the candidate with the highest mean 2-fold cross-validated pairwise accuracy on the training
        pairs; the first on ties), ``vector`` (refitted on all training pairs there), ``test`` (its
        :func:`~lmsci.methods.rep_reading.read_accuracy` on the held-out pairs), ``cv`` and ``test_by_layer``
        (``{layer: pairwise accuracy}``; the held-out one is reported only, it chooses nothing).
    """
    if kind not in ESTIMATORS:
        raise ConfigError("estimator", kind, ", ".join(ESTIMATORS))
    layers = sorted(fit)
    n = len(fit[layers[0]][0])
    perm = np.random.default_rng(derive_seed(seed, "cv-split")).permutation(n)
    halves = (torch.as_tensor(perm[: n // 2]), torch.as_tensor(perm[n // 2:]))
    cv, test_acc, vecs = {}, {}, {}
    for l in layers:
        P, N = fit[l]
        rand = random_direction(P.shape[1], derive_seed(seed, "random", l), P.device) if kind == "random" else None
        accs = []
        for a, b in (halves, halves[::-1]):
            rv = fit_direction(kind, P[a], N[a], seed, l, rand)
            accs.append(read_accuracy(rv, P[b], N[b])["pair_acc"])
        cv[l] = float(np.mean(accs))
        vecs[l] = fit_direction(kind, P, N, seed, l, rand)
        test_acc[l] = read_accuracy(vecs[l], *test[l])["pair_acc"]
    best = max(layers, key=lambda l: (cv[l], -l))
    return {"layer": best, "vector": vecs[best], "test": read_accuracy(vecs[best], *test[best]), "cv": cv,
            "test_by_layer": test_acc}


@torch.no_grad()
def median_norm(model: Any, prompts: Tensor, layer: int) -> float:
    """Median L2 norm of the residual stream leaving block ``layer`` over the tokens of ``prompts [n, P]``
    (activation units): the yardstick of the steering norm."""
    m = as_steerable(model)
    name = f"blocks.{int(layer)}.resid_post"
    ids = prompts.to(device_of(m))
    with m.hooks(cache=name) as cache:
        logits_of(m, ids, torch.ones_like(ids))
    return float(cache[name].float().norm(dim=-1).flatten().median())


@torch.no_grad()
def lines_nll(model: Any, seqs: list[list[int]], pad_id: int) -> float:
    """Mean next-token NLL (nats/token) of token lists under the unsteered model (the ``pretrained`` gate)."""
    m = as_steerable(model)
    ids, mask = pad_batch(seqs, pad_id, device_of(m))
    nll, tmask = masked_nll(logits_of(m, ids, mask), ids, mask)
    return float((nll * tmask).sum() / tmask.sum().clamp_min(1))


__all__ = ["ESTIMATORS", "build_pools", "sample_pairs", "stimulus_ids", "layer_activations", "random_direction",
           "fit_direction", "select_layer", "median_norm", "lines_nll"]
