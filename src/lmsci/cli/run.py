"""The ``lmsci`` commands that run experiments or read what runs left: ``run``, ``suite``, ``show``, ``report``,
``profile``, and the standalone tools ``train`` (a GPT on a corpus), ``generate`` (samples from it) and ``fit`` (a
scaling law to a CSV)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lmsci.cli.common import ADDRESS_HELP, BACKEND_HELP, DEVICE_HELP, device_overrides, fail, guard
from lmsci.errors import ConfigError, RunDirError


def run_cmd(
    name: str = typer.Argument(..., help="experiment name (see `lmsci list`)"),
    preset: str = typer.Option("quick", "--preset", "-p", help="smoke | quick | gpu | paper (gpu where the experiment has one)"),
    set_: Optional[list[str]] = typer.Option(
        None, "--set", "-s", help="override a config key: key=value, dotted for nested specs (model.d_model=128, "
        "train.steps=4000; a bare key that names one nested field works too); repeatable"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="run directory (rerun into it to resume)"),
    seed: Optional[int] = typer.Option(None, "--seed", help="master seed (default: the config's, 0)"),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="show progress bars"),
    device: Optional[str] = typer.Option(None, "--device", help=DEVICE_HELP),
    backend: str = typer.Option("local", "--backend", help=BACKEND_HELP),
    address: Optional[str] = typer.Option(None, "--address", help=ADDRESS_HELP),
    config: Optional[Path] = typer.Option(None, "--config", help="a resolved config.yaml to run as it is "
                                          "(what `lmsci suite --jobs` hands each process); --set/--seed/--device "
                                          "refused"),
    training_cache: Optional[Path] = typer.Option(
        None, "--training-cache", help="a folder of trained models to reuse and add to (sets $LMSCI_TRAINING_CACHE; "
        "an experiment that trains what an earlier run trained with the same key loads it, bit for bit; "
        "`lmsci suite` uses DIR/training-cache)"),
) -> None:
    """Run (or resume) an experiment: data, training, measurement, report and verdict."""
    from lmsci.backends import make_backend
    from lmsci.config import resolve_config
    from lmsci.experiments.registry import get
    from lmsci.sweep import PointsFailedError, run_experiment

    def go():
        b = make_backend(backend, address)
        cls = get(name)
        if training_cache is not None and training_cache.exists() and not training_cache.is_dir():
            raise ConfigError("--training-cache", str(training_cache), "a folder (or a path to create one at)")
        if config is not None:
            from lmsci.config import config_from_yaml

            if set_ or seed is not None or device is not None:
                raise ConfigError("--config", str(config), "a config file alone (no --set, --seed or --device "
                                  "beside it)")
            if not config.is_file():
                raise ConfigError("--config", str(config), "an existing config.yaml")
            cfg = config_from_yaml(cls.Config, config.read_text())
            if cfg.preset != preset:
                raise ConfigError("--config", str(config), f"a config of preset {preset!r} (it has {cfg.preset!r})")
        else:
            cfg = resolve_config(cls.Config, preset, device_overrides(set_, device), seed)
        import contextlib

        from lmsci.train.cache import using

        try:
            with using(training_cache) if training_cache is not None else contextlib.nullcontext():
                return run_experiment(cls(), cfg, out, progress=progress, log=lambda m: typer.echo(m, err=True),
                                      backend=b)
        except PointsFailedError as e:  # not bad input: some points were lost, the rest recorded
            fail(str(e), code=1)

    run = guard(go)
    typer.echo(f"run directory: {run.path}")
    _show(run.path)


def suite_cmd(
    preset: str = typer.Option("quick", "--preset", "-p", help="smoke | quick | gpu | paper"),
    only: Optional[str] = typer.Option(None, "--only", help="comma-separated experiments (default: all)"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="suite directory (rerun into it to resume)"),
    compare: Optional[Path] = typer.Option(None, "--compare", help="an earlier suite directory: mark every claim "
                                           "whose outcome changed or whose value moved outside its interval"),
    device: Optional[str] = typer.Option(None, "--device", help="cpu | cuda | cuda:N | auto, for every experiment "
                                         "(its config's device field)"),
    set_: Optional[list[str]] = typer.Option(None, "--set", "-s", help="key=value for every experiment "
                                             "(seed, threads, n_seeds)"),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="master seeds, e.g. 0,1: each experiment runs once per "
                                        "seed; a claim whose outcome differs between them is seed-dependent"),
    update: Optional[Path] = typer.Option(None, "--update", help="a published table directory (results/quick): "
                                          "replace the rows of the experiments run, keep the others"),
    jobs: int = typer.Option(1, "--jobs", "-j", help="experiments (or master seeds) run at once, each its own "
                             "process with CPUs // jobs threads (OMP_NUM_THREADS, MKL_NUM_THREADS, "
                             "OPENBLAS_NUM_THREADS where not set)"),
    check: Optional[Path] = typer.Option(None, "--check", help="a published table (results/quick): list the rows whose "
                                         "provenance digest differs from HEAD's (runs nothing; exit 1 when any is stale)"),
    budget: Optional[float] = typer.Option(None, "--budget", help="wall seconds: start nothing after, stop what runs "
                                           "(finished points kept, the rest resumable), write the partial table"),
    progress: bool = typer.Option(False, "--progress/--no-progress", help="show progress bars"),
    backend: str = typer.Option("local", "--backend", help=BACKEND_HELP),
    address: Optional[str] = typer.Option(None, "--address", help=ADDRESS_HELP),
    include_undecided: bool = typer.Option(False, "--include-undecided", help="at quick without --only, also run the "
                                           "experiments that decide nothing at quick (left out by default)"),
    merge: Optional[str] = typer.Option(None, "--merge", help="comma-separated suite directories run apart (e.g. one "
                                        "per master seed): link their finished runs into --out as one suite at all "
                                        "their seeds (later directories win), then build its table as a rerun would"),
) -> None:
    """Run every experiment (or --only some) at a preset into one directory; write the claims table
    (claims.md, claims.csv, claims.html), claims and design checks apart. Experiments that fail are error
    rows; the suite goes on."""
    if check is not None:
        from lmsci.table_check import check_published

        rep = guard(check_published, check)
        typer.echo(rep.text())
        raise typer.Exit(0 if rep.clean else 1)
    from lmsci.backends import make_backend
    from lmsci.publish import CLAIMS_HTML, CLAIMS_MD, ERROR
    from lmsci.suite import merge_suites, run_suite

    if merge is not None:
        if out is None:
            fail("--merge needs --out (the suite directory to assemble)")
        names, merged = guard(merge_suites, out, [m for m in merge.split(",") if m], only)
        seeds = seeds or ",".join(map(str, merged["seeds"]))
        only = only or ",".join(names)

    b = guard(make_backend, backend, address)
    guard(b.open)  # an unreachable cluster is reported before any work
    try:
        res = guard(run_suite, preset, only, out, device=device, overrides=set_ or [], compare=compare,
                     progress=progress, log=lambda m: typer.echo(m, err=True), backend=b, seeds=seeds, update=update,
                     jobs=jobs, budget=budget, include_undecided=include_undecided)
    finally:
        b.close()
    from lmsci.publish import table_counts

    t = res.table
    counts = table_counts(t)
    typer.echo(f"suite directory: {res.path}")
    if res.left_out:
        typer.echo(f"left out (decide nothing at {preset}): {', '.join(res.left_out)}")
    typer.echo(", ".join(f"{k}: {v}" for k, v in counts.items()) or "no claims")
    for _, r in t[t["outcome"] == ERROR].iterrows():
        typer.echo(f"error: {r['experiment']}: {r['error']}")
    if res.changes is not None:
        typer.echo(f"{len(res.changes)} claim(s) changed against {compare}")
        for _, r in res.changes.iterrows():
            typer.echo(f"  {r['experiment']} / {r['claim']}: {r['change']}")
    typer.echo(f"claims table: {res.path / CLAIMS_MD} (and {CLAIMS_HTML}, claims.csv)")


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
    from lmsci.report import _fmt_gates, _fmt_value, _seeds_label

    vt = Table(title="verdicts", show_lines=True)
    for c in ("claim", "paper", "ours", "rule", "gates", "outcome"):
        vt.add_column(c)
    colour = {"reproduced": "green", "not reproduced": "red", "inconclusive": "yellow"}
    verdicts = run.verdicts()
    for v in verdicts:
        ours = f"{_fmt_value(v)}\n{_seeds_label(v)}"
        vt.add_row(v.claim_id + (" (ablation)" if v.ablation else ""), v.paper_value, ours, v.rule,
                   _fmt_gates(v), f"[{colour.get(v.outcome, 'white')}]{v.outcome}[/]")
    con.print(vt)
    for v in verdicts:
        for r in v.reasons:
            con.print(f"[yellow]{v.claim_id}[/]: inconclusive because {r}", highlight=False)
    con.print(f"report: {run.path / run.REPORT} (and {run.REPORT_HTML})")


def show_cmd(run_dir: Path = typer.Argument(..., help="a run directory")) -> None:
    """Print a run's results table and verdict."""
    guard(_show, run_dir)


