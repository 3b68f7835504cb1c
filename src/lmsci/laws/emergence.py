"""Is an ability's curve over compute sharp, or is the sharpness made by the metric? Law fits for one metric.

Schaeffer, Miranda & Koyejo 2023 ("Are Emergent Abilities of Large Language Models a Mirage?", arXiv 2304.15004,
Section 2): if the per-token probability of the right answer token grows smoothly with scale, ``p(C)`` (the
per-token loss a power law in C), a discontinuous metric of an ``L``-token answer (exact match, ``p^L``) rises
sharply, like the "emergent" abilities of Wei et al. 2022 (arXiv 2206.07682), while a continuous metric of the same
outputs (per-token log-likelihood; token edit distance, about ``L (1 - p)``) changes smoothly. Seed 000 fits the
downstream sigmoid in log compute.

For one metric ``y`` over compute ``C`` this module fits the two forms of :mod:`lmsci.laws.forms` with
:func:`lmsci.laws.fit.fit` (same fitter, same loss, linear space, so the residuals compare):

* ``logistic_c``: ``y = b + a / (1 + exp(-k (ln C - m)))`` (4 parameters) and
* ``power_c``: ``y = E + A C^-alpha`` (3 parameters),

with compute rescaled by its geometric mean (``C_ref``) for conditioning (``m`` and the power law's ``A`` are in
those units; predictions take raw compute). :func:`compare_metric_laws` reports in-sample RMSE and AIC
(``n ln(RSS/n) + 2k``, :class:`lmsci.laws.fit.FitResult`), the held-out error when the largest-compute points are
left out of the fit (extrapolation, as :func:`lmsci.laws.compare.heldout_error`), and each held-out point's prediction
with a bootstrap interval (:func:`predict_interval`: the fits of ``n_boot`` resamples of the training points).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from lmsci.errors import ConfigError, DataError
from lmsci.laws.fit import FitResult, fit
from lmsci.laws.forms import get_form

LAWS = ("logistic_c", "power_c")


def _data_grid(law: str, lc: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Starting points in fit space spread over the data: midpoints at the quantiles of ln C, amplitudes at the
    range of y, both directions."""
    lo, hi = float(y.min()), float(y.max())
    span = max(hi - lo, 1e-6)
    width = max(float(lc.max() - lc.min()), 1e-6)
    if law == "logistic_c":
        la = [np.log(span), np.log(2 * span)]
        b = [lo - 0.1 * span, lo]
        k = [s * g / width for s in (-1, 1) for g in (2.0, 8.0, 32.0)]
        m = list(np.quantile(lc, [0.2, 0.5, 0.8]))
        return np.array(list(itertools.product(la, b, k, m)), dtype=float)
    E = [lo, hi, 0.5 * (lo + hi)]
    A = [s * span * f for s in (-1, 1) for f in (0.5, 2.0)]
    alpha = [0.05, 0.3, 1.0, 2.5]
    return np.array(list(itertools.product(E, A, alpha)), dtype=float)


