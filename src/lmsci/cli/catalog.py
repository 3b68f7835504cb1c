"""The ``lmsci`` commands that look up what the lab holds, without running an experiment: ``list`` (the catalog with
the published quick outcomes), ``claims`` (the registered claims), ``models`` (the model zoo) and ``check-model``
(whether a model's attention interventions are exact)."""

from __future__ import annotations

import re
import textwrap
from typing import Optional

import typer

from lmsci.cli.common import guard
from lmsci.errors import RunDirError

LIST_WIDTH = 120  # `lmsci list` fits a 120-column terminal

_DURATION = re.compile(r"(~)?\s*(\d+(?:\.\d+)?)\s*(?:CPU-)?(s|sec|seconds?|min|minutes?|h|hours?)\b")


def short_time(text: str | None) -> str:
    """The first duration in a free-text time estimate, in short form: ``"~260 s (estimated ...)"`` -> ``"~4m"``,
    ``"711 s measured ..."`` -> ``"12m"``, ``"~1 h on one H100"`` -> ``"~60m"``, under a minute ``"30s"``.

    ``~`` marks an estimate: the duration is written with ``~``, or the text says "estimated" before it says
    "measured". ``"-"`` for no text, ``"?"`` when the text holds no duration (seconds, minutes or hours).
    """
    if not text:
        return "-"
    m = _DURATION.search(text)
    if m is None:
        return "?"
    value, unit = float(m.group(2)), m.group(3)
    seconds = value * (3600 if unit.startswith("h") else 60 if unit.startswith("min") else 1)
    low = text.lower()
    est, meas = low.find("estimat"), low.find("measured")
    approx = bool(m.group(1)) or (est >= 0 and (meas < 0 or est < meas))
    short = f"{round(seconds)}s" if seconds < 59.5 else f"{int(seconds / 60 + 0.5)}m"
    return ("~" if approx else "") + short


def measured_quick(rows) -> str | None:
    """One experiment's quick wall time per master seed from its published rows (``wall_s`` is summed over the
    row's master seeds), as :func:`short_time` writes a measured one; None without a positive time."""
    import pandas as pd

    if rows is None or len(rows) == 0 or "wall_s" not in rows:
        return None
    wall = pd.to_numeric(rows["wall_s"], errors="coerce").max()
    seeds = str(rows["master_seeds"].iloc[0]) if "master_seeds" in rows else ""
    n = max(len([x for x in seeds.split(",") if x.strip()]), 1)
    if not wall or wall != wall or wall <= 0:
        return None
    return short_time(f"{wall / n:.0f} s measured")


def quick_time(rows, estimate: str | None) -> str:
    """The ``quick`` cell of ``lmsci list``: a time measured with ``--backend processes`` (or ``ray``, which also puts
    one group of points on each core) where the experiment's quick estimate starts with one (``"10.1 min measured
    with --backend processes ..."`` -> ``"10m p"``: its points on every core, the way to run it on a small
    machine), else :func:`measured_quick` of the published rows, else the estimate's :func:`short_time`."""
    text = (estimate or "").split(";")[0]
    if ("--backend processes" in text or "--backend ray" in text) and "measured" in text.lower():
        short = short_time(text)
        if short[:1] not in ("~", "-", "?"):
            return short + " p"
    return measured_quick(rows) or short_time(estimate)


def outcome_summary(rows) -> str:
    """One experiment's published rows (a claims-table slice) as ``"3R 1N 0I"`` (claims reproduced / not
    reproduced / inconclusive, seed-dependent included, ablations apart, as the README's counts), then
    ``"2P"``/``"1F"``/``"1?"`` for design checks passed / failed / inconclusive and ``"2u"`` for items not
    decided at the table's preset (each only when non-zero); ``"-"`` for no rows."""
    from lmsci.publish import table_counts

    if rows is None or len(rows) == 0:
        return "-"
    c = table_counts(rows)
    parts = [f"{c['reproduced']}R {c['not reproduced']}N {c['inconclusive']}I"]
    for key, tag in (("checks passed", "P"), ("checks failed", "F"), ("checks inconclusive", "?"),
                     ("not decided at this preset", "u"), ("errors", "E")):
        if c[key]:
            parts.append(f"{c[key]}{tag}")
    return " ".join(parts)


def _published_quick():
    """The published quick table (``results/quick/claims.csv`` of :func:`lmsci.publish.results_root`), or None."""
    from lmsci.publish import CLAIMS_CSV, load_claims_table, results_root

    f = results_root() / "quick" / CLAIMS_CSV
    if not f.is_file():
        return None
    try:
        return load_claims_table(f)
    except RunDirError:
        return None


