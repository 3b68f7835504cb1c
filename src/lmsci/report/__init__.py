"""Reports: verdict.json, report.md and report.html (with PNG figures), re-renderable from stored results.

report.html is report.md rendered by ``markdown-it-py`` (CommonMark + tables) into one self-contained
page (inline CSS; figures linked from ``figures/`` as in the markdown), for reading in a browser.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pandas as pd

from lmsci.config import ExperimentConfig
from lmsci.claims import PILOT_SEED_MIN
from lmsci.runs import RunDir, Verdict, atomic_write_text

if TYPE_CHECKING:
    from lmsci.contract import Experiment


def _fmt(v) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return f"{v:.4g}"
    return str(v)


def quantity_table(results: pd.DataFrame, row: int = 0, max_rows: int = 200,
                   skip: tuple[str, ...] = ("point", "status", "commit", "device")) -> str:
    """One results row as a two-column markdown table (``quantity | value``), without the executor's
    bookkeeping columns ``skip``; for experiments whose run is a single point."""
    r = results.iloc[row]
    return markdown_table(pd.DataFrame([{"quantity": k, "value": r[k]} for k in results.columns if k not in skip]),
                          max_rows=max_rows)


def markdown_table(df: pd.DataFrame, max_rows: int | None = 60, *, cols: Sequence[str] | None = None,
                   float_format: str | None = None) -> str:
    """A GitHub-flavoured markdown table of ``df`` (first ``max_rows`` rows; None: every row), ending in a newline.

    Args:
        df: the rows.
        max_rows: rows shown (a note counts the rest); None shows every row.
        cols: the columns shown, in this order (default: every column of ``df``). With ``cols`` or
            ``float_format`` the cells keep each column's own type (an integer column is never printed as a
            float) and an empty table is its header alone.
        float_format: format spec of float cells (for example ``".3f"``), a non-finite float then an empty
            cell; default: 4 significant digits and ``nan``.

    Raises:
        KeyError: a column of ``cols`` is not in ``df``.
    """
    if cols is None and float_format is None:
        if df.empty:
            return "_(no rows)_\n"
        cols = list(df.columns)
        shown = df if max_rows is None else df.head(max_rows)
        rows = ([r[c] for c in cols] for _, r in shown.iterrows())
        fmt = _fmt
    else:
        cols = list(df.columns) if cols is None else list(cols)
        shown = df[cols] if max_rows is None else df[cols].head(max_rows)
        rows = shown.itertuples(index=False)
        fmt = _fmt if float_format is None else (lambda v: _fmt_float(v, float_format))
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    if max_rows is not None and len(df) > max_rows:
        lines.append(f"\n_{len(df) - max_rows} more rows in results.csv_")
    return "\n".join(lines) + "\n"


def _fmt_float(v, spec: str) -> str:
    """A cell with floats in format ``spec`` (non-finite: empty), anything else as ``str``."""
    if isinstance(v, float):
        return "" if not math.isfinite(v) else format(v, spec)
    return str(v)


def _fmt_value(v: Verdict) -> str:
    if v.value is None:
        return "n/a"
    out = _fmt(v.value)
    if v.ci and all(c is not None for c in v.ci):
        out += f" [{v.ci[0]:.4g}, {v.ci[1]:.4g}]"
    return out


def _seeds_label(v: Verdict) -> str:
    """The interval's kind, and the number of seeds where the kind does not already say it."""
    seeds = f"{v.n_seeds} seed{'s' * (v.n_seeds != 1)}"
    if not v.ci_kind:
        return seeds
    return v.ci_kind if "seed" in v.ci_kind else f"{v.ci_kind}; {seeds}"


def _fmt_gates(v: Verdict) -> str:
    marks = {True: "pass", False: "FAIL", None: "not measured"}
    return "; ".join(f"{g.id}: {_fmt(g.value) if g.value is not None else '-'} ({marks[g.passed]})"
                     for g in v.gates) or "none"


def _cell(text: str) -> str:
    return str(text).replace("|", "/").replace("\n", " ")


def _fmt_null(v: Verdict) -> str:
    """The null arm's value and whether it met the rule (``-`` for a check or an ablation without one)."""
    if v.kind == "check" or (v.ablation and v.null_passed is None):
        return "-"
    if v.null_passed is None:
        return "not measured"
    val = _fmt(v.null_value) if v.null_value is not None else "n/a"
    return f"{val} ({'MEETS the rule' if v.null_passed else 'fails the rule'})"


def outcome_label(v: Verdict) -> str:
    """The outcome with its marks: ``post hoc`` (rule, gate or preset changed after this seed's result was
    seen) and ``pilot`` (a pilot master seed)."""
    marks = [m for m, on in (("post hoc", v.post_hoc), ("pilot", v.pilot)) if on]
    return v.outcome + (f" ({', '.join(marks)})" if marks else "")


