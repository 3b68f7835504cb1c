"""Experiment ``chinchilla-refit``: Chinchilla's parametric law refitted to Epoch AI's extraction of its data.

Hoffmann et al. 2022 (arXiv 2203.15556, Approach 3, eq. 2) fitted ``L(N, D) = E + A/N^alpha + B/D^beta``
and reported E 1.69, A 406.4, B 410.7, alpha 0.34, beta 0.28. Besiroglu et al. 2024 ("Chinchilla
Scaling: A replication attempt", arXiv 2404.10102) extracted 245 runs from the paper's Figure 4,
dropped the 5 highest-loss runs, and refitted with a summed Huber loss (delta 1e-3) on log loss from a
grid of L-BFGS starts: E 1.8172, A 482.01, B 2085.43, alpha 0.3478, beta 0.3658, with bootstrap
standard errors 0.03, 124.58, 1293.23, 0.02, 0.02, and found Hoffmann's estimates inconsistent with the
data. This experiment repeats the refit with :mod:`lmsci.laws` on the CSV the user passes
(``--set data=PATH``; default the packaged copy of Epoch's ``data/svg_extracted_data.csv``), which is
copied into the run directory, and reports both published sets of constants beside ours.

Verdicts:
1. Our estimates agree with Besiroglu et al.'s: every parameter lies inside their 95% interval,
   built as estimate ± 1.96 × their reported bootstrap SE (statistic: max |ours − theirs| / SE).
2. Hoffmann et al.'s beta = 0.28 lies outside our 95% bootstrap interval for beta (the replication's
   main finding that the published Approach-3 fit does not describe the data).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field

from lmsci.config import ExperimentConfig
from lmsci.errors import ConfigError
from lmsci.experiments.base import Experiment, Figure, Point, PointContext
from lmsci.experiments.registry import register
from lmsci.laws.allocation import chinchilla_allocation
from lmsci.laws.analysis import analyze
from lmsci.laws.datasets import chinchilla_csv_path, load_csv
from lmsci.laws.fit import load_fit, save_fit
from lmsci.report import markdown_table
from lmsci.runs import RunDir, Verdict

PARAMS = ("E", "A", "B", "alpha", "beta")
#: Hoffmann et al. 2022, arXiv 2203.15556, eq. 10 (Approach 3), as published (rounded).
HOFFMANN = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
#: Besiroglu et al. 2024, arXiv 2404.10102, their refit (240 runs): estimates and bootstrap standard errors.
BESIROGLU = {"E": 1.8172, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658}
BESIROGLU_SE = {"E": 0.03, "A": 124.58, "B": 1293.23, "alpha": 0.02, "beta": 0.02}
CHINCHILLA_C = 5.76e23  # FLOP of Chinchilla (70B params, 1.4T tokens), Hoffmann et al. Table 3
INPUT_DIR = "input"


class ChinchillaRefitConfig(ExperimentConfig):
    """Configuration of ``chinchilla-refit`` (defaults = the ``quick`` preset).

    Attributes:
        data: path of the runs CSV; None = the packaged copy of Epoch's extraction.
        n_col, c_col, d_col, loss_col: column names (C is training FLOP; D = C/(6N) when no D column).
        drop_highest: runs with the highest loss dropped before fitting (Besiroglu et al.: 5).
        n_boot: bootstrap resamples (Besiroglu et al.: 4,000).
        n_starts: grid end points polished by L-BFGS-B after the batched screening of the 4,500-start grid.
        heldout_frac: fraction of runs (smallest by C) used to fit in the extrapolation test.
        grid: starting grid, ``full`` (Besiroglu et al.'s 4,500 starts) or ``coarse`` (243; smoke preset).
    """

    data: str | None = None
    n_col: str = "Model Size"
    c_col: str | None = "Training FLOP"
    d_col: str | None = None
    loss_col: str = "loss"
    drop_highest: int = Field(5, ge=0)
    n_boot: int = Field(1000, ge=0, le=100000)
    n_starts: int = Field(8, ge=1, le=4500)
    heldout_frac: float = Field(0.75, gt=0.1, lt=1.0)
    grid: Literal["full", "coarse"] = "full"

    PRESETS = {"smoke": {"n_boot": 40, "n_starts": 2, "grid": "coarse"}, "quick": {},
               "paper": {"n_boot": 4000, "n_starts": 64}}


def _input_path(cfg: ChinchillaRefitConfig) -> Path:
    return Path(cfg.data) if cfg.data is not None else chinchilla_csv_path()


@register("chinchilla-refit")
class ChinchillaRefit(Experiment):
    claim = ("Refitting Chinchilla's parametric law L = E + A/N^alpha + B/D^beta to the runs extracted from "
             "Hoffmann et al.'s Figure 4 gives Besiroglu et al.'s estimates (E 1.82, A 482, B 2085, alpha 0.348, "
             "beta 0.366), not Hoffmann's (beta 0.28).")
    source = ("Hoffmann et al. 2022, arXiv 2203.15556, Approach 3 (eq. 2, Fig. 4); Besiroglu et al. 2024, "
              "arXiv 2404.10102, Section 3 (Huber delta 1e-3 on log loss, L-BFGS grid, bootstrap)")
    Config = ChinchillaRefitConfig
    time_estimate = {"smoke": "10 s", "quick": "20 s", "paper": "1 min"}

    def validate(self, cfg: ChinchillaRefitConfig) -> None:
        p = _input_path(cfg)
        if not p.is_file():
            raise ConfigError("data", cfg.data, "the path of an existing CSV file of runs")
        if cfg.c_col is None and cfg.d_col is None:
            raise ConfigError("c_col", None, "a column name when d_col is not given")

    def points(self, cfg):
        return [Point("refit", {})]

    def _load(self, cfg, path: Path):
        d = load_csv(path, n_col=cfg.n_col, c_col=cfg.c_col, d_col=cfg.d_col, loss_col=cfg.loss_col,
                     need=("N", "D"), min_points=cfg.drop_highest + 10)
        return d, d.drop_highest(cfg.drop_highest)

    def run_point(self, cfg: ChinchillaRefitConfig, point: Point, ctx: PointContext) -> dict:
        src = _input_path(cfg)
        dst_dir = ctx.run.path / INPUT_DIR
        dst_dir.mkdir(parents=True, exist_ok=True)
        dst = dst_dir / src.name
        shutil.copyfile(src, dst)
        full, d = self._load(cfg, dst)
        an = analyze(d, "chinchilla", n_boot=cfg.n_boot, seed=ctx.seed, n_starts=cfg.n_starts,
                     budgets=[1e19, 1e21, CHINCHILLA_C], heldout_frac=cfg.heldout_frac, out=ctx.artifact_dir,
                     grid=cfg.grid, figures=False)
        save_fit(an.fit, ctx.artifact_dir / "fit.npz")
        r = an.fit
        row = {"input": f"{INPUT_DIR}/{src.name}", "n_runs": len(full), "n_fit": r.n, "objective": r.objective,
               "rmse_log": r.rmse, "fit_seconds": r.fit_seconds, "n_boot": cfg.n_boot,
               "boot_seconds": r.boot_seconds}
        for p in PARAMS:
            ci = r.ci(p)
            row[p] = r.params[p]
            row[f"{p}_lo"], row[f"{p}_hi"] = ci if ci else (np.nan, np.nan)
            row[f"{p}_se"] = r.se(p) if ci else np.nan
        e = an.exponents
        row["a"] = e["a"]
        row["a_lo"], row["a_hi"] = e["a_ci"] if e["a_ci"] else (np.nan, np.nan)
        alloc = an.allocation.set_index("C")
        row["tpp_chinchilla"] = float(alloc.loc[CHINCHILLA_C, "tokens_per_param"])
        row["tpp_chinchilla_lo"] = float(alloc.loc[CHINCHILLA_C, "tpp_lo"])
        row["tpp_chinchilla_hi"] = float(alloc.loc[CHINCHILLA_C, "tpp_hi"])
        a2 = an.approach2 or {}
        row["a_approach2"] = a2.get("a", np.nan)
        row["a2_lo"], row["a2_hi"] = a2.get("a_ci") or (np.nan, np.nan)
        row["a2_profiles"] = a2.get("n_used", 0)
        h = an.heldout or {}
        row["heldout_rmse_log"] = h.get("rmse_test", np.nan)
        row["heldout_mare"] = h.get("mare_test", np.nan)
        ctx.log(step=0, objective=r.objective, fit_seconds=r.fit_seconds, boot_seconds=r.boot_seconds)
        return row

    # ------------------------------------------------------------------------------------------
    def verdicts(self, cfg, results: pd.DataFrame, run: RunDir) -> list[Verdict]:
        r = results.iloc[0]
        z = {p: abs(float(r[p]) - BESIROGLU[p]) / BESIROGLU_SE[p] for p in PARAMS}
        worst = max(z, key=z.get)
        v1 = Verdict(
            claim="Our Huber refit agrees with Besiroglu et al.'s estimates within their 95% intervals",
            statistic="max over (E, A, B, alpha, beta) of |ours - Besiroglu| / Besiroglu SE",
            value=float(z[worst]), threshold="<= 1.96 (every parameter inside estimate ± 1.96 SE)",
            reproduced=bool(z[worst] <= 1.96),
            details={"z": z, "worst": worst, "ours": {p: float(r[p]) for p in PARAMS}, "besiroglu": BESIROGLU,
                     "besiroglu_se": BESIROGLU_SE},
            note="Besiroglu et al. report bootstrap standard errors (arXiv 2404.10102); their 95% intervals "
                 "are taken here as estimate ± 1.96 SE. Our own percentile bootstrap CIs are in the report.",
        )
        lo, hi = float(r["beta_lo"]), float(r["beta_hi"])
        have = np.isfinite(lo) and np.isfinite(hi)
        out = bool(have and not (lo <= HOFFMANN["beta"] <= hi))
        v2 = Verdict(
            claim="Hoffmann et al.'s Approach-3 beta = 0.28 is inconsistent with the data (outside our 95% CI)",
            statistic="our bootstrap 95% CI of beta", value=float(r["beta"]),
            threshold="0.28 outside the CI", reproduced=out, ci=(lo, hi) if have else None,
            details={"hoffmann_beta": HOFFMANN["beta"]},
            note="" if have else "no bootstrap (n_boot = 0): the interval is unavailable",
        )
        return [v1, v2]

    def report_sections(self, cfg, results: pd.DataFrame, run: RunDir) -> str:
        r = results.iloc[0]
        rows = []
        for p in PARAMS:
            ci = f"[{r[p + '_lo']:.4g}, {r[p + '_hi']:.4g}]" if np.isfinite(r[p + "_lo"]) else ""
            rows.append({"parameter": p, "ours": r[p], "ours 95% CI": ci, "Besiroglu et al. 2024": BESIROGLU[p],
                         "Besiroglu SE": BESIROGLU_SE[p], "Hoffmann et al. 2022": HOFFMANN[p]})
        nh, dh = chinchilla_allocation(HOFFMANN, CHINCHILLA_C)
        nb, db = chinchilla_allocation(BESIROGLU, CHINCHILLA_C)
        tpp_ci = (f"[{r['tpp_chinchilla_lo']:.3g}, {r['tpp_chinchilla_hi']:.3g}]"
                  if np.isfinite(r["tpp_chinchilla_lo"]) else "")
        a_ci = f"[{r['a_lo']:.3f}, {r['a_hi']:.3f}]" if np.isfinite(r["a_lo"]) else ""
        a2_ci = f"[{r['a2_lo']:.3f}, {r['a2_hi']:.3f}]" if np.isfinite(r["a2_lo"]) else ""
        return "\n".join([
            "## Constants\n",
            f"Input: `{r['input']}` ({int(r['n_runs'])} runs; {int(r['n_fit'])} fitted after dropping the "
            f"{cfg.drop_highest} highest-loss runs). Objective: sum of Huber(delta=1e-3) of log-loss residuals "
            f"= {r['objective']:.6g}; in-sample RMSE of log loss {r['rmse_log']:.4f}.\n",
            markdown_table(pd.DataFrame(rows)),
            "\n## Allocation at Chinchilla's budget (C = 5.76e23 FLOP)\n",
            f"- ours: tokens per parameter {r['tpp_chinchilla']:.3g} {tpp_ci}; N_opt ∝ C^a with "
            f"a = {r['a']:.3f} {a_ci}",
            f"- Besiroglu et al. constants: N_opt {nb:.3g}, D_opt {db:.3g}, tokens per parameter {db / nb:.3g}",
            f"- Hoffmann et al. constants: N_opt {nh:.3g}, D_opt {dh:.3g}, tokens per parameter {dh / nh:.3g}",
            f"- Approach 2 on the same runs (IsoFLOP groups within 0.05 dex, parabola minima; "
            f"{int(r['a2_profiles'])} profiles): a = {r['a_approach2']:.3f} {a2_ci}\n",
            "## Extrapolation and speed\n",
            f"Fit on the {cfg.heldout_frac:.0%} smallest-compute runs, scored on the rest: RMSE of log loss "
            f"{r['heldout_rmse_log']:.4f}, mean |relative error| {r['heldout_mare']:.2%}.\n",
            f"Multi-start fit ({'4,500' if cfg.grid == 'full' else '243'}-point grid screened in one batched pass, up to {cfg.n_starts} distinct end "
            f"points polished by L-BFGS-B): {r['fit_seconds']:.2f} s; bootstrap with {int(r['n_boot'])} resamples "
            f"(batched, warm-started): {r['boot_seconds']:.2f} s, on this machine.\n",
        ])

    def figures(self, cfg, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        from lmsci.laws.allocation import approach2
        from lmsci.laws.plots import plot_fit, plot_isoflop, plot_isoloss, plot_residuals

        fp = run.path / "points" / "refit" / "fit.npz"
        if not fp.exists():
            return []
        res = load_fit(fp)
        _, d = self._load(cfg, run.path / str(results.iloc[0]["input"]))
        fd = run.figures_dir
        a2 = approach2(d.X["N"], d.X["C"], d.y)
        plot_isoloss(res, d.X, d.y, fd / "isoloss.png", approach2=a2,
                     title="IsoLoss contours of our refit, efficient frontier, IsoFLOP minima")
        plot_fit(res, d.X, d.y, fd / "fit.png")
        plot_residuals(res, d.X, d.y, fd / "residuals.png")
        plot_isoflop(d.X["N"], d.X["C"], d.y, a2, fd / "isoflop.png", res)
        return [
            Figure("isoloss.png", "IsoLoss contours of the refitted law over (FLOP, parameters); blue: efficient "
                   "frontier N_opt(C) with its 95% bootstrap band; red stars: IsoFLOP parabola minima (Approach 2)"),
            Figure("fit.png", "Runs and the fitted law: loss vs tokens in bins of model size"),
            Figure("residuals.png", "Residuals of log loss vs training FLOP"),
            Figure("isoflop.png", "IsoFLOP profiles with parabola fits (Approach 2) and the fitted law (dotted)"),
        ]