def report_cmd(run_dir: Path = typer.Argument(..., help="a run directory")) -> None:
    """Re-render a run's report and verdict from its stored results, without training."""
    from lmsci.report import render_report

    def go():
        exp, cfg, run = _load_run(run_dir)
        render_report(exp, cfg, run)
        return run

    run = guard(go)
    typer.echo(f"wrote {run.path / run.REPORT} and {run.path / run.REPORT_HTML}")


def train_cmd(
    corpus: str = typer.Option("shakespeare", "--corpus", help="training corpus: shakespeare"),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="char | bpe [default: char]"),
    vocab_size: Optional[int] = typer.Option(None, "--vocab-size", help="BPE vocabulary size [default: 1024]"),
    d_model: Optional[int] = typer.Option(None, "--d-model", help="residual width [default: 128]"),
    n_layers: Optional[int] = typer.Option(None, "--n-layers", help="blocks [default: 4]"),
    n_heads: Optional[int] = typer.Option(None, "--n-heads", help="heads per layer [default: 4]"),
    d_head: Optional[int] = typer.Option(None, "--d-head", help="per-head width [default: d_model/n_heads]"),
    d_mlp: Optional[int] = typer.Option(None, "--d-mlp", help="MLP width [default: 4*d_model]"),
    pos: Optional[str] = typer.Option(None, "--pos", help="learned | rope | relative | alibi | nope | uni"),
    mlp: Optional[str] = typer.Option(None, "--mlp", help="gelu | swiglu | none"),
    norm: Optional[str] = typer.Option(None, "--norm", help="layernorm | rmsnorm"),
    dropout: Optional[float] = typer.Option(None, "--dropout"),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="context length [default: 128]"),
    steps: Optional[int] = typer.Option(None, "--steps", help="optimizer steps [default: 2000]"),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="sequences per step [default: 16]"),
    lr: Optional[float] = typer.Option(None, "--lr", help="peak learning rate [default: 3e-3]"),
    warmup_steps: Optional[int] = typer.Option(
        None, "--warmup-steps", help="linear warmup steps [default: 100, or steps // 10 when --steps < 100]"),
    set_: Optional[list[str]] = typer.Option(None, "--set", "-s", help="any other shakespeare-lm key=value"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="run directory (rerun into it to resume)"),
    seed: Optional[int] = typer.Option(None, "--seed", help="seed [default: 0]"),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
) -> None:
    """Train a GPT on a corpus; writes a run directory (config, metrics, report, model + tokenizer).

    The run is the ``shakespeare-lm`` experiment with these options as config fields; rerunning the
    same command with the same --out resumes from the last checkpoint.
    """
    import time

    from lmsci.config import parse_overrides, resolve_config
    from lmsci.errors import UnknownNameError
    from lmsci.experiments.laws.shakespeare_lm import ShakespeareLM
    from lmsci.sweep import run_experiment

    opts = {"tokenizer": tokenizer, "vocab_size": vocab_size, "d_model": d_model, "n_layers": n_layers,
            "n_heads": n_heads, "d_head": d_head, "d_mlp": d_mlp, "pos": pos, "mlp": mlp, "norm": norm,
            "dropout": dropout, "seq_len": seq_len, "steps": steps, "batch_size": batch_size, "lr": lr,
            "warmup_steps": warmup_steps}

    def go():
        if corpus != "shakespeare":
            raise UnknownNameError("corpus", corpus, ["shakespeare"])
        overrides = parse_overrides(set_ or [])
        overrides.update({k: v for k, v in opts.items() if v is not None})
        exp = ShakespeareLM()
        default_warmup = exp.Config.model_fields["train"].default.warmup_steps
        if "warmup_steps" not in overrides and isinstance(overrides.get("steps"), int) \
                and overrides["steps"] < default_warmup:
            overrides["warmup_steps"] = overrides["steps"] // 10
        cfg = resolve_config(exp.Config, "quick", overrides, seed)
        exp.validate(cfg)
        dest = out or Path("runs") / "train" / time.strftime("%Y-%m-%dT%H-%M-%S")
        return run_experiment(exp, cfg, dest, progress=progress, log=lambda m: typer.echo(m, err=True))

    run = guard(go)
    typer.echo(f"run directory: {run.path}")
    _show(run.path)


