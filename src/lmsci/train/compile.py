"""When training compiles: :func:`torch.compile` of the forward and loss, on by default on CUDA.

Tiny models on a big GPU are bound by kernel launches and Python, not FLOPs (issue 32: the bioS model reached
about 2.5% of an H200's dense bf16 peak in eager mode); compiling fuses the trunk's small kernels, as nanoGPT and
modded-nanogpt do (Karpathy 2022; Jordan et al. 2024). On a CPU compilation buys little (1.0-1.15x at d_model
32-128 on one thread, ``benchmarks/bench_train_throughput.py``) and costs seconds of compile time per shape, so the
default, ``auto``, compiles on CUDA only. Compiled training equals eager training to float tolerance (tested on CPU).

The mode comes from, in order: ``TrainConfig.compile`` when not None; else the process default set by the
executor from the experiment's ``compile`` field (:func:`compile_mode`); else ``auto``.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Literal

import torch

CompileMode = Literal["auto", "on", "off"]
MODES: tuple[str, ...] = ("auto", "on", "off")
_default: str = "auto"


@contextmanager
def compile_mode(mode: str) -> Iterator[None]:
    """Within the block, training with ``TrainConfig.compile=None`` uses ``mode`` (``auto`` | ``on`` | ``off``).

    Raises:
        ValueError: an unknown mode.
    """
    global _default
    if mode not in MODES:
        raise ValueError(f"compile: {mode!r} is not one of {', '.join(MODES)}")
    old, _default = _default, mode
    try:
        yield
    finally:
        _default = old


def resolve(mode: str | None, device: str) -> bool:
    """Whether training on ``device`` compiles under ``mode`` (None: the process default)."""
    m = _default if mode is None else mode
    if m not in MODES:
        raise ValueError(f"compile: {m!r} is not one of {', '.join(MODES)}")
    return m == "on" or (m == "auto" and str(device).startswith("cuda"))


def maybe_compile(fn: Callable, mode: str | None, device: str) -> Callable:
    """``torch.compile(fn, dynamic=False)`` when :func:`resolve` says so (a module keeps sharing its parameters),
    else ``fn``. Shapes are static (a new batch shape recompiles): symbolic shapes break the stacked trainer's
    ``vmap`` over ``functional_call`` under Dynamo, and the trainers' batches have one shape per run."""
    return torch.compile(fn, dynamic=False) if resolve(mode, device) else fn
