"""The attribution fields that ``knowledge-neurons`` and ``knowledge-neurons-lm`` share (a configuration mixin).

Source: Dai et al., "Knowledge Neurons in Pretrained Transformers", ACL 2022, arXiv 2104.08696 (Sec. 3: integrated
gradients with m Riemann steps, coarse threshold t of the maximum attribution, the adaptive sharing threshold p
refined so that a fact keeps 2-5 neurons; Sec. 4.1: amplification by 2).
"""

from __future__ import annotations

from pydantic import Field

from lmsci.config import StrictModel


class KnowledgeNeuronFields(StrictModel):
    """Integrated-gradients attribution and neuron-edit fields (a mixin: ``class C(ExperimentConfig,
    KnowledgeNeuronFields)``).

    Attributes:
        ig_steps: Riemann steps m (paper 20). threshold: coarse threshold t (paper 0.2 of the maximum).
        share_start, share_step: the sharing threshold p's start and step (paper 0.7, 0.05), tuned so the mean
            number of neurons per fact lies in [min_neurons, max_neurons] (paper [2, 5]).
        amplify_factor: the amplification (paper 2).
    """

    ig_steps: int = Field(20, ge=1)
    threshold: float = Field(0.2, gt=0, le=1)
    share_start: float = Field(0.7, ge=0, lt=1)
    share_step: float = Field(0.05, gt=0, lt=1)
    min_neurons: float = Field(2.0, ge=0)
    max_neurons: float = Field(5.0, ge=0)
    amplify_factor: float = Field(2.0, gt=1)
