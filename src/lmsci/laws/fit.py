"""Robust fitting of scaling-law forms: the multi-start fit, its certificate, bootstrap intervals, a Wald test.

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

The objective, the grid of starts, its batched screening and the L-BFGS-B polish live in
:mod:`lmsci.laws.objective`; held-out error and model comparison in :mod:`lmsci.laws.compare`.

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

from lmsci.claims import finite_or_none
from lmsci.errors import ConfigError, DataError
from lmsci.laws.forms import Form, get_form
from lmsci.laws.objective import (CERT_MIN_STARTS, CERT_OBJECTIVE_RTOL, CERT_STATIONARITY_RTOL, Problem,
                                  certify, check_fit_args, clean_inputs, polish, screen, start_grid)

Array = np.ndarray


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


def certify_optimum(form: Form | str, X: dict[str, Array], y: Array, theta: Array, start_objectives: Array, *,
                    loss: str = "huber", delta: float = 1e-3, fixed: dict[str, float] | None = None,
                    weights: Array | None = None) -> dict[str, Any]:
    """Whether a fitted point is a certified optimum: what "converged" means in :mod:`lmsci.laws`.

    A fit has converged when its optimum is certified, not when one optimiser run says so (SciPy's
    L-BFGS-B may stop in its line search at the optimum, ``ABNORMAL``, or report success short of it,
    depending on the float rounding of one BLAS kernel). Two properties of the data and the point, each
    with a registered tolerance, certify it:

    1. **stationary**: the relative Gauss-Newton decrement of the projected gradient at the best point
       (:meth:`lmsci.laws.objective.Problem.stationarity`: ``0.5 g^T H^-1 g / F`` with ``g`` the gradient projected
       on the bounds, ``H`` the IRLS majoriser of the Huber loss, ``F`` the objective) is at most
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
    X, y = clean_inputs(form, X, y)
    prob = Problem(form, X, y, loss, delta, fixed)
    z = np.asarray(theta, dtype=float)[prob.free]
    ends = np.asarray(start_objectives, dtype=float) * prob.scale
    return certify(prob, z, ends, None if weights is None else np.asarray(weights, dtype=float))


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
    fixed = check_fit_args(form, loss, delta, fixed)
    X, y = clean_inputs(form, X, y)
    k = len(form.params) - len(fixed)
    if y.size < k + 1:
        raise DataError(f"law {form.name!r} has {k} free parameters and needs at least {k + 1} points; "
                        f"got {y.size}")
    prob = Problem(form, X, y, loss, delta, fixed)
    t0 = time.perf_counter()
    grid = start_grid(form, prob, grid, init, fixed)
    starts, start_idx, ends = screen(prob, grid, n_starts, screen_iters, polish_rtol)
    best, n_ok = polish(prob, starts, start_idx, ends, maxiter)
    cert = certify(prob, best.x, ends)
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
    X, y = clean_inputs(form, X, y)
    prob = Problem(form, X, y, res.loss, res.delta, res.fixed)
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