def verdict_table(verdicts: list[Verdict]) -> str:
    """One row per claim: id, the paper's value, ours with its interval and seeds, the null arm, the rule,
    the gates and the outcome (ablations and post hoc / pilot verdicts marked). Checks go in
    :func:`check_table`."""
    rows = []
    for v in verdicts:
        ours = f"{_fmt_value(v)} ({_seeds_label(v)})"
        rows.append({
            "claim": v.claim_id + (" (ablation)" if v.ablation else ""),
            "paper": _cell(v.paper_value),
            "ours": _cell(ours),
            "null arm": _cell(_fmt_null(v)),
            "rule": _cell(short_rule(v.rule)),
            "gates": _cell(_fmt_gates(v)),
            "outcome": f"**{outcome_label(v)}**",
        })
    return markdown_table(pd.DataFrame(rows))


def check_table(verdicts: list[Verdict]) -> str:
    """Design checks (true by construction: a world's design, a closed-form bound, an interpolation): id,
    ours, the rule and passed / failed. Never counted as reproduced claims."""
    rows = [{"check": v.claim_id, "ours": _cell(f"{_fmt_value(v)} ({_seeds_label(v)})"), "rule": _cell(v.rule),
             "outcome": f"**{outcome_label(v)}**"} for v in verdicts]
    return markdown_table(pd.DataFrame(rows))


def short_rule(rule: str, width: int = 90) -> str:
    """A rule in a few words for a table cell: its first clause, cut at ``width`` characters (the full rule is
    printed under the claim)."""
    first = rule.split("; ")[0].strip()
    return first if len(first) <= width else first[: width - 3].rstrip() + "..."


def one_line(v: Verdict) -> str:
    """A claim's outcome in one line: outcome, value with its interval and seeds, the null arm, the rule."""
    null = "" if v.kind == "check" else f"; null arm {_fmt_null(v)}"
    return (f"**{outcome_label(v)}**: {_fmt_value(v)} ({_seeds_label(v)}){null}; paper {_cell(v.paper_value)}; "
            f"rule: {short_rule(v.rule)}")


def claim_section(v: Verdict, figures: list) -> str:
    """One claim: its figures first, the one-line outcome, then the statement, statistic, full rule, gates and the
    reasons, folded below."""
    parts = [f"### {v.claim_id}\n"]
    for f in figures:
        parts.append(f"![{f.caption}](figures/{f.filename})\n\n_{f.caption}_\n")
    parts.append(one_line(v) + "\n")
    lines = [f"- claim: {v.claim} _Source: {v.source}._", f"- statistic: {v.statistic}", f"- rule: {v.rule}",
             f"- gates: {_fmt_gates(v)}"]
    if v.null and v.kind != "check":
        lines.append(f"- null arm: {v.null}")
    lines += [f"- inconclusive because {r}" for r in v.reasons]
    if v.note:
        lines.append(f"- note: {v.note}")
    return "\n".join(parts) + "\n" + "\n".join(lines) + "\n"


def claim_figures(exp: Experiment, ok: pd.DataFrame, run: RunDir, figures: list) -> dict[str, list]:
    """claim id -> the figures shown under it: the experiment's figures that name the claim, else (for a claim
    judged by the engine) the points of its statistic per arm and seed, drawn by the report kit."""
    from lmsci.contract import save_figure
    from lmsci.report.figures import claim_points

    out: dict[str, list] = {}
    for f in figures:
        for cid in getattr(f, "claims", ()):
            out.setdefault(cid, []).append(f)
    for c in exp.claims:
        if c.id in out or c.stat is None or c.kind == "check" or ok.empty:
            continue
        fig = claim_points(c, ok)
        if fig is not None:
            out[c.id] = [save_figure(fig, run, f"claim_{c.id}.png", f"{c.id}: the statistic per arm and training "
                                     "seed, with each arm's mean and 95% interval", claims=(c.id,))]
    return out


def method_text(exp: Experiment) -> str:
    """The experiment module's docstring (its method), without the first line (the report's title says it)."""
    import inspect

    mod = inspect.getmodule(type(exp))
    doc = inspect.cleandoc(mod.__doc__ or "") if mod is not None else ""
    return doc.split("\n", 1)[1].strip() if "\n" in doc else ""


def verdict_notes(verdicts: list[Verdict]) -> str:
    """Each claim's statement and source, the reasons for an inconclusive outcome, and its note."""
    parts = []
    for v in verdicts:
        parts.append(f"- **{v.claim_id}** ({outcome_label(v)}): {v.claim} _Source: {v.source}._")
        if v.null and v.kind != "check":
            parts.append(f"  - null arm: {v.null}")
        for r in v.reasons:
            parts.append(f"  - inconclusive because {r}")
        if v.note:
            parts.append(f"  - note: {v.note}")
    return "\n".join(parts) + "\n"


