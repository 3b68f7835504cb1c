"""The run directory: configuration, environment, metrics, results, verdict.

Layout (see docs/architecture.md)::

    RUN_DIR/
      config.yaml        resolved configuration, every default written out
      environment.json   lmsci version, git commit, Python/torch/numpy versions, threads, device, seed
      provenance.json    the digest of what determines the outcome (lmsci.provenance): config, source, libraries
      metrics.jsonl      one line per logged training step, tagged with the sweep point id
      results.csv        one row per finished sweep point
      verdict.json       per claim: statement, paper value, statistic, value, CI, rule, gates, outcome
      report.md          the report, with figures/*.png
      points/<id>/       per-point artifacts (checkpoints, arrays) where an experiment needs them

Writes are atomic (temporary file + ``os.replace``), so an interrupted run never leaves a
half-written results file; rerunning into the same directory resumes from the finished points.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

import lmsci
from lmsci.claims import INCONCLUSIVE, NOT_REPRODUCED, PILOT_SEED_MIN, REPRODUCED, Verdict  # noqa: F401 (re-exported)
from lmsci.config import NON_SCIENCE_FIELDS
from lmsci.errors import ConfigError, RunDirError


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see either the old or the new file, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def derive_seed(seed: int, *keys: Any) -> int:
    """A 31-bit seed derived deterministically from a master seed and any keys (e.g. a point id)."""
    h = hashlib.sha256(repr((int(seed),) + tuple(keys)).encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


def resolve_device(device: str = "auto") -> str:
    """``"auto"`` becomes ``"cuda"`` when a GPU is visible, else ``"cpu"``.

    Raises:
        ConfigError: ``device`` names CUDA (or a CUDA index) that this machine does not have.
    """
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError("device", device, "cpu or auto (no CUDA device is visible on this machine)")
        idx = int(device.split(":")[1]) if ":" in device else 0
        if idx >= torch.cuda.device_count():
            raise ConfigError("device", device, f"cuda:0 .. cuda:{torch.cuda.device_count() - 1}, cpu or auto")
    return device


def git_commit() -> str | None:
    """The git commit of the lmsci source tree, or None outside a checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def machine_description() -> str:
    """A short description of this machine: CPU model, cores, and the BLAS core type when one is forced
    (``OPENBLAS_CORETYPE``), for the claims table's machine column."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    blas = os.environ.get("OPENBLAS_CORETYPE")
    return f"{cpu}, {os.cpu_count()} cores" + (f", OPENBLAS_CORETYPE={blas}" if blas else "")


def environment(seed: int, device: str) -> dict[str, Any]:
    """Versions and machine facts recorded with every run."""
    import numpy
    import torch

    return {
        "lmsci_version": lmsci.__version__,
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": device,
        "cuda_device": torch.cuda.get_device_name(0) if device.startswith("cuda") else None,
        "seed": seed,
        "pilot": int(seed) >= PILOT_SEED_MIN,
        "machine": machine_description(),
        "started": datetime.now().isoformat(timespec="seconds"),
    }


def jsonable(v: Any) -> Any:
    """numpy/torch scalars to Python numbers (``.item()``); anything else unchanged."""
    if hasattr(v, "item") and callable(v.item):
        try:
            return v.item()
        except (ValueError, RuntimeError):
            return str(v)
    return v


def _same_config(stored: str, new: str) -> bool:
    """Whether a run directory's ``config.yaml`` (``stored``) and a new run's resolve to the same run: equal text,
    or equal once the execution fields that ``stored`` predates are dropped from ``new`` (a field such as
    ``compile``, added to every config after the run was made, must not block resuming it)."""
    if stored == new:
        return True
    a, b = yaml.safe_load(stored), yaml.safe_load(new)
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    b = {k: v for k, v in b.items() if k in a or k not in NON_SCIENCE_FIELDS}
    return a == b



#: strings read back as missing from results.csv: pandas' defaults less "null" / "NULL", which name an arm
#: (:attr:`lmsci.contract.Point.arm`), not a missing value
NA_VALUES = ["", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A",
             "NA", "NaN", "None", "n/a", "nan"]

class RunDir:
    """One run's directory on disk.

    Args:
        path: the directory (created when missing).
    """

    CONFIG = "config.yaml"
    ENV = "environment.json"
    PROVENANCE = "provenance.json"
    METRICS = "metrics.jsonl"
    RESULTS = "results.csv"
    VERDICT = "verdict.json"
    REPORT = "report.md"
    REPORT_HTML = "report.html"
    META = "run.json"

    def __init__(self, path: str | Path):
        self.path = Path(path)

    # -- creation and identity -------------------------------------------------------------
    def init(self, experiment: str, config_yaml: str, env: dict[str, Any]) -> bool:
        """Create the directory or check that it belongs to the same experiment and config.

        On resume, a commit or device different from the last recorded environment segment is
        appended to ``environment.json`` as a new segment (each results row also carries its own
        commit and device).

        Returns:
            True when resuming an existing run, False for a new one.

        Raises:
            RunDirError: the path is a file, or the directory holds a different experiment or
                configuration, or its results table is unreadable.
        """
        if self.path.exists() and not self.path.is_dir():
            raise RunDirError(f"--out {self.path} is an existing file, not a run directory; "
                              "choose a directory path (it is created when missing)")
        self.path.mkdir(parents=True, exist_ok=True)
        cfg_path = self.path / self.CONFIG
        if cfg_path.exists():
            meta = self.meta()
            if meta.get("experiment") != experiment:
                raise RunDirError(
                    f"{self.path} holds a run of {meta.get('experiment')!r}, not {experiment!r}; "
                    "choose another --out"
                )
            if not _same_config(cfg_path.read_text(), config_yaml):
                raise RunDirError(
                    f"{self.path} holds a run with a different configuration; rerun with the "
                    "same --preset/--set/--seed to resume, or choose another --out"
                )
            self.results()  # a corrupted table is reported before any work
            self._drop_unfinished_metrics()
            self._add_environment_segment(env)
            return True
        atomic_write_text(self.path / self.META, json.dumps({"experiment": experiment}, indent=2))
        atomic_write_text(self.path / self.ENV, json.dumps(env, indent=2))
        atomic_write_text(cfg_path, config_yaml)
        return False

    def _add_environment_segment(self, env: dict[str, Any]) -> None:
        """Record a resumed segment when the code (commit) or the device changed since the last one."""
        first = self.environment()
        segs = self.environment_segments()
        last = segs[-1] if segs else {}
        if (env.get("git_commit"), env.get("device")) != (last.get("git_commit"), last.get("device")):
            first.setdefault("resumed", []).append(env)
            atomic_write_text(self.path / self.ENV, json.dumps(first, indent=2))

    def record_model(self, provenance: dict[str, Any]) -> None:
        """Add a loaded pretrained model's provenance (:func:`lmsci.models.zoo.model_provenance`: weight file
        sha256, package version, known deviations) to ``environment.json`` under ``"models"``, keyed by its
        ``source``; the report prints it. Call it from ``run_point`` after loading (``ctx.run.record_model``)."""
        env = self.environment()
        env.setdefault("models", {})[str(provenance.get("source", "?"))] = provenance
        atomic_write_text(self.path / self.ENV, json.dumps(env, indent=2, default=str))

    def environment_segments(self) -> list[dict[str, Any]]:
        """The run's environment segments in order: the first run, then each resume on another commit
        or device."""
        first = self.environment()
        if not first:
            return []
        return [{k: v for k, v in first.items() if k != "resumed"}, *first.get("resumed", [])]

    def meta(self) -> dict[str, Any]:
        p = self.path / self.META
        if not p.exists():
            raise RunDirError(f"{self.path} is not an lmsci run directory (no {self.META})")
        return json.loads(p.read_text())

    def config_yaml(self) -> str:
        return (self.path / self.CONFIG).read_text()

    def environment(self) -> dict[str, Any]:
        p = self.path / self.ENV
        return json.loads(p.read_text()) if p.exists() else {}

    def write_provenance(self, record: dict[str, Any]) -> None:
        """Record a run's provenance (:meth:`lmsci.provenance.Provenance.to_json`) in ``provenance.json``; a
        resume whose digest differs from the last recorded one is appended under ``resumed``, so a run
        computed by two versions of the code shows both."""
        old = self.provenance_record()
        if not old:
            atomic_write_text(self.path / self.PROVENANCE, json.dumps(record, indent=2))
            return
        if self.digests()[-1] != record.get("digest"):
            old.setdefault("resumed", []).append(record)
            atomic_write_text(self.path / self.PROVENANCE, json.dumps(old, indent=2))

    def provenance_record(self) -> dict[str, Any]:
        """``provenance.json`` as written ({} for a run made before provenance was recorded)."""
        p = self.path / self.PROVENANCE
        return json.loads(p.read_text()) if p.exists() else {}

    def digests(self) -> list[str]:
        """The run's provenance digests in order: the first run, then each resume with another digest."""
        rec = self.provenance_record()
        return [rec["digest"], *(r.get("digest", "") for r in rec.get("resumed", []))] if rec.get("digest") else []

    def point_dir(self, point_id: str) -> Path:
        """A directory for one point's artifacts (checkpoints, arrays)."""
        d = self.path / "points" / point_id
        d.mkdir(parents=True, exist_ok=True)
        return d

    @property
    def figures_dir(self) -> Path:
        d = self.path / "figures"
        d.mkdir(parents=True, exist_ok=True)
        return d

    # -- metrics ---------------------------------------------------------------------------
    def log_metrics(self, point_id: str, row: dict[str, Any]) -> None:
        """Append one metrics line (flushed at once) tagged with ``point_id``."""
        rec = {"point": point_id, **{k: jsonable(v) for k, v in row.items()}}
        with open(self.path / self.METRICS, "a") as f:
            f.write(json.dumps(rec) + "\n")

    def metrics(self) -> pd.DataFrame:
        """All metrics lines as a table (empty when none)."""
        p = self.path / self.METRICS
        if not p.exists():
            return pd.DataFrame()
        rows = []
        for line in p.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by kill -9
                continue
        return pd.DataFrame(rows)

    def _drop_unfinished_metrics(self) -> None:
        """On resume, forget metrics of points that never finished (they will be recomputed)."""
        p = self.path / self.METRICS
        if not p.exists():
            return
        done = self.finished_ids()
        keep = []
        for line in p.read_text().splitlines():
            try:
                if json.loads(line).get("point") in done:
                    keep.append(line)
            except json.JSONDecodeError:
                continue
        atomic_write_text(p, "".join(x + "\n" for x in keep))

    # -- results ---------------------------------------------------------------------------
    def results(self) -> pd.DataFrame:
        """The finished points, one row each, in the order they finished."""
        p = self.path / self.RESULTS
        if not p.exists():
            return pd.DataFrame()
        try:
            # a commit column holds hex strings, some of which ("1234e567") read as numbers
            df = pd.read_csv(p, keep_default_na=False, na_values=NA_VALUES, dtype={"commit": str})
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
            raise RunDirError(f"{p} is corrupted and cannot be read ({type(e).__name__}: {str(e).strip()[:200]}); "
                              "restore it, delete it to recompute every point, or choose another --out") from None
        if "point" not in df.columns:
            raise RunDirError(f"{p} has no 'point' column, so it is not an lmsci results table; "
                              "restore it, delete it to recompute every point, or choose another --out")
        return df

    def finished_ids(self) -> set[str]:
        df = self.results()
        return set(df["point"].astype(str)) if "point" in df else set()

    def append_result(self, point_id: str, row: dict[str, Any]) -> None:
        """Add one finished point's row; the file is replaced atomically."""
        df = self.results()
        new = pd.DataFrame([{"point": point_id, **{k: jsonable(v) for k, v in row.items()}}])
        df = new if df.empty else pd.concat([df, new], ignore_index=True)
        atomic_write_text(self.path / self.RESULTS, df.to_csv(index=False))

    # -- verdict and report ----------------------------------------------------------------
    def write_verdict(self, verdicts: list[Verdict]) -> None:
        """Write verdict.json: a list with one object per registered claim."""
        atomic_write_text(self.path / self.VERDICT, json.dumps([v.to_dict() for v in verdicts], indent=2))

    def verdicts(self) -> list[Verdict]:
        p = self.path / self.VERDICT
        if not p.exists():
            return []
        data = json.loads(p.read_text())
        data = data if isinstance(data, list) else [data]
        out = []
        for d in data:
            if "outcome" not in d:  # written before claims were registered (two outcomes, no claim id)
                d = {"claim_id": "unregistered", "claim": d.get("claim", ""), "source": "", "paper_value": "",
                     "statistic": d.get("statistic", ""), "rule": d.get("threshold", ""),
                     "outcome": REPRODUCED if d.get("reproduced") else NOT_REPRODUCED,
                     "value": d.get("value"), "ci": d.get("ci"), "details": d.get("details", {}),
                     "note": d.get("note", "")}
            out.append(Verdict.from_dict(d))
        return out
