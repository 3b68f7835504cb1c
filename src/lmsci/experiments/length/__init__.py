"""Length: generalising beyond the training length (LM-Infinite) and passkey retrieval.

The registry imports every module of this family package (:mod:`lmsci.experiments.registry`);
no module here imports another family's modules."""
