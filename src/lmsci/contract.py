"""The experiment contract: points of a sweep, one pure function per point, a verdict, figures.

An experiment is a pipeline world -> model -> trainer -> instruments -> verdict -> report run over
a sweep of points; each point is a pure function of (config, point, seed) so sweeps resume and
parallelise. See ``docs/architecture.md``.

The contract lives below the executor (:mod:`lmsci.sweep`), the report (:mod:`lmsci.report`) and the
suite (:mod:`lmsci.suite`), which see an experiment only through it; experiments import it as
``lmsci.experiments.base`` (a re-export), and nothing but the CLI, the suite and the registry imports
``lmsci.experiments``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd

from lmsci.claims import Claim, Verdict, judge
from lmsci.config import ExperimentConfig
from lmsci.runs import RunDir, derive_seed


@dataclass(frozen=True)
class Point:
    """One point of a sweep.

    Attributes:
        id: a stable, filename-safe identifier (for example ``"attn_H4_dh8_S64"``); seed k > 0 of a
            point gets the suffix ``__s{k}``.
        params: the point's parameters (written to the results row by the experiment).
        seed_index: which training seed of the point this is (0 .. n_seeds - 1); the executor writes it
            to the results row as ``seed_index``.
        arm: the arm of the sweep the point belongs to (``"real"``, ``"null"``, ``"control"``, ...); the
            executor writes it to the results row as ``arm`` (when set), where the claims engine finds it: a null
            arm is the same ``run_point`` on another arm, not a copied block or ``null_`` columns.
    """

    id: str
    params: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    seed_index: int = 0
    arm: str = ""


def cross_arms(points: list[Point], arms: tuple[str, ...] | list[str]) -> list[Point]:
    """Every point of ``points`` on every arm: ids ``<arm>-<id>``, the arm also in ``params["arm"]``. The arms of
    one point share its seed (:meth:`Experiment.point_seed`): they are paired by seed.

    Raises:
        ValueError: no arms, or an arm name that is not filename-safe.
    """
    if not arms:
        raise ValueError("cross_arms: no arms")
    bad = [a for a in arms if not a or not all(c.isalnum() or c in "_." for c in a)]
    if bad:
        raise ValueError(f"cross_arms: arm names must be non-empty letters, digits, '_' or '.': {bad}")
    return [Point(f"{a}-{p.id}", {**p.params, "arm": a}, p.seed_index, a) for a in arms for p in points]


@dataclass
class Figure:
    """A figure written under ``RUN_DIR/figures/``; ``filename`` is relative to that folder; ``claims``: the ids
    of the claims it decides (the report shows it under each of them, first)."""

    filename: str
    caption: str
    claims: tuple[str, ...] = ()


def save_figure(fig: Any, run: RunDir, filename: str, caption: str, dpi: int = 110,
                claims: tuple[str, ...] | list[str] = ()) -> Figure:
    """Lay out a matplotlib figure, write it as ``run.figures_dir / filename`` at ``dpi``, close it,
    and return its :class:`Figure` (what ``Experiment.figures`` lists); ``claims`` names the claims it decides."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(run.figures_dir / filename, dpi=dpi)
    plt.close(fig)
    return Figure(filename, caption, tuple(claims))


class PointContext:
    """What ``run_point`` gets besides config and point: its seed, device, logging and progress.

    Attributes:
        point: the point being computed.
        seed: the point's seed, derived from (config seed, point id).
        device: the resolved torch device string.
        run: the run directory.
    """

    def __init__(self, run: RunDir, point: Point, seed: int, device: str, show_progress: bool = True):
        self.run, self.point, self.seed, self.device = run, point, seed, device
        self.show_progress = show_progress

    @property
    def artifact_dir(self) -> Path:
        """``RUN_DIR/points/<id>/`` for checkpoints and arrays of this point."""
        return self.run.point_dir(self.point.id)

    def log(self, **metrics: Any) -> None:
        """Append a metrics line (step, loss, lr, tokens/s, ...) for this point."""
        self.run.log_metrics(self.point.id, metrics)

    def progress(self, total: int, desc: str = "train"):
        """A tqdm progress bar over ``total`` steps (disabled when progress is off)."""
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=f"{self.point.id}:{desc}", leave=False, disable=not self.show_progress,
                    dynamic_ncols=True)


