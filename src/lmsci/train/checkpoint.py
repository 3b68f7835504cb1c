"""Checkpoints of :func:`lmsci.train.trainer.train`: atomic save and load, generator states, and resuming.

Split out of ``trainer.py`` (issue 44 item 6) with no change of behaviour. A ``checkpoint_dir`` holds
``step-XXXXXXX/{model.safetensors, trainer_state.pt}`` and a ``latest`` file naming the newest complete step
directory (:func:`save_checkpoint` writes both atomically and deletes older steps). ``trainer_state.pt`` holds the
step, tokens seen, seed, the :class:`~lmsci.train.trainer.TrainConfig` (as JSON), the optimizer state, the batch
generator's state, torch's CPU generator and, when CUDA is available, every CUDA device's generator
(:func:`rng_state`), and the history. :func:`resume` restores all of it and refuses a checkpoint written with another
seed or another value of a :data:`RESUME_KEYS` field, so that a run interrupted and resumed on CPU produces
bit-for-bit the same weights and losses as the uninterrupted run (tested in ``tests/train/test_trainer.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from lmsci.errors import ConfigError

_LATEST = "latest"
RESUME_KEYS = ("steps", "batch_size", "lr", "warmup_steps", "min_lr_ratio", "weight_decay", "betas",
               "grad_clip", "grad_accum")
"""The TrainConfig fields a resumed run must share with its checkpoint (:func:`resume` checks these and the seed)."""


def latest_checkpoint(checkpoint_dir: str | Path) -> Path | None:
    """The newest complete checkpoint directory under ``checkpoint_dir``, or None."""
    p = Path(checkpoint_dir) / _LATEST
    if not p.exists():
        return None
    d = Path(checkpoint_dir) / p.read_text().strip()
    return d if (d / "model.safetensors").exists() and (d / "trainer_state.pt").exists() else None


def save_checkpoint(checkpoint_dir: str | Path, model: nn.Module, state: dict[str, Any]) -> Path:
    """Write ``step-XXXXXXX/{model.safetensors, trainer_state.pt}`` atomically, then point
    ``latest`` at it and delete older step directories.

    The step directory is filled under a temporary name and renamed in one ``os.replace``; the
    ``latest`` pointer is replaced atomically too, so a crash leaves the previous checkpoint valid.
    """
    from safetensors.torch import save_model

    from lmsci.runs import atomic_write_text

    root = Path(checkpoint_dir)
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{state['step']:07d}"
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}."))
    try:
        save_model(model, str(tmp / "model.safetensors"))
        torch.save(state, tmp / "trainer_state.pt")
        final = root / name
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    atomic_write_text(root / _LATEST, name)
    for old in root.glob("step-*"):
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(path: str | Path, model: nn.Module) -> dict[str, Any]:
    """Load weights from ``path/model.safetensors`` into ``model`` (copied into its tensors on whatever device
    they are) and return the trainer state."""
    from safetensors.torch import load_model

    path = Path(path)
    # read on the host, then load_state_dict copies into the model's own tensors (on its device)
    load_model(model, str(path / "model.safetensors"), device="cpu")
    return torch.load(path / "trainer_state.pt", weights_only=True)


def rng_state() -> dict[str, Any]:
    """torch's global generator states: ``{"torch_rng": CPU state}`` plus ``"cuda_rng"`` (one state per CUDA
    device, :func:`torch.cuda.get_rng_state_all`) when CUDA is available. Saved in every checkpoint."""
    state: dict[str, Any] = {"torch_rng": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda_rng"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` saved (the CUDA states only where CUDA is available and they were saved;
    a checkpoint written on a machine with fewer devices restores the ones it has)."""
    torch.set_rng_state(state["torch_rng"])
    cuda = state.get("cuda_rng")
    if cuda and torch.cuda.is_available():
        n = min(len(cuda), torch.cuda.device_count())
        for i in range(n):
            torch.cuda.set_rng_state(cuda[i], i)


def resume(loop: Any, ckpt: Path, progress: Any, replay_log_on_resume: bool) -> None:
    """Restore weights, optimizer, generators, step and history from checkpoint ``ckpt`` into ``loop`` (the state of
    one :func:`lmsci.train.trainer.train` call: ``model``, ``cfg``, ``seed``, ``opt``, ``gen``, ``step``,
    ``tokens_seen``, ``result``, ``log``, ``checkpoint_dir``); ``progress`` (tqdm-like) is advanced to the step.

    Raises:
        ConfigError: the checkpoint was written with another config (a :data:`RESUME_KEYS` field) or seed.
    """
    cfg, seed = loop.cfg, loop.seed
    state = load_checkpoint(ckpt, loop.model)
    saved = state["config"]
    for k in RESUME_KEYS:
        mine = list(getattr(cfg, k)) if k == "betas" else getattr(cfg, k)
        theirs = list(saved[k]) if k == "betas" else saved[k]
        if mine != theirs:
            raise ConfigError(f"train.{k}", mine, f"{theirs!r} (the value the checkpoint in "
                              f"{loop.checkpoint_dir} was written with); use another directory to start over")
    if state["seed"] != int(seed):
        raise ConfigError("seed", seed, f"{state['seed']} (the checkpoint's seed)")
    loop.opt.load_state_dict(state["optimizer"])
    loop.gen.set_state(state["batch_rng"])
    set_rng_state(state)
    loop.step, loop.tokens_seen = int(state["step"]), int(state["tokens_seen"])
    loop.result.history = json.loads(state["history"])
    loop.result.resumed_from = loop.step
    if loop.log is not None and replay_log_on_resume:
        for rec in loop.result.history:
            loop.log(dict(rec))
    if progress is not None:
        progress.update(loop.step)
