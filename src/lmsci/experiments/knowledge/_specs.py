"""The bioS model, data and optimizer specs shared by the knowledge experiments (front: :mod:`.common`).

A :class:`ModelSpec` is the GPT trained (``d_model``, ``n_layers``, ``n_heads``, positions), a :class:`DataSpec` how
biographies are written (multiplicity M, permute, fullname: Allen-Zhu & Li, Physics of Language Models Part 3.1,
arXiv 2309.14316, Section 2), a :class:`TrainSpec` one training phase's AdamW settings.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from lmsci.config import StrictModel
from lmsci.errors import ConfigError
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.worlds.bios import BiosWorld


class ModelSpec(StrictModel):
    """A GPT-2-style model with rotary positions, no dropout (Part 3.1 / 3.3: "GPT2 with rotary")."""

    d_model: int = Field(64, ge=8)
    n_layers: int = Field(2, ge=1)
    n_heads: int = Field(4, ge=1)
    pos: Literal["rope", "learned"] = "rope"
    tie_embeddings: bool = True  # GPT-2 ties the input and output embeddings


class DataSpec(StrictModel):
    """How biographies are written (Part 3.1, Section 2): multiplicity M, permute, fullname."""

    multiplicity: int = Field(1, ge=1, le=100)
    permute: bool = False
    fullname: bool = False


SINGLE = DataSpec()
AUGMENTED = DataSpec(multiplicity=5, permute=True, fullname=True)


def check_model(spec: ModelSpec, field: str = "model") -> None:
    """Raise ConfigError when ``d_model`` is not divisible into even-sized heads."""
    if spec.d_model % spec.n_heads or (spec.d_model // spec.n_heads) % 2:
        raise ConfigError(f"{field}.d_model", spec.d_model,
                          f"a multiple of 2*n_heads={2 * spec.n_heads} (even head size for rotary)")


def make_model(world: BiosWorld, spec: ModelSpec, seq_len: int, seed: int) -> GPT:
    """A fresh GPT for ``world``'s vocabulary."""
    return GPT(GPTConfig(vocab_size=len(world.vocab), seq_len=seq_len, n_layers=spec.n_layers,
                         n_heads=spec.n_heads, d_model=spec.d_model, pos=spec.pos,
                         tie_embeddings=spec.tie_embeddings), seed=seed)



class TrainSpec(StrictModel):
    """Optimizer settings of one training phase (AdamW, warmup + cosine, lmsci.train.trainer)."""

    lr: float = Field(3e-3, gt=0)
    batch_size: int = Field(32, ge=1)
    weight_decay: float = Field(0.1, ge=0)
    warmup_frac: float = Field(0.05, ge=0, le=0.5)

