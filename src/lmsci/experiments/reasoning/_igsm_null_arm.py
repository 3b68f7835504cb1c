"""An iGSM experiment whose null arm is measured on the real arm's trained models (``igsm-noop``, ``igsm-probing``).

Two points, ``gpt`` (arm ``real``) and ``null-gpt`` (arm ``null``), share each seed (``point_seed`` strips the arm
prefix) and run as one group: only the real arm trains (stacked, as :class:`IGSMExperiment`), and its
:meth:`~IGSMExperiment.measure` returns the null arm's columns prefixed ``_null_``; :meth:`NullOnTrained.run_group`
moves them into the null arm's row.
"""

from __future__ import annotations

from typing import Any

from lmsci.experiments.base import Point, PointContext
from lmsci.experiments.reasoning.igsm_common import IGSMCommonConfig, IGSMExperiment

NULL_PREFIX = "_null_"


class NullOnTrained(IGSMExperiment):
    """:class:`~lmsci.experiments.reasoning.igsm_common.IGSMExperiment` with a null arm read from the real arm's
    models. ``null_needs_columns``: a trained seed whose row has no ``_null_`` columns gives a null row with a status
    (``igsm-noop``) rather than an empty one (``igsm-probing``)."""

    null_needs_columns = False

    def points(self, cfg: IGSMCommonConfig) -> list[Point]:
        # the null arm shares the model's seed (point_seed strips the arm prefix) and its trained model
        return [Point("gpt", {"world": cfg.world}, arm="real"), Point("null-gpt", {"world": cfg.world}, arm="null")]

    def trained_points(self, cfg: IGSMCommonConfig) -> list[Point]:
        """The points that train a model (the null arm reuses the trained one): what the GPU estimate counts."""
        return [p for p in self.points(cfg) if p.arm == "real"]

    def groups(self, cfg: IGSMCommonConfig, points: list[Point]) -> list[list[Point]]:
        """Every seed and arm of the point in one group: the seeds train stacked (as before), the null arm is measured
        on (or beside) the same trained models."""
        return [points]

    def run_group(self, cfg: IGSMCommonConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict[str, Any]]:
        real = [(p, c) for p, c in zip(points, ctxs) if p.arm != "null"]
        rows = super().run_group(cfg, [p for p, _ in real], [c for _, c in real]) if real else []
        by_seed = {p.seed_index: r for (p, _), r in zip(real, rows)}
        nulls = {k: {c[len(NULL_PREFIX):]: r.pop(c) for c in [c for c in r if c.startswith(NULL_PREFIX)]}
                 for k, r in by_seed.items()}
        out = []
        for p in points:
            r = by_seed.get(p.seed_index, {})
            if p.arm != "null":
                out.append(r)
            elif r.get("status", "ok") != "ok" or (self.null_needs_columns and not nulls.get(p.seed_index)):
                out.append({**p.params, "status": r.get("status", "diverged")})  # diverged, or the seed not trained
            else:
                out.append({**p.params, **nulls.get(p.seed_index, {})})
        return out
