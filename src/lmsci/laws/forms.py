"""Scaling-law forms: each a named formula with named parameters, fitted in a transformed space.

Every form maps inputs (a dict of 1-D arrays keyed by ``"N"`` parameters, ``"D"`` training tokens,
``"C"`` training FLOP, ``"S"`` optimizer steps or ``"x"`` for a generic size variable) to a prediction.
Forms whose target is a loss are fitted on log-loss (``space = "log"``): the fitter works with
``f(theta) = log L_hat`` written as a log-sum-exp of log-space terms, exactly as Besiroglu et al.
(2024, arXiv 2404.10102, Section 2) fit Chinchilla's law, so that ``A = exp(a)`` and friends are
positive by construction. The downstream-accuracy sigmoid is fitted in linear space.

Each form gives ``f`` and its analytic Jacobian with respect to the fit-space parameters
``theta`` (shape ``[..., p]``; inputs broadcast as ``[..., n]``), so the robust fitter runs
L-BFGS-B with exact gradients and can evaluate a whole grid of starting points at once.

Forms (``FORMS`` registry, keyed by name):

- ``chinchilla``: ``L = E + A / N^alpha + B / D^beta`` (Hoffmann et al. 2022, arXiv 2203.15556, eq. 2).
- ``kaplan_n``: ``L = (N_c / N)^alpha_N`` (Kaplan et al. 2020, arXiv 2001.08361, eq. 1.1).
- ``kaplan_d``: ``L = (D_c / D)^alpha_D`` (ibid., eq. 1.2).
- ``kaplan_c``: ``L = (C_c / C_min)^alpha_C`` (ibid., eq. 1.3; ``C`` in the units of the input column,
  Kaplan's ``C_c = 3.1e8`` is in PF-days = 8.64e19 FLOP).
- ``kaplan_nd``: ``L = [(N_c / N)^(alpha_N / alpha_D) + D_c / D]^alpha_D`` (ibid., eq. 1.5).
- ``kaplan_ns``: ``L = (N_c / N)^alpha_N + (S_c / S)^alpha_S`` (ibid., eq. 1.6, with S the steps).
- ``bnsl`` (``bnsl1``, ``bnsl2``, ...): ``y = a + b x^-c0 prod_i (1 + (x / d_i)^(1/f_i))^(-c_i f_i)``
  with ``n`` breaks (Caballero et al. 2022, arXiv 2210.14891, eq. 1).
- ``sigmoid``: ``Acc = a / (1 + exp(-k (A N^-alpha + B D^-beta + E))) + b`` (the downstream law in
  seed 000 Part 3; cf. Gadre et al. 2024). ``k`` is not identifiable apart from the scale of
  ``(A, B, E)``, so it is held fixed at ``k = -1`` unless the caller frees it.
- ``logistic_c``: ``y = b + a / (1 + exp(-k (ln C - m)))``, one metric over compute as a sigmoid in log compute
  (linear space; ``k`` of either sign). ``power_c``: ``y = E + A C^-alpha`` (linear space; ``A`` of either sign).
  The pair that :mod:`lmsci.laws.emergence` compares (Schaeffer et al. 2023, arXiv 2304.15004).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from lmsci.errors import UnknownNameError

Array = np.ndarray


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of a form.

    Attributes:
        name: the paper's symbol (``"E"``, ``"alpha"``, ``"N_c"``, ...).
        log: whether the fitter works with ``log(value)`` (value must be > 0).
        bounds: (low, high) in fit space (that is, on ``log(value)`` when ``log``).
        grid: starting values in fit space for the multi-start grid.
    """

    name: str
    log: bool
    bounds: tuple[float, float]
    grid: tuple[float, ...]

    @property
    def fit_name(self) -> str:
        return f"log_{self.name}" if self.log else self.name


def _lse(terms: list[Array]) -> tuple[Array, list[Array]]:
    """log(sum(exp(terms))) over a list of broadcastable arrays, and the softmax weights."""
    b = np.broadcast_arrays(*terms)
    st = np.stack(b, axis=0)
    m = st.max(axis=0)
    ex = np.exp(st - m)
    s = ex.sum(axis=0)
    return m + np.log(s), [e / s for e in ex]