def generate_cmd(
    run_dir: Path = typer.Argument(..., help="a run directory of `lmsci train` / shakespeare-lm, or a model dir"),
    prompt: str = typer.Option("\n", "--prompt", help="text to continue"),
    max_new_tokens: int = typer.Option(200, "--max-new-tokens", min=0),
    temperature: float = typer.Option(0.8, "--temperature", min=0.0, help="0 = greedy"),
    top_k: Optional[int] = typer.Option(None, "--top-k", min=1),
    num_samples: int = typer.Option(1, "--num-samples", min=1),
    seed: int = typer.Option(0, "--seed", help="sampling seed"),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda | cuda:N (auto: cuda when visible)"),
) -> None:
    """Sample text from a trained model saved with its tokenizer."""
    import torch

    from lmsci.experiments.laws.shakespeare_lm import find_model_dir
    from lmsci.models.gpt import GPT
    from lmsci.runs import resolve_device
    from lmsci.worlds.tokenizers import load_tokenizer

    def go():
        dev = resolve_device(device)
        d = find_model_dir(run_dir)
        tok = load_tokenizer(d)
        model = GPT.from_pretrained(d, device=dev)
        ids = torch.tensor([tok.encode(prompt)] * num_samples, dtype=torch.long, device=dev)
        if ids.shape[1] == 0:
            raise ConfigError("--prompt", prompt, "a non-empty text")
        out = model.generate(ids, max_new_tokens, temperature=temperature, top_k=top_k,
                             generator=torch.Generator(device=dev).manual_seed(seed))
        return [tok.decode(row.tolist()) for row in out]

    for i, text in enumerate(guard(go)):
        if i:
            typer.echo("\n-----")
        typer.echo(text)


