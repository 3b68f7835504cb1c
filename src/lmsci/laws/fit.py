"""Robust fitting of scaling-law forms: Huber loss, bounds, a grid of starts, bootstrap, held-out error.

The recipe is Besiroglu et al.'s (2024, "Chinchilla Scaling: A replication attempt", arXiv 2404.10102,
Section 2), which corrected Hoffmann et al.'s Approach 3:

* the objective is the **sum** (not the mean) of Huber losses with ``delta = 1e-3`` of the residuals
  ``log y - log y_hat`` (log-space forms) or ``y - y_hat`` (the accuracy sigmoid);
* the parameters are fitted in log space (``A = exp(a)``) with the prediction written as a log-sum-exp;
* L-BFGS-B (``scipy.optimize.minimize``) runs from the best points of a grid of initialisations;
  we evaluate the objective on the whole grid at once and start the local optimiser from the
  ``n_starts`` best grid points (``n_starts=None`` runs all of them, as Epoch did);
* confidence intervals come from a nonparametric bootstrap (resampling the data points with
  replacement), each resample warm-started at the full-data optimum; gradients are analytic.

Speed. Per-start L-BFGS-B costs ~20-30 ms here (and far more when OpenBLAS threads contend on a
loaded machine, so local fits run under ``threadpool_limits(1)``). Two batched numpy passes therefore
do the bulk of the work, with SciPy's L-BFGS-B as the final word:

* the grid of starts is screened by a *batched* damped Gauss-Newton / IRLS descent (Levenberg-Marquardt
  on the Huber majoriser ``w_i = min(1, delta/|r_i|)``, a step accepted only when the exact objective
  decreases) run on all starts at once; L-BFGS-B then polishes the ``n_starts`` best end points;
* the bootstrap runs the same batched descent on all resamples at once (``method="batched"``,
  default), warm-started at the full-data optimum; ``method="lbfgsb"`` refits each resample with
  L-BFGS-B instead (slower; the tests check both agree).

Convergence is certified, never assumed, and never read off one optimiser run
(:func:`certify_optimum`, tolerances :data:`CERT_STATIONARITY_RTOL`, :data:`CERT_OBJECTIVE_RTOL`,
:data:`CERT_MIN_STARTS`). :attr:`FitResult.converged` is True when the best point is stationary (the
relative Gauss-Newton decrement of its projected gradient is tiny) and at least two distinct starts end at
the best objective within a relative tolerance; SciPy's success flag and message for the best start are
reported beside it and decide nothing (an L-BFGS-B line-search stop, ``ABNORMAL``, at the optimum is
convergence; a "success" short of it is not). A bootstrap resample converged when its end point is
stationary by the same test, whatever stopped the descent; one that is not after the batched descent is
continued by L-BFGS-B and then by a longer batched descent, and certified again.
Resamples that did not converge are counted (:attr:`FitResult.n_boot_failed`) and excluded from
every interval, standard error and covariance; ``fit.json`` and ``lmsci fit`` show the count.

Measured on the shared 2-core machine (``lmsci fit`` prints it): Chinchilla, 240 points, 1,000
resamples: about a second batched (tens of seconds with per-resample L-BFGS-B).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import minimize
from threadpoolctl import threadpool_limits

from lmsci.claims import finite_or_none
from lmsci.errors import ConfigError, DataError
from lmsci.laws.forms import Form, get_form

Array = np.ndarray

#: Certificate of an optimum (:func:`certify_optimum`): the best point is stationary when its relative
#: Gauss-Newton decrement of the projected gradient (:meth:`_Problem.stationarity`, the objective decrease one
#: more Gauss-Newton step predicts, over the objective) is at most this.
CERT_STATIONARITY_RTOL = 1e-8
#: a start reaches the best objective when the objective where it ended is within this relative margin of it
CERT_OBJECTIVE_RTOL = 1e-6
#: the fewest distinct starts (grid points) that must reach the best objective
CERT_MIN_STARTS = 2


# --------------------------------------------------------------------------------------------
def huber(r: Array, delta: float) -> tuple[Array, Array]:
    """Huber loss of residuals ``r`` and its derivative ``clip(r, -delta, delta)``."""
    a = np.abs(r)
    val = np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))
    return val, np.clip(r, -delta, delta)


def _target(form: Form, y: Array) -> Array:
    return np.log(y) if form.space == "log" else np.asarray(y, dtype=float)


@dataclass
class FitResult:
    """A fitted form.

    Attributes:
        form: the form.
        params: natural parameter values ``{name: value}``.
        theta: fit-space parameters ``[p]``.
        objective: the minimised sum of losses (Huber or squared), in fit space.
        n: number of data points used.
        k: number of free parameters.
        loss: ``"huber"`` or ``"l2"``; ``delta`` the Huber threshold.
        fixed: parameters held fixed (natural values).
        rmse: in-sample root mean squared residual in fit space (log y for log-space forms).
        aic, bic: Gaussian information criteria on the fit-space residuals:
            ``n log(RSS/n) + 2k`` and ``n log(RSS/n) + k log n``.
        boot: bootstrap natural parameters ``[B, p]`` of the resamples that converged (``None``
            without bootstrap); intervals, standard errors and covariances use only these.
        boot_theta: the same in fit space.
        boot_seconds: wall time of the bootstrap.
        fit_seconds: wall time of the multi-start fit.
        n_starts: number of local optimisations (L-BFGS-B runs) started.
        converged: the optimum is certified (:func:`certify_optimum`): stationary at the best point and
            reached by at least :data:`CERT_MIN_STARTS` distinct starts. Not the optimiser's flag.
        message: the optimiser's message for the best start (reported; decides nothing).
        n_starts_converged: how many of the ``n_starts`` L-BFGS-B runs reported success (reported).
        optimizer_success: SciPy's ``OptimizeResult.success`` of the best start (reported; decides nothing).
        stationarity: the relative Gauss-Newton decrement of the projected gradient at the best point.
        n_starts_at_best: distinct starts that ended within :data:`CERT_OBJECTIVE_RTOL` of the best objective.
        n_grid_starts: distinct starting points (grid points, ``init`` included).
        start_objectives: the objective where each distinct start ended ``[n_grid_starts]`` (units of
            ``objective``; inf where a start failed), from which the certificate counts.
        n_boot: bootstrap resamples requested (0 = none).
        n_boot_failed: resamples that did not converge (excluded from ``boot``).
        boot_converged: per requested resample, whether it converged ``[n_boot]`` (None without bootstrap).
    """

    form: Form
    params: dict[str, float]
    theta: Array
    objective: float
    n: int
    k: int
    loss: str
    delta: float
    fixed: dict[str, float]
    rmse: float
    aic: float
    bic: float
    boot: Array | None = None
    boot_theta: Array | None = None
    boot_seconds: float = 0.0
    fit_seconds: float = 0.0
    n_starts: int = 0
    converged: bool = True
    message: str = ""
    n_starts_converged: int = 0
    n_boot: int = 0
    n_boot_failed: int = 0
    boot_converged: Array | None = None
    optimizer_success: bool = True
    stationarity: float = float("nan")
    n_starts_at_best: int = 0
    n_grid_starts: int = 0
    start_objectives: Array | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def predict(self, X: dict[str, Array]) -> Array:
        """Predicted y at inputs ``X`` (arrays keyed by the form's inputs)."""
        return self.form.predict(self.theta, X)

    @property
    def n_boot_ok(self) -> int:
        """Bootstrap resamples that converged (the ones behind every interval)."""
        return 0 if self.boot is None else int(len(self.boot))

    def convergence(self) -> dict[str, Any]:
        """The convergence record: the certificate (``converged``, its stationarity and the starts that reach
        the best objective, with the tolerances), the optimiser's own message and flag for the best start
        (reported, deciding nothing), and bootstrap resamples requested / converged / failed."""
        return {"converged": bool(self.converged), "stationarity": finite_or_none(self.stationarity),
                "n_starts_at_best": int(self.n_starts_at_best), "n_grid_starts": int(self.n_grid_starts),
                "tolerances": {"stationarity_rtol": CERT_STATIONARITY_RTOL, "objective_rtol": CERT_OBJECTIVE_RTOL,
                               "min_starts": CERT_MIN_STARTS},
                "message": self.message, "optimizer_success": bool(self.optimizer_success),
                "n_starts": int(self.n_starts), "n_starts_converged": int(self.n_starts_converged),
                "n_boot": int(self.n_boot), "n_boot_ok": self.n_boot_ok, "n_boot_failed": int(self.n_boot_failed)}

    def certificate_text(self) -> str:
        """The certificate in words (what the reports print)."""
        return (f"{'certified' if self.converged else 'NOT CERTIFIED'}: stationarity {self.stationarity:.2g} "
                f"(<= {CERT_STATIONARITY_RTOL:g}), {self.n_starts_at_best} of {self.n_grid_starts} starts reach the "
                f"best objective within {CERT_OBJECTIVE_RTOL:g} (>= {CERT_MIN_STARTS}); optimiser: {self.message}")

    def cov_theta(self) -> Array | None:
        """Bootstrap covariance ``[k, k]`` of the free fit-space parameters (converged resamples only;
        None with fewer than ``k + 1`` of them)."""
        if self.boot_theta is None:
            return None
        free = [i for i, n in enumerate(self.form.param_names) if n not in self.fixed]
        bt = self.boot_theta[:, free]
        if len(bt) < len(free) + 1:
            return None
        return np.atleast_2d(np.cov(bt, rowvar=False))

    def ci(self, name: str, level: float = 0.95) -> tuple[float, float] | None:
        """Percentile bootstrap interval of parameter ``name`` over the converged resamples (None
        without bootstrap, when fixed, or when fewer than 2 resamples converged)."""
        if self.boot is None or name in self.fixed or len(self.boot) < 2:
            return None
        i = self.form.param_names.index(name)
        q = (1 - level) / 2
        lo, hi = np.quantile(self.boot[:, i], [q, 1 - q])
        return float(lo), float(hi)

    def se(self, name: str) -> float | None:
        """Bootstrap standard error of parameter ``name`` (converged resamples only)."""
        if self.boot is None or name in self.fixed or len(self.boot) < 2:
            return None
        return float(np.std(self.boot[:, self.form.param_names.index(name)], ddof=1))

    def table(self, level: float = 0.95) -> pd.DataFrame:
        """One row per parameter: value, bootstrap SE and percentile CI."""
        rows = []
        for name in self.form.param_names:
            ci = self.ci(name, level)
            rows.append({"param": name, "value": self.params[name], "se": self.se(name),
                         "ci_low": ci[0] if ci else None, "ci_high": ci[1] if ci else None,
                         "fixed": name in self.fixed})
        return pd.DataFrame(rows)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary: law, equation, source, natural parameters, fit statistics (objective, rmse, aic,
        bic), the optimum certificate, bootstrap counts and per-parameter 95% intervals (``ci95``) and standard
        errors (``se``); a non-finite stationarity becomes None."""
        return {
            "law": self.form.name, "equation": self.form.equation, "source": self.form.source,
            "params": self.params, "fixed": self.fixed, "n": self.n, "k": self.k, "loss": self.loss,
            "delta": self.delta, "objective": self.objective, "rmse": self.rmse, "aic": self.aic,
            "bic": self.bic, "n_starts": self.n_starts, "fit_seconds": self.fit_seconds,
            "converged": bool(self.converged), "message": self.message,
            "optimizer_success": bool(self.optimizer_success), "stationarity": finite_or_none(self.stationarity),
            "n_starts_at_best": int(self.n_starts_at_best), "n_grid_starts": int(self.n_grid_starts),
            "n_starts_converged": int(self.n_starts_converged), "n_boot": int(self.n_boot),
            "n_boot_ok": self.n_boot_ok, "n_boot_failed": int(self.n_boot_failed), "boot_seconds": self.boot_seconds,
            "ci95": {n: self.ci(n) for n in self.form.param_names},
            "se": {n: self.se(n) for n in self.form.param_names},
        }


class _Problem:
    """Objective and gradient over the free parameters, with per-point weights (bootstrap counts)."""

    def __init__(self, form: Form, X: dict[str, Array], y: Array, loss: str, delta: float,
                 fixed: dict[str, float]):
        self.form, self.X, self.t = form, X, _target(form, y)
        self.loss, self.delta = loss, delta
        names = form.param_names
        self.free = np.array([n not in fixed for n in names])
        self.base = np.zeros(len(names))
        for n, v in fixed.items():
            spec = form.params[names.index(n)]
            self.base[names.index(n)] = np.log(v) if spec.log else v
        # scale the objective so L-BFGS-B's absolute tolerances are meaningful at delta = 1e-3
        self.scale = 1.0 / delta if loss == "huber" else 1.0

    def full(self, z: Array) -> Array:
        th = np.array(np.broadcast_to(self.base, z.shape[:-1] + self.base.shape), dtype=float)
        th[..., self.free] = z
        return th

    def residuals(self, theta: Array) -> Array:
        return self.t - self.form.f(theta, self.X)

    def values(self, z: Array, w: Array | None = None) -> Array:
        """Objective for a batch of free-parameter vectors ``z [m, k]`` (no gradient)."""
        r = self.residuals(self.full(z))
        v = huber(r, self.delta)[0] if self.loss == "huber" else 0.5 * r * r
        if w is not None:
            v = v * w
        v = np.where(np.isfinite(v), v, np.inf)
        return v.sum(axis=-1) * self.scale

    def fun_grad(self, z: Array, w: Array | None) -> tuple[float, Array]:
        th = self.full(z)
        f, J = self.form.fj(th, self.X)
        r = self.t - f
        if self.loss == "huber":
            v, d = huber(r, self.delta)
        else:
            v, d = 0.5 * r * r, r
        if w is not None:
            v, d = v * w, d * w
        val = float(v.sum()) * self.scale
        g = -(J[:, self.free].T @ d) * self.scale
        if not np.isfinite(val) or not np.all(np.isfinite(g)):
            return 1e300, np.zeros_like(z)
        return val, g

    def batched_descent(self, Z0: Array, W: Array | None = None, iters: int = 200, tol: float = 1e-12,
                        chunk: int = 512, return_converged: bool = False):
        """Minimise the objective from many starts at once (damped Gauss-Newton on the IRLS majoriser).

        Args:
            Z0: free-parameter starts ``[m, k]``.
            W: per-start point weights ``[m, n]`` (bootstrap counts) or None.
            iters: the most iterations per start.
            return_converged: also return the per-start convergence mask.
        Returns:
            (Z ``[m, k]``, objective ``[m]``), plus ``converged [m]`` when ``return_converged``: the
            descent stopped because the relative decrease fell below ``tol`` or no damped step decreased
            the objective, with a finite objective (not by running out of ``iters``).
        """
        Zs, Vs, Cs = [], [], []
        for i in range(0, len(Z0), chunk):
            w = None if W is None else W[i : i + chunk]
            z, v, c = self._descent_chunk(np.array(Z0[i : i + chunk], dtype=float), w, iters, tol)
            Zs.append(z)
            Vs.append(v)
            Cs.append(c)
        out = np.concatenate(Zs), np.concatenate(Vs)
        return (*out, np.concatenate(Cs)) if return_converged else out

    def _descent_chunk(self, z, W, iters, tol):
        lo = np.array([b[0] for b in self.bounds()])
        hi = np.array([b[1] for b in self.bounds()])
        z = np.clip(z, lo, hi)
        m, k = z.shape
        obj = self.values(z, W)
        lam = np.full(m, 1e-2)
        active = np.isfinite(obj)
        conv = np.zeros(m, dtype=bool)
        eye = np.eye(k)
        for _ in range(iters):
            idx = np.flatnonzero(active)
            if idx.size == 0:
                break
            za = z[idx]
            f, J = self.form.fj(self.full(za), self.X)
            J = J[..., self.free]
            r = self.t - f
            if self.loss == "huber":
                w = np.minimum(1.0, self.delta / np.maximum(np.abs(r), 1e-300))
            else:
                w = np.ones_like(r)
            if W is not None:
                w = w * W[idx]
            JW = J * w[..., None]
            H = np.einsum("mnk,mnl->mkl", JW, J)
            g = np.einsum("mnk,mn->mk", JW, r)
            dg = np.einsum("mkk->mk", H)
            Hd = H + (lam[idx, None] * (dg + 1e-12))[..., None] * eye
            try:
                step = np.linalg.solve(Hd, g[..., None])[..., 0]
            except np.linalg.LinAlgError:
                step = g / (np.maximum(dg, 1e-12) * (1 + lam[idx, None]))
            step = np.where(np.isfinite(step), step, 0.0)
            zn = np.clip(za + step, lo, hi)
            vn = self.values(zn, None if W is None else W[idx])
            acc = vn < obj[idx]
            rel = np.where(acc, (obj[idx] - vn) / np.maximum(np.abs(obj[idx]), 1e-300), 0.0)
            z[idx[acc]] = zn[acc]
            obj[idx[acc]] = vn[acc]
            lam[idx] = np.where(acc, np.maximum(lam[idx] * 0.3, 1e-9), lam[idx] * 10.0)
            done = (acc & (rel < tol)) | (lam[idx] > 1e10)
            active[idx[done]] = False
            conv[idx[done]] = True
        return z, obj, conv & np.isfinite(obj)

    def bounds(self) -> list[tuple[float, float]]:
        return [p.bounds for p, fr in zip(self.form.params, self.free) if fr]

    def stationarity(self, Z: Array, W: Array | None = None, chunk: int = 512) -> Array:
        """The relative Gauss-Newton decrement of the projected gradient at each point of ``Z [m, k]``.

        For the objective ``F`` (summed Huber or squared loss, point weights ``W [m, n]``), the gradient
        ``g`` at ``z`` is projected onto the bounds (a component is dropped when ``z`` sits on a bound
        and ``-g`` points outside it), and measured in the metric of the IRLS majoriser
        ``H = J^T diag(w) J``, ``w = min(1, delta / |r|)`` (1 for least squares): ``0.5 g^T H^-1 g`` is
        the objective decrease one Gauss-Newton step on the majoriser predicts. Returned relative to
        ``F``: ``0.5 g^T H^-1 g / max(F, tiny)`` (NaN when ``F`` or ``g`` is not finite). It is invariant
        to rescaling the parameters or the objective, and it is small at a minimum whatever stopped the
        optimiser (a line-search stop at the optimum included).
        """
        Z = np.atleast_2d(np.asarray(Z, dtype=float))
        out = []
        for i in range(0, len(Z), chunk):
            w = None if W is None else np.atleast_2d(W)[i : i + chunk]
            out.append(self._stationarity_chunk(Z[i : i + chunk], w))
        return np.concatenate(out) if out else np.zeros(0)

    def _stationarity_chunk(self, z: Array, W: Array | None) -> Array:
        lo = np.array([b[0] for b in self.bounds()])
        hi = np.array([b[1] for b in self.bounds()])
        f, J = self.form.fj(self.full(z), self.X)
        J = J[..., self.free]
        r = self.t - f
        if self.loss == "huber":
            v, d = huber(r, self.delta)
            wm = np.minimum(1.0, self.delta / np.maximum(np.abs(r), 1e-300))
        else:
            v, d, wm = 0.5 * r * r, r, np.ones_like(r)
        if W is not None:
            v, d, wm = v * W, d * W, wm * W
        F = v.sum(axis=-1)
        g = -np.einsum("mnk,mn->mk", J, d)
        H = np.einsum("mnk,mnl->mkl", J * wm[..., None], J)
        # projection onto the bounds: a component at a bound whose descent direction leaves the box is inactive
        eps = 1e-10 * (1.0 + np.maximum(np.abs(lo), np.abs(hi)))
        act = ((z <= lo + eps) & (g > 0)) | ((z >= hi - eps) & (g < 0))
        g = np.where(act, 0.0, g)
        k = z.shape[1]
        eye = np.eye(k)
        keep = ~act
        H = H * (keep[:, :, None] & keep[:, None, :]) + eye * act[:, :, None]
        dg = np.einsum("mkk->mk", H)
        H = H + (1e-12 * dg + 1e-300)[..., None] * eye  # a whisker of damping for a singular majoriser
        ok = np.isfinite(F) & np.all(np.isfinite(g), axis=1) & np.all(np.isfinite(H), axis=(1, 2))
        dec = np.full(len(z), np.nan)
        if ok.any():
            try:
                s = np.linalg.solve(H[ok], g[ok][..., None])[..., 0]
            except np.linalg.LinAlgError:
                s = np.stack([np.linalg.lstsq(h, gg, rcond=None)[0] for h, gg in zip(H[ok], g[ok])])
            dec[ok] = 0.5 * np.einsum("mk,mk->m", g[ok], s) / np.maximum(F[ok], 1e-300)
        return dec

    def local(self, z0: Array, w: Array | None = None, maxiter: int = 1000):
        b = self.bounds()
        z0 = np.clip(z0, [x[0] for x in b], [x[1] for x in b])
        with threadpool_limits(1):
            return minimize(self.fun_grad, z0, args=(w,), jac=True, method="L-BFGS-B", bounds=b,
                            options={"maxiter": maxiter, "ftol": 1e-12, "gtol": 1e-9, "maxcor": 20})


def _clean_inputs(form: Form, X: dict[str, Array], y: Array) -> tuple[dict[str, Array], Array]:
    missing = [v for v in form.inputs if v not in X]
    if missing:
        raise DataError(f"law {form.name!r} needs inputs {list(form.inputs)}; missing {missing} "
                        f"(have {sorted(X)})")
    Xc = {v: np.asarray(X[v], dtype=float).ravel() for v in form.inputs}
    y = np.asarray(y, dtype=float).ravel()
    for v, a in Xc.items():
        if a.shape != y.shape:
            raise DataError(f"input {v} has {a.size} values but y has {y.size}")
        bad = np.flatnonzero(~np.isfinite(a) | (a <= 0))
        if bad.size:
            raise DataError(f"input {v} must be finite and > 0; bad at rows {bad[:10].tolist()}")
    bad = np.flatnonzero(~np.isfinite(y) | ((y <= 0) if form.space == "log" else False))
    if bad.size:
        raise DataError(f"target must be finite{' and > 0' if form.space == 'log' else ''}; "
                        f"bad at rows {bad[:10].tolist()}")
    return Xc, y


def _certify(prob: "_Problem", z_best: Array, ends: Array, W: Array | None = None) -> dict[str, Any]:
    """:func:`certify_optimum` on a built problem (fit-space free parameters ``z_best``, start objectives)."""
    ends = np.asarray(ends, dtype=float)
    stat = float(prob.stationarity(np.asarray(z_best, dtype=float)[None], None if W is None else W[None])[0])
    finite = ends[np.isfinite(ends)]
    f_best = float(min(finite.min(), prob.values(np.asarray(z_best)[None], None if W is None else W[None])[0])) \
        if finite.size else float("nan")
    at_best = int(np.sum(finite <= f_best + CERT_OBJECTIVE_RTOL * abs(f_best) + 1e-300)) if finite.size else 0
    reasons = []
    if not (np.isfinite(stat) and stat <= CERT_STATIONARITY_RTOL):
        reasons.append(f"not stationary: relative Gauss-Newton decrement of the projected gradient {stat:.3g} > "
                       f"{CERT_STATIONARITY_RTOL:g}")
    if at_best < CERT_MIN_STARTS:
        reasons.append(f"{at_best} of {len(ends)} starts reach the best objective within {CERT_OBJECTIVE_RTOL:g} "
                       f"(relative); {CERT_MIN_STARTS} needed")
    return {"certified": not reasons, "stationarity": stat, "n_starts_at_best": at_best, "n_starts": int(len(ends)),
            "reasons": reasons}


def certify_optimum(form: Form | str, X: dict[str, Array], y: Array, theta: Array, start_objectives: Array, *,
                    loss: str = "huber", delta: float = 1e-3, fixed: dict[str, float] | None = None,
                    weights: Array | None = None) -> dict[str, Any]:
    """Whether a fitted point is a certified optimum: what "converged" means in :mod:`lmsci.laws`.

    A fit has converged when its optimum is certified, not when one optimiser run says so (SciPy's
    L-BFGS-B may stop in its line search at the optimum, ``ABNORMAL``, or report success short of it,
    depending on the float rounding of one BLAS kernel). Two properties of the data and the point, each
    with a registered tolerance, certify it:

    1. **stationary**: the relative Gauss-Newton decrement of the projected gradient at the best point
       (:meth:`_Problem.stationarity`: ``0.5 g^T H^-1 g / F`` with ``g`` the gradient projected on the
       bounds, ``H`` the IRLS majoriser of the Huber loss, ``F`` the objective) is at most
       :data:`CERT_STATIONARITY_RTOL`; no Gauss-Newton step from there could lower the objective by more
       than that fraction;
    2. **reproduced by several starts**: at least :data:`CERT_MIN_STARTS` distinct starting points end
       (after the batched screening descent or L-BFGS-B, whichever ran last) within
       :data:`CERT_OBJECTIVE_RTOL` (relative) of the best objective.

    The optimiser's own message and success flag are reported beside the certificate and decide nothing.
    A bootstrap resample, warm-started at the certified full-data optimum, converged when its end point
    is stationary by (1) (:func:`bootstrap`).

    Args:
        form, X, y, loss, delta, fixed: the fitted problem, as given to :func:`fit`.
        theta: the best point in fit space (all parameters, ``FitResult.theta``).
        start_objectives: ``[m]`` the objective where each distinct start ended, in the units of
            :attr:`FitResult.objective` (``FitResult.start_objectives``); non-finite entries are starts that failed.
        weights: optional per-point weights ``[n]`` (a bootstrap resample).

    Returns:
        ``{"certified", "stationarity", "n_starts_at_best", "n_starts", "reasons"}`` (``reasons``: why not).
    """
    form = get_form(form) if isinstance(form, str) else form
    fixed = dict(form.default_fixed if fixed is None else fixed)
    X, y = _clean_inputs(form, X, y)
    prob = _Problem(form, X, y, loss, delta, fixed)
    z = np.asarray(theta, dtype=float)[prob.free]
    ends = np.asarray(start_objectives, dtype=float) * prob.scale
    return _certify(prob, z, ends, None if weights is None else np.asarray(weights, dtype=float))


def _check_fit_args(form: Form, loss: str, delta: float, fixed: dict[str, float] | None) -> dict[str, float]:
    """The parameters held fixed (``fixed``, or the form's defaults), after checking ``loss`` and ``delta``.

    Raises:
        ConfigError: unknown loss, non-positive delta, or a fixed parameter the form does not have.
    """
    if loss not in ("huber", "l2"):
        raise ConfigError("loss", loss, "'huber' or 'l2'")
    if not delta > 0:
        raise ConfigError("delta", delta, "a number > 0")
    fixed = dict(form.default_fixed if fixed is None else fixed)
    for name in fixed:
        if name not in form.param_names:
            raise ConfigError("fixed", name, f"one of {form.param_names}")
    return fixed


def _start_grid(form: Form, prob: _Problem, grid: Array | str | None, init: dict[str, float] | None,
                fixed: dict[str, float]) -> Array:
    """The distinct starting points in fit space over the free parameters ``[m, k]`` (``init`` first).

    Raises:
        ConfigError: ``grid`` is a string other than ``"full"`` or ``"coarse"``.
    """
    if grid is None or (isinstance(grid, str) and grid == "full"):
        grid = form.grid()
    elif isinstance(grid, str):
        if grid != "coarse":
            raise ConfigError("grid", grid, "'full', 'coarse' or an array of starts")
        grid = form.coarse_grid()
    grid = np.unique(np.atleast_2d(grid)[:, prob.free], axis=0)
    if init is not None:
        th = form.to_theta({**{n: init.get(n, 1.0) for n in form.param_names}, **fixed})
        grid = np.vstack([th[prob.free][None], grid])
    return grid


def _screen(prob: _Problem, grid: Array, n_starts: int | None, screen_iters: int,
            polish_rtol: float) -> tuple[Array, Array, Array]:
    """Choose the starts L-BFGS-B polishes: every grid point (``n_starts=None``, Epoch's recipe verbatim), or
    the ``n_starts`` best distinct end points of a batched descent over the grid (successive halving above
    256 points) within ``polish_rtol`` of the best.

    Returns:
        ``(starts [s, k], their grid indices [s], ends [m])``: ``ends[i]`` is the objective where grid point
        i ended (inf where not descended), for the certificate.
    """
    if n_starts is None:  # Epoch's recipe verbatim: L-BFGS-B from every grid point
        return grid, np.arange(len(grid)), np.full(len(grid), np.inf)
    # screen the whole grid with the batched descent (successive halving), polish the best
    Z, V = prob.batched_descent(grid, iters=10 if len(grid) > 256 else screen_iters)
    ends = np.where(np.isfinite(V), V, np.inf)
    cand = np.arange(len(grid))
    if len(grid) > 256:
        keep = np.argsort(ends, kind="stable")[: max(64, 4 * n_starts)]
        Z, V = prob.batched_descent(Z[keep], iters=screen_iters)
        ends[keep] = np.where(np.isfinite(V), V, np.inf)
        cand = keep
    order = np.argsort(np.where(np.isfinite(V), V, np.inf), kind="stable")
    starts, start_idx = [], []
    for i in order:
        if not np.isfinite(V[i]) or (starts and V[i] > V[order[0]] * (1 + polish_rtol) + 1e-12):
            break
        if all(np.max(np.abs(Z[i] - s)) > 1e-3 for s in starts):
            starts.append(Z[i])
            start_idx.append(cand[i])
        if len(starts) >= max(1, n_starts):
            break
    if not starts:
        starts, start_idx = [grid[0]], [0]
    return np.array(starts), np.array(start_idx), ends


def _polish(prob: _Problem, starts: Array, start_idx: Array, ends: Array, maxiter: int) -> tuple[Any, int]:
    """L-BFGS-B from every start (``ends`` lowered in place to where each ended).

    Returns:
        ``(best SciPy OptimizeResult, number of runs that reported success)``.

    Raises:
        DataError: no start gave a finite objective.
    """
    best = None
    n_ok = 0
    for z0, i in zip(starts, start_idx):
        res = prob.local(z0, maxiter=maxiter)
        n_ok += bool(res.success)
        if np.isfinite(res.fun):
            ends[i] = min(ends[i], float(res.fun))
            if best is None or res.fun < best.fun:
                best = res
    if best is None:
        raise DataError(f"law {prob.form.name!r}: no starting point gave a finite objective")
    return best, n_ok


def fit(
    form: Form | str,
    X: dict[str, Array],
    y: Array,
    *,
    loss: str = "huber",
    delta: float = 1e-3,
    n_starts: int | None = 4,
    fixed: dict[str, float] | None = None,
    init: dict[str, float] | None = None,
    n_boot: int = 0,
    seed: int = 0,
    boot_method: str = "batched",
    screen_iters: int = 150,
    grid: Array | str | None = None,
    polish_rtol: float = 0.01,
    maxiter: int = 1000,
    boot_maxiter: int | None = None,
) -> FitResult:
    """Fit ``form`` to data by minimising the summed Huber (or squared) loss of fit-space residuals.

    Args:
        form: a :class:`Form` or its name (see ``lmsci.laws.forms.FORMS``).
        X: inputs keyed by variable (``"N"``, ``"D"``, ``"C"``, ``"S"``, ``"x"``), each ``[n]``.
        y: targets ``[n]`` (loss in nats/token, > 0, for log-space forms; accuracy for ``sigmoid``).
        loss: ``"huber"`` (Besiroglu et al. 2024) or ``"l2"`` (ordinary least squares).
        delta: Huber threshold on the fit-space residual (1e-3 on log loss, as Besiroglu et al.).
        n_starts: the whole grid of starts is first descended in one batched pass; L-BFGS-B then
            polishes the ``n_starts`` best distinct end points. None = L-BFGS-B from every raw grid
            point (Besiroglu et al.'s procedure verbatim; slow).
        fixed: parameters to hold fixed (natural values); defaults to the form's ``default_fixed``.
        init: an extra starting point (natural values), always tried.
        n_boot: bootstrap resamples for confidence intervals (0 = none).
        seed: seed of the bootstrap resampling.
        boot_method: ``"batched"`` (all resamples at once) or ``"lbfgsb"`` (one L-BFGS-B per resample).
        screen_iters: iterations of the batched screening descent.
        grid: starting points in fit space ``[m, p]`` replacing the form's grid (all parameters,
            fixed ones included), or ``"full"`` (the form's grid, default) or ``"coarse"``
            (:meth:`Form.coarse_grid`).
        polish_rtol: only end points of the batched screening whose objective is within this
            relative margin of the best are polished (at most ``n_starts`` of them).
        maxiter: L-BFGS-B iterations per start.
        boot_maxiter: iterations per bootstrap resample (None: 300 batched / ``maxiter`` L-BFGS-B);
            resamples that run out are counted as not converged and excluded.

    Returns:
        a :class:`FitResult`.

    Raises:
        DataError: missing inputs, non-finite or non-positive values (rows named), too few points.
        ConfigError: unknown loss, non-positive delta, unknown fixed parameter.
    """
    form = get_form(form) if isinstance(form, str) else form
    fixed = _check_fit_args(form, loss, delta, fixed)
    X, y = _clean_inputs(form, X, y)
    k = len(form.params) - len(fixed)
    if y.size < k + 1:
        raise DataError(f"law {form.name!r} has {k} free parameters and needs at least {k + 1} points; "
                        f"got {y.size}")
    prob = _Problem(form, X, y, loss, delta, fixed)
    t0 = time.perf_counter()
    grid = _start_grid(form, prob, grid, init, fixed)
    starts, start_idx, ends = _screen(prob, grid, n_starts, screen_iters, polish_rtol)
    best, n_ok = _polish(prob, starts, start_idx, ends, maxiter)
    cert = _certify(prob, best.x, ends)
    fit_s = time.perf_counter() - t0
    theta = prob.full(best.x)
    r = prob.residuals(theta)
    rss = float(np.sum(r * r))
    n = y.size
    ll_term = n * np.log(max(rss / n, 1e-300))
    res = FitResult(
        form=form, params=form.from_theta(theta), theta=theta, objective=float(best.fun / prob.scale), n=n,
        k=k, loss=loss, delta=delta, fixed=fixed, rmse=float(np.sqrt(rss / n)),
        aic=float(ll_term + 2 * k), bic=float(ll_term + k * np.log(n)), fit_seconds=fit_s,
        n_starts=len(starts), converged=cert["certified"], message=str(best.message), n_starts_converged=n_ok,
        optimizer_success=bool(best.success), stationarity=cert["stationarity"],
        n_starts_at_best=cert["n_starts_at_best"], n_grid_starts=cert["n_starts"],
        start_objectives=ends / prob.scale,
    )
    if n_boot > 0:
        bootstrap(res, X, y, n_boot=n_boot, seed=seed, method=boot_method, maxiter=boot_maxiter)
    return res


def bootstrap(res: FitResult, X: dict[str, Array], y: Array, n_boot: int = 1000, seed: int = 0,
              method: str = "batched", maxiter: int | None = None) -> FitResult:
    """Nonparametric bootstrap: refit on ``n_boot`` resamples (with replacement) of the points.

    Each resample is encoded as integer weights (multinomial counts), which is the same objective
    as a resampled data set, and its fit is warm-started at the full-data optimum ``res.theta``.
    ``method="batched"`` descends all resamples at once (see the module docstring);
    ``"lbfgsb"`` runs SciPy's L-BFGS-B per resample. ``maxiter`` caps the iterations per resample
    (None: 300 batched, 1000 L-BFGS-B). Fills in place: ``res.boot`` (natural parameters of the
    resamples that converged, ``[n_ok, p]``), ``res.boot_theta``, ``res.boot_converged`` (mask over
    all ``n_boot``), ``res.n_boot``, ``res.n_boot_failed`` and ``res.boot_seconds``.

    Raises:
        ConfigError: unknown ``method``.
    """
    if method not in ("batched", "lbfgsb"):
        raise ConfigError("boot_method", method, "'batched' or 'lbfgsb'")
    form = res.form
    X, y = _clean_inputs(form, X, y)
    prob = _Problem(form, X, y, res.loss, res.delta, res.fixed)
    rng = np.random.default_rng(seed)
    n = y.size
    W = rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot).astype(float)
    z0 = res.theta[prob.free]
    t0 = time.perf_counter()
    if method == "batched":
        Z, _ = prob.batched_descent(np.repeat(z0[None], n_boot, axis=0), W,
                                    iters=300 if maxiter is None else maxiter)
        # the certificate decides (a stationary end point), not what stopped the descent; a resample still
        # creeping along a flat valley is finished by L-BFGS-B from where it stopped, then certified again
        stat = prob.stationarity(Z, W)
        for b in np.flatnonzero(~(stat <= CERT_STATIONARITY_RTOL)):
            r = prob.local(Z[b], W[b], maxiter=1000 if maxiter is None else maxiter)
            if np.isfinite(r.fun) and r.fun <= prob.values(Z[b][None], W[b][None])[0]:
                Z[b] = r.x
                stat[b] = prob.stationarity(Z[b][None], W[b][None])[0]
        # L-BFGS-B may stop in an ill-conditioned valley (towards a bound) with the point still unfinished;
        # a longer batched descent from where it stopped finishes those
        left = np.flatnonzero(~(stat <= CERT_STATIONARITY_RTOL))
        if left.size:
            z2, v2 = prob.batched_descent(Z[left], W[left], iters=2000 if maxiter is None else maxiter)
            better = v2 <= prob.values(Z[left], W[left])
            Z[left[better]] = z2[better]
            stat[left] = prob.stationarity(Z[left], W[left])
        out = prob.full(Z)
    else:
        out = np.empty((n_boot, len(form.params)))
        stat = np.full(n_boot, np.nan)
        for b in range(n_boot):
            r = prob.local(z0, W[b], maxiter=1000 if maxiter is None else maxiter)
            out[b] = prob.full(r.x)
            if np.isfinite(r.fun):
                stat[b] = prob.stationarity(r.x[None], W[b][None])[0]
    ok = (stat <= CERT_STATIONARITY_RTOL) & np.all(np.isfinite(out), axis=1)
    res.boot_converged = ok
    res.n_boot, res.n_boot_failed = int(n_boot), int((~ok).sum())
    # no converged resample: no intervals (the counts above still say what happened)
    res.boot_theta = out[ok] if ok.any() else None
    res.boot = form.natural_array(out[ok]) if ok.any() else None
    res.boot_seconds = time.perf_counter() - t0
    return res


def wald_chi2(res: FitResult, params: dict[str, float]) -> dict[str, Any]:
    """Chi-square test that the data's parameters equal ``params``, as Besiroglu et al. test Hoffmann's.

    The statistic is ``(theta_0 - theta_hat)^T Sigma^-1 (theta_0 - theta_hat)`` over the free fit-space
    parameters (``log E``, ``log A``, ``log B``, ``alpha``, ``beta`` for Chinchilla), with ``Sigma`` the
    bootstrap covariance of the converged resamples (:meth:`FitResult.cov_theta`), referred to a
    chi-square with as many degrees of freedom as free parameters (Epoch AI's ``data_analysis.ipynb``,
    ``chi_squared_stat``: 238.4 on df = 5 for Hoffmann's constants, p = 1.7e-49).

    Args:
        res: a fit with a bootstrap.
        params: the hypothesised natural parameter values (every free parameter).

    Returns:
        ``{"stat", "df", "p", "n_boot_ok"}``; ``stat`` and ``p`` are NaN when the covariance is unavailable
        (no bootstrap, too few converged resamples) or singular.
    """
    from scipy.stats import chi2

    free = [i for i, n in enumerate(res.form.param_names) if n not in res.fixed]
    missing = [res.form.param_names[i] for i in free if res.form.param_names[i] not in params]
    if missing:
        raise ConfigError("params", sorted(params), f"values for every free parameter (missing {missing})")
    th0 = res.form.to_theta({**res.params, **params})[free]
    d = th0 - np.asarray(res.theta)[free]
    cov = res.cov_theta()
    out = {"stat": float("nan"), "df": len(free), "p": float("nan"), "n_boot_ok": res.n_boot_ok}
    if cov is None:
        return out
    try:
        stat = float(d @ np.linalg.solve(cov, d))
    except np.linalg.LinAlgError:
        return out
    if np.isfinite(stat):
        out["stat"], out["p"] = stat, float(chi2.sf(stat, len(free)))
    return out


# --------------------------------------------------------------------------------------------
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
    tgt = _target(form, y[test])
    ptr = _target(form, pred)
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


# --------------------------------------------------------------------------------------------
def save_fit(res: FitResult, path) -> None:
    """Store a fit (parameters, bootstrap samples, metadata) as ``.npz`` so figures can be redrawn."""
    import json

    meta = {k: v for k, v in res.to_dict().items() if k not in ("ci95", "se")}
    meta["x"] = res.form.inputs[0] if res.form.name.startswith("bnsl") else None
    np.savez(path, theta=res.theta, boot_theta=np.zeros((0, len(res.theta))) if res.boot_theta is None
             else res.boot_theta, meta=np.array(json.dumps(meta)))


def load_fit(path) -> FitResult:
    """Load a fit written by :func:`save_fit`."""
    import json

    z = np.load(path, allow_pickle=False)
    meta = json.loads(str(z["meta"]))
    form = get_form(meta["law"], x=meta.get("x"))
    bt = z["boot_theta"]
    return FitResult(
        form=form, params=meta["params"], theta=z["theta"], objective=meta["objective"], n=meta["n"], k=meta["k"],
        loss=meta["loss"], delta=meta["delta"], fixed=meta["fixed"], rmse=meta["rmse"], aic=meta["aic"],
        bic=meta["bic"], boot=form.natural_array(bt) if len(bt) else None, boot_theta=bt if len(bt) else None,
        boot_seconds=meta["boot_seconds"], fit_seconds=meta["fit_seconds"], n_starts=meta["n_starts"],
        converged=meta.get("converged", True), message=meta.get("message", ""),
        n_starts_converged=meta.get("n_starts_converged", 0), n_boot=meta.get("n_boot", len(bt)),
        n_boot_failed=meta.get("n_boot_failed", 0), optimizer_success=meta.get("optimizer_success", True),
        stationarity=float("nan") if meta.get("stationarity") is None else meta["stationarity"],
        n_starts_at_best=meta.get("n_starts_at_best", 0), n_grid_starts=meta.get("n_grid_starts", 0),
    )