def _softplus(z: Array) -> Array:
    return np.logaddexp(0.0, z)


def _sigmoid(z: Array) -> Array:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


@dataclass
class Form:
    """A scaling-law form.

    Attributes:
        name: registry name (``lmsci fit --law NAME``).
        inputs: the input variables it reads, e.g. ``("N", "D")``.
        params: parameter specs in fit order.
        space: ``"log"`` (the target is fitted as log y; y > 0) or ``"linear"``.
        equation: the formula as text.
        source: paper, arXiv id, equation.
        fj: ``fj(theta [..., p], X, jac=True) -> (f [..., n], J [..., n, p] or None)`` in fit space.
        default_fixed: parameters held fixed unless the caller frees them (natural values).
    """

    name: str
    inputs: tuple[str, ...]
    params: tuple[ParamSpec, ...]
    space: str
    equation: str
    source: str
    fj: Callable[[Array, dict[str, Array]], tuple[Array, Array]]
    default_fixed: dict[str, float] = field(default_factory=dict)

    @property
    def param_names(self) -> list[str]:
        return [p.name for p in self.params]

    def to_theta(self, params: dict[str, float]) -> Array:
        """Natural parameters ``{name: value}`` -> fit-space vector ``[p]``."""
        out = []
        for p in self.params:
            v = float(params[p.name])
            out.append(np.log(v) if p.log else v)
        return np.array(out)

    def from_theta(self, theta: Array) -> dict[str, float]:
        """Fit-space vector ``[p]`` -> natural parameters."""
        return {p.name: float(np.exp(t) if p.log else t) for p, t in zip(self.params, theta)}

    def natural_array(self, thetas: Array) -> Array:
        """Fit-space ``[..., p]`` -> natural values ``[..., p]``."""
        out = np.array(thetas, dtype=float, copy=True)
        for i, p in enumerate(self.params):
            if p.log:
                out[..., i] = np.exp(out[..., i])
        return out

    def f(self, theta: Array, X: dict[str, Array]) -> Array:
        """The fit-space prediction (log y for log-space forms), shape ``[..., n]``."""
        return self.fj(np.asarray(theta, dtype=float), X, jac=False)[0]

    def predict(self, params: dict[str, float] | Array, X: dict[str, Array]) -> Array:
        """Predicted y (loss in nats/token, or accuracy) for natural ``params`` (dict) or fit-space ``theta``."""
        theta = self.to_theta(params) if isinstance(params, dict) else np.asarray(params, dtype=float)
        X = {k: np.asarray(v, dtype=float) for k, v in X.items()}
        f = self.f(theta, X)
        return np.exp(f) if self.space == "log" else f

    def grid(self) -> Array:
        """The Cartesian product of the parameters' starting grids, ``[n_starts, p]``."""
        return np.array(list(itertools.product(*[p.grid for p in self.params])), dtype=float)

    def coarse_grid(self) -> Array:
        """A smaller grid: the first, middle and last starting value of each parameter, ``[<=3^p, p]``."""
        axes = [sorted({p.grid[0], p.grid[len(p.grid) // 2], p.grid[-1]}) for p in self.params]
        return np.array(list(itertools.product(*axes)), dtype=float)


def _col(theta: Array, i: int) -> Array:
    return theta[..., i : i + 1]


# --------------------------------------------------------------------------------------------
# Chinchilla: L = E + A/N^alpha + B/D^beta, fitted as LSE(a - alpha log N, b - beta log D, e).
def _chinchilla_fj(theta, X, jac=True):
    e, a, b, al, be = (_col(theta, i) for i in range(5))
    lnN, lnD = np.log(X["N"]), np.log(X["D"])
    f, (w1, w2, w3) = _lse([a - al * lnN, b - be * lnD, e + 0 * lnN])
    if not jac:
        return f, None
    J = np.stack([w3, w1, w2, -w1 * lnN, -w2 * lnD], axis=-1)
    return f, J


def _chinchilla() -> Form:
    # Besiroglu et al.'s grid: alpha, beta in {0,...,2}, e in {-1,...,1}, a, b in {0,5,...,25}
    # (4,500 starts); the exponents start at 0.05 rather than 0 because of the bounds.
    return Form(
        name="chinchilla",
        inputs=("N", "D"),
        params=(
            ParamSpec("E", True, (-10.0, 5.0), (-1.0, -0.5, 0.0, 0.5, 1.0)),
            ParamSpec("A", True, (-20.0, 80.0), (0.0, 5.0, 10.0, 15.0, 20.0, 25.0)),
            ParamSpec("B", True, (-20.0, 80.0), (0.0, 5.0, 10.0, 15.0, 20.0, 25.0)),
            ParamSpec("alpha", False, (1e-4, 3.0), (0.05, 0.5, 1.0, 1.5, 2.0)),
            ParamSpec("beta", False, (1e-4, 3.0), (0.05, 0.5, 1.0, 1.5, 2.0)),
        ),
        space="log",
        equation="L = E + A / N^alpha + B / D^beta",
        source="Hoffmann et al. 2022, arXiv 2203.15556, eq. 2 / Approach 3; fit as Besiroglu et al. 2024, "
        "arXiv 2404.10102",
        fj=_chinchilla_fj,
    )


# --------------------------------------------------------------------------------------------
# Kaplan single-variable power laws: L = (X_c / X)^alpha  ->  f = alpha (log X_c - log X).
def _kaplan_single(var: str, name: str, sym: str, eq: str) -> Form:
    def fj(theta, X, jac=True):
        lc, al = _col(theta, 0), _col(theta, 1)
        lx = np.log(X[var])
        f = al * (lc - lx)
        if not jac:
            return f, None
        J = np.stack(np.broadcast_arrays(al + 0 * lx, lc - lx), axis=-1)
        return f, J

    return Form(
        name=name,
        inputs=(var,),
        params=(
            ParamSpec(f"{var}_c", True, (-50.0, 250.0), (5.0, 15.0, 30.0, 50.0, 80.0)),
            ParamSpec(f"alpha_{sym}", False, (1e-5, 5.0), (0.02, 0.05, 0.1, 0.3, 0.7, 1.5)),
        ),
        space="log",
        equation=f"L = ({var}_c / {var})^alpha_{sym}",
        source=f"Kaplan et al. 2020, arXiv 2001.08361, {eq}",
        fj=fj,
    )


# Kaplan L(N, D) = [(N_c/N)^(alpha_N/alpha_D) + D_c/D]^alpha_D
def _kaplan_nd_fj(theta, X, jac=True):
    nc, dc, aN, aD = (_col(theta, i) for i in range(4))
    lnN, lnD = np.log(X["N"]), np.log(X["D"])
    u1 = (aN / aD) * (nc - lnN)
    u2 = dc - lnD
    g, (w1, w2) = _lse([u1, u2])
    f = aD * g
    if not jac:
        return f, None
    J = np.stack(np.broadcast_arrays(aN * w1, aD * w2, w1 * (nc - lnN), g - w1 * u1), axis=-1)
    return f, J


def _kaplan_nd() -> Form:
    return Form(
        name="kaplan_nd",
        inputs=("N", "D"),
        params=(
            ParamSpec("N_c", True, (-50.0, 250.0), (10.0, 20.0, 30.0, 50.0)),
            ParamSpec("D_c", True, (-50.0, 250.0), (10.0, 20.0, 30.0, 50.0)),
            ParamSpec("alpha_N", False, (1e-5, 5.0), (0.03, 0.1, 0.3, 0.8)),
            ParamSpec("alpha_D", False, (1e-5, 5.0), (0.03, 0.1, 0.3, 0.8)),
        ),
        space="log",
        equation="L = [(N_c / N)^(alpha_N / alpha_D) + D_c / D]^alpha_D",
        source="Kaplan et al. 2020, arXiv 2001.08361, eq. 1.5",
        fj=_kaplan_nd_fj,
    )


# Kaplan L(N, S) = (N_c/N)^alpha_N + (S_c/S)^alpha_S
def _kaplan_ns_fj(theta, X, jac=True):
    nc, sc, aN, aS = (_col(theta, i) for i in range(4))
    lnN, lnS = np.log(X["N"]), np.log(X["S"])
    f, (w1, w2) = _lse([aN * (nc - lnN), aS * (sc - lnS)])
    if not jac:
        return f, None
    J = np.stack(np.broadcast_arrays(w1 * aN, w2 * aS, w1 * (nc - lnN), w2 * (sc - lnS)), axis=-1)
    return f, J


def _kaplan_ns() -> Form:
    return Form(
        name="kaplan_ns",
        inputs=("N", "S"),
        params=(
            ParamSpec("N_c", True, (-50.0, 250.0), (10.0, 20.0, 30.0, 50.0)),
            ParamSpec("S_c", True, (-50.0, 100.0), (2.0, 5.0, 10.0, 20.0)),
            ParamSpec("alpha_N", False, (1e-5, 5.0), (0.03, 0.1, 0.3, 0.8)),
            ParamSpec("alpha_S", False, (1e-5, 5.0), (0.1, 0.3, 0.8, 1.5)),
        ),
        space="log",
        equation="L = (N_c / N)^alpha_N + (S_c / S)^alpha_S",
        source="Kaplan et al. 2020, arXiv 2001.08361, eq. 1.6 (S = optimizer steps)",
        fj=_kaplan_ns_fj,
    )


# --------------------------------------------------------------------------------------------
# Broken neural scaling law with n breaks, fitted as
#   log y = LSE(log a, log b - c0 log x - sum_i c_i f_i softplus((log x - log d_i) / f_i)).
def bnsl(n_breaks: int = 1, x: str = "x") -> Form:
    """A BNSL form with ``n_breaks`` breaks over input variable ``x`` (Caballero et al. 2022, eq. 1).

    Raises:
        ValueError: ``n_breaks`` < 0.
    """
    if n_breaks < 0:
        raise ValueError("n_breaks must be >= 0")

    def fj(theta, X, jac=True):
        la, lb, c0 = _col(theta, 0), _col(theta, 1), _col(theta, 2)
        lx = np.log(X[x])
        h = lb - c0 * lx
        cols_h = [None, np.ones_like(h), -lx + 0 * h]
        parts = []
        for i in range(n_breaks):
            c, ld, lf = (_col(theta, 3 + 3 * i + j) for j in range(3))
            fb = np.exp(lf)
            z = (lx - ld) / fb
            s, sg = _softplus(z), _sigmoid(z)
            h = h - c * fb * s
            parts.append((-fb * s, c * sg, -c * (s - sg * z) * fb))
        f, (wa, wh) = _lse([la + 0 * h, h])
        if not jac:
            return f, None
        cols = [wa, wh * cols_h[1], wh * cols_h[2]]
        for p in parts:
            cols.extend(wh * q for q in p)
        return f, np.stack(np.broadcast_arrays(*cols), axis=-1)

    specs = [
        ParamSpec("a", True, (-30.0, 10.0), (-10.0, -1.0, 0.5)),
        ParamSpec("b", True, (-30.0, 60.0), (0.0, 3.0, 8.0)),
        ParamSpec("c0", False, (-3.0, 5.0), (0.0, 0.2, 0.6)),
    ]
    for i in range(1, n_breaks + 1):
        specs += [
            ParamSpec(f"c{i}", False, (-5.0, 5.0), (-0.3, 0.3, 1.0) if n_breaks == 1 else (-0.3, 0.5)),
            ParamSpec(f"d{i}", True, (-30.0, 80.0), (5.0, 10.0, 15.0, 20.0) if n_breaks == 1 else (5.0, 12.0, 20.0)),
            ParamSpec(f"f{i}", True, (-6.0, 3.0), (-1.0, 0.5) if n_breaks == 1 else (0.0,)),
        ]
    terms = " * ".join(f"(1 + ({x}/d{i})^(1/f{i}))^(-c{i} f{i})" for i in range(1, n_breaks + 1))
    return Form(
        name=f"bnsl{n_breaks}" if n_breaks != 1 else "bnsl",
        inputs=(x,),
        params=tuple(specs),
        space="log",
        equation=f"y = a + b {x}^-c0" + (f" * {terms}" if terms else ""),
        source="Caballero et al. 2022, Broken Neural Scaling Laws, arXiv 2210.14891, eq. 1",
        fj=fj,
    )


# --------------------------------------------------------------------------------------------
# Downstream accuracy: Acc = a / (1 + exp(-k (A N^-alpha + B D^-beta + E))) + b  (linear space)
def _sigmoid_fj(theta, X, jac=True):
    la, b, k, lA, lB, E, al, be = (_col(theta, i) for i in range(8))
    lnN, lnD = np.log(X["N"]), np.log(X["D"])
    tA = np.exp(lA - al * lnN)
    tB = np.exp(lB - be * lnD)
    z = tA + tB + E
    s = _sigmoid(-k * z)
    a = np.exp(la)
    f = a * s + b
    if not jac:
        return f, None
    ds = a * s * (1 - s)  # d f / d(-k z)
    dz = ds * (-k)
    J = np.stack(np.broadcast_arrays(a * s, np.ones_like(f), -ds * z, dz * tA, dz * tB, dz,
                                     -dz * tA * lnN, -dz * tB * lnD), axis=-1)
    return f, J


def _sigmoid_form() -> Form:
    return Form(
        name="sigmoid",
        inputs=("N", "D"),
        params=(
            ParamSpec("a", True, (-10.0, 0.7), (-1.0, -0.3)),
            ParamSpec("b", False, (-0.5, 1.0), (0.0, 0.25)),
            ParamSpec("k", False, (-50.0, 50.0), (-1.0,)),
            ParamSpec("A", True, (-20.0, 60.0), (2.0, 6.0, 12.0)),
            ParamSpec("B", True, (-20.0, 60.0), (2.0, 6.0, 12.0)),
            ParamSpec("E", False, (-30.0, 30.0), (-3.0, 0.0, 3.0)),
            ParamSpec("alpha", False, (1e-4, 3.0), (0.1, 0.4)),
            ParamSpec("beta", False, (1e-4, 3.0), (0.1, 0.4)),
        ),
        space="linear",
        equation="Acc = a / (1 + exp(-k (A N^-alpha + B D^-beta + E))) + b",
        source="Seed 000 Part 3 'Downstream performance scales with training compute' (cf. Gadre et al. 2024, "
        "arXiv 2403.08540); k fixed at -1 by default (only k*(A, B, E) is identifiable)",
        fj=_sigmoid_fj,
        default_fixed={"k": -1.0},
    )


# --------------------------------------------------------------------------------------------
# One metric over compute (emergence, Schaeffer et al. 2023, arXiv 2304.15004): a logistic in log compute
# against a power law in compute, both in linear space so that their residuals, AIC and held-out errors compare.
def _logistic_c_fj(theta, X, jac=True):
    la, b, k, m = (_col(theta, i) for i in range(4))
    lc = np.log(X["C"])
    s = _sigmoid(k * (lc - m))
    a = np.exp(la)
    f = b + a * s
    if not jac:
        return f, None
    ds = a * s * (1 - s)
    J = np.stack(np.broadcast_arrays(a * s, np.ones_like(f), ds * (lc - m), -ds * k), axis=-1)
    return f, J


def _logistic_c() -> Form:
    return Form(
        name="logistic_c",
        inputs=("C",),
        params=(
            ParamSpec("a", True, (-12.0, 5.0), (-2.0, -0.7, 0.0)),
            ParamSpec("b", False, (-10.0, 10.0), (0.0, 0.5)),
            ParamSpec("k", False, (-30.0, 30.0), (-3.0, -1.0, 1.0, 3.0)),
            ParamSpec("m", False, (-60.0, 60.0), (-3.0, 0.0, 3.0)),
        ),
        space="linear",
        equation="y = b + a / (1 + exp(-k (ln C - m)))",
        source="Seed 000 'Downstream performance scales with training compute' (a sigmoid in log compute); the "
        "emergent-ability curves of Wei et al. 2022 (arXiv 2206.07682) read by Schaeffer et al. 2023 "
        "(arXiv 2304.15004, Section 2)",
        fj=_logistic_c_fj,
    )


def _power_c_fj(theta, X, jac=True):
    E, A, al = (_col(theta, i) for i in range(3))
    lc = np.log(X["C"])
    t = np.exp(-al * lc)
    f = E + A * t
    if not jac:
        return f, None
    J = np.stack(np.broadcast_arrays(np.ones_like(f), t, -A * t * lc), axis=-1)
    return f, J


def _power_c() -> Form:
    return Form(
        name="power_c",
        inputs=("C",),
        params=(
            ParamSpec("E", False, (-10.0, 10.0), (0.0, 0.5, 1.0)),
            ParamSpec("A", False, (-100.0, 100.0), (-1.0, -0.3, 0.3, 1.0)),
            ParamSpec("alpha", False, (1e-4, 5.0), (0.1, 0.5, 1.5)),
        ),
        space="linear",
        equation="y = E + A C^-alpha",
        source="Schaeffer et al. 2023 (arXiv 2304.15004, Section 2): a metric linear in the per-token loss follows "
        "the loss's power law in scale (Kaplan et al. 2020, arXiv 2001.08361); A < 0 for a metric that grows",
        fj=_power_c_fj,
    )


FORMS: dict[str, Callable[[], Form]] = {
    "chinchilla": _chinchilla,
    "kaplan_n": lambda: _kaplan_single("N", "kaplan_n", "N", "eq. 1.1"),
    "kaplan_d": lambda: _kaplan_single("D", "kaplan_d", "D", "eq. 1.2"),
    "kaplan_c": lambda: _kaplan_single("C", "kaplan_c", "C", "eq. 1.3 (C_min)"),
    "kaplan_nd": _kaplan_nd,
    "kaplan_ns": _kaplan_ns,
    "bnsl": lambda: bnsl(1),
    "bnsl0": lambda: bnsl(0),
    "bnsl2": lambda: bnsl(2),
    "sigmoid": _sigmoid_form,
    "logistic_c": _logistic_c,
    "power_c": _power_c,
}
"""The registered law forms: name -> a zero-argument factory of its :class:`Form`. ``chinchilla``
(L = E + A/N^alpha + B/D^beta, Hoffmann et al. 2022, arXiv 2203.15556, eq. 2); ``kaplan_n``, ``kaplan_d``,
``kaplan_c``, ``kaplan_nd``, ``kaplan_ns`` (Kaplan et al. 2020, arXiv 2001.08361, eqs. 1.1-1.3, 1.5, 1.6);
``bnsl``/``bnsl0``/``bnsl2`` (broken neural scaling laws with 1, 0, 2 breaks, Caballero et al. 2022, arXiv
2210.14891); ``sigmoid`` (downstream accuracy against compute). Use :func:`get_form` (which also builds
``bnslN`` for any N and raises :class:`~lmsci.errors.UnknownNameError` with a did-you-mean)."""


def get_form(name: str, x: str | None = None) -> Form:
    """The form registered as ``name``; for BNSL forms ``x`` picks the input variable (N, D, C, S).

    Raises:
        UnknownNameError: no such form (with a did-you-mean).
    """
    if name.startswith("bnsl") and name[4:].isdigit():
        return bnsl(int(name[4:]), x or "x")
    if name not in FORMS:
        raise UnknownNameError("law", name, FORMS.keys())
    if name == "bnsl":
        return bnsl(1, x or "x")
    return FORMS[name]()