def fit_cmd(
    data: Path = typer.Argument(..., help="CSV of training runs, one per row"),
    law: str = typer.Option("chinchilla", "--law", "-l", help="chinchilla | kaplan_n | kaplan_d | kaplan_c | "
                            "kaplan_nd | kaplan_ns | bnsl | bnsl0 | bnsl2 | sigmoid"),
    n_col: Optional[str] = typer.Option(None, "--n-col", help="column of parameters N"),
    d_col: Optional[str] = typer.Option(None, "--d-col", help="column of training tokens D"),
    c_col: Optional[str] = typer.Option(None, "--c-col", help="column of training FLOP C (D = C/6N if no D)"),
    s_col: Optional[str] = typer.Option(None, "--s-col", help="column of optimizer steps S (kaplan_ns)"),
    loss_col: Optional[str] = typer.Option(None, "--loss-col", help="column of the target (loss, or accuracy)"),
    x: Optional[str] = typer.Option(None, "--x", help="input variable of a BNSL law: N, D, C or S"),
    drop_highest: int = typer.Option(0, "--drop-highest", help="drop the k runs with the highest loss"),
    bootstrap: int = typer.Option(1000, "--bootstrap", "-b", help="bootstrap resamples (0 = no intervals)"),
    budget: Optional[list[float]] = typer.Option(None, "--budget", help="FLOP budget for the allocation (repeatable)"),
    seed: int = typer.Option(0, "--seed", help="bootstrap seed"),
    grid: str = typer.Option("full", "--grid", help="starting grid: full (4,500 for chinchilla) | coarse"),
    starts: str = typer.Option("4", "--starts", help="L-BFGS-B starts: N (the N best end points of a batched "
                               "screening of the grid) | all (L-BFGS-B from every grid point, Besiroglu et al. "
                               "verbatim; minutes for 4,500 starts)"),
    compare: Optional[str] = typer.Option(None, "--compare", help="also compare laws, e.g. chinchilla,kaplan_nd,"
                                          "kaplan_n: held-out error (fit on the 75%% smallest C), AIC, BIC"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="directory for figures, fit.json, params.csv"),
) -> None:
    """Fit a scaling law (Huber on log loss, many starts, bootstrap CIs); print constants and allocation."""
    from lmsci.laws.analysis import analyze
    from lmsci.laws.datasets import load_csv
    from lmsci.laws.forms import get_form

    def go():
        form = get_form(law, x=x)
        if x is not None and x not in ("N", "D", "C", "S"):
            raise ConfigError("--x", x, "N, D, C or S")
        if bootstrap < 0 or drop_highest < 0:
            raise ConfigError("--bootstrap/--drop-highest", min(bootstrap, drop_highest), "an integer >= 0")
        d = load_csv(data, n_col=n_col, d_col=d_col, c_col=c_col, s_col=s_col, loss_col=loss_col,
                     need=tuple(v for v in form.inputs if v != "x") if not law.startswith("bnsl") else (),
                     positive_target=form.space == "log", min_points=1)
        d = d.drop_highest(drop_highest)
        k = len(form.params) - len(form.default_fixed)
        if len(d) < k + 2:
            from lmsci.errors import DataError

            raise DataError(f"{len(d)} runs (CSV lines {d.lines.tolist()}) are too few for law {form.name!r} "
                            f"with {k} free parameters; need at least {k + 2}")
        if starts != "all" and not (starts.isdigit() and int(starts) >= 1):
            raise ConfigError("--starts", starts, "'all' or an integer >= 1")
        n_starts = None if starts == "all" else int(starts)
        an = analyze(d, law, x=x, n_boot=bootstrap, seed=seed, budgets=budget, out=out, grid=grid, n_starts=n_starts)
        table = None
        if compare:
            from lmsci.laws.compare import compare_forms

            forms = [get_form(n.strip(), x=x or "C") for n in compare.split(",") if n.strip()]
            table = compare_forms(forms, d.X, d.y, split_var="C" if "C" in d.X else forms[0].inputs[0], grid=grid)
            if out is not None:
                table.to_csv(Path(out) / "comparison.csv", index=False)
        return an, table

    an, table = guard(go)
    typer.echo(an.text())
    if table is not None:
        typer.echo("\nmodel comparison (sorted by held-out RMSE of log y; laws lacking inputs skipped):")
        typer.echo(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))