def _checked(compute: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    C, y = np.asarray(compute, dtype=float), np.asarray(y, dtype=float)
    if C.shape != y.shape or C.ndim != 1:
        raise DataError(f"compute and metric must be 1-D of one length; got {C.shape} and {y.shape}")
    if not (np.isfinite(C).all() and (C > 0).all() and np.isfinite(y).all()):
        raise DataError("compute must be finite and > 0 and the metric finite")
    return C, y


def fit_metric_law(law: str, compute: Sequence[float], y: Sequence[float], *, n_boot: int = 0, seed: int = 0,
                   c_ref: float | None = None) -> FitResult:
    """Fit ``law`` (``"logistic_c"`` or ``"power_c"``) to a metric ``y [n]`` over ``compute [n]`` (FLOPs or any
    positive scale) by least squares (:func:`lmsci.laws.fit.fit`, ``loss="l2"``, data-spread starting grid).

    Args:
        n_boot: bootstrap resamples of the points for intervals (0 = none).
        c_ref: the compute unit (default: the geometric mean of ``compute``); kept on the result as ``c_ref``.

    Returns:
        the :class:`FitResult`, with attribute ``c_ref`` (predict at ``C / c_ref``: use :func:`predict`).

    Raises:
        ConfigError: an unknown law. DataError: bad data or too few points for the law.
    """
    if law not in LAWS:
        raise ConfigError("law", law, f"one of {LAWS}")
    C, y = _checked(compute, y)
    ref = float(np.exp(np.log(C).mean())) if c_ref is None else float(c_ref)
    x = C / ref
    form = get_form(law)
    res = fit(form, {"C": x}, y, loss="l2", grid=_data_grid(law, np.log(x), y), n_starts=6, n_boot=n_boot,
              seed=seed)
    res.c_ref = ref  # type: ignore[attr-defined]
    return res


def predict(res: FitResult, compute: Sequence[float]) -> np.ndarray:
    """The fitted metric at raw ``compute [m]`` (a result of :func:`fit_metric_law`)."""
    return res.predict({"C": np.asarray(compute, dtype=float) / res.c_ref})  # type: ignore[attr-defined]


def predict_interval(res: FitResult, compute: Sequence[float], level: float = 0.9) -> dict[str, np.ndarray]:
    """Prediction at raw ``compute [m]`` with a bootstrap percentile interval: the ``(1 - level)/2`` and
    ``(1 + level)/2`` quantiles of the predictions of the resamples' fits (the parameter uncertainty of the curve,
    not the noise of a new measurement).

    Returns:
        ``{"pred": [m], "lo": [m], "hi": [m]}``.

    Raises:
        ConfigError: the fit has no bootstrap (``n_boot=0``) or ``level`` outside (0, 1).
    """
    if not 0.0 < level < 1.0:
        raise ConfigError("level", level, "a number in (0, 1)")
    if res.boot_theta is None or len(res.boot_theta) == 0:
        raise ConfigError("n_boot", res.n_boot, ">= 1 converged bootstrap resample (fit with n_boot > 0)")
    x = {"C": np.asarray(compute, dtype=float) / res.c_ref}  # type: ignore[attr-defined]
    draws = np.stack([res.form.predict(th, x) for th in res.boot_theta])  # [B, m]
    q = (1.0 - level) / 2.0
    return {"pred": res.form.predict(res.theta, x), "lo": np.quantile(draws, q, axis=0),
            "hi": np.quantile(draws, 1.0 - q, axis=0)}


def compare_metric_laws(compute: Sequence[float], y: Sequence[float], *, n_heldout: int = 2, n_boot: int = 200,
                        level: float = 0.9, seed: int = 0) -> dict[str, Any]:
    """Fit both laws to a metric over compute and compare them in-sample and on held-out large-compute points.

    Args:
        compute, y: ``[n]`` compute and metric (one value per model; average seeds first or pass them all).
        n_heldout: the points of largest compute left out of the held-out fits (0: no held-out comparison).
        n_boot: bootstrap resamples for the held-out prediction intervals.
        level: the interval's coverage.

    Returns:
        ``{"laws": {law: {"params", "rmse", "aic", "bic", "k", "converged", "rmse_heldout", "heldout":
        {"compute", "y", "pred", "lo", "hi", "covered"}}}, "best_aic": law, "best_heldout": law or None,
        "delta_aic": aic(power_c) - aic(logistic_c) (> 0 favours the sigmoid), "heldout_ratio":
        rmse_heldout(power_c) / rmse_heldout(logistic_c) (> 1 favours the sigmoid)}``.

    Raises:
        DataError: bad data, or too few points (the 4-parameter sigmoid needs ``n - n_heldout >= 5``).
    """
    C, y = _checked(compute, y)
    if n_heldout < 0 or len(C) - n_heldout < 5:
        raise DataError(f"{len(C)} points with n_heldout={n_heldout}: the sigmoid needs >= 5 points to fit")
    order = np.argsort(C, kind="stable")
    train, test = order[: len(C) - n_heldout], order[len(C) - n_heldout:]
    ref = float(np.exp(np.log(C).mean()))
    out: dict[str, Any] = {"laws": {}}
    for law in LAWS:
        full = fit_metric_law(law, C, y, c_ref=ref)
        row = {"params": full.params, "rmse": full.rmse, "aic": full.aic, "bic": full.bic, "k": full.k,
               "converged": bool(full.converged), "rmse_heldout": None, "heldout": None}
        if n_heldout:
            part = fit_metric_law(law, C[train], y[train], n_boot=n_boot, seed=seed, c_ref=ref)
            iv = predict_interval(part, C[test], level)
            row["rmse_heldout"] = float(np.sqrt(np.mean((iv["pred"] - y[test]) ** 2)))
            row["heldout"] = {"compute": C[test], "y": y[test], **iv,
                              "covered": (iv["lo"] <= y[test]) & (y[test] <= iv["hi"])}
        out["laws"][law] = row
    lg, pw = out["laws"]["logistic_c"], out["laws"]["power_c"]
    out["delta_aic"] = pw["aic"] - lg["aic"]
    out["best_aic"] = "logistic_c" if out["delta_aic"] > 0 else "power_c"
    if n_heldout:
        out["heldout_ratio"] = pw["rmse_heldout"] / max(lg["rmse_heldout"], 1e-300)
        out["best_heldout"] = "logistic_c" if out["heldout_ratio"] > 1 else "power_c"
    else:
        out["heldout_ratio"], out["best_heldout"] = None, None
    return out
