"""In-context learning: linear regression in context (Garg et al.) and ICL as kernel regression.

The registry imports every module of this family package (:mod:`lmsci.experiments.registry`);
no module here imports another family's modules."""
