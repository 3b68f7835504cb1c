"""Held-out extrapolation error and model comparison of scaling-law forms (in-sample RMSE, AIC, BIC, held-out RMSE).

Each form is fitted by :func:`lmsci.laws.fit.fit`; the held-out score follows BNSL's evaluation (Caballero et al. 2022,
arXiv 2210.14891, Section 3): fit on the small end, score on the large end.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lmsci.errors import DataError
from lmsci.laws.fit import fit
from lmsci.laws.forms import Form, get_form
from lmsci.laws.objective import target

Array = np.ndarray


def split_by(X: dict[str, Array], var: str, frac: float) -> tuple[Array, Array]:
    """Boolean masks (train, test): the smallest ``frac`` of points by ``X[var]`` vs the rest."""
    v = np.asarray(X[var], dtype=float)
    cut = np.quantile(v, frac)
    train = v <= cut
    return train, ~train


def heldout_error(
    form: Form | str, X: dict[str, Array], y: Array, *, split_var: str = "C", frac: float = 0.75,
    **fit_kw,
) -> dict[str, float]:
    """Extrapolation error: fit on the small end (smallest ``frac`` by ``split_var``), score on the rest.

    The score is the RMSE of fit-space residuals (log y for log-space forms) on the held-out large
    end, as BNSL's evaluation (Caballero et al. 2022, arXiv 2210.14891, Section 3) reports
    RMSLE on held-out extrapolation points, and the mean absolute relative error of y.

    Raises:
        DataError: ``split_var`` missing, or too few points on either side.
    """
    form = get_form(form) if isinstance(form, str) else form
    if split_var not in X:
        raise DataError(f"held-out split variable {split_var!r} not in the data (have {sorted(X)})")
    train, test = split_by(X, split_var, frac)
    if test.sum() < 2:
        raise DataError(f"held-out split by {split_var} at fraction {frac} leaves {int(test.sum())} test points")
    Xt = {k: np.asarray(v)[train] for k, v in X.items()}
    Xh = {k: np.asarray(v)[test] for k, v in X.items()}
    y = np.asarray(y, dtype=float)
    res = fit(form, Xt, y[train], **fit_kw)
    pred = res.predict({k: Xh[k] for k in form.inputs})
    tgt = target(form, y[test])
    ptr = target(form, pred)
    return {
        "law": form.name, "split_var": split_var, "frac": frac, "n_train": int(train.sum()),
        "n_test": int(test.sum()), "rmse_train": res.rmse, "converged": bool(res.converged),
        "rmse_test": float(np.sqrt(np.mean((tgt - ptr) ** 2))),
        "mare_test": float(np.mean(np.abs(pred - y[test]) / np.abs(y[test]))),
        "cut": float(np.quantile(np.asarray(X[split_var], dtype=float), frac)),
    }


def compare_forms(
    forms: list[str | Form], X: dict[str, Array], y: Array, *, split_var: str = "C", frac: float = 0.75,
    **fit_kw,
) -> pd.DataFrame:
    """Model comparison: in-sample RMSE, AIC, BIC and held-out extrapolation error per form.

    Forms whose inputs are missing from ``X`` are skipped. Sorted by held-out RMSE (best first).
    ``delta_aic``/``delta_bic`` are relative to the best form by that criterion.
    """
    rows = []
    for f in forms:
        form = get_form(f) if isinstance(f, str) else f
        if any(v not in X for v in form.inputs):
            continue
        r = fit(form, X, y, **fit_kw)
        h = heldout_error(form, X, y, split_var=split_var, frac=frac, **fit_kw)
        rows.append({"law": form.name, "k": r.k, "n": r.n, "converged": bool(r.converged and h["converged"]),
                     "rmse": r.rmse, "aic": r.aic, "bic": r.bic,
                     "rmse_heldout": h["rmse_test"], "mare_heldout": h["mare_test"],
                     "n_train": h["n_train"], "n_test": h["n_test"]})
    df = pd.DataFrame(rows)
    if not df.empty:
        df["delta_aic"] = df["aic"] - df["aic"].min()
        df["delta_bic"] = df["bic"] - df["bic"].min()
        df = df.sort_values("rmse_heldout").reset_index(drop=True)
    return df
