"""Progress measures of grokking (Fourier restricted/excluded loss, the embedding's spectrum, weight norm) and the
phases they reveal, with the small step and rank helpers the grokking experiments read them with.

Source: Nanda, Chan, Lieberum, Smith, Steinhardt, "Progress measures for grokking via mechanistic
interpretability", arXiv 2301.05217 (ICLR 2023), secs. 4-5 and Fig. 7. At checkpoints of one training run (key
frequencies are those of the *final* model, as in Nanda et al., applied to every checkpoint):

* the embedding's Fourier spectrum: ``W_E`` restricted to the ``p`` residue tokens (``[p, d_model]``) in the
  orthonormal Fourier basis over residues (constant, ``cos(2 pi k x / p)``, ``sin(2 pi k x / p)``,
  ``k = 1 .. (p-1)/2``); the share of the squared Frobenius norm per frequency
  (:func:`lmsci.measure.fourier.embedding_spectrum`);
* key frequencies: the ``n_key`` frequencies with the largest share at the end of training;
* restricted loss: the logits over all ``p**2`` pairs projected, for every output ``c``, onto the constant and
  the directions ``cos(w_k (x + y))``, ``sin(w_k (x + y))`` of the key frequencies (``w_k = 2 pi k / p``), the
  cross-entropy on the test pairs (:func:`lmsci.measure.fourier.fourier_logit_split`);
* excluded loss: the same directions *removed* from the logits, the cross-entropy on the training pairs;
* total weight norm ``sqrt(sum of squared parameters)``.

Phase detection (:func:`detect_phases`): memorisation ends at ``t_mem``, the first step whose training accuracy
reaches ``acc`` (0.99); circuit formation runs from ``t_mem`` to ``t_clean``, the first evaluation at or after
``t_mem`` whose test loss is at most half the largest test loss seen between ``t_mem`` and ``t_gen``; clean-up
runs from ``t_clean`` to ``t_gen``, the first evaluation with test accuracy >= ``acc``.

Instruments take what they measure as arguments: the task (a :class:`lmsci.worlds.modular.ModularData` or
anything with its ``p``, ``input_ids``, ``train_idx`` and ``test_idx``) is passed in, no world is imported.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from lmsci.measure.fourier import embedding_spectrum, fourier_logit_split, key_frequencies, top_share
from lmsci.models.gpt import GPT
from lmsci.models.modular import answer_logits

__all__ = ["first_step", "detect_phases", "spearman", "progress_measures", "REACH_ACC"]

#: "reaches" = accuracy >= 0.99 (Nanda et al.'s and Power et al.'s generalisation level)
REACH_ACC = 0.99


def first_step(steps, values, pred) -> int | None:
    """The first ``steps[i]`` with ``pred(values[i])`` true, or None (None and non-finite values are skipped).

    Args:
        steps: steps ``[n]`` (in order).
        values: the measure at those steps ``[n]``.
        pred: the condition, ``pred(value) -> bool``.
    """
    for s, v in zip(steps, values):
        if v is not None and np.isfinite(v) and pred(v):
            return int(s)
    return None


def detect_phases(steps: np.ndarray, test_loss: np.ndarray, test_acc: np.ndarray, t_mem: int | None,
                  acc: float = REACH_ACC) -> dict:
    """The three phases of Nanda et al. from the measured curves (rule in the module docstring; arXiv 2301.05217
    sec. 5.2).

    Args:
        steps: evaluation steps ``[n]`` (increasing).
        test_loss, test_acc: ``[n]`` at those steps (nats; fraction).
        t_mem: the first step with training accuracy >= ``acc`` (None: never memorised).
        acc: the accuracy that counts as "reached" (0.99).

    Returns:
        ``{"t_mem", "t_clean", "t_gen"}`` (steps; None where a boundary was not reached): memorisation
        ``[0, t_mem)``, circuit formation ``[t_mem, t_clean)``, clean-up ``[t_clean, t_gen]``.
    """
    steps, test_loss, test_acc = (np.asarray(a, float) for a in (steps, test_loss, test_acc))
    t_gen = first_step(steps, test_acc, lambda v: v >= acc)
    out = {"t_mem": t_mem, "t_clean": None, "t_gen": t_gen}
    if t_mem is None:
        return out
    after = steps >= t_mem
    window = after & (steps <= (t_gen if t_gen is not None else steps[-1]))
    if not window.any():
        return out
    peak = float(np.nanmax(test_loss[window]))
    t_clean = first_step(steps[after], test_loss[after], lambda v: v <= 0.5 * peak)
    if t_gen is not None and t_clean is not None:
        t_clean = min(t_clean, t_gen)
    out["t_clean"] = t_clean
    return out


def spearman(x, y) -> float:
    """Spearman rank correlation of two equal-length sequences (scipy; ties averaged); NaN with fewer than 3
    values or when undefined (a constant sequence)."""
    from scipy import stats

    if len(x) < 3:
        return float("nan")
    r = stats.spearmanr(x, y).statistic
    return float(r)


def progress_measures(model: GPT, data: Any, checkpoints: dict[int, dict], n_key: int,
                      top_k: int = 6) -> tuple[pd.DataFrame, list[int], np.ndarray]:
    """Fourier progress measures at every checkpoint (key frequencies of the final checkpoint; Nanda et al.,
    arXiv 2301.05217, sec. 5.1).

    Args:
        model: the one-layer model of :func:`lmsci.models.modular.grokking_model` (vocabulary ``p + 1``); its
            weights are overwritten by each checkpoint in turn (the last step's weights stay loaded).
        data: the task of (x + y) mod p (``p``, ``input_ids [n, 3]``, ``train_idx``, ``test_idx``; e.g.
            :class:`lmsci.worlds.modular.ModularData`).
        checkpoints: ``{step: state_dict}`` of the run.
        n_key: key frequencies (the largest shares of the final embedding).
        top_k: the top-k share reported (column ``top{top_k}_share``).

    Returns:
        ``(table, keys, final_shares)``: table columns ``step, restricted_loss`` (test pairs, nats),
        ``excluded_loss`` (training pairs, nats), ``full_test_loss``, ``full_train_loss``, ``top{top_k}_share``,
        ``const_share``, ``weight_norm`` and ``share_k{k}`` for every frequency; ``keys`` the key frequencies;
        ``final_shares [(p-1)/2]`` the final embedding's spectrum.
    """
    p = data.p
    dev = next(model.parameters()).device
    order = sorted(checkpoints)
    model.load_state_dict(checkpoints[order[-1]])
    final_shares, _ = embedding_spectrum(model.wte.weight[:p])
    keys = key_frequencies(final_shares, n_key)
    grid_ids = torch.stack([torch.arange(p, device=dev).repeat_interleave(p), torch.arange(p, device=dev).repeat(p),
                            torch.full((p * p,), p, device=dev)], 1)
    z = (grid_ids[:, 0] + grid_ids[:, 1]) % p
    # rows of data.input_ids -> index into the x-major grid (add: x * p + y)
    flat = (data.input_ids[:, 0] * p + data.input_ids[:, 1]).to(dev)
    tr, te = flat[data.train_idx.to(dev)], flat[data.test_idx.to(dev)]
    rows = []
    for s in order:
        model.load_state_dict(checkpoints[s])
        with torch.no_grad():
            L = answer_logits(model, grid_ids)[:, :p]
            restricted, excluded = fourier_logit_split(L.view(p, p, p), keys)
            restricted, excluded = restricted.view(p * p, p), excluded.view(p * p, p)
            shares, const = embedding_spectrum(model.wte.weight[:p])
            wn = float(torch.sqrt(sum((w ** 2).sum() for w in model.parameters())))
        rows.append({"step": s,
                     "restricted_loss": float(F.cross_entropy(restricted[te], z[te])),
                     "excluded_loss": float(F.cross_entropy(excluded[tr], z[tr])),
                     "full_test_loss": float(F.cross_entropy(L[te], z[te])),
                     "full_train_loss": float(F.cross_entropy(L[tr], z[tr])),
                     f"top{top_k}_share": top_share(shares, top_k), "const_share": const, "weight_norm": wn,
                     **{f"share_k{k + 1}": float(v) for k, v in enumerate(shares)}})
    return pd.DataFrame(rows), keys, final_shares
