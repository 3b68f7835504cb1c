"""Fit and compare scaling laws on your own CSV of training runs, from Python and with `lmsci fit`.

    python docs/tutorials/scaling_laws.py [RUNS.csv]     # default: a CSV made from the packaged Chinchilla data

A CSV has one row per training run: parameters N, training tokens D (or FLOP C; C = 6ND fills in the other) and
the final loss in nats/token; the column names are yours (`n_col=`, `--n-col`, ...). Without a path the script
writes one from the data of Hoffmann et al.'s Fig. 4 as extracted by Besiroglu et al. (arXiv 2404.10102), which
lmsci ships, renamed to the columns a training script of yours might write.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from lmsci.laws import allocation_table, compare_forms, fit, get_form, load_csv
from lmsci.laws.datasets import chinchilla_csv_path

with tempfile.TemporaryDirectory() as tmp:
    if len(sys.argv) > 1:
        path, cols = Path(sys.argv[1]), {}
    else:
        raw = pd.read_csv(chinchilla_csv_path())
        path = Path(tmp) / "my_runs.csv"
        raw.rename(columns={"Model Size": "params", "Training FLOP": "flops", "loss": "final_loss"})[
            ["params", "flops", "final_loss"]].to_csv(path, index=False)
        cols = {"n_col": "params", "c_col": "flops", "loss_col": "final_loss"}
    runs = load_csv(path, **cols)                    # named arrays; errors name the CSV line
    print(f"{len(runs.y)} runs from {path.name}: columns {runs.columns}")

    # 1. one law, with bootstrap intervals (Huber on log loss, many starts: Besiroglu et al.'s recipe)
    law = get_form("chinchilla")                     # L = E + A / N^alpha + B / D^beta
    res = fit(law, runs.X, runs.y, n_boot=200, seed=0, grid="coarse")  # "full": 4,500 starts
    print(f"chinchilla fit (certified optimum: {res.converged}, RMSE of log loss {res.rmse:.4f}):")
    for name, value in res.params.items():
        lo, hi = res.ci(name, 0.95)                  # percentile bootstrap interval
        print(f"  {name:6s} = {value:9.4g}   95% bootstrap CI [{lo:.4g}, {hi:.4g}]")
    table = allocation_table(res, [1e21, 1e23])      # compute-optimal N and D at a FLOP budget, C = 6ND
    print(table[["C", "N_opt", "N_lo", "N_hi", "D_opt", "tokens_per_param", "loss_opt"]].to_string(
        index=False, float_format=lambda v: f"{v:.3g}"))

    # 2. compare laws: held-out error when fitted on the 75% smallest budgets, AIC, BIC
    cmp = compare_forms(["chinchilla", "kaplan_nd", "kaplan_n", "kaplan_c"], runs.X, runs.y, split_var="C",
                        grid="coarse")
    print(cmp[["law", "k", "rmse", "rmse_heldout", "delta_aic", "delta_bic"]].to_string(
        index=False, float_format=lambda v: f"{v:.4g}"))

    # 3. the same from the shell: lmsci fit (figures, fit.json and params.csv go to --out)
    cli = [sys.executable, "-c", "from lmsci.cli import main; main()", "fit", str(path), "--law", "chinchilla",
           *(f"--{k.replace('_', '-')}={v}" for k, v in cols.items()), "--bootstrap", "0", "--grid", "coarse",
           "--out", f"{tmp}/fit"]
    out = subprocess.run(cli, capture_output=True, text=True, check=True).stdout
    print(f"$ lmsci fit my_runs.csv --law chinchilla {' '.join(cli[7:-6])} --bootstrap 0 --grid coarse --out fit/")
    print("\n".join(out.splitlines()[:8]))
    print(f"fit/: {sorted(p.name for p in Path(tmp, 'fit').iterdir())}")