def profile_cmd(
    run_dirs: list[Path] = typer.Argument(..., help="lmsci run directories (one per experiment and master seed)"),
    out: Path = typer.Option(Path("profile"), "--out", "-o", help="output path without suffix: writes OUT.md "
                             "and OUT.csv"),
    peak_seconds: float = typer.Option(2.0, "--peak-seconds", help="seconds of float32 matmul that measure the "
                                       "one-thread peak"),
    table: Optional[Path] = typer.Option(None, "--table", help="a published table directory (results/quick): its "
                                         "experiments without a run directory are listed as missing (default: "
                                         "every shipped experiment)"),
    note: str = typer.Option("", "--note", help="a line for the table's header: how the runs were made"),
) -> None:
    """Wall time, training tokens/s, train share and MFU per experiment from finished run directories, against
    a one-thread float32 matmul peak measured here (see lmsci.profile_table, lmsci.profile_report)."""
    from lmsci.profile_report import published_experiments, write_profile

    if table is not None:
        expected = guard(published_experiments, table)
    else:
        from lmsci.experiments.registry import shipped

        expected = sorted(shipped())
    try:
        md, csv, rows, peak = guard(write_profile, run_dirs, out, expected=expected, header=note,
                                     peak_seconds=peak_seconds)
    except ValueError as e:
        fail(str(e))
    typer.echo(f"peak {peak['peak_flops'] / 1e9:.1f} GFLOP/s ({peak['cpu']}); {len(rows)} experiments -> {md}, {csv}")