def published_seeds(table) -> str:
    """The master seeds behind a claims table's rows, as the legend of `lmsci list` says them: ``"master seeds 11
    and 12"`` where every row has the same ones, ``"master seeds per row: 0,1 or 11,12"`` where they differ, ``"no
    rows"`` without a table."""
    if table is None or len(table) == 0 or "master_seeds" not in table:
        return "no rows"
    # a one-seed column reads as numbers (as floats, "3.0", beside an error row's empty cell)
    parsed = {tuple(int(float(x)) for x in str(s).split(",")) for s in table["master_seeds"]
              if str(s).strip() and str(s) != "nan"}
    sets = [",".join(map(str, t)) for t in sorted(parsed)]
    if len(sets) == 1:
        seeds = sets[0].split(",")
        return "master seed " + seeds[0] if len(seeds) == 1 else (
            "master seeds " + ", ".join(seeds[:-1]) + " and " + seeds[-1])
    return "master seeds per row: " + " or ".join(sets)


def catalog_lines(width: int = LIST_WIDTH) -> list[str]:
    """`lmsci list`'s lines: a title, a header, one line per experiment (name, family, claims, checks, the
    published quick outcome, quick and gpu time, the claim tested cut to fit) and a legend, each at most
    ``width`` characters."""
    from lmsci.experiments.registry import PACKAGE, catalog

    pub = _published_quick()
    rows = []
    for name, cls in catalog().items():
        mod = cls.__module__
        family = mod.split(".")[2] if mod.startswith(PACKAGE + ".") and mod.count(".") >= 3 else "-"
        n_claims = sum(c.kind != "check" and not c.ablation for c in cls.claims)
        n_abl = sum(c.kind != "check" and bool(c.ablation) for c in cls.claims)
        n_checks = sum(c.kind == "check" for c in cls.claims)
        mine = None if pub is None else pub[pub["experiment"] == name]
        est = cls.time_estimate
        outcome = outcome_summary(mine)
        if outcome == "-" and not any("quick" in c.presets for c in cls.claims):
            outcome = "left out"
        rows.append([name, family, f"{n_claims}" + (f"+{n_abl}a" if n_abl else ""), str(n_checks or "-"),
                     outcome, quick_time(mine, est.get("quick")),
                     short_time(est.get("gpu")) if "gpu" in cls.Config.PRESETS else "-", " ".join(cls.claim.split())])
    head = ["name", "family", "claims", "checks", "quick outcome", "quick", "gpu", "claim tested"]
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head) - 1)]

    def line(cells: list[str]) -> str:
        left = "  ".join(c.ljust(w) for c, w in zip(cells, widths)) + "  "
        room = width - len(left)
        last = cells[-1] if len(cells[-1]) <= room else cells[-1][:max(room - 3, 0)] + "..."
        return (left + last).rstrip()[:width]

    title = f"{len(rows)} experiments (`lmsci list --long`: claims, sources, every preset's time)"
    legend = textwrap.wrap(
        f"quick outcome: the published table (results/quick/claims.csv, {published_seeds(pub)}): R reproduced, "
        "N not reproduced, I inconclusive (claims; ablations apart); design checks P passed, F failed, ? "
        "inconclusive; u not decided at quick; - no row; left out: decides nothing at quick, so the quick suite "
        "does not run it.", 100, break_on_hyphens=False) + textwrap.wrap(
        "claims: +Na = N ablations. Times: ~ estimated; quick without ~: the published rows' wall time per master "
        "seed (one core of a 2-core CPU, two runs at once); p: measured with --backend processes or ray (the "
        "experiment's points on both cores of that CPU, one run alone).", 100, break_on_hyphens=False)
    return [title[:width], line(head)] + [line(r) for r in rows] + [s[:width] for s in legend]


def list_cmd(
    long: bool = typer.Option(False, "--long", "-l", help="the detailed catalog: claim, source and time per "
                              "preset in full (160 columns)"),
) -> None:
    """The catalog: one line per experiment (name, family, claims, published quick outcome, quick and gpu
    time) in 120 columns; --long for each one's claim, source and time per preset in full."""
    if not long:
        for s in catalog_lines():
            typer.echo(s)
        return
    from rich.console import Console
    from rich.table import Table

    from lmsci.experiments.registry import catalog

    t = Table(show_lines=True)
    for col in ("name", "claim", "source", "time (smoke / quick / gpu / paper)"):
        t.add_column(col)
    for name, cls in catalog().items():
        est = cls.time_estimate
        t.add_row(name, cls.claim, cls.source,
                  " / ".join(est.get(p, "-" if p == "gpu" else "?") for p in ("smoke", "quick", "gpu", "paper")))
    Console(width=160).print(t)


