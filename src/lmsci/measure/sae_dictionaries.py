"""A TopK SAE against PCA and random directions on the same activations, scored against a world's true features:
the measurement that ``sae-ground-truth`` (CFG features) and ``sae-bios`` (bioS attribute features) share.

* :func:`compare_sae_baselines`: train a TopK SAE (:func:`lmsci.measure.sae.train_sae`, Gao et al. arXiv
  2406.04093) on training activations, encode held-out activations with it and with the same number of PCA
  components and random unit directions (:func:`lmsci.measure.feature_recovery.baseline_codes`), and score every
  dictionary against the held-out true features (:func:`lmsci.measure.feature_recovery.compare_dictionaries`,
  best-threshold F1 of each feature's best latent; Bricken et al. 2023, Karvonen et al. arXiv 2408.00113).
* :func:`dictionary_columns`: the per-dictionary result columns of that comparison.
* :class:`SAEDictionaryFields`: the configuration fields of the read-out layer and of the SAE (a mixin of both
  experiments' configurations).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from pydantic import Field
from torch import Tensor

from lmsci.config import StrictModel
from lmsci.measure.feature_recovery import baseline_codes, compare_dictionaries
from lmsci.measure.sae import SparseAutoencoder, train_sae

DICTS = ("sae", "pca", "random")
"""The dictionaries compared, in column order: the TopK SAE, PCA components, random unit directions."""


class SAEDictionaryFields(StrictModel):
    """Configuration fields of the read-out and the SAE (a mixin: ``class C(ExperimentConfig, SAEDictionaryFields)``).

    Attributes:
        layer: the block whose output residual stream is read (``blocks.{layer}.resid_post``; negative counts from
            the last block).
        d_sae, k: SAE latents and active latents (TopK). sae_steps, sae_batch, sae_lr: its Adam optimisation.
        aux_k, dead_tokens: AuxK (Gao et al., arXiv 2406.04093, app. A.2): a latent silent for ``dead_tokens``
            training tokens is dead; the ``aux_k`` largest dead pre-activations reconstruct the residual.
    """

    layer: int = Field(-1, description="block read: blocks.{layer}.resid_post (negative: from the end)")
    d_sae: int = Field(256, ge=2)
    k: int = Field(8, ge=1)
    sae_steps: int = Field(2000, ge=1)
    sae_batch: int = Field(256, ge=1)
    sae_lr: float = Field(1e-3, gt=0)
    aux_k: int = Field(64, ge=1)
    dead_tokens: int = Field(4096, ge=1)


def compare_sae_baselines(a_tr: Tensor, a_ev: Tensor, f_ev: Any, names: Sequence[str], *, d_sae: int, k: int,
                          steps: int, batch_size: int, lr: float, aux_k: int | None, dead_tokens: int, seed: int,
                          device: Any, threshold: float) -> tuple[SparseAutoencoder, dict[str, Any]]:
    """Train a TopK SAE on ``a_tr [n_train, d_model]`` and score it, PCA and random directions (``d_sae`` each, all
    seeded by ``seed``) on ``a_ev [n_eval, d_model]`` against the true binary features ``f_ev [n_eval, F]``.

    Args:
        names: the ``F`` feature names. d_sae, k, steps, batch_size, lr, aux_k, dead_tokens: the SAE
            (:func:`lmsci.measure.sae.train_sae`, ``kind="topk"``). device: where the SAE trains and encodes.
        threshold: best-latent F1 at which a feature counts as recovered.

    Returns:
        (the trained SAE in eval mode, :func:`~lmsci.measure.feature_recovery.compare_dictionaries`'s result keyed
        by :data:`DICTS`, ``by="f1"``).

    Raises:
        ValueError: from :func:`~lmsci.measure.sae.train_sae` or the comparison on bad shapes.
    """
    sae, _ = train_sae(a_tr.to(device), d_sae, kind="topk", k=k, steps=steps, batch_size=batch_size, lr=lr,
                       aux_k=aux_k, dead_tokens=dead_tokens, seed=seed)
    sae.eval()
    with torch.no_grad():
        codes = {"sae": sae.encode(a_ev.to(device)).float().cpu().numpy()}
    codes["pca"] = baseline_codes("pca", a_tr, a_ev, d_sae, seed=seed)
    codes["random"] = baseline_codes("random", a_tr, a_ev, d_sae, seed=seed)
    return sae, compare_dictionaries(codes, f_ev, threshold=threshold, by="f1", feature_names=list(names))


def dictionary_columns(res: dict[str, Any],
                       per_feature: Callable[[str, np.ndarray], dict[str, float]] | None = None) -> dict[str, Any]:
    """Result columns of :func:`compare_sae_baselines`: per dictionary ``d`` of :data:`DICTS`, ``share_d`` (share of
    features recovered), ``mean_f1_d``, ``mean_auc_d`` and ``per_feature(d, best F1 per feature [F])``'s columns;
    then ``sae_minus_pca`` and ``sae_minus_random`` (differences of mean best F1)."""
    out: dict[str, Any] = {}
    for d in DICTS:
        out[f"share_{d}"] = res[d]["share"]
        out[f"mean_f1_{d}"] = res[d]["mean_f1"]
        out[f"mean_auc_{d}"] = res[d]["mean_auc"]
        if per_feature is not None:
            out.update(per_feature(d, np.asarray(res[d]["scores"]["f1"])))
    out["sae_minus_pca"] = out["mean_f1_sae"] - out["mean_f1_pca"]
    out["sae_minus_random"] = out["mean_f1_sae"] - out["mean_f1_random"]
    return out
