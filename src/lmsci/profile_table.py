"""Profile table: wall time, training tokens/s and MFU per experiment, read from finished run directories.

``lmsci profile RUN_DIR... --out results/quick/profile`` (:mod:`lmsci.profile_report` writes the files) reads lmsci run directories (``config.yaml``,
``results.csv``, ``metrics.jsonl``, ``run.json``, ``environment.json``; a ``suite.json`` beside a run directory
gives its wall time) and writes ``profile.md`` and ``profile.csv``, one row per experiment (its master seeds
together). Nothing here runs an experiment; no experiment imports this module.

What each column means (per master seed where it says so):

* **wall**: seconds per master seed: ``wall_s`` of the run in the ``suite.json`` of the folder holding the run
  directory (the whole ``lmsci run`` process, start-up and report included) when there is one, else the sum of
  ``results.csv``'s ``seconds`` (each row's group time over the group size: compute only). The ``wall_source``
  column says which.
* **tokens**: training target tokens (the trainer's ``tokens_seen`` counts the positions with a loss, not every
  input position: an experiment that trains on the answer or class token only processes more tokens per step than
  this, so its FLOP/s and MFU below are understated), the sum over the training records' windows of the ``tokens_seen`` growth:
  the last ``tokens_seen`` of every trained model (a point that trains several models, tagged by ``model``,
  ``phase`` or another field of its records, or restarts ``tokens_seen``, counts each).
* **training seconds**: ``sum(window tokens / window tokens_per_s)``: the trainer's ``tokens_per_s`` is measured
  over training steps only (no evaluation, no checkpoints), so this is the time in training steps. Models trained
  as one stack (``lmsci.train.stacked``) log the stack's window time with every member; records at one step with
  the same window time (relative 1e-9) are one stack window, counted once.
* **train share**: training seconds over wall. What is left is start-up, data generation, evaluation,
  measurement (probes, patching, ...) and report rendering.
* **median tokens/s**: the median over windows of (tokens of every member in the window) / window time.
* **N**: parameters per trained model, from a ``results.csv`` column (``n_params_total``, ``n_params``, ``params``,
  ``N``: first present) or else from the config's ``model`` section (overridden by the row's own ``n_layers``,
  ``d_model``, ``n_heads``, ``d_head``, ``d_mlp``, ``vocab_size``): ``n_layers * (4 * d_model * n_heads * d_head
  + k * d_model * d_mlp) + vocab_size * d_model``, ``k`` = 2 (GELU/ReLU MLP), 3 (SwiGLU), 0 (no MLP), ``d_head`` =
  ``d_model / n_heads`` and ``d_mlp`` = ``4 * d_model`` by default, so the standard block gives
  ``12 * n_layers * d_model**2``; biases, norms and position embeddings are left out; ``vocab_size * d_model`` is
  one embedding matrix (the output head's matmul; the input lookup costs no FLOPs); without a recorded vocabulary
  the count is the non-embedding part only (marked, a lower bound). A ``model``-tagged record whose tag starts with
  a config prefix ``P`` that has ``P_d_model`` (e.g. ``flu_`` for ``fluency``) uses ``P_n_layers``... instead.
  The recorded columns are taken as they are: ``params``/``n_params`` count every parameter (input embedding
  included, whose lookup costs no FLOPs, so 6N overstates those models' work), ``N`` (laws experiments) is Kaplan's
  non-embedding count.
* **achieved FLOP/s**: ``sum(6 * N * window tokens) / training seconds``: training compute C ~ 6 N per token
  (Kaplan et al. 2020, arXiv:2001.08361, eq. 2.1), which leaves out attention's context term
  ``6 * n_layers * n_ctx * d_model`` per token (small next to 6N only when ``n_ctx << 12 d_model``; for the tiny
  models here, with n_ctx ~ d_model, it understates the work).
* **MFU**: achieved FLOP/s over the peak: the float32 ``torch.matmul`` rate of large square matrices on this machine
  at one thread (:func:`measure_peak_flops`: the best of ~2 CPU-seconds of repeats, timed by CPU time). The runs'
  ``tokens_per_s`` are wall-clock rates: a run that shared its core with other work shows a lower MFU.

Experiments without training records (pretrained-model ones: forward passes only; closed-form or fitting
experiments; experiments whose own loop logs no ``tokens_per_s``) get ``-`` and a note.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
import yaml

from lmsci.errors import RunDirError

PARAM_COLUMNS = ("n_params_total", "n_params", "params", "N")
_STANDARD_KEYS = {"point", "step", "loss", "lr", "grad_norm", "tokens_seen", "tokens_per_s"}
_SHAPE_KEYS = ("n_layers", "d_model", "n_heads", "d_head", "d_mlp", "vocab_size")
_MLP_FACTOR = {"gelu": 2, "relu": 2, "swiglu": 3, "none": 0}


def measure_peak_flops(n: int = 2048, seconds: float = 2.0, threads: int = 1) -> dict[str, Any]:
    """The float32 matmul peak of this machine: ``torch.matmul`` of two ``[n, n]`` matrices repeated for about
    ``seconds`` of CPU time at ``threads`` intra-op threads; the best repeat's ``2 n^3 / time``.

    Each repeat is timed by this process's CPU time (``time.process_time``: every thread of the process), not by the
    wall clock, so that the peak does not depend on how busy the machine is: on a shared machine a one-thread matmul
    waits for the core, and its wall time measures the load. With ``threads=1`` the CPU time of a repeat is the time
    the one core spent on it. The wall-clock rate of the best repeat is returned beside it (``wall_flops``).

    Returns:
        ``{"peak_flops", "median_flops", "wall_flops", "n", "repeats", "threads", "seconds", "cpu"}`` (FLOP/s;
        ``seconds``: CPU seconds spent in the timed repeats).

    Raises:
        ValueError: ``n < 1``, ``seconds <= 0`` or ``threads < 1``.
    """
    import torch

    from lmsci.runs import machine_description

    if n < 1 or seconds <= 0 or threads < 1:
        raise ValueError(f"measure_peak_flops: need n >= 1, seconds > 0, threads >= 1 (got {n}, {seconds}, {threads})")
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(0)
        a, b = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
        torch.matmul(a, b)  # warm-up
        cpu: list[float] = []
        wall: list[float] = []
        wall_end = time.perf_counter() + 20 * seconds  # a cap for a machine that gives this process little time
        while (sum(cpu) < seconds and time.perf_counter() < wall_end) or len(cpu) < 3:
            w0, c0 = time.perf_counter(), time.process_time()
            torch.matmul(a, b)
            cpu.append(max(time.process_time() - c0, 1e-9))
            wall.append(time.perf_counter() - w0)
    finally:
        torch.set_num_threads(old)
    flop = 2.0 * n ** 3
    return {"peak_flops": flop / min(cpu), "median_flops": flop / statistics.median(cpu),
            "wall_flops": flop / min(wall), "n": n, "repeats": len(cpu), "threads": threads, "seconds": sum(cpu),
            "cpu": machine_description()}


# -- reading one run directory -------------------------------------------------------------------------------------
@dataclass
class Window:
    """One training log window: ``seconds`` in training steps, ``tokens`` trained in it by every member of the
    (possibly stacked) step, ``flops`` = sum of 6 N tokens over members (None when a member's N is unknown)."""

    step: int
    seconds: float
    tokens: int
    flops: float | None
    members: int = 1


@dataclass
class RunProfile:
    """What one run directory gives: see the module docstring for each quantity."""

    path: Path
    experiment: str
    seed: int
    points: int
    wall_s: float
    wall_source: str
    windows: list[Window] = field(default_factory=list)
    params: dict[str, float] = field(default_factory=dict)  # trained model (point/tag) -> N
    param_source: set[str] = field(default_factory=set)
    pretrained: str | None = None
    loop_without_rate: bool = False

    @property
    def tokens(self) -> int:
        return sum(w.tokens for w in self.windows)

    @property
    def train_s(self) -> float:
        return sum(w.seconds for w in self.windows)


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def derive_params(model: dict[str, Any], row: dict[str, Any] | None = None) -> tuple[float | None, bool]:
    """Parameters of an lmsci GPT from its config ``model`` section, with the row's shape columns overriding it
    (formula in the module docstring).

    Returns:
        ``(N, with_embedding)``: N is None when ``n_layers`` or ``d_model`` is missing or the MLP kind is unknown
        (e.g. MoE); ``with_embedding`` is False when no ``vocab_size`` was found (non-embedding count only).
    """
    shape = {k: model.get(k) for k in _SHAPE_KEYS}
    for k in _SHAPE_KEYS:
        if row is not None and _num(row.get(k)) is not None:
            shape[k] = _num(row.get(k))
    L, d = _num(shape["n_layers"]), _num(shape["d_model"])
    factor = _MLP_FACTOR.get(str(model.get("mlp", "gelu")))
    if L is None or d is None or factor is None:
        return None, False
    heads = _num(shape["n_heads"]) or 1.0
    d_head = _num(shape["d_head"]) or d / heads
    d_mlp = _num(shape["d_mlp"]) or 4.0 * d
    n = L * (4.0 * d * heads * d_head + factor * d * d_mlp)
    vocab = _num(shape["vocab_size"])
    return (n + vocab * d if vocab else n), vocab is not None


def _tagged_model(cfg: dict[str, Any], tag: str | None) -> dict[str, Any]:
    """The config's model section for a record tagged ``model=tag``: a prefix ``P`` with ``P_d_model`` in the
    config and ``tag.startswith(P)`` selects ``P_*`` keys; otherwise the ``model`` section."""
    base = cfg.get("model") if isinstance(cfg.get("model"), dict) else {}
    if tag:
        for key in cfg:
            if key.endswith("_d_model") and tag.startswith(key[: -len("_d_model")]):
                p = key[: -len("d_model")]
                sub = {k: cfg[p + k] for k in (*_SHAPE_KEYS, "mlp") if p + k in cfg}
                return {**base, "vocab_size": cfg.get("vocab_size"), **sub}
    return {**base, "vocab_size": base.get("vocab_size", cfg.get("vocab_size"))}


def _point_params(prof: RunProfile, cfg: dict[str, Any], rows: dict[str, dict], point: str,
                  tag: str | None) -> float | None:
    """N of the model trained in ``point`` (tagged ``tag``), cached in ``prof.params``."""
    key = f"{point}/{tag}" if tag else point
    if key in prof.params:
        return prof.params[key]
    row = rows.get(point, {})
    n = None
    if not tag or not any(k.endswith("_d_model") for k in cfg):
        for col in PARAM_COLUMNS:
            if _num(row.get(col)) is not None:
                n = _num(row.get(col))
                prof.param_source.add(f"results.csv {col}")
                break
    if n is None:
        n, emb = derive_params(_tagged_model(cfg, tag), row)
        if n is not None:
            prof.param_source.add("config" if emb else "config, non-embedding only")
    if n is not None:
        prof.params[key] = n
    return n


def _windows(records: list[dict[str, Any]], n_of) -> list[Window]:
    """Training windows from the trainer's records: per record ``dt = (tokens_seen growth) / tokens_per_s``;
    records of different models at one step with equal ``dt`` (relative 1e-9) are the members of one stacked
    step."""
    last: dict[tuple, int] = {}
    raw: list[tuple[int, float, int, float | None, tuple]] = []
    for r in records:
        tps, seen = _num(r.get("tokens_per_s")), _num(r.get("tokens_seen"))
        if tps is None or seen is None or tps <= 0:
            continue
        tag = tuple(sorted((k, str(v)) for k, v in r.items() if k not in _STANDARD_KEYS))
        key = (str(r.get("point")), tag)
        prev = last.get(key, 0)
        prev = 0 if seen < prev else prev  # a restarted tokens_seen: a new model
        last[key] = int(seen)
        tok = int(seen) - prev
        n = n_of(str(r.get("point")), r.get("model"))
        raw.append((int(r.get("step", 0)), tok / tps, tok, None if n is None else 6.0 * n * tok, key))
    raw.sort(key=lambda w: (w[0], w[1]))
    out: list[Window] = []
    keys: set[tuple] = set()
    for step, dt, tok, fl, key in raw:
        w = out[-1] if out else None
        if (w is not None and w.step == step and key not in keys
                and abs(w.seconds - dt) <= 1e-9 * max(dt, w.seconds)):
            w.tokens += tok
            w.flops = None if (w.flops is None or fl is None) else w.flops + fl
            w.members += 1
        else:
            out.append(Window(step, dt, tok, fl))
            keys = set()
        keys.add(key)
    return out


def _wall(path: Path, results: pd.DataFrame) -> tuple[float, str]:
    """The run's wall seconds: the parent folder's suite.json entry, else the sum of results' ``seconds``."""
    suite = path.parent / "suite.json"
    if suite.is_file():
        entry = json.loads(suite.read_text()).get("experiments", {}).get(path.name)
        if entry and _num(entry.get("wall_s")) is not None:
            return float(entry["wall_s"]), "suite.json"
    secs = pd.to_numeric(results["seconds"], errors="coerce").sum() if "seconds" in results else float("nan")
    return float(secs), "sum of results seconds"


def is_finished(path: Path) -> bool:
    """A run directory whose report was rendered (``report.md``), or that its suite.json records as ended without
    error (an ``error`` field of null and a positive ``wall_s``; a running one has neither)."""
    path = Path(path)
    if (path / "report.md").is_file():
        return True
    suite = path.parent / "suite.json"
    if suite.is_file():
        entry = json.loads(suite.read_text()).get("experiments", {}).get(path.name)
        return bool(entry) and "error" in entry and entry["error"] is None and (_num(entry.get("wall_s")) or 0) > 0
    return False


def profile_run(path: str | Path) -> RunProfile:
    """Read one run directory.

    Raises:
        RunDirError: ``path`` lacks ``run.json``, ``config.yaml`` or ``results.csv``.
    """
    path = Path(path)
    for f in ("run.json", "config.yaml", "results.csv"):
        if not (path / f).is_file():
            raise RunDirError(f"{path} is not an lmsci run directory (no {f})")
    meta = json.loads((path / "run.json").read_text())
    cfg = yaml.safe_load((path / "config.yaml").read_text()) or {}
    results = pd.read_csv(path / "results.csv")
    rows = {str(r["point"]): r for r in results.to_dict("records")} if "point" in results else {}
    wall, source = _wall(path, results)
    prof = RunProfile(path, str(meta.get("experiment", path.name)), int(cfg.get("seed", 0) or 0), len(results),
                      wall, source)
    if isinstance(cfg.get("model"), str):
        prof.pretrained = cfg["model"]
    records: list[dict[str, Any]] = []
    if (path / "metrics.jsonl").is_file():
        records = [json.loads(x) for x in (path / "metrics.jsonl").read_text().splitlines() if x.strip()]
    prof.windows = _windows(records, lambda p, tag: _point_params(prof, cfg, rows, p, tag))
    prof.loop_without_rate = not prof.windows and any("loss" in r and "step" in r for r in records)
    return prof


# -- one row per experiment ----------------------------------------------------------------------------------------
COLUMNS = ["experiment", "master_seeds", "points", "wall_s", "wall_s_by_seed", "wall_source", "tokens_trained",
           "train_s", "train_share", "median_tokens_per_s", "max_stack", "params_min", "params_max", "params_source",
           "achieved_flops", "mfu", "note", "run_dirs"]


def experiment_row(runs: Sequence[RunProfile], peak: float) -> dict[str, Any]:
    """One table row from an experiment's runs (one per master seed): wall, tokens and training seconds are per
    master seed (means); tokens/s, FLOP/s and MFU pool every run's windows."""
    k = len(runs)
    wins = [w for r in runs for w in r.windows]
    row: dict[str, Any] = {
        "experiment": runs[0].experiment, "master_seeds": ",".join(str(r.seed) for r in runs),
        "points": "/".join(str(r.points) for r in runs), "wall_s": sum(r.wall_s for r in runs) / k,
        "wall_s_by_seed": "/".join(f"{r.wall_s:.1f}" for r in runs),
        "wall_source": ", ".join(sorted({r.wall_source for r in runs})),
        "run_dirs": " ".join(str(r.path) for r in runs)}
    if not wins:
        pre = next((r.pretrained for r in runs if r.pretrained), None)
        if pre:
            note = (f"pretrained model ({pre}): forward passes only; no lmsci.train records (any small trained "
                    "probe, lens or steering parameters are not counted)")
        elif any(r.loop_without_rate for r in runs):
            note = "trains in its own loop, which logs loss but no tokens_seen/tokens_per_s: not measured"
        else:
            note = "no training records (closed form, fitting or forward passes only)"
        return {**row, "note": note}
    train_s = sum(w.seconds for w in wins)
    ns = [n for r in runs for n in r.params.values()]
    row.update(tokens_trained=sum(r.tokens for r in runs) / k, train_s=train_s / k,
               train_share=train_s / sum(r.wall_s for r in runs),
               median_tokens_per_s=statistics.median(w.tokens / w.seconds for w in wins if w.seconds > 0),
               max_stack=max(w.members for w in wins),
               params_source=", ".join(sorted({s for r in runs for s in r.param_source})))
    if ns:
        row.update(params_min=min(ns), params_max=max(ns))
    known = [w for w in wins if w.flops is not None]
    if known:
        flops = sum(w.flops for w in known) / sum(w.seconds for w in known)
        row.update(achieved_flops=flops, mfu=flops / peak)
        if len(known) < len(wins):
            row["note"] = f"FLOPs from {len(known)} of {len(wins)} windows (N unknown for the rest)"
    else:
        row["note"] = "N not derivable: no FLOP/s"
    if "non-embedding only" in row["params_source"]:
        row["note"] = (row.get("note", "") + "; " if row.get("note") else "") + \
            "N without embeddings (vocabulary not recorded): FLOP/s and MFU are lower bounds"
    return row


def select_runs(paths: Sequence[str | Path]) -> tuple[list[RunProfile], list[str]]:
    """Read the finished run directories among ``paths``; for an experiment and master seed given more than once,
    keep the run started last (``environment.json``'s ``started``).

    Returns:
        ``(runs, notes)``: the kept runs (sorted by experiment, seed) and one line per skipped directory.
    """
    notes: list[str] = []
    best: dict[tuple[str, int], tuple[str, RunProfile]] = {}
    for p in paths:
        p = Path(p)
        if not (p / "run.json").is_file():
            raise RunDirError(f"{p} is not an lmsci run directory (no run.json)")
        if not is_finished(p):
            notes.append(f"{p}: not finished (no report.md, no suite.json entry): skipped")
            continue
        prof = profile_run(p)
        env = json.loads((p / "environment.json").read_text()) if (p / "environment.json").is_file() else {}
        started = str(env.get("started", ""))
        key = (prof.experiment, prof.seed)
        if key in best:
            old_started, old = best[key]
            keep, drop = ((prof, old) if started >= old_started else (old, prof))
            notes.append(f"{drop.path}: superseded by the later run {keep.path}")
            if keep is old:
                continue
        best[key] = (started, prof)
    runs = sorted((r for _, r in best.values()), key=lambda r: (r.experiment, r.seed))
    return runs, notes


def profile_rows(runs: Sequence[RunProfile], peak: float) -> list[dict[str, Any]]:
    """One row per experiment (its runs grouped), sorted by name."""
    by_exp: dict[str, list[RunProfile]] = {}
    for r in runs:
        by_exp.setdefault(r.experiment, []).append(r)
    return [experiment_row(rs, peak) for _, rs in sorted(by_exp.items())]