def split_status(results: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(finished rows, diverged rows) of a results table (rows without a status count as finished)."""
    if results.empty or "status" not in results:
        return results, results.iloc[0:0]
    ok = results["status"].fillna("ok") == "ok"
    return results[ok].reset_index(drop=True), results[~ok].reset_index(drop=True)


def compute_verdicts(exp: Experiment, cfg: ExperimentConfig, results: pd.DataFrame, run: RunDir) -> list[Verdict]:
    """Every registered claim's verdict from a results table: ``exp.verdicts`` on the finished rows,
    an inconclusive verdict for each claim it did not judge, and a failed run-level gate on every
    verdict when some point diverged (non-finite training loss)."""
    from lmsci.claims import add_gate_failure, complete

    ok, diverged = split_status(results)
    verdicts = exp.verdicts(cfg, ok, run) if not ok.empty else []
    verdicts = complete(exp.claims, verdicts, cfg.preset)
    if not diverged.empty:
        ids = ", ".join(map(str, diverged["point"].tolist()[:5]))
        for v in verdicts:
            add_gate_failure(v, "no-divergence", "every training point keeps a finite loss",
                             f"{len(diverged)} of {len(results)} points diverged ({ids})")
    return verdicts


def render_report(exp: Experiment, cfg: ExperimentConfig, run: RunDir) -> list[Verdict]:
    """Compute verdicts and figures from ``run``'s results and write verdict.json, report.md and
    report.html."""
    import matplotlib

    matplotlib.use("Agg")
    results = run.results()
    verdicts = compute_verdicts(exp, cfg, results, run)
    run.write_verdict(verdicts)
    ok, _ = split_status(results)
    figures = exp.figures(cfg, ok, run) if not ok.empty else []
    env = run.environment()
    segs = run.environment_segments()
    parts = [
        f"# {exp.name}\n",
        f"**Claim.** {exp.claim}\n",
        f"**Source.** {exp.source}\n",
        f"**Preset.** `{cfg.preset}` · seed {cfg.seed} · {cfg.n_seeds} training seed{'s' * (cfg.n_seeds != 1)} · "
        f"device {env.get('device', '?')} · lmsci {env.get('lmsci_version', '?')} "
        f"(commit {str(env.get('git_commit'))[:10]}) · torch {env.get('torch', '?')}\n",
    ]
    if env.get("models"):  # pretrained models the run loaded (RunDir.record_model)
        parts.append("**Models.** " + "; ".join(
            f"`{k}` (sha256 {str(v.get('sha256'))[:12]}, {v.get('package') or v.get('format')} "
            f"{v.get('package_version') or ''}{'; ' + v['deviation'] if v.get('deviation') else ''})"
            for k, v in env["models"].items()) + "\n")
    if len(segs) > 1:
        parts.append("**Resumed** on " + "; ".join(
            f"commit {str(e.get('git_commit'))[:10]}, device {e.get('device')} ({e.get('started')})" for e in segs[1:])
            + ". Each results row names the commit and device it was computed on.\n")
    claims_ = [v for v in verdicts if v.kind != "check"]
    checks = [v for v in verdicts if v.kind == "check"]
    by_claim = claim_figures(exp, ok, run, figures)
    parts += [
        "## Verdict\n",
        verdict_table(claims_) if claims_ else "_no registered claims_\n",
    ]
    if claims_:
        parts.append("## Claims\n")
        parts += [claim_section(v, by_claim.get(v.claim_id, [])) for v in claims_]
    if checks:
        parts += ["## Design checks\n",
                  "True by construction (a world's design, a closed-form bound, an interpolation): they guard the "
                  "setup and are never counted as reproduced claims.\n",
                  check_table(checks), verdict_notes(checks)]
    if getattr(cfg, "seed", 0) >= PILOT_SEED_MIN:
        parts.append(f"> **Pilot.** Master seed {cfg.seed} is in the pilot range (>= {PILOT_SEED_MIN:,}): these "
                     "verdicts size a preset or check a gate and are never published.\n")
    method = method_text(exp)
    if method:
        parts.append("## Method\n\n" + method + "\n")
    extra = exp.report_sections(cfg, ok, run) if not ok.empty else ""
    if extra:
        parts.append(extra.rstrip() + "\n")
    shown = {f.filename for fs in by_claim.values() for f in fs}
    rest = [f for f in figures if f.filename not in shown]
    if rest:
        parts.append("## More figures\n")
    for f in rest:
        parts.append(f"### {f.caption}\n\n![{f.caption}](figures/{f.filename})\n")
    parts.append("## Results\n")
    parts.append(markdown_table(results))
    parts.append("\n## Configuration\n\n```yaml\n" + run.config_yaml() + "```\n")
    text = "\n".join(parts)
    atomic_write_text(run.path / RunDir.REPORT, text)
    atomic_write_text(run.path / RunDir.REPORT_HTML, markdown_to_html(text, title=f"lmsci: {exp.name}"))
    return verdicts


_CSS = """body{font:15px/1.5 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px;display:block;max-width:100%;overflow-x:auto}
th,td{border:1px solid #ccc;padding:4px 8px;vertical-align:top;max-width:30em;overflow-wrap:break-word}th{background:#f3f3f3}img{max-width:100%}pre{background:#f6f6f6;padding:1em;overflow:auto}
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
