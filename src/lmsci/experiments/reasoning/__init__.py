"""Reasoning: grade-school math on the iGSM world (Physics of LMs Part 2.1/2.2) and reasoning on graphs.

The registry imports every module of this family package (:mod:`lmsci.experiments.registry`);
no module here imports another family's modules."""
