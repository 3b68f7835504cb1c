"""The ``lmsci`` command line: a thin typer app. Parse, look up the registry, call; no science here."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from lmsci.errors import ConfigError, LmsciError, RunDirError

app = typer.Typer(
    help="lmsci: a laboratory for the science of language models. "
    "`lmsci list` shows the experiments; `lmsci run NAME` reproduces one end to end.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def fail(msg: str, code: int = 2) -> None:
    """Print an error to stderr and exit (code 2 = bad input)."""
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


def _guard(fn, *args, **kwargs):
    """Run ``fn``; turn lmsci input errors into a clear message and exit code 2."""
    try:
        return fn(*args, **kwargs)
    except (ConfigError, RunDirError, LmsciError) as e:
        fail(str(e))


@app.command("list")
def list_cmd() -> None:
    """The catalog: each experiment, the claim it tests, its source and time per preset."""
    from rich.console import Console
    from rich.table import Table

    from lmsci.experiments.registry import catalog

    t = Table(show_lines=True)
    for col in ("name", "claim", "source", "time (smoke / quick / paper)"):
        t.add_column(col)
    for name, cls in catalog().items():
        est = cls.time_estimate
        t.add_row(name, cls.claim, cls.source,
                  " / ".join(est.get(p, "?") for p in ("smoke", "quick", "paper")))
    Console(width=160).print(t)


@app.command("run")
def run_cmd(
    name: str = typer.Argument(..., help="experiment name (see `lmsci list`)"),
    preset: str = typer.Option("quick", "--preset", "-p", help="smoke | quick | paper"),
    set_: Optional[list[str]] = typer.Option(None, "--set", "-s", help="override a config key: key=value (repeatable)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="run directory (rerun into it to resume)"),
    seed: Optional[int] = typer.Option(None, "--seed", help="master seed (default: the config's, 0)"),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="show progress bars"),
) -> None:
    """Run (or resume) an experiment: data, training, measurement, report and verdict."""
    from lmsci.config import resolve_config
    from lmsci.experiments.registry import get
    from lmsci.sweep import run_experiment

    def go():
        cls = get(name)
        cfg = resolve_config(cls.Config, preset, set_ or [], seed)
        exp = cls()
        exp.validate(cfg)
        return run_experiment(exp, cfg, out, progress=progress, log=lambda m: typer.echo(m, err=True))

    run = _guard(go)
    typer.echo(f"run directory: {run.path}")
    _show(run.path)


def _load_run(run_dir: Path):
    from lmsci.config import config_from_yaml
    from lmsci.experiments.registry import get
    from lmsci.runs import RunDir

    run = RunDir(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir} does not exist")
    cls = get(run.meta()["experiment"])
    return cls(), config_from_yaml(cls.Config, run.config_yaml()), run


def _show(run_dir: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    exp, cfg, run = _load_run(run_dir)
    con = Console(width=160)
    res = run.results()
    con.print(f"[bold]{exp.name}[/bold] · preset {cfg.preset} · seed {cfg.seed} · {len(res)} points finished")
    if not res.empty:
        t = Table(title="results")
        cols = list(res.columns)[:12]
        for c in cols:
            t.add_column(str(c))
        for _, r in res.head(40).iterrows():
            t.add_row(*[f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c]) for c in cols])
        con.print(t)
    vt = Table(title="verdict")
    for c in ("claim", "statistic", "value", "CI", "threshold", "verdict"):
        vt.add_column(c)
    for v in run.verdicts():
        ci = f"[{v.ci[0]:.4g}, {v.ci[1]:.4g}]" if v.ci else ""
        val = f"{v.value:.4g}" if isinstance(v.value, (int, float)) else str(v.value)
        vt.add_row(v.claim, v.statistic, val, ci, v.threshold,
                   "[green]reproduced[/green]" if v.reproduced else "[red]not reproduced[/red]")
    con.print(vt)
    con.print(f"report: {run.path / 'report.md'}")


@app.command("show")
def show_cmd(run_dir: Path = typer.Argument(..., help="a run directory")) -> None:
    """Print a run's results table and verdict."""
    _guard(_show, run_dir)


@app.command("report")
def report_cmd(run_dir: Path = typer.Argument(..., help="a run directory")) -> None:
    """Re-render a run's report and verdict from its stored results, without training."""
    from lmsci.report import render_report

    def go():
        exp, cfg, run = _load_run(run_dir)
        render_report(exp, cfg, run)
        return run

    run = _guard(go)
    typer.echo(f"wrote {run.path / 'report.md'}")


def main() -> None:  # console script entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
