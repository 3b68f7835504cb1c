"""The training cache: a model trained once on this machine, loaded by every later run that asks for the same one.

Two experiments that train the same model on the same data with the same seeds (``cfg-probing`` probes the very
GPT_rot models ``cfg-learning`` trains) need not train it twice. :func:`cached_training` keys a training by
everything that decides its weights -- the caller's fields (configuration, seeds, arm), the source of the lmsci
modules that train it (their import closure, :func:`lmsci.provenance.import_closure`), the torch version, the
device, the CPU capability and the thread count -- so a hit gives bit for bit the weights a training on this
machine would give, and anything that could change them makes another key. A hit loads the weights and replays the
training's logged records (so the run's ``metrics.jsonl`` is what a training would have written), then logs one
record ``{"cache": "hit", "training_key": ...}``; a miss trains, stores ``model.safetensors`` (safetensors, shared
tensors handled by ``save_model``), the final record and the log, and logs ``{"cache": "stored", ...}``.

Where: the folder in the environment variable ``LMSCI_TRAINING_CACHE`` (``lmsci run --training-cache DIR`` sets
it; ``lmsci suite`` sets it to ``<suite out>/training-cache`` for its runs), or nowhere: unset, every call trains.
The variable is inherited by the processes and Ray backends' workers on the same machine. Entries are written to a
temporary folder and renamed into place; a lock file (``O_EXCL``, holding the writer's pid) keeps two processes
from training the same key at once: the second waits for the first's entry (a lock whose process is gone is
taken over). Delete the folder to empty the cache; nothing in it is read without its full key.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from lmsci.runs import jsonable

ENV = "LMSCI_TRAINING_CACHE"
_POLL_S = 2.0


def cache_dir() -> Path | None:
    """The cache folder named by ``$LMSCI_TRAINING_CACHE``, or ``None`` (no cache) when it is unset or empty."""
    d = os.environ.get(ENV, "").strip()
    return Path(d) if d else None


@contextlib.contextmanager
def using(folder: str | Path, keep_set: bool = False):
    """Within it, ``$LMSCI_TRAINING_CACHE`` names ``folder`` (resolved), for this process's trainings and the processes
    and workers it starts; restored on exit. ``keep_set``: a value set already wins (``lmsci suite``'s
    ``DIR/training-cache`` under a user's own cache); else ``folder`` does (``lmsci run --training-cache``)."""
    old = os.environ.get(ENV)
    if keep_set and (old or "").strip():
        yield
        return
    os.environ[ENV] = str(Path(folder).resolve())
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = old


def _code_digest(code: Sequence[str]) -> dict[str, str]:
    from lmsci.provenance import file_hashes, import_closure

    files, _ = import_closure(code)
    return file_hashes(files)


def training_key(fields: dict[str, Any], code: Sequence[str], device: str) -> tuple[str, dict[str, Any]]:
    """``(key, what it hashes)``: 24 hex digits of the SHA-256 of ``fields`` (JSON, sorted keys), the file hashes of
    the import closure of the modules ``code``, torch's version, ``device``, the CPU capability and the thread count.

    Raises:
        TypeError: a field JSON cannot encode.
        ValueError: a module of ``code`` is not an lmsci module.
    """
    cap = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "")()
    what = {"fields": fields, "code": _code_digest(code), "torch": torch.__version__, "device": str(device),
            "cpu": f"{platform.machine()} {cap}", "threads": torch.get_num_threads()}
    blob = json.dumps(what, sort_keys=True, allow_nan=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24], what


class _Recorder:
    """The point context with ``log`` recorded (for the entry) and passed on."""

    def __init__(self, ctx: Any):
        self._ctx, self.records = ctx, []

    def log(self, **metrics: Any) -> None:
        self.records.append(metrics)
        self._ctx.log(**metrics)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _take_lock(lock: Path) -> bool:
    """Take ``lock`` (True), or False while another live process holds it; a dead holder's lock is taken over."""
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        try:
            pid = int(lock.read_text().strip() or 0)
        except (OSError, ValueError):
            return False  # being written: ask again
        if pid and not _alive(pid):
            lock.unlink(missing_ok=True)
            return _take_lock(lock)
        return False
    with os.fdopen(fd, "w") as f:
        f.write(str(os.getpid()))
    return True


def _load(entry: Path, model: torch.nn.Module, ctx: Any, key: str, device: str) -> dict[str, Any]:
    from safetensors.torch import load_model

    load_model(model, str(entry / "model.safetensors"), strict=True, device="cpu")
    model.to(device)
    for line in (entry / "log.jsonl").read_text().splitlines():
        if line.strip():
            ctx.log(**json.loads(line))
    ctx.log(cache="hit", training_key=key)
    return json.loads((entry / "final.json").read_text())


def cached_training(model: torch.nn.Module, train: Callable[[Any], dict[str, Any]], fields: dict[str, Any],
                    ctx: Any, *, code: Sequence[str], folder: str | Path | None = None) -> dict[str, Any]:
    """Train ``model`` in place through ``train``, or load the weights a training with the same key stored.

    Args:
        model: the freshly initialised model (its weights are replaced on a hit; moved to ``ctx.device``).
        train: ``train(ctx) -> final record``: trains ``model`` in place, logging through ``ctx.log`` (the context
            it gets records the log for the entry and passes it on).
        fields: what decides the weights besides the code and machine: the configuration of model, data and
            optimizer, the seeds, the arm (JSON-encodable).
        ctx: the point context (``device``, ``log``).
        code: lmsci modules whose import closure trains the model (``"lmsci.experiments.syntax._common"``).
        folder: the cache folder (default :func:`cache_dir`; ``None`` there: no cache, ``train`` runs).

    Returns:
        the training's final record (loss, tokens_seen, ...), the stored one on a hit.

    Raises:
        whatever ``train`` raises (nothing is stored then); TypeError: a field JSON cannot encode.
    """
    root = Path(folder) if folder is not None else cache_dir()
    if root is None:
        return train(ctx)
    key, what = training_key(fields, code, ctx.device)
    entry, lock = root / key, root / f"{key}.lock"
    root.mkdir(parents=True, exist_ok=True)
    while True:
        if (entry / "final.json").is_file():
            return _load(entry, model, ctx, key, ctx.device)
        if _take_lock(lock):
            break
        time.sleep(_POLL_S)  # another process trains this key: wait for its entry
    try:
        if (entry / "final.json").is_file():  # stored between the check and the lock
            return _load(entry, model, ctx, key, ctx.device)
        rec = _Recorder(ctx)
        final = train(rec)
        from safetensors.torch import save_model

        tmp = root / f".{key}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        save_model(model, str(tmp / "model.safetensors"))
        # records as RunDir.log_metrics writes them (numpy and torch scalars as numbers)
        (tmp / "log.jsonl").write_text("".join(json.dumps({k: jsonable(v) for k, v in r.items()}) + "\n"
                                               for r in rec.records))
        (tmp / "key.json").write_text(json.dumps(what, indent=1, sort_keys=True))
        # last: its presence marks the entry whole
        (tmp / "final.json").write_text(json.dumps({k: jsonable(v) for k, v in final.items()}))
        os.replace(tmp, entry)
        ctx.log(cache="stored", training_key=key)
        return final
    finally:
        lock.unlink(missing_ok=True)
