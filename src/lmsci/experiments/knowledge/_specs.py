"""The bioS data and training-phase specs shared by the knowledge experiments (front: :mod:`.common`).

The GPT trained is a library :class:`lmsci.models.gpt.GPTSpec` (the family's configs spell GPT-2 with rotary
positions and tied embeddings: ``GPTSpec(..., pos="rope", tie_embeddings=True)``; a model is
``GPT(spec.gpt_config(len(world.vocab), seq_len), seed=...)``); a :class:`DataSpec` is how biographies are written
(multiplicity M, permute, fullname: Allen-Zhu & Li, Physics of Language Models Part 3.1, arXiv 2309.14316,
Section 2), a :class:`PhaseSpec` one training phase's AdamW settings (sized by exposures, not steps).
"""

from __future__ import annotations

from pydantic import Field

from lmsci.config import StrictModel


class DataSpec(StrictModel):
    """How biographies are written (Part 3.1, Section 2): multiplicity M, permute, fullname."""

    multiplicity: int = Field(1, ge=1, le=100)
    permute: bool = False
    fullname: bool = False


SINGLE = DataSpec()
AUGMENTED = DataSpec(multiplicity=5, permute=True, fullname=True)


class PhaseSpec(StrictModel):
    """Optimizer settings of one training phase (AdamW, warmup + cosine, :func:`lmsci.train.packed.train_packed`).
    The phase's length is set by exposures (biographies per person), so it has no step count: the steps, and the
    warmup ``int(warmup_frac * steps)``, follow from the data (unlike the library
    :class:`lmsci.train.trainer.TrainSpec`)."""

    lr: float = Field(3e-3, gt=0)
    batch_size: int = Field(32, ge=1)
    weight_decay: float = Field(0.1, ge=0)
    warmup_frac: float = Field(0.05, ge=0, le=0.5)