class Experiment:
    """Base class of experiments. Subclasses set the class attributes and implement the methods.

    Class attributes:
        name: registry name (``lmsci run NAME``).
        claim: the published claim tested, one sentence (the catalog's summary).
        source: paper, arXiv id, section/figure/theorem.
        claims: the registered :class:`~lmsci.claims.Claim` s; ``verdicts`` returns one verdict per
            claim (the report adds an inconclusive one for any claim left without).
        seeded: whether points are repeated over ``cfg.n_seeds`` training seeds (False for a
            deterministic computation, which then requires ``n_seeds == 1``).
        Config: the pydantic config class (defaults = quick preset; ``PRESETS`` for the rest).
        time_estimate: preset -> rough wall time on the intended hardware.
        local_inputs: preset -> the config fields naming files the user must supply for it (a local model or
            data set that lmsci cannot download); ``validate`` raises a ConfigError naming the first one missing.
        claim_notes: claim id -> a caveat the engine reports with that claim's every verdict (which preset settles
            it, for example); not part of the registered claim.
        training_scope: the name the point seeds are derived under (:meth:`point_seed`; empty: ``name``). An
            experiment that measures the models another trains (``cfg-probing``: ``"cfg-learning"``) sets it to that
            one's name, so that at the same master seed the two ask for the same trainings and a training cache
            (:mod:`lmsci.train.cache`) serves them once; ``lmsci suite --jobs`` never runs two runs of one scope and
            master seed at once.
    """

    name: ClassVar[str] = ""
    claim: ClassVar[str] = ""
    source: ClassVar[str] = ""
    claims: ClassVar[list[Claim]] = []
    seeded: ClassVar[bool] = True
    Config: ClassVar[type[ExperimentConfig]] = ExperimentConfig
    time_estimate: ClassVar[dict[str, str]] = {}
    local_inputs: ClassVar[dict[str, tuple[str, ...]]] = {}
    claim_notes: ClassVar[dict[str, str]] = {}
    training_scope: ClassVar[str] = ""

    def validate(self, cfg: ExperimentConfig) -> None:
        """Cross-field checks; raise :class:`lmsci.errors.ConfigError` before any work starts."""

    def points(self, cfg: ExperimentConfig) -> list[Point]:
        """The sweep grid of one seed, in the order it is run."""
        raise NotImplementedError

    def seeded_points(self, cfg: ExperimentConfig) -> list[Point]:
        """:meth:`points` repeated over ``cfg.n_seeds`` training seeds: seed 0 keeps each point's id,
        seed k > 0 runs as ``<id>__s{k}`` (so its derived seed differs). Seeds of one point are adjacent,
        so :meth:`groups` can stack them.

        Raises:
            ConfigError: ``n_seeds > 1`` for an experiment that is not seeded (deterministic).
        """
        base = self.points(cfg)
        if not self.seeded:
            if cfg.n_seeds != 1:
                from lmsci.errors import ConfigError

                raise ConfigError("n_seeds", cfg.n_seeds, f"1 ({self.name} is deterministic: it trains nothing)")
            return base
        return [Point(p.id if k == 0 else f"{p.id}__s{k}", dict(p.params), k, p.arm)
                for p in base for k in range(cfg.n_seeds)]

    def get_claim(self, claim_id: str) -> Claim:
        """The registered claim ``claim_id``.

        Raises:
            KeyError: no such claim (lists the registered ids).
        """
        for c in self.claims:
            if c.id == claim_id:
                return c
        raise KeyError(f"{self.name}: no claim {claim_id!r}; registered: {[c.id for c in self.claims]}")

    def judge(self, cfg: ExperimentConfig, claim_id: str, **kw: Any) -> Verdict:
        """:func:`lmsci.claims.judge` for the registered claim ``claim_id`` at ``cfg.preset`` (with this
        experiment's name and the run's master seed, for the post hoc and pilot marks)."""
        kw.setdefault("experiment", self.name)
        kw.setdefault("master_seed", cfg.seed)
        return judge(self.get_claim(claim_id), cfg.preset, **kw)

    def groups(self, cfg: ExperimentConfig, points: list[Point]) -> list[list[Point]]:
        """How points are batched for :meth:`run_group` (default: one at a time)."""
        return [[p] for p in points]

    def run_point(self, cfg: ExperimentConfig, point: Point, ctx: PointContext) -> dict[str, Any]:
        """Train and measure one point; deterministic in (cfg, point, ctx.seed). Returns a results row."""
        raise NotImplementedError

    def run_group(
        self, cfg: ExperimentConfig, points: list[Point], ctxs: list[PointContext]
    ) -> list[dict[str, Any]]:
        """Compute several points at once (override to batch tiny models); default loops."""
        return [self.run_point(cfg, p, c) for p, c in zip(points, ctxs)]

    def verdicts(self, cfg: ExperimentConfig, results: pd.DataFrame, run: RunDir | None) -> list[Verdict]:
        """Every claim's verdict from the results table.

        The default judges each claim declared as values (a :class:`~lmsci.claims.Stat` and a
        :class:`~lmsci.claims.Rule`) with :func:`lmsci.claims.judge_claim`, on the real and the null arm by the same
        rule, with the gates that have statistics and those :meth:`measured_gates` returns; then it adds
        :meth:`hand_verdicts` for the claims whose statistic is in words (the escape hatch). Override only to
        change that composition.
        """
        from lmsci.claims import judge_claim

        gates = self.measured_gates(cfg, results)
        out = [judge_claim(c, cfg.preset, results, gate_values=gates, experiment=self.name, master_seed=cfg.seed,
                           note=self.claim_notes.get(c.id, "")) for c in self.claims if c.stat is not None]
        return out + self.hand_verdicts(cfg, results, run)

    def measured_gates(self, cfg: ExperimentConfig, results: pd.DataFrame) -> dict[str, tuple[Any, bool | None]]:
        """Gate id -> (value, passed) for gates the experiment measures itself (gates without a statistic;
        default none)."""
        return {}

    def hand_verdicts(self, cfg: ExperimentConfig, results: pd.DataFrame, run: RunDir | None) -> list[Verdict]:
        """Verdicts written by hand, for claims whose statistic is in words: the escape hatch (like
        lm-evaluation-harness' ``!function``). Each such claim says in the experiment's docstring why the engine
        cannot judge it. Default: none."""
        return []

    @classmethod
    def escape_hatches(cls) -> list[str]:
        """The ids of the claims judged by hand (statistic in words) rather than by the engine."""
        return [c.id for c in cls.claims if c.stat is None]

    def figures(self, cfg: ExperimentConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        """Write PNG figures into ``run.figures_dir`` and describe them."""
        return []

    def report_sections(self, cfg: ExperimentConfig, results: pd.DataFrame, run: RunDir) -> str:
        """Extra markdown for the report (method notes, tables); default none."""
        return ""

    def point_seed(self, cfg: ExperimentConfig, point: Point) -> int:
        """The point's seed, derived from (master seed, experiment, point id), the experiment named by its
        ``training_scope`` where set. The arms of one point are paired: ``real-p`` and ``null-p`` (from
        :func:`cross_arms`) get the seed of ``p`` (same initialisation and data stream, only the arm differs), and
        ``p``'s seed is what it was before arms were an axis."""
        pid = point.id
        if point.arm and pid.startswith(f"{point.arm}-"):
            pid = pid[len(point.arm) + 1:]
        return derive_seed(cfg.seed, self.training_scope or self.name, pid)
