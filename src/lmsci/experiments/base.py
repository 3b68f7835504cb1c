"""The experiment contract, as experiments import it: a re-export of :mod:`lmsci.contract`.

The contract (:class:`Point`, :class:`PointContext`, :class:`Figure`, :func:`save_figure`,
:class:`Experiment`) lives in :mod:`lmsci.contract`, below the executor and the report, so that
``lmsci.sweep`` and ``lmsci.report`` never import ``lmsci.experiments`` (docs/architecture.md: one-way imports).
"""

from lmsci.contract import Experiment, Figure, Point, PointContext, save_figure  # noqa: F401

__all__ = ["Experiment", "Figure", "Point", "PointContext", "save_figure"]
