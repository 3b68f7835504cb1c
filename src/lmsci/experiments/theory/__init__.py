"""Theory: learning-theory results held against trained models (benign overfitting, double descent, implicit bias) and impossibility results (calibration and hallucination, alignment attacks).

The registry imports every module of this family package (:mod:`lmsci.experiments.registry`);
no module here imports another family's modules."""
