"""Experiments: one module per published claim; see :mod:`lmsci.experiments.registry`."""

from lmsci.experiments.base import Experiment, Figure, Point, PointContext
from lmsci.experiments.registry import catalog, get, register

__all__ = ["Experiment", "Figure", "Point", "PointContext", "catalog", "get", "register"]
