"""Watermarks: the Kirchenbauer watermark's detection bound and its removal by random walks.

The registry imports every module of this family package (:mod:`lmsci.experiments.registry`);
no module here imports another family's modules."""
