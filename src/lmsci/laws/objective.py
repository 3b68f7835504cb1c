"""The objective of a scaling-law fit and the search for its optimum: Huber loss, the problem over the free
parameters, the certificate of an optimum, the grid of starts, batched screening and L-BFGS-B polishing.

:func:`lmsci.laws.fit.fit` drives these; the recipe is Besiroglu et al.'s (2024, "Chinchilla Scaling: A replication
attempt", arXiv 2404.10102, Section 2): the summed Huber loss (``delta = 1e-3``) of the fit-space residuals, parameters
in log space, L-BFGS-B from the best points of a grid of initialisations (see :mod:`lmsci.laws.fit`).

Speed. Per-start L-BFGS-B costs ~20-30 ms here (and far more when OpenBLAS threads contend on a
loaded machine, so local fits run under ``threadpool_limits(1)``). Two batched numpy passes therefore
do the bulk of the work, with SciPy's L-BFGS-B as the final word:

* the grid of starts is screened by a *batched* damped Gauss-Newton / IRLS descent (Levenberg-Marquardt
  on the Huber majoriser ``w_i = min(1, delta/|r_i|)``, a step accepted only when the exact objective
  decreases) run on all starts at once (:meth:`Problem.batched_descent`, :func:`screen`); L-BFGS-B then
  polishes the ``n_starts`` best end points (:func:`polish`);
* the bootstrap (:func:`lmsci.laws.fit.bootstrap`) runs the same batched descent on all resamples at once.

Convergence is certified, never assumed (:func:`certify`, :func:`lmsci.laws.fit.certify_optimum`, tolerances
:data:`CERT_STATIONARITY_RTOL`, :data:`CERT_OBJECTIVE_RTOL`, :data:`CERT_MIN_STARTS`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import minimize
from threadpoolctl import threadpool_limits

from lmsci.errors import ConfigError, DataError
from lmsci.laws.forms import Form

Array = np.ndarray

#: Certificate of an optimum (:func:`lmsci.laws.fit.certify_optimum`): the best point is stationary when its
#: relative Gauss-Newton decrement of the projected gradient (:meth:`Problem.stationarity`, the objective decrease
#: one more Gauss-Newton step predicts, over the objective) is at most this.
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


def target(form: Form, y: Array) -> Array:
    """The fit-space target ``[n]``: ``log y`` for log-space forms, ``y`` (as floats) for the others."""
    return np.log(y) if form.space == "log" else np.asarray(y, dtype=float)


class Problem:
    """Objective and gradient over the free parameters, with per-point weights (bootstrap counts)."""

    def __init__(self, form: Form, X: dict[str, Array], y: Array, loss: str, delta: float,
                 fixed: dict[str, float]):
        self.form, self.X, self.t = form, X, target(form, y)
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


def clean_inputs(form: Form, X: dict[str, Array], y: Array) -> tuple[dict[str, Array], Array]:
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


def certify(prob: "Problem", z_best: Array, ends: Array, W: Array | None = None) -> dict[str, Any]:
    """:func:`lmsci.laws.fit.certify_optimum` on a built problem (fit-space free parameters ``z_best``, start
    objectives)."""
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


def check_fit_args(form: Form, loss: str, delta: float, fixed: dict[str, float] | None) -> dict[str, float]:
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


def start_grid(form: Form, prob: Problem, grid: Array | str | None, init: dict[str, float] | None,
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


def screen(prob: Problem, grid: Array, n_starts: int | None, screen_iters: int,
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


def polish(prob: Problem, starts: Array, start_idx: Array, ends: Array, maxiter: int) -> tuple[Any, int]:
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
