"""Steering: LM-Steer, word embeddings as linear steers of the output, and detoxification.

The registry imports every module of this family package (:mod:`lmsci.experiments.registry`);
no module here imports another family's modules."""
