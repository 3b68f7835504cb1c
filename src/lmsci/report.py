"""Reports: verdict.json, report.md and report.html (with PNG figures), re-renderable from stored results.

report.html is report.md rendered by ``markdown-it-py`` (CommonMark + tables) into one self-contained
page (inline CSS; figures linked from ``figures/`` as in the markdown), for reading in a browser.
"""

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
    """Compute verdicts and figures from ``run``'s results and write verdict.json, report.md and
    report.html."""
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
    text = "\n".join(parts)
    atomic_write_text(run.path / RunDir.REPORT, text)
    atomic_write_text(run.path / RunDir.REPORT_HTML, markdown_to_html(text, title=f"lmsci: {exp.name}"))
    return verdicts


_CSS = """body{font:15px/1.5 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}th,td{border:1px solid #ccc;padding:4px 8px;
vertical-align:top}th{background:#f3f3f3}img{max-width:100%}pre{background:#f6f6f6;padding:1em;overflow:auto}
blockquote{border-left:4px solid #ddd;margin:0;padding:0 1em;color:#555}"""


def markdown_to_html(text: str, title: str = "lmsci report") -> str:
    """Render markdown (CommonMark with GitHub tables) to a complete HTML page with inline CSS.

    Raw HTML in ``text`` is escaped, not passed through (``html=False``).
    """
    import html

    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(text)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head>\n<body>\n{body}</body></html>\n")