def claims_cmd(
    name: Optional[str] = typer.Argument(None, help="experiment name (default: every experiment)"),
    as_json: bool = typer.Option(False, "--json", help="print the claims as JSON (the snapshot's format)"),
    status: bool = typer.Option(False, "--status", help="one line per claim with its published outcome "
                                "(results/quick and results/gpu)"),
) -> None:
    """The registered claims: statement, source, the paper's value, statistic, rule, null arm, gates,
    presets, and whether the claims engine or the experiment's own code judges it (with --status: each one's
    published outcome)."""
    import json

    from rich.console import Console
    from rich.table import Table

    from lmsci.claims import registered_digest, snapshot
    from lmsci.experiments.registry import get, shipped

    def go():
        return {name: get(name)} if name else shipped()

    exps = guard(go)
    if as_json:
        typer.echo(json.dumps(snapshot(exps), indent=2))
        return
    if status:
        from lmsci.publish import published_outcomes

        pub = published_outcomes()
        st = Table(show_lines=False)
        for col in ("experiment", "claim", "kind", "quick", "gpu"):
            st.add_column(col)
        for ename, cls in exps.items():
            for c in cls.claims:
                kind = "check" if c.kind == "check" else ("ablation" if c.ablation else "claim")
                st.add_row(ename, c.id, kind, *(pub.get(p, {}).get((ename, c.id), "not published")
                                                for p in ("quick", "gpu")))
        Console(width=160).print(st)
        return
    t = Table(show_lines=True)
    for col in ("experiment / claim", "statement and source", "paper", "statistic", "rule and null arm", "gates",
                "presets"):
        t.add_column(col)
    for ename, cls in exps.items():
        for c in cls.claims:
            seeds = {"seeds": f"CI across >= {c.min_seeds} seeds", "within-run": f"within-run, >= {c.min_seeds} seeds",
                     "exact": "exact"}[c.uncertainty]
            kind = " (check)" if c.kind == "check" else (" (ablation)" if c.ablation else "")
            judged = "engine" if c.stat is not None else "by hand"
            null = f"\nnull arm: {c.null}" if c.null else ""
            t.add_row(f"{ename}\n{c.id}{kind}\n[{registered_digest(cls, c)}]\njudged {judged}",
                      f"{c.statement}\n[dim]{c.source}[/dim]", c.paper_value, c.statistic_text,
                      f"{c.rule_text}\n({seeds}){null}",
                      "\n".join(f"{g.id}: {g.rule_text}" for g in c.gates) or "-", ", ".join(c.presets))
    Console(width=200).print(t)


def models_cmd(
    as_json: bool = typer.Option(False, "--json", help="the zoo entries and their install state as JSON"),
    prepare: str = typer.Option(None, "--prepare", help="write NAME's dequantised copy to the model cache now"),
) -> None:
    """The model zoo: pretrained models loadable offline (zoo name, or --set hf_model=NAME), what each supports,
    and whether it is installed here (size, sha256 prefix)."""
    import json

    from lmsci.models import zoo

    if prepare:
        typer.echo(f"{prepare}: {guard(zoo.prepare, prepare)}")
        return
    if as_json:
        typer.echo(json.dumps([{**zoo.ZOO[n].to_dict(), **zoo.installed(n)} for n in zoo.zoo_names()], indent=2))
        return
    typer.echo(zoo.models_table())


def check_model_cmd(
    path_or_id: str = typer.Argument(..., help="a zoo name (lmsci models), a checkpoint directory (config.json + "
                                     "weights), a .gguf file or a hub id"),
    dtype: str = typer.Option("float32", "--dtype", help="float32, bfloat16 or float64"),
    seq_len: int = typer.Option(48, "--seq-len", help="length of the random test input"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> None:
    """Check that every attention intervention is exact on a model: its family, the interventions it
    supports, and each one's largest logit difference against the unpatched model (exit 1 above the
    dtype's tolerance, 2 for an unsupported family or a directory without config.json)."""
    from lmsci.models.check import check_model

    report = guard(check_model, path_or_id, dtype=dtype, seq_len=seq_len)
    typer.echo(report.to_json() if as_json else report.text())
    if not report.passed:
        raise typer.Exit(1)


