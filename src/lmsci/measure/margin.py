"""Instruments for the implicit bias of gradient descent on separable data (Soudry, Hoffer, Nacson, Gunasekar,
Srebro, "The implicit bias of gradient descent on separable data", JMLR 2018, arXiv 1710.10345, Theorem 3).

- :func:`check_separable`: a linear program that finds w with y_n w^T x_n >= 1 or proves none exists;
  non-separable data raise :class:`~lmsci.errors.DataError` before any work.
- :func:`hard_margin_svm`: w_hat = argmin ||w||^2 s.t. y_n w^T x_n >= 1 (homogeneous, intercept folded into
  x), from scikit-learn's ``SVC(kernel="linear", C=1e10)`` on the symmetrised set {(x, y), (-x, -y)}, whose
  max-margin intercept is exactly 0.
- :func:`gd_linear`: full-batch GD on the mean logistic or exponential loss, logged at geometric steps.
- :func:`angle`, :func:`line_fit`: the summary statistics.
"""

from __future__ import annotations

import numpy as np

from lmsci.errors import ConfigError, DataError

LOSSES = ("logistic", "exponential")


def check_separable(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Find w with y_n w^T x_n >= 1 for all n (homogeneous linear separability) by an LP.

    Args:
        X: (n, d), intercept folded in as a column if wanted. y: (n,) in {-1, +1}.

    Returns:
        a feasible w (d,).

    Raises:
        DataError: labels outside {-1, +1}, or the LP is infeasible (the data are not linearly separable
            through the origin of the augmented space; the reason says how many points the best hinge fit
            leaves on the wrong side).
    """
    from scipy.optimize import linprog

    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if not np.all(np.isin(y, (-1.0, 1.0))):
        raise DataError("labels must be -1 or +1")
    A = -(y[:, None] * X)
    res = linprog(np.zeros(X.shape[1]), A_ub=A, b_ub=-np.ones(len(y)), bounds=[(None, None)] * X.shape[1],
                  method="highs")
    if res.status == 0:
        return res.x
    # not separable: report how many points the least-violating hinge solution leaves misclassified
    n, d = X.shape
    c = np.concatenate([np.zeros(d), np.ones(n)])
    A2 = np.hstack([A, -np.eye(n)])
    r2 = linprog(c, A_ub=A2, b_ub=-np.ones(n), bounds=[(None, None)] * d + [(0, None)] * n, method="highs")
    wrong = int(np.sum(y * (X @ r2.x[:d]) <= 0)) if r2.status == 0 else -1
    raise DataError(f"the data are not linearly separable: no w has y_n w^T x_n >= 1 for all {n} points "
                    f"(LP infeasible; the least-hinge-loss separator misclassifies {wrong}); the implicit-bias "
                    "theorem (Soudry et al. 2018) needs separable data")


def hard_margin_svm(X: np.ndarray, y: np.ndarray, C: float = 1e10) -> np.ndarray:
    """The homogeneous hard-margin SVM w_hat = argmin ||w||^2 s.t. y_n w^T x_n >= 1.

    scikit-learn's ``SVC(kernel="linear", C=C, tol=1e-10)`` on the symmetrised set {(x_n, y_n), (-x_n, -y_n)}
    (so the fitted intercept is 0 and the homogeneous problem is solved), then rescaled so that
    min_n y_n w^T x_n = 1.

    Returns:
        w_hat (d,).

    Raises:
        DataError: non-separable data (:func:`check_separable`).
    """
    from sklearn.svm import SVC

    check_separable(X, y)
    Xs = np.vstack([X, -X])
    ys = np.concatenate([y, -y])
    svm = SVC(kernel="linear", C=C, tol=1e-10, max_iter=10_000_000).fit(Xs, ys)
    w = svm.coef_.ravel().astype(np.float64)
    return w / np.min(y * (X @ w))


def svm_slsqp(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The same homogeneous hard-margin SVM solved independently with SciPy's SLSQP (an independent check of
    :func:`hard_margin_svm`; small d only). Raises DataError on non-separable data."""
    from scipy.optimize import minimize

    w0 = check_separable(X, y)
    A = y[:, None] * X
    res = minimize(lambda w: 0.5 * w @ w, w0, jac=lambda w: w, method="SLSQP",
                   constraints=[{"type": "ineq", "fun": lambda w: A @ w - 1.0, "jac": lambda w: A}],
                   options={"ftol": 1e-14, "maxiter": 1000})
    return res.x


def logistic_loss(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    """Mean logistic loss log(1 + exp(-y w^T x)) (nats)."""
    return float(np.logaddexp(0.0, -y * (X @ w)).mean())


def _batch_loss_grad(W: np.ndarray, A: np.ndarray, is_exp: np.ndarray):
    """Mean losses (B,) and gradients (B, d) for margins u = A w with A = y * X of shape (B, n, d)."""
    u = np.matmul(A, W[:, :, None])[:, :, 0]
    lse = np.logaddexp(0.0, -u)
    e = np.exp(np.minimum(-u, 700.0))
    val = np.where(is_exp[:, None], e, lse).mean(1)
    # -(d loss / d u): exp(-u) for the exponential loss, sigmoid(-u) = 1 / (1 + exp(u)) for the logistic loss
    g = np.where(is_exp[:, None], e, 1.0 / (1.0 + np.exp(np.minimum(u, 700.0))))
    return val, -np.matmul(g[:, None, :], A)[:, 0, :] / A.shape[1]


def gd_linear_batch(X: np.ndarray, y: np.ndarray, losses: list[str], steps: int, lr: np.ndarray | None = None,
                    n_log: int = 120, X_test: np.ndarray | None = None, y_test: np.ndarray | None = None):
    """Full-batch gradient descent from w = 0 on B independent problems at once (same n and d).

    Args:
        X: (B, n, d). y: (B, n) in {-1, +1}. losses: B names, ``"logistic"`` or ``"exponential"`` (mean loss).
        steps: GD steps T. lr: (B,) step sizes (default 1 / L_b with L_b = sigma_max(X_b)^2 / n, the smoothness
            of the mean exponential loss at w = 0 and 4x that of the mean logistic loss: inside Soudry et al.'s
            eta < 2 beta^-1 sigma_max^-2).
        n_log: geometric logging points in [1, T].
        X_test, y_test: optional (B, m, d), (B, m) held-out sets for the logistic loss and 0-1 error.

    Returns:
        dict: ``t`` (k,), ``w`` (B, k, d), ``loss`` (B, k), ``lr`` (B,), and ``test_logistic``, ``test_error``
        (B, k) when a test set is given.

    Raises:
        ConfigError: unknown loss, steps < 10 or lr <= 0.
        DivergedError: a non-finite loss or iterate at a logged step (the first logged step at which it is seen).
    """
    from lmsci.errors import DivergedError

    X = np.asarray(X, dtype=np.float64)
    B, n, d = X.shape
    bad = [l for l in losses if l not in LOSSES]
    if bad or len(losses) != B:
        raise ConfigError("loss", losses, f"{B} names from " + ", ".join(LOSSES))
    if steps < 10:
        raise ConfigError("steps", steps, ">= 10")
    if lr is None:
        lr = np.array([n / np.linalg.norm(X[b], 2) ** 2 for b in range(B)])
    lr = np.asarray(lr, dtype=np.float64)
    if not np.all(lr > 0):
        raise ConfigError("lr", lr.tolist(), "> 0")
    A = y[:, :, None] * X
    AT = np.ascontiguousarray(A.transpose(0, 2, 1))
    is_exp = np.array([l == "exponential" for l in losses])
    logistic = (~is_exp).astype(np.float64)[:, None, None]
    step = (lr / n)[:, None, None]
    log_at = np.unique(np.geomspace(1, steps, n_log).astype(np.int64))
    W = np.zeros((B, d, 1))
    ts, ws, ls = [], [], []
    j = 0
    for t in range(1, steps + 1):
        # -(d loss / d u) with u = A w: e = exp(-u) (exponential) or e / (1 + e) = sigmoid(-u) (logistic); the
        # step is 10 numpy calls (numpy call overhead is the cost at this size), the loss is evaluated at log points
        e = np.exp(np.minimum(-(A @ W), 700.0))
        W += step * (AT @ (e / (1.0 + logistic * e)))
        if t == log_at[j]:
            val = _batch_loss_grad(W[:, :, 0], A, is_exp)[0]
            if not np.all(np.isfinite(val)) or not np.all(np.isfinite(W)):
                raise DivergedError(t, float(val[~np.isfinite(val)][0]) if not np.all(np.isfinite(val))
                                    else float("nan"))
            ts.append(t)
            ws.append(W[:, :, 0].copy())
            ls.append(val)
            j += 1
            if j == len(log_at):
                break
    Wt = np.stack(ws, 1)
    out = {"t": np.array(ts), "w": Wt, "loss": np.stack(ls, 1), "lr": lr}
    if X_test is not None and X_test.shape[1]:
        m = np.einsum("bmd,bkd->bmk", X_test, Wt) * y_test[:, :, None]
        out["test_logistic"] = np.logaddexp(0.0, -m).mean(1)
        out["test_error"] = (m <= 0).mean(1)
    return out


def gd_linear(X: np.ndarray, y: np.ndarray, loss: str, steps: int, lr: float | None = None,
              n_log: int = 120, X_test: np.ndarray | None = None, y_test: np.ndarray | None = None):
    """:func:`gd_linear_batch` for one problem: X (n, d), y (n,); arrays without the batch axis."""
    o = gd_linear_batch(X[None], y[None], [loss], steps, None if lr is None else np.array([lr]), n_log,
                        None if X_test is None else X_test[None], None if y_test is None else y_test[None])
    return {k: (v if k == "t" else v[0]) for k, v in o.items()}


def angle(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Angle in radians between the rows of ``u`` (k, d) (or a vector) and the vector ``v`` (d,), computed as
    2 atan2(|a - b|, |a + b|) of the unit vectors (accurate near 0)."""
    u = np.atleast_2d(u)
    a = u / np.linalg.norm(u, axis=1, keepdims=True)
    b = v / np.linalg.norm(v)
    out = 2 * np.arctan2(np.linalg.norm(a - b, axis=1), np.linalg.norm(a + b, axis=1))
    return out


def line_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Least-squares line y = a + b x; returns (intercept a, slope b, R^2)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    b, a = np.polyfit(x, y, 1)
    res = y - (a + b * x)
    ss = np.sum((y - y.mean()) ** 2)
    return float(a), float(b), float(1 - res @ res / ss) if ss > 0 else float("nan")


def implicit_bias_stats(t: np.ndarray, W: np.ndarray, loss: np.ndarray, w_hat: np.ndarray,
                        t_min: int = 100, tail_decades: float = 2.0) -> dict[str, float]:
    """The statistics Soudry et al.'s Theorem 3 predicts: the angle fit on the logged steps with t >= ``t_min``,
    the loss slope and the norm residual on the last ``tail_decades`` decades [T / 10^tail_decades, T].

    Args:
        t: (k,) steps. W: (k, d) iterates. loss: (k,) training loss. w_hat: (d,) hard-margin SVM.

    Returns:
        ``angle_final`` (radians), ``angle_slope``/``angle_intercept``/``angle_r2`` of angle against 1/log t,
        ``loss_slope`` (log-log slope of the training loss against t), ``norm_residual_range``: range of
        ||w(t)|| - ||w_hat|| log t over the window, divided by ||w_hat|| log(t_max / t_min) (the growth of the
        log t term over the same window), ``norm_slope_ratio``: slope of ||w|| against log t over ||w_hat||.

    Raises:
        ValueError: fewer than 3 logged steps in a window.
    """
    keep = t >= t_min
    tail = t >= t[-1] / 10 ** tail_decades
    if keep.sum() < 3 or tail.sum() < 3:
        raise ValueError("implicit_bias_stats: fewer than 3 logged steps in a fitting window")
    ang = angle(W[keep], w_hat)
    a, b, r2 = line_fit(1.0 / np.log(t[keep]), ang)
    tt = t[tail]
    ls = line_fit(np.log(tt), np.log(loss[tail]))[1]
    nw = np.linalg.norm(W[tail], axis=1)
    nh = float(np.linalg.norm(w_hat))
    resid = nw - nh * np.log(tt)
    growth = nh * np.log(tt[-1] / tt[0])
    return {"angle_final": float(ang[-1]), "angle_start": float(ang[0]), "angle_slope": b, "angle_intercept": a,
            "angle_r2": r2, "loss_slope": ls, "norm_residual_range": float(np.ptp(resid) / growth),
            "norm_slope_ratio": line_fit(np.log(tt), nw)[1] / nh, "w_hat_norm": nh}
