"""Reproduce a registered claim and read its verdict and report, from Python.

    python docs/tutorials/reproduce_a_claim.py [EXPERIMENT] [PRESET]      # default: factual-recall smoke (~10 s)

The same as `lmsci run factual-recall --preset smoke --out DIR` followed by `lmsci show DIR`. At the smoke preset
the claims come out inconclusive by design ("below the scale"): smoke checks that the pipeline runs; `quick` (the
CLI's default) is the smallest preset whose verdicts are published.
"""

from __future__ import annotations

import sys
import tempfile
import textwrap
from pathlib import Path

import pandas as pd

from lmsci.config import resolve_config
from lmsci.experiments.registry import get
from lmsci.sweep import run_experiment

def short(text: str, width: int = 110) -> str:
    return textwrap.shorten(text, width, placeholder=" ...")


name = sys.argv[1] if len(sys.argv) > 1 else "factual-recall"
preset = sys.argv[2] if len(sys.argv) > 2 else "smoke"

exp = get(name)                                              # the registered experiment (did-you-mean on a typo)
cfg = resolve_config(exp.Config, preset, {"threads": 1})     # the preset's config, every default resolved
with tempfile.TemporaryDirectory() as out:
    run = run_experiment(exp(), cfg, Path(out) / name, progress=False, log=lambda msg: None)

    results = run.results()                                  # results.csv: one row per sweep point and seed
    print(f"{name} at preset {preset!r}: {len(results)} result rows, columns {', '.join(results.columns[:6])}, ...")
    for v in run.verdicts():                                 # verdict.json, judged by the registered rules
        value = "not computed" if v.value is None else f"{v.value:.4g}"
        null = "" if v.null_value is None else f"; null arm {v.null_value:.4g} (meets the rule: {v.null_passed})"
        print(f"- {v.claim_id} [{v.kind}] {v.outcome.upper()}: {short(v.statistic, 70)} = {value}{null}")
        print(f"    rule: {short(v.rule)}")
        for reason in v.reasons:                             # why it is inconclusive, one line each
            print(f"    why: {short(reason)}")
    report = (run.path / run.REPORT).read_text()             # report.md, with figures/*.png beside it
    print(f"\nreport.md ({len(report.splitlines())} lines, {len(list((run.path / 'figures').glob('*.png')))} "
          f"figures) starts:")
    print("\n".join(report.splitlines()[:6]))
    print(f"\nrun directory: {sorted(p.name for p in run.path.iterdir())}")

# the published verdicts of the same claims (preset quick, master seeds 0 and 1): `lmsci claims NAME --status`
table = pd.read_csv(Path(__file__).resolve().parents[2] / "results" / "quick" / "claims.csv")
print(f"\npublished at quick (results/quick/claims.csv):")
for row in table[table.experiment == name].itertuples():
    print(f"- {row.claim} [{row.kind}] {row.outcome}: {short(str(row.ours), 90)}")
