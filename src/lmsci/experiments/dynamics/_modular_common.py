"""Pieces shared by the dynamics family's modular-arithmetic experiments (:mod:`.grokking`,
:mod:`.grokking_fractions`): the model and optimiser fields of their configurations and the accuracy that counts
as reached.

Source: Nanda, Chan, Lieberum, Smith, Steinhardt, "Progress measures for grokking via mechanistic
interpretability", arXiv 2301.05217, sec. 3 and their code (the defaults); Power et al., arXiv 2201.02177, sec. 3
(generalisation = validation accuracy 99%).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from lmsci.config import ExperimentConfig

ACC = 0.99  # "reaches" = accuracy >= 0.99 (registered, issue 17)


class ModularTrainConfig(ExperimentConfig):
    """Model and optimiser fields shared by ``grokking`` and ``grokking-fractions`` (Nanda et al.'s transformer and
    full-batch AdamW; defaults as their code)."""

    d_model: int = Field(128, ge=1)
    n_heads: int = Field(4, ge=1)
    d_mlp: int = Field(512, ge=1)
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(1.0, ge=0, description="decoupled AdamW weight decay")
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.98, ge=0, lt=1)
    warmup_steps: int = Field(10, ge=0)
    loss_dtype: Literal["float64", "float32"] = Field(
        "float64", description="dtype of the logits in the training loss (Nanda: float64, cross_entropy_high_precision; "
                               "in float32 the loss of a memorised training set rounds to exactly 0 and its gradient vanishes)")
    eval_every: int = Field(10, ge=1, description="test loss/accuracy every this many steps")
    threads: int = Field(1, ge=0, description="torch threads (0 = torch's default)")
