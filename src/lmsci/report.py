"""Reports: verdict.json and report.md (with PNG figures), re-renderable from stored results."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pandas as pd

from lmsci.config import ExperimentConfig
from lmsci.runs import RunDir, Verdict, atomic_write_text

if TYPE_CHECKING:
    from lmsci.experiments.base import Experiment


def _fmt(v) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return f"{v:.4g}"
    return str(v)


def markdown_table(df: pd.DataFrame, max_rows: int = 60) -> str:
    """A GitHub-flavoured markdown table of ``df`` (first ``max_rows`` rows)."""
    if df.empty:
        return "_(no rows)_\n"
    cols = list(df.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for _, r in df.head(max_rows).iterrows():
        lines.append("| " + " | ".join(_fmt(r[c]) for c in cols) + " |")
    if len(df) > max_rows:
        lines.append(f"\n_{len(df) - max_rows} more rows in results.csv_")
    return "\n".join(lines) + "\n"


def verdict_table(verdicts: list[Verdict]) -> str:
    rows = []
    for v in verdicts:
        ci = f"[{v.ci[0]:.4g}, {v.ci[1]:.4g}]" if v.ci else ""
        rows.append({
            "claim": v.claim,
            "statistic": v.statistic,
            "value": v.value if v.value is not None else float("nan"),
            "95% CI": ci,
            "threshold": v.threshold,
            "verdict": "**reproduced**" if v.reproduced else "**not reproduced**",
        })
    return markdown_table(pd.DataFrame(rows))


def render_report(exp: Experiment, cfg: ExperimentConfig, run: RunDir) -> list[Verdict]:
    """Compute verdicts and figures from ``run``'s results and write verdict.json and report.md."""
    import matplotlib

    matplotlib.use("Agg")
    results = run.results()
    verdicts = exp.verdicts(cfg, results, run) if not results.empty else []
    run.write_verdict(verdicts)
    figures = exp.figures(cfg, results, run) if not results.empty else []
    env = run.environment()
    parts = [
        f"# {exp.name}\n",
        f"**Claim.** {exp.claim}\n",
        f"**Source.** {exp.source}\n",
        f"**Preset.** `{cfg.preset}` · seed {cfg.seed} · device {env.get('device', '?')} · "
        f"lmsci {env.get('lmsci_version', '?')} (commit {str(env.get('git_commit'))[:10]}) · "
        f"torch {env.get('torch', '?')}\n",
        "## Verdict\n",
        verdict_table(verdicts) if verdicts else "_no finished points yet_\n",
    ]
    for v in verdicts:
        if v.note:
            parts.append(f"> {v.note}\n")
    extra = exp.report_sections(cfg, results, run) if not results.empty else ""
    if extra:
        parts.append(extra.rstrip() + "\n")
    for f in figures:
        parts.append(f"### {f.caption}\n\n![{f.caption}](figures/{f.filename})\n")
    parts.append("## Results\n")
    parts.append(markdown_table(results))
    parts.append("\n## Configuration\n\n```yaml\n" + run.config_yaml() + "```\n")
    atomic_write_text(run.path / RunDir.REPORT, "\n".join(parts))
    return verdicts
