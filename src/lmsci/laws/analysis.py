"""One call from a table of runs to a fitted law, its intervals, allocation, held-out error and figures.

Used by ``lmsci fit`` and by the experiments ``chinchilla-refit`` and ``scaling-sweep``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lmsci.errors import DataError
from lmsci.laws.allocation import allocation_exponents, allocation_table, approach2
from lmsci.laws.datasets import ScalingData
from lmsci.laws.compare import heldout_error
from lmsci.laws.fit import FitResult, fit
from lmsci.laws.forms import Form, get_form


@dataclass
class Analysis:
    """The outputs of :func:`analyze`."""

    fit: FitResult
    params: pd.DataFrame
    allocation: pd.DataFrame | None = None
    exponents: dict[str, Any] | None = None
    approach2: dict[str, Any] | None = None
    heldout: dict[str, Any] | None = None
    figures: list[Path] = field(default_factory=list)

    def text(self) -> str:
        """A plain-text summary (what ``lmsci fit`` prints)."""
        r = self.fit
        lines = [f"law: {r.form.name}   {r.form.equation}", f"source: {r.form.source}",
                 f"points: {r.n}   free parameters: {r.k}   loss: {r.loss} (delta {r.delta:g})   "
                 f"local starts polished: {r.n_starts}   fit time {r.fit_seconds:.2f} s",
                 f"optimiser: {'converged' if r.converged else 'DID NOT CONVERGE'} (optimum "
                 f"{'certified' if r.converged else 'not certified'}: stationarity {r.stationarity:.2g}, "
                 f"{r.n_starts_at_best} of {r.n_grid_starts} starts reach the best objective; best start's L-BFGS-B: "
                 f"{r.message}; {r.n_starts_converged} of {r.n_starts} L-BFGS-B runs report success)",
                 f"in-sample RMSE ({'log y' if r.form.space == 'log' else 'y'}): {r.rmse:.5f}   "
                 f"AIC {r.aic:.1f}   BIC {r.bic:.1f}"]
        if r.n_boot:
            lines.append(f"\nparameters (95% percentile bootstrap CI over the {r.n_boot_ok} of {r.n_boot} resamples "
                         f"that converged; {r.n_boot_failed} did not converge and are excluded; "
                         f"{r.boot_seconds:.2f} s):")
        else:
            lines.append("\nparameters (no bootstrap):")
        for _, row in self.params.iterrows():
            ci = "" if pd.isna(row["ci_low"]) else f"  [{row['ci_low']:.4g}, {row['ci_high']:.4g}]"
            fx = "  (fixed)" if row["fixed"] else ""
            lines.append(f"  {row['param']:>8} = {row['value']:.5g}{ci}{fx}")
        if self.exponents is not None:
            e = self.exponents
            ci = f" [{e['a_ci'][0]:.3f}, {e['a_ci'][1]:.3f}]" if e.get("a_ci") else ""
            lines.append(f"\ncompute-optimal scaling (Approach 3): N_opt ∝ C^{e['a']:.3f}{ci}, "
                         f"D_opt ∝ C^{e['b']:.3f}")
        if self.allocation is not None:
            lines.append("allocation under C = 6ND (95% CI):")
            for _, a in self.allocation.iterrows():
                tci = "" if pd.isna(a["tpp_lo"]) else f" [{a['tpp_lo']:.3g}, {a['tpp_hi']:.3g}]"
                nci = "" if pd.isna(a["N_lo"]) else f" [{a['N_lo']:.3g}, {a['N_hi']:.3g}]"
                lines.append(f"  C={a['C']:.3g}: N_opt={a['N_opt']:.3g}{nci}  D_opt={a['D_opt']:.3g}  "
                             f"tokens/param={a['tokens_per_param']:.3g}{tci}  loss={a['loss_opt']:.4f}")
        if self.approach2 is not None and self.approach2.get("n_used", 0) >= 2:
            a2 = self.approach2
            ci = f" [{a2['a_ci'][0]:.3f}, {a2['a_ci'][1]:.3f}]" if a2.get("a_ci") else ""
            lines.append(f"Approach 2 (IsoFLOP minima of {a2['n_used']} profiles): N_opt ∝ C^{a2['a']:.3f}{ci}, "
                         f"D_opt ∝ C^{a2['b']:.3f}")
        if self.heldout is not None:
            h = self.heldout
            lines.append(f"held-out extrapolation (fit on smallest {h['frac']:.0%} by {h['split_var']}, "
                         f"n={h['n_train']}; score on {h['n_test']} larger runs): RMSE {h['rmse_test']:.5f} "
                         f"(train {h['rmse_train']:.5f}), mean |rel. error| {h['mare_test']:.2%}")
        if self.figures:
            lines.append("figures: " + ", ".join(str(p) for p in self.figures))
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        d = {"fit": self.fit.to_dict(), "convergence": self.fit.convergence()}
        if self.allocation is not None:
            d["allocation"] = self.allocation.to_dict(orient="records")
        if self.exponents is not None:
            d["exponents"] = self.exponents
        if self.approach2 is not None:
            d["approach2"] = {k: (v.to_dict(orient="records") if isinstance(v, pd.DataFrame) else v)
                              for k, v in self.approach2.items()}
        if self.heldout is not None:
            d["heldout"] = self.heldout
        return d


def analyze(
    data: ScalingData,
    law: str | Form,
    *,
    x: str | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    budgets: list[float] | None = None,
    heldout_frac: float = 0.75,
    heldout_var: str | None = None,
    out: str | Path | None = None,
    n_starts: int | None = 4,
    heldout_n_starts: int | None | str = "same",
    loss: str = "huber",
    delta: float = 1e-3,
    grid: str = "full",
    figures: bool = True,
) -> Analysis:
    """Fit ``law`` to ``data`` with bootstrap CIs; allocation, Approach 2, held-out error; figures in ``out``.

    Args:
        data: runs (see :mod:`lmsci.laws.datasets`).
        law: a form name (``chinchilla``, ``kaplan_n``, ``kaplan_d``, ``kaplan_c``, ``kaplan_nd``,
            ``kaplan_ns``, ``bnsl``/``bnsl0``/``bnsl2``, ``sigmoid``) or a :class:`Form`.
        x: for BNSL forms, the input variable (``N``, ``D``, ``C`` or ``S``; default ``C`` when present).
        n_boot: bootstrap resamples (0 = no intervals).
        budgets: FLOP budgets for the allocation table (default: the data's min, max and 10x and 1000x max).
        heldout_frac: fraction of runs (smallest by ``heldout_var``) used to fit in the extrapolation test.
        heldout_var: the variable ordering runs for the held-out split (default ``C``, else the first input).
        out: directory for figures and ``fit.json``/``params.csv``/``allocation.csv`` (None = nothing written).
        n_starts: L-BFGS-B polishes of the best end points of the batched screening of the grid;
            None runs L-BFGS-B from every grid point (Besiroglu et al.'s recipe verbatim, 4,500 starts
            for Chinchilla on the full grid).
        heldout_n_starts: the same for the held-out extrapolation fit (``"same"``: ``n_starts``).
        grid: ``"full"`` (the form's grid of starts; 4,500 for Chinchilla as Besiroglu et al.) or
            ``"coarse"`` (first/middle/last value per parameter; 243 for Chinchilla).
        figures: draw figures into ``out``.

    Raises:
        ConfigError: unknown ``grid``.

    Raises:
        DataError: the data lack the law's inputs, have too few points, or bad values.
    """
    if isinstance(law, str):
        if law.startswith("bnsl"):
            x = x or ("C" if "C" in data.X else next(iter(data.X)))
            form = get_form(law, x=x)
        else:
            form = get_form(law)
    else:
        form = law
    missing = [v for v in form.inputs if v not in data.X]
    if missing:
        raise DataError(f"law {form.name!r} needs {list(form.inputs)}; the data lack {missing} "
                        f"(have {sorted(data.X)}); map columns with --n-col/--d-col/--c-col/--s-col")
    if grid not in ("full", "coarse"):
        from lmsci.errors import ConfigError

        raise ConfigError("grid", grid, "'full' or 'coarse'")
    starts = form.grid() if grid == "full" else form.coarse_grid()
    X = {k: v for k, v in data.X.items()}
    res = fit(form, X, data.y, n_boot=n_boot, seed=seed, n_starts=n_starts, loss=loss, delta=delta, grid=starts)
    an = Analysis(fit=res, params=res.table())
    two_var = set(form.inputs) == {"N", "D"} and form.space == "log"
    if two_var:
        C = X["C"] if "C" in X else 6 * X["N"] * X["D"]
        if budgets is None:
            budgets = [float(C.min()), float(C.max()), float(C.max() * 10), float(C.max() * 1000)]
        an.allocation = allocation_table(res, np.array(budgets, dtype=float))
        an.exponents = allocation_exponents(res)
        a2 = approach2(X["N"], C, data.y)
        an.approach2 = a2 if a2["n_profiles"] else None
    hv = heldout_var or ("C" if "C" in X else form.inputs[0])
    try:
        an.heldout = heldout_error(form, X, data.y, split_var=hv, frac=heldout_frac, loss=loss, delta=delta,
                                   n_starts=n_starts if heldout_n_starts == "same" else heldout_n_starts,
                                   grid=starts)
    except DataError as e:
        an.heldout = None
        an.params.attrs["heldout_error"] = str(e)
    if out is not None:
        write_outputs(an, data, Path(out), figures=figures)
    return an


def write_outputs(an: Analysis, data: ScalingData, out: Path, figures: bool = True) -> None:
    """Write ``fit.json``, ``params.csv``, ``allocation.csv`` and (optionally) figures into ``out``."""
    from lmsci.laws.plots import plot_fit, plot_isoflop, plot_isoloss, plot_residuals

    out.mkdir(parents=True, exist_ok=True)
    res = an.fit
    name = res.form.name
    an.params.to_csv(out / "params.csv", index=False)
    (out / "fit.json").write_text(json.dumps(an.to_json(), indent=2, default=_json_default))
    if an.allocation is not None:
        an.allocation.to_csv(out / "allocation.csv", index=False)
    if not figures:
        return
    an.figures.append(plot_fit(res, data.X, data.y, out / f"{name}_fit.png"))
    an.figures.append(plot_residuals(res, data.X, data.y, out / f"{name}_residuals.png"))
    if an.allocation is not None:
        an.figures.append(plot_isoloss(res, data.X, data.y, out / f"{name}_isoloss.png", approach2=an.approach2))
        if an.approach2 is not None:
            C = data.X["C"] if "C" in data.X else 6 * data.X["N"] * data.X["D"]
            an.figures.append(plot_isoflop(data.X["N"], C, data.y, an.approach2, out / f"{name}_isoflop.png", res))


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, tuple):
        return list(o)
    return str(o)
