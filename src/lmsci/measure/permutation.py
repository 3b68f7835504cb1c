"""Word-order (in)sensitivity metrics: permutation acceptance Omega_x, P^c / P^f, and the share of correct
predictions unchanged by shuffling.

Sources: Sinha, Parthasarathi, Pineau, Williams, "UnNatural Language Inference", arXiv 2101.00010, sec. 3
(Omega_x: the fraction of examples for which at least a fraction x of the q permutations get the gold label;
Omega_max = Omega_{1/q}; P^c / P^f: the mean fraction of accepted permutations over examples the model got right /
wrong unpermuted); Pham, Bui, Mai, Nguyen, "Out of Order", arXiv 2012.15180, sec. 3 (the share of originally
correct predictions that stay the same after shuffling). Spec: impossibility_and_theory.md sec. 6a-6b.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def permutation_metrics(gold: np.ndarray, pred_orig: np.ndarray, pred_perm: np.ndarray,
                        xs: Sequence[float] = (0.1, 0.25, 0.5, 0.75, 1.0)) -> dict[str, float | dict]:
    """All metrics from predictions.

    Args:
        gold: ``[n]`` gold labels.
        pred_orig: ``[n]`` predictions on the unpermuted inputs.
        pred_perm: ``[n, q]`` predictions on ``q`` permutations of each input.
        xs: thresholds of the Omega_x curve (``1/q`` is added as ``omega_max``).

    Returns:
        ``acc_orig``, ``acc_perm`` (mean over all permuted inputs), ``omega_max``, ``omega`` (``{x: Omega_x}``),
        ``p_c`` / ``p_f`` (NaN when no example is correct / incorrect), ``unchanged_correct`` (over originally
        correct examples, the fraction of their permutations predicted as before), ``unchanged_all``.
    """
    gold, pred_orig, pred_perm = np.asarray(gold), np.asarray(pred_orig), np.asarray(pred_perm)
    n, q = pred_perm.shape
    accept = (pred_perm == gold[:, None]).mean(1)  # per example, fraction of permutations with the gold label
    correct = pred_orig == gold
    same = (pred_perm == pred_orig[:, None])
    omega = {float(x): float((accept >= x - 1e-12).mean()) for x in xs}
    return {
        "acc_orig": float(correct.mean()),
        "acc_perm": float((pred_perm == gold[:, None]).mean()),
        "omega_max": float((accept >= 1.0 / q - 1e-12).mean()),
        "omega": omega,
        "p_c": float(accept[correct].mean()) if correct.any() else float("nan"),
        "p_f": float(accept[~correct].mean()) if (~correct).any() else float("nan"),
        "unchanged_correct": float(same[correct].mean()) if correct.any() else float("nan"),
        "unchanged_all": float(same.mean()),
        "q": int(q),
        "n": int(n),
    }
