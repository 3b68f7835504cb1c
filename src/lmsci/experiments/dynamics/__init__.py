"""Training dynamics: grokking (progress measures) and the hallucination stage of knowledge learning.

The registry imports every module of this family package (:mod:`lmsci.experiments.registry`);
no module here imports another family's modules."""
