"""Experiment ``factual-recall``: facts stored scale linearly with parameters.

Source: Nichani, Lee, Bietti, "Understanding Factual Recall in Transformers via Associative
Memories", arXiv 2412.06538 (ICLR 2025), Theorems 3-4 and Figure 4 (left: facts vs parameters;
right: the attention/MLP trade-off). Protocol from the official code (``run.py``,
``fact_recall_sweep.py``, ``param_scaling_sweep.py``): S = R = ``size`` facts ``size**2``, D
answers per relation, ``n_noise = S + R``, T = 32, frozen random embeddings, AdamW (weight decay
0), fresh noise every step, a test set of fresh sequences over the same facts, early stop once the
test accuracy reaches the threshold (0.99); a size counts as stored if *any* learning rate of the
list reaches the threshold (the paper's retry rule: 1e-3, 3e-3, 1e-2 tried in turn); the largest
stored size is found by a search over ``size``; parameters counted as ``4 H d_h d + 2 m d``.

Two kinds of sweep points (``point.params["kind"]``):

* ``capacity``: one model family (``alpha``, ``beta``: ``d_head = alpha * d / H``,
  ``d_mlp = beta * d``; ``beta = 0`` is attention-only) at one ``d_model``; result = the largest
  fact count stored. All families at one ``d_model`` train together as one stacked computation
  (probes x learning rates as members of one :class:`OneLayerTransformer` stack).
* ``tradeoff``: one (n_heads, d_mlp) cell of the trade-off map at a fixed fact count; result =
  the best test accuracy.

Search (per capacity point, several probes per round, all trained at once): the first round
probes sizes around ``sqrt(guess_ratio * params)`` (only to place the bracket; the answer does not
depend on it); later rounds gallop up/down until a bracket [largest stored, smallest not stored]
exists, then split the bracket with up to ``probes_per_round`` interior sizes (a k-ary
bisection) until the two ends are adjacent.

Null arms (issue 29), from the same run: the two per-family slope claims refit each seed with the
family's capacities randomly permuted across its model sizes (capacity unrelated to parameters by
construction; a random-init model stores no facts, so its log-log slope is undefined); the trade-off
boundary refits each seed's slope with the boundary's MLP params permuted across its head counts;
facts-per-param takes each capacity point's model before any training step (it stores the smallest
fact set only if its test accuracy already reaches the threshold, else 0 facts).

Presets: the two per-family slopes are decided at quick, gpu and paper; the trade-off boundary at gpu and
paper only (issue 29: the quick map's MLP cells did not store the facts at H = 1, so its mlp-stores gate
cannot pass at quick); facts-per-param at paper only.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from lmsci.claims import Claim, Gate, Verdict, across_seeds
from lmsci.config import ExperimentConfig
from lmsci.errors import ConfigError, DivergedError
from lmsci.experiments.base import Experiment, Figure, Point, PointContext, save_figure
from lmsci.experiments.registry import register
from lmsci.measure.capacity import next_probes, search_capacity, update_bracket  # noqa: F401 (re-exported)
from lmsci.models.associative import OneLayerSpec
from lmsci.runs import RunDir, derive_seed
from lmsci.train.stacked_assoc import StackMember as _Member
from lmsci.train.stacked_assoc import train_stack as _train_stack
from lmsci.worlds.factual_recall import FactualRecallWorld, sample_stack


def train_stack(members: list[_Member], d_model: int, **kw) -> None:
    """:func:`lmsci.train.stacked_assoc.train_stack` with this world's batches
    (:func:`lmsci.worlds.factual_recall.sample_stack`); keyword arguments as there."""
    _train_stack(members, d_model, sample=sample_stack, **kw)



GUIDE_RATIO = 0.15  # the authors' guide line, facts ~ 0.15 x params (plotting.ipynb, c0 = 0.15)
MIN_FAMILY_POINTS = 5  # uncensored capacity points a seed needs for its per-family slope (issue 10)
MIN_BOUNDARY_POINTS = 4  # trade-off boundary points a seed needs for its slope (issue 10)
PAPER_BOUNDARY = "MLP params ~ 2300 - attention params / 2 at 1,024 facts (d = 32, d_h = 8, attention params >= 1280)"


class FactualRecallConfig(ExperimentConfig):
    """Configuration of ``factual-recall`` (field defaults = the ``quick`` preset).

    World: ``answers_per_relation`` (D), ``seq_len`` (T); (S, R) on ``fact_grid``, ``n_noise = S + R``.
    Capacity sweep: ``d_models`` x families, where a family is ``(alpha, beta)`` with
    ``d_head = max(1, round(alpha * d / n_heads))`` and ``d_mlp = round(beta * d)``; the families
    are ``attn_only_alphas`` (beta = 0) and every ``(alpha, beta)`` of ``mlp_alphas x mlp_betas``.
    Trade-off map: ``tradeoff_heads x tradeoff_mlps`` at ``d_model = tradeoff_d_model``,
    ``d_head = tradeoff_d_head`` and S = R = ``tradeoff_size``; each training seed draws its own fact table.
    Seeds: ``n_seeds`` (the base field) repeats every point; the quick preset uses 3 (the per-family,
    facts-per-parameter and trade-off intervals are across seeds).
    """

    answers_per_relation: int = Field(8, ge=1, le=1024, description="D, answers per relation")
    seq_len: int = Field(32, ge=3, le=4096, description="T, sequence length")
    # capacity sweep
    d_models: list[int] = Field([8, 10, 13, 16, 20, 25, 32], min_length=1, description="d_model grid")
    n_heads: int = Field(4, ge=1, le=256, description="H for the capacity sweep")
    attn_only_alphas: list[float] = Field([2.0], description="attention-only families (d_head = alpha*d/H)")
    mlp_alphas: list[float] = Field([0.5], description="attention+MLP families: alpha values")
    mlp_betas: list[float] = Field([2.0], description="attention+MLP families: beta values (d_mlp = beta*d)")
    fact_grid: Literal["square", "near-square"] = Field(
        "near-square", description="searched (S, R): 'square' S = R = level (the paper); 'near-square' "
        "S = ceil(level/2), R = floor(level/2), twice as fine in facts")
    size_min: int = Field(2, ge=2, description="smallest S = R searched")
    size_max: int = Field(128, ge=2, description="largest S = R searched")
    guess_ratio: float = Field(0.05, gt=0, description="first probes near guess_ratio x params facts (only "
                               "places the first bracket; the paper's guide is 0.15 at 16k steps)")
    probes_per_round: int = Field(2, ge=1, le=16, description="sizes trained at once per search round")
    max_rounds: int = Field(8, ge=1, le=64, description="search rounds per capacity point")
    lrs: list[float] = Field([1e-2, 3e-2], min_length=1, description="learning rates (retry rule)")
    lr_schedule: Literal["constant", "cosine"] = Field("cosine", description="LR schedule over steps")
    steps: int = Field(2000, ge=1, description="max AdamW steps per training run")
    batch_size: int = Field(256, ge=1, description="fresh sequences per step")
    eval_every: int = Field(50, ge=1, description="steps between test evaluations")
    n_eval: int = Field(1024, ge=16, description="test sequences (fresh noise, same facts)")
    threshold: float = Field(0.99, gt=0, le=1, description="test accuracy that counts as stored")
    # trade-off map
    tradeoff: bool = Field(True, description="also run the attention/MLP trade-off map")
    tradeoff_d_model: int = Field(16, ge=1)
    tradeoff_d_head: int = Field(4, ge=1)
    tradeoff_size: int = Field(10, ge=1, description="S = R of the trade-off map (facts = size**2)")
    tradeoff_heads: list[int] = Field([1, 2, 4, 6, 8, 12, 16], description="H values of the map")
    tradeoff_mlps: list[int] = Field([0, 8, 16, 24, 32, 48, 64, 96], description="d_mlp values of the map "
                                     "(the smallest is the 'attention-only' cell of the trade-off gates)")
    tradeoff_lr: float = Field(3e-2, gt=0)
    tradeoff_steps: int = Field(1000, ge=1)
    stack_size: int = Field(64, ge=1, description="max models trained at once in the trade-off map")
    threads: int = Field(1, ge=0, description="torch threads while training (0 = torch's default); tiny "
                         "models run fastest on 1 thread, and far faster than on 2 on a shared machine")

    PRESETS = {
        "smoke": {
            "d_models": [8, 12], "n_heads": 2, "attn_only_alphas": [2.0], "mlp_alphas": [1.0],
            "mlp_betas": [1.0], "size_min": 2, "size_max": 6, "lrs": [3e-2], "steps": 80,
            "batch_size": 128, "eval_every": 40, "n_eval": 128, "threshold": 0.9, "max_rounds": 2,
            "probes_per_round": 2, "seq_len": 12, "tradeoff_d_model": 8, "tradeoff_d_head": 2,
            "tradeoff_size": 3, "tradeoff_heads": [1, 2], "tradeoff_mlps": [0, 8],
            "tradeoff_steps": 60,
        },
        "quick": {"n_seeds": 3},
        # one H100: d spans 8x (quick: 4x, which left the attention-only slope unresolved), 2x the quick steps at
        # 2x its batch, and a trade-off map at the paper's d = 32, d_h = 8 with 256 facts and wider MLPs (quick's
        # MLP cells did not store at H = 1). facts-per-param stays at the paper preset (it needs 16,384 steps).
        "gpu": {
            "d_models": [8, 11, 16, 22, 32, 45, 64], "size_max": 256, "steps": 4096, "batch_size": 512,
            "eval_every": 64, "tradeoff_d_model": 32, "tradeoff_d_head": 8, "tradeoff_size": 16,
            "tradeoff_mlps": [0, 16, 32, 48, 64, 96, 128, 192], "tradeoff_lr": 1e-2, "tradeoff_steps": 4096,
            "stack_size": 256, "threads": 0, "n_seeds": 3,
        },
        "paper": {
            "d_models": [8, 11, 16, 22, 32, 45, 64, 90, 128, 181], "n_heads": 8,
            "attn_only_alphas": [4.0, 2.0, 1.0, 0.5, 0.25],
            "mlp_alphas": [4.0, 2.0, 1.0, 0.5, 0.25], "mlp_betas": [4.0, 2.0, 1.0, 0.5, 0.25],
            "size_min": 8, "size_max": 512, "lrs": [1e-3, 3e-3, 1e-2], "lr_schedule": "constant",
            "fact_grid": "square", "guess_ratio": 0.15,
            "steps": 16384, "batch_size": 1024, "eval_every": 128, "n_eval": 1024,
            "probes_per_round": 1, "max_rounds": 16, "tradeoff_d_model": 32, "tradeoff_d_head": 8,
            "tradeoff_size": 32, "tradeoff_heads": [1, 2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32],
            "tradeoff_mlps": [1] + list(range(8, 129, 8)), "tradeoff_lr": 1e-2,
            "tradeoff_steps": 16384, "stack_size": 256, "threads": 0, "n_seeds": 3,
        },
    }


def permuted(values, seed: int) -> np.ndarray:
    """``values`` in a random order other than the given one (a null arm: the pairing of each value with its model
    size is broken by construction); unchanged when all values are equal."""
    v = np.asarray(values)
    rng = np.random.default_rng(seed)
    for _ in range(100):
        out = v[rng.permutation(len(v))]
        if len(v) < 2 or not np.array_equal(out, v):
            return out
    return out


def family_name(alpha: float, beta: float) -> str:
    return f"attn_a{alpha:g}" if beta == 0 else f"attn+mlp_a{alpha:g}_b{beta:g}"


def loglog_fit(params: np.ndarray, facts: np.ndarray, groups: np.ndarray | None = None) -> dict[str, float]:
    """Least-squares fit of ``log facts = c_g + slope * log params`` (one intercept per group).

    Returns slope, its standard error, the 95% CI (Student t with n - p degrees of freedom), the
    intercept(s) and n. With a single group this is ``scipy.stats.linregress``.

    Raises:
        ValueError: fewer than (groups + 2) points (no degrees of freedom left for a CI).
    """
    from scipy import stats

    x, y = np.log(np.asarray(params, float)), np.log(np.asarray(facts, float))
    g = np.zeros(len(x), int) if groups is None else pd.factorize(np.asarray(groups))[0]
    n_g = int(g.max()) + 1 if len(g) else 0
    if len(x) < n_g + 2:
        raise ValueError(f"need at least {n_g + 2} points for a slope CI, got {len(x)}")
    if n_g == 1:
        r = stats.linregress(x, y)
        t = stats.t.ppf(0.975, len(x) - 2)
        return {"slope": r.slope, "stderr": r.stderr, "ci_lo": r.slope - t * r.stderr,
                "ci_hi": r.slope + t * r.stderr, "intercept": r.intercept, "n": len(x), "r2": r.rvalue**2}
    X = np.column_stack([x] + [(g == k).astype(float) for k in range(n_g)])
    coef, res, *_ = np.linalg.lstsq(X, y, rcond=None)
    dof = len(x) - X.shape[1]
    sigma2 = float(np.sum((y - X @ coef) ** 2) / dof)
    cov = sigma2 * np.linalg.inv(X.T @ X)
    se = math.sqrt(cov[0, 0])
    t = stats.t.ppf(0.975, dof)
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    return {"slope": coef[0], "stderr": se, "ci_lo": coef[0] - t * se, "ci_hi": coef[0] + t * se,
            "intercept": float(np.mean(coef[1:])), "n": len(x),
            "r2": 1 - sigma2 * dof / ss_tot if ss_tot > 0 else float("nan")}


@register("factual-recall")
class FactualRecall(Experiment):
    """Facts stored scale linearly with parameters (Nichani, Lee, Bietti 2024, Theorems 3-4, Fig. 4)."""

    claim = ("The number of facts a one-layer transformer stores (>= 99% recall) grows linearly with its "
             "parameter count, and attention or MLP parameters can each hold the facts.")
    source = ("Nichani, Lee, Bietti, 'Understanding Factual Recall in Transformers via Associative Memories', "
              "arXiv 2412.06538 (ICLR 2025), Theorems 3-4, Figure 4")
    Config = FactualRecallConfig
    time_estimate = {"smoke": "~10 s",
                     "quick": "14 min measured on 2 CPU cores (threads=2, 3 seeds, 210 points; 22.6 min on one "
                              "thread beside another run)",
                     "gpu": "~25 min on one H100 (7 widths x 2 families x 3 seeds, stacked search of up to 8 rounds of "
                            "4,096 steps with early stop, plus the 56-cell trade-off map; "
                            "estimated, not measured: no GPU in the session that wrote it)",
                     "paper": "days on one GPU"}
    _SRC = "Nichani, Lee, Bietti, arXiv 2412.06538 (ICLR 2025)"
    _SLOPE_RULE = ("95% CI across training seeds (Student t) of the per-seed slope lies inside (0.5, 1.5) and "
                   "contains 1; a seed with fewer than 5 uncensored capacity points of the family is not fitted, "
                   "and a family with no fitted seed is inconclusive; with several families of this kind (paper "
                   "preset) each family gets its own verdict")
    claims = [
        Claim(
            "linear-attention-only",
            "The number of facts an attention-only one-layer transformer stores grows linearly with its parameters "
            "(each attention-only family d_h = alpha d / H separately).",
            f"{_SRC}, Theorems 3-4 and Fig. 4 left",
            "slope 1 (facts ~ 0.15 x params for every family)",
            "slope of log facts stored (largest S·R at >= threshold test accuracy) on log params (4·H·d_h·d), OLS "
            "over the family's uncensored capacity points, one fit per training seed; mean over seeds",
            _SLOPE_RULE,
            null="the same per-seed fit with the family's capacities randomly permuted across its model sizes (one "
                 "permutation per seed, never the identity): capacity made unrelated to parameters by construction",
        ),
        Claim(
            "linear-attention-mlp",
            "The number of facts a one-layer transformer with an MLP stores grows linearly with its parameters "
            "(each attention+MLP family d_h = alpha d / H, m = beta d separately).",
            f"{_SRC}, Theorems 3-4 and Fig. 4 left",
            "slope 1 (facts ~ 0.15 x params for every family)",
            "slope of log facts stored on log params (4·H·d_h·d + 2·m·d), OLS over the family's uncensored capacity "
            "points, one fit per training seed; mean over seeds",
            _SLOPE_RULE,
            null="the same per-seed fit with the family's capacities randomly permuted across its model sizes (one "
                 "permutation per seed, never the identity): capacity made unrelated to parameters by construction",
        ),
        Claim(
            "linear-pooled",
            "Pooled over all families, facts stored grow linearly with parameters.",
            f"{_SRC}, Fig. 4 left",
            "slope 1",
            "slope of log facts on log params pooled over families (one intercept per family), one fit per "
            "training seed; mean over seeds",
            "reported beside the per-family claims, decides nothing: 95% CI across seeds inside (0.5, 1.5) and "
            "containing 1",
            ablation=True,
        ),
        Claim(
            "facts-per-param",
            "A one-layer transformer trained as in the paper stores about 0.15 facts per parameter.",
            f"{_SRC}, Fig. 4 left (the authors' guide line facts = 0.15 x params, plotting.ipynb c0 = 0.15)",
            "0.15 facts per parameter (after 16,384 AdamW steps of batch 1,024)",
            "median facts / params over the uncensored capacity points of all families, per training seed; mean "
            "over seeds",
            "95% CI across seeds (Student t) inside [0.075, 0.30], i.e. within a factor 2 of 0.15; decided at the "
            "paper preset only (the constant depends on training length)",
            presets=("paper",),
            null="the same statistic for each capacity point's model before any training step (its initialisation, "
                 "test accuracy on the smallest fact set searched): it stores that set if its accuracy reaches the "
                 "threshold, else 0 facts",
        ),
        Claim(
            "tradeoff-boundary",
            "At a fixed fact count, attention and MLP parameters trade off: the smallest MLP that stores the facts "
            "falls as the attention parameters grow.",
            f"{_SRC}, Theorem 4 and Fig. 4 right (param_scaling_sweep.py)",
            f"boundary {PAPER_BOUNDARY}: slope about -0.5",
            "per training seed, the boundary: for each head count H (ascending), the smallest MLP params d·m whose "
            "cell stores the facts (test accuracy >= threshold), up to and including the first H whose attention-only "
            "cell (smallest d_mlp of the grid) stores; OLS slope of these MLP params on attention params d·d_h·H; "
            "mean over seeds",
            "95% CI across seeds (Student t) of the slope entirely below 0; a seed with fewer than 4 boundary points "
            "is not fitted (inconclusive when no seed is); decided at the gpu and paper presets only (issue 29: in "
            "the quick map no MLP cell stored the facts at H = 1, so its mlp-stores gate cannot pass there; quick "
            "reports the value)",
            presets=("gpu", "paper"),
            null="the same per-seed slope with the boundary's MLP params randomly permuted across its head counts (one "
                 "permutation per seed, never the identity): storage made unrelated to attention params by "
                 "construction",
            gates=(Gate("attn-only-stores", "in every seed the attention-only cell (smallest d_mlp of the grid) "
                        "stores the facts at the largest H"),
                   Gate("mlp-stores", "in every seed some cell with an MLP stores the facts at the smallest H")),
        ),
    ]

    # -- grid ------------------------------------------------------------------------------
    @staticmethod
    def families(cfg: FactualRecallConfig) -> list[tuple[float, float]]:
        fams = [(float(a), 0.0) for a in cfg.attn_only_alphas]
        fams += [(float(a), float(b)) for a in cfg.mlp_alphas for b in cfg.mlp_betas]
        return list(dict.fromkeys(fams))

    def validate(self, cfg: FactualRecallConfig) -> None:
        if cfg.size_max < cfg.size_min:
            raise ConfigError("size_max", cfg.size_max, f">= size_min = {cfg.size_min}")
        for name in ("d_models", "tradeoff_heads"):
            bad = [v for v in getattr(cfg, name) if v < 1]
            if bad:
                raise ConfigError(name, getattr(cfg, name), "positive integers")
        if any(v < 0 for v in cfg.tradeoff_mlps):
            raise ConfigError("tradeoff_mlps", cfg.tradeoff_mlps, "integers >= 0")
        for name in ("attn_only_alphas", "mlp_alphas"):
            if any(a <= 0 for a in getattr(cfg, name)):
                raise ConfigError(name, getattr(cfg, name), "positive numbers")
        if any(b <= 0 for b in cfg.mlp_betas):
            raise ConfigError("mlp_betas", cfg.mlp_betas, "positive numbers (beta = 0 is attn_only_alphas)")
        if any(lr <= 0 for lr in cfg.lrs):
            raise ConfigError("lrs", cfg.lrs, "positive learning rates")
        if not self.families(cfg):
            raise ConfigError("attn_only_alphas/mlp_alphas", [], "at least one model family")
        for name in ("d_models", "tradeoff_heads", "tradeoff_mlps", "attn_only_alphas", "mlp_alphas", "mlp_betas"):
            vals = getattr(cfg, name)
            if len(set(vals)) != len(vals):
                raise ConfigError(name, vals, "distinct values (each is one sweep point)")

    def points(self, cfg: FactualRecallConfig) -> list[Point]:
        pts = []
        for d in cfg.d_models:
            for a, b in self.families(cfg):
                dh = max(1, round(a * d / cfg.n_heads))
                m = round(b * d)
                spec = OneLayerSpec(cfg.n_heads, dh, m)
                fam = family_name(a, b)
                pts.append(Point(f"cap_{fam}_d{d}", {
                    "kind": "capacity", "family": fam, "alpha": a, "beta": b, "d_model": d,
                    "n_heads": cfg.n_heads, "d_head": dh, "d_mlp": m, "params": spec.num_params(d)}))
        if cfg.tradeoff:
            d = cfg.tradeoff_d_model
            for h in cfg.tradeoff_heads:
                for m in cfg.tradeoff_mlps:
                    pts.append(Point(f"trade_H{h}_m{m}", {
                        "kind": "tradeoff", "d_model": d, "n_heads": h, "d_head": cfg.tradeoff_d_head,
                        "d_mlp": m, "attn_params": d * cfg.tradeoff_d_head * h, "mlp_params": d * m,
                        "params": OneLayerSpec(h, cfg.tradeoff_d_head, m).num_params(d),
                        "size": cfg.tradeoff_size, "facts": cfg.tradeoff_size**2}))
        return pts

    def groups(self, cfg: FactualRecallConfig, points: list[Point]) -> list[list[Point]]:
        """Capacity points batched by ``d_model`` (all families and training seeds at one d train as
        one stack); the trade-off cells batched by head count (all MLP widths and seeds of one H, in
        chunks of ``stack_size``: a stack pads every member to its largest one). Each seed of a point
        (``<id>__s{k}``) has its own derived seed, hence its own fact tables and initial weights. Model
        weights are drawn per member, but the training batches come from one generator per stack, so
        a group cut by a kill between two result rows is recomputed (on resume) with statistically
        equivalent, not identical, data."""
        cap: dict[int, list[Point]] = {}
        trade: dict[int, list[Point]] = {}
        for p in points:
            if p.params["kind"] == "capacity":
                cap.setdefault(p.params["d_model"], []).append(p)
            else:
                trade.setdefault(p.params["n_heads"], []).append(p)
        out = [cap[d] for d in sorted(cap)]
        for h in sorted(trade):
            out += [trade[h][i: i + cfg.stack_size] for i in range(0, len(trade[h]), cfg.stack_size)]
        return out

    # -- running ---------------------------------------------------------------------------
    def run_point(self, cfg, point, ctx):
        return self.run_group(cfg, [point], [ctx])[0]

    def run_group(self, cfg: FactualRecallConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict]:
        if points[0].params["kind"] == "capacity":
            return self._capacity(cfg, points, ctxs)
        return self._tradeoff(cfg, points, ctxs)

    @staticmethod
    def level_sr(cfg: FactualRecallConfig, level: int) -> tuple[int, int]:
        """(S, R) of a search level: S = R = level ('square') or (ceil(level/2), floor(level/2))."""
        if cfg.fact_grid == "square":
            return level, level
        return (level + 1) // 2, level // 2

    @staticmethod
    def level_bounds(cfg: FactualRecallConfig) -> tuple[int, int]:
        k = 1 if cfg.fact_grid == "square" else 2
        return k * cfg.size_min, k * cfg.size_max

    def _world(self, cfg: FactualRecallConfig, level: int, seed: int) -> FactualRecallWorld:
        S, R = self.level_sr(cfg, level)
        return FactualRecallWorld(S, R, cfg.answers_per_relation, seq_len=cfg.seq_len, seed=seed)

    def _square_world(self, cfg: FactualRecallConfig, size: int, seed: int) -> FactualRecallWorld:
        return FactualRecallWorld(size, size, cfg.answers_per_relation, seq_len=cfg.seq_len, seed=seed)

    def _untrained_accuracy(self, cfg: FactualRecallConfig, p: Point, seed: int, level: int,
                            device: str = "cpu") -> float:
        """The null arm of ``facts-per-param``: test accuracy of the point's model *before any step* (its
        initialisation at the first learning rate, as the search would draw it) on the smallest fact set searched.
        Below the threshold, the untrained model stores no fact set: 0 facts."""
        from lmsci.models.associative import OneLayerTransformer

        world = self._world(cfg, level, derive_seed(seed, "facts", level))
        spec = OneLayerSpec(p.params["n_heads"], p.params["d_head"], p.params["d_mlp"], world.n_answers,
                            world.vocab_size)
        model = OneLayerTransformer(p.params["d_model"], world.vocab_size, world.n_answers, [spec],
                                    seed=[derive_seed(seed, "init", level, cfg.lrs[0])]).to(device)
        ev = world.eval_set(cfg.n_eval, derive_seed(derive_seed(seed, "init", level, cfg.lrs[0]), "eval"))
        x, t = ev.input_ids[None].to(device), ev.targets[None].to(device)
        with torch.no_grad():
            return float((model(x).argmax(-1) == t).float().mean())

    @staticmethod
    def _logger(ctx_of: dict[Any, PointContext], extra):
        def log(step, live, accs, losses):
            for m, a, l in zip(live, accs, losses):
                ctx_of[m.key[0]].log(step=step, loss=l, test_acc=a, **extra(m))
        return log

    def _capacity(self, cfg: FactualRecallConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict]:
        d = points[0].params["d_model"]
        k = cfg.probes_per_round
        lmin, lmax = self.level_bounds(cfg)
        guesses = {p.id: int(round(math.sqrt(cfg.guess_ratio * p.params["params"])
                                   * (1 if cfg.fact_grid == "square" else 2))) for p in points}
        point_of = {p.id: (p, c) for p, c in zip(points, ctxs)}
        st = {p.id: {"trials": [], "runs": 0, "steps": 0} for p in points}
        ctx_of = {p.id: c for p, c in zip(points, ctxs)}
        t_train, seqs = 0.0, 0

        def try_levels(rnd: int, probes: list[tuple[str, int]]) -> dict[str, dict[int, bool]]:
            nonlocal t_train, seqs
            members = []
            for pid, size in probes:
                p, c = point_of[pid]
                world = self._world(cfg, size, derive_seed(c.seed, "facts", size))
                spec = OneLayerSpec(p.params["n_heads"], p.params["d_head"], p.params["d_mlp"])
                for lr in cfg.lrs:
                    members.append(_Member((p.id, size, lr), world, spec, lr,
                                           derive_seed(c.seed, "init", size, lr)))
            bar = ctxs[0].progress(cfg.steps, f"d{d}:round{rnd}")
            t0 = time.perf_counter()
            train_stack(members, d, steps=cfg.steps, batch_size=cfg.batch_size, eval_every=cfg.eval_every,
                        n_eval=cfg.n_eval, threshold=cfg.threshold, schedule=cfg.lr_schedule,
                        seed=derive_seed(ctxs[0].seed, "data", rnd), done_key=lambda m: m.key[:2],
                        log=self._logger(ctx_of, lambda m: {"round": rnd, "level": m.key[1],
                                                            "facts": m.world.n_facts, "lr": m.key[2]}),
                        progress=bar, device=ctxs[0].device)
            t_train += time.perf_counter() - t0
            seqs += sum(m.steps_run for m in members) * cfg.batch_size
            by_point: dict[str, dict[int, bool]] = {}
            for m in members:
                pid, size, lr = m.key
                s = st[pid]
                s["runs"] += 1
                s["steps"] += m.steps_run
                s["trials"].append({"round": rnd, "level": size, "S": m.world.S, "R": m.world.R,
                                    "facts": m.world.n_facts, "lr": lr, "acc": round(m.best_acc, 4),
                                    "steps": m.steps_run, "stored": m.reached_at is not None})
                ok = by_point.setdefault(pid, {}).get(size, False) or m.reached_at is not None
                by_point[pid][size] = ok
            return by_point

        found = search_capacity(guesses, try_levels, level_min=lmin, level_max=lmax, probes_per_round=k,
                                max_rounds=cfg.max_rounds)
        rows = []
        for p, c in zip(points, ctxs):
            s = st[p.id]
            lo, hi = found[p.id].lo, found[p.id].hi
            S, R = self.level_sr(cfg, lo) if lo >= lmin else (0, 0)
            censored = found[p.id].censoring(lmin, lmax)
            hS, hR = self.level_sr(cfg, hi)
            rows.append({**p.params, "capacity_level": max(lo, 0), "S": S, "R": R, "facts": S * R,
                         "facts_next_failed": hS * hR if hi <= lmax else None,
                         "censored": censored, "runs": s["runs"], "steps_total": s["steps"],
                         "facts_per_param": S * R / p.params["params"],
                         "untrained_acc_min_level": self._untrained_accuracy(cfg, p, c.seed, lmin, c.device),
                         "group_train_seq_per_s": round(seqs / max(t_train, 1e-9)),
                         "trials": json.dumps(s["trials"])})
        return rows

    def _tradeoff(self, cfg: FactualRecallConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict]:
        d = cfg.tradeoff_d_model
        # one fact table per training seed for the whole map (a pure function of config seed and seed index)
        worlds: dict[int, FactualRecallWorld] = {}
        members = []
        for p, c in zip(points, ctxs):
            k = p.seed_index
            if k not in worlds:
                fs = derive_seed(cfg.seed, "tradeoff-facts") if k == 0 else derive_seed(cfg.seed, "tradeoff-facts", k)
                worlds[k] = self._square_world(cfg, cfg.tradeoff_size, fs)
            spec = OneLayerSpec(p.params["n_heads"], p.params["d_head"], p.params["d_mlp"])
            members.append(_Member((p.id,), worlds[k], spec, cfg.tradeoff_lr, derive_seed(c.seed, "init")))
        ctx_of = {p.id: c for p, c in zip(points, ctxs)}
        bar = ctxs[0].progress(cfg.tradeoff_steps, "tradeoff")
        train_stack(members, d, steps=cfg.tradeoff_steps, batch_size=cfg.batch_size, eval_every=cfg.eval_every,
                    n_eval=cfg.n_eval, threshold=cfg.threshold, schedule=cfg.lr_schedule,
                    seed=derive_seed(cfg.seed, "tradeoff-data", points[0].id),
                    log=self._logger(ctx_of, lambda m: {}), progress=bar, device=ctxs[0].device)
        return [{**p.params, "accuracy": m.best_acc, "stored": m.reached_at is not None,
                 "steps_run": m.steps_run, "final_loss": m.final_loss} for p, m in zip(points, members)]

    # -- analysis ---------------------------------------------------------------------------
    @staticmethod
    def _cap(results: pd.DataFrame) -> pd.DataFrame:
        if "kind" not in results:
            return results.iloc[0:0]
        df = results[results["kind"] == "capacity"].copy()
        if df.empty:
            return df
        df["censored"] = df["censored"].fillna("").astype(str)
        return df

    @staticmethod
    def _usable(df: pd.DataFrame) -> pd.DataFrame:
        return df[(df["censored"] == "") & (df["facts"] > 0)]

    @staticmethod
    def _seeds(df: pd.DataFrame) -> list[tuple[int, pd.DataFrame]]:
        if "seed_index" not in df:
            return [(0, df)]
        return [(int(k), sub) for k, sub in df.groupby(df["seed_index"].fillna(0).astype(int), sort=True)]

    @staticmethod
    def _slope_rule(lo: float, hi: float) -> bool:
        return bool(0.5 < lo <= 1 <= hi < 1.5)

    @staticmethod
    def _interval(values: list[float], within: tuple[float, float] | None, what: str):
        """(mean, ci, ci_kind) across seeds; one seed falls back to its within-run interval ``within``."""
        st = across_seeds(values)
        if st.n >= 2:
            return st.mean, st.ci, st.kind
        if within is not None:
            return st.mean, within, f"within-run 95% {what} (1 seed)"
        return st.mean, None, st.kind

    def _slope_verdict(self, cfg, claim_id: str, fam: str, rows: pd.DataFrame, groups: bool = False) -> Verdict:
        """``rows``: every capacity row of the family (all families when ``groups``), censored ones included."""
        per_seed, skipped = {}, {}
        for k, sub in self._seeds(rows):
            sub = self._usable(sub)
            if not groups and len(sub) < MIN_FAMILY_POINTS:
                skipped[k] = int(len(sub))
                continue
            try:
                f = loglog_fit(sub["params"].values, sub["facts"].values, sub["family"].values if groups else None)
            except ValueError:
                skipped[k] = int(len(sub))
                continue
            per_seed[k] = f
        details = {"family": fam, "min_points_per_seed": MIN_FAMILY_POINTS,
                   "seeds_skipped_points": skipped,
                   "per_seed": {k: {"slope": f["slope"], "within_fit_ci": [f["ci_lo"], f["ci_hi"]], "n": int(f["n"]),
                                    "r2": f["r2"]} for k, f in per_seed.items()}}
        if not per_seed:
            return self.judge(cfg, claim_id, value=None, passed=None, details=details,
                              why_not_computed=f"{fam}: no training seed has "
                                               f"{'enough' if groups else MIN_FAMILY_POINTS} uncensored capacity "
                                               f"points (uncensored points per seed: {skipped})")
        slopes = [f["slope"] for f in per_seed.values()]
        one = next(iter(per_seed.values()))
        value, ci, kind = self._interval(slopes, (one["ci_lo"], one["ci_hi"]), "OLS CI of the slope")
        passed = ci is not None and self._slope_rule(*ci)
        null = None
        if not groups:  # the null arm: the same fit with the capacities permuted across the family's model sizes
            null_slopes = {}
            for k, sub in self._seeds(rows):
                if k not in per_seed:
                    continue
                sub = self._usable(sub)
                facts = permuted(sub["facts"].values, derive_seed(cfg.seed, "null-permutation", fam, k))
                null_slopes[k] = float(loglog_fit(sub["params"].values, facts)["slope"])
            nst = across_seeds(null_slopes.values())
            null = (nst.mean, None if nst.ci is None else self._slope_rule(*nst.ci))
            details["null_per_seed_slope (facts permuted across sizes)"] = null_slopes
            details["null_ci"] = nst.ci
        note = f"{fam}: slope {value:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
        if not passed and ci is not None:
            note += (" - consistent with 1 but the interval is too wide to decide (more seeds or a wider parameter "
                     "range would narrow it)" if ci[0] <= 1 <= ci[1] else
                     f" - inconsistent with 1 at this scale (step budget {cfg.steps}; the paper trains 16,384 steps)")
        return self.judge(cfg, claim_id, value=value, passed=passed, ci=ci, ci_kind=kind, n_seeds=len(per_seed),
                          details=details, note=note, null=null)

    @staticmethod
    def boundary(cfg: FactualRecallConfig, tr: pd.DataFrame) -> pd.DataFrame:
        """One seed's trade-off boundary: per head count (ascending), the smallest stored MLP params, up to
        and including the first H whose attention-only cell (smallest d_mlp of the map) stores."""
        m0 = tr["d_mlp"].min()
        rows = []
        for h, sub in tr.groupby("n_heads", sort=True):
            ok = sub[sub["accuracy"] >= cfg.threshold]
            if ok.empty:
                continue
            rows.append({"n_heads": int(h), "attn_params": float(sub["attn_params"].iloc[0]),
                         "min_mlp_params": float(ok["mlp_params"].min())})
            if (ok["d_mlp"] == m0).any():
                break
        return pd.DataFrame(rows, columns=["n_heads", "attn_params", "min_mlp_params"])

    def _tradeoff_verdict(self, cfg: FactualRecallConfig, tr: pd.DataFrame) -> Verdict:
        from scipy import stats

        h_max, h_min, m0 = tr["n_heads"].max(), tr["n_heads"].min(), tr["d_mlp"].min()
        per_seed, skipped, attn_ok, mlp_ok, bounds, null_slopes = {}, {}, [], [], {}, {}
        for k, sub in self._seeds(tr):
            stored = sub["accuracy"] >= cfg.threshold
            attn_ok.append(bool((stored & (sub["n_heads"] == h_max) & (sub["d_mlp"] == m0)).any()))
            mlp_ok.append(bool((stored & (sub["n_heads"] == h_min) & (sub["d_mlp"] > m0)).any()))
            b = self.boundary(cfg, sub)
            bounds[k] = b[["n_heads", "min_mlp_params"]].values.tolist()
            if len(b) < MIN_BOUNDARY_POINTS or b["attn_params"].nunique() < 2:
                skipped[k] = int(len(b))
                continue
            r = stats.linregress(b["attn_params"].values, b["min_mlp_params"].values)
            # the null arm: the same boundary with its MLP params permuted across the head counts
            null_slopes[k] = float(stats.linregress(
                b["attn_params"].values,
                permuted(b["min_mlp_params"].values, derive_seed(cfg.seed, "null-permutation", "tradeoff", k))).slope)
            t = stats.t.ppf(0.975, len(b) - 2) if len(b) > 2 else float("nan")
            per_seed[k] = {"slope": float(r.slope), "intercept": float(r.intercept), "n": int(len(b)),
                           "within_fit_ci": [float(r.slope - t * r.stderr), float(r.slope + t * r.stderr)]}
        n_s = len(attn_ok)
        gates = {"attn-only-stores": (f"{sum(attn_ok)}/{n_s} seeds", all(attn_ok)),
                 "mlp-stores": (f"{sum(mlp_ok)}/{n_s} seeds", all(mlp_ok))}
        facts = int(tr["facts"].iloc[0])
        details = {"facts": facts, "paper_boundary": PAPER_BOUNDARY, "paper_slope": -0.5,
                   "boundary_per_seed (H, min MLP params)": bounds, "per_seed": per_seed,
                   "seeds_skipped_boundary_points": skipped, "min_boundary_points": MIN_BOUNDARY_POINTS}
        if not per_seed:
            return self.judge(cfg, "tradeoff-boundary", value=None, passed=None, gates=gates, details=details,
                              why_not_computed=f"no training seed has {MIN_BOUNDARY_POINTS} boundary points "
                                               f"(points per seed: {skipped})")
        one = next(iter(per_seed.values()))
        value, ci, kind = self._interval([f["slope"] for f in per_seed.values()], tuple(one["within_fit_ci"]),
                                         "OLS CI of the slope")
        details["intercept_mean"] = float(np.mean([f["intercept"] for f in per_seed.values()]))
        passed = ci is not None and bool(ci[1] < 0)
        nst = across_seeds(null_slopes.values())
        null = (nst.mean, None if nst.ci is None else bool(nst.ci[1] < 0))
        details["null_per_seed_slope (MLP params permuted across head counts)"] = null_slopes
        details["null_ci"] = nst.ci
        note = (f"Ours at {facts} facts: MLP params ~ {details['intercept_mean']:.0f} {value:+.2f} x attention params; "
                f"paper at 1,024 facts: {PAPER_BOUNDARY}.")
        return self.judge(cfg, "tradeoff-boundary", value=value, passed=passed, ci=ci, ci_kind=kind,
                          n_seeds=len(per_seed), gates=gates, details=details, note=note, null=null)

    def verdicts(self, cfg: FactualRecallConfig, results: pd.DataFrame, run: RunDir) -> list[Verdict]:
        out = []
        cap = self._cap(results)
        if not cap.empty:
            use = self._usable(cap)
            beta = cap["beta"] if "beta" in cap else cap["d_mlp"]
            kinds = {f: ("linear-attention-only" if float(b) == 0 else "linear-attention-mlp")
                     for f, b in zip(cap["family"], beta)}
            for fam in sorted(kinds):
                out.append(self._slope_verdict(cfg, kinds[fam], fam, cap[cap["family"] == fam]))
            out.append(self._slope_verdict(cfg, "linear-pooled", "all families (one intercept each)", cap,
                                           groups=True))
            fpp = {k: float(sub["facts_per_param"].median()) for k, sub in self._seeds(use) if not sub.empty}
            null_fpp = {}  # the untrained model of each point stores the smallest fact set or nothing
            if "untrained_acc_min_level" in use:
                lmin = self.level_bounds(cfg)[0]
                S0, R0 = self.level_sr(cfg, lmin)
                for k, sub in self._seeds(use):
                    if not sub.empty:
                        stored0 = (sub["untrained_acc_min_level"] >= cfg.threshold) * S0 * R0
                        null_fpp[k] = float((stored0 / sub["params"]).median())
            if not fpp:
                out.append(self.judge(cfg, "facts-per-param", value=None, passed=None,
                                      why_not_computed=f"no uncensored capacity point ({len(cap)} censored)"))
            else:
                value, ci, kind = self._interval(list(fpp.values()), None, "")
                lo, hi = ci if ci is not None else (value, value)

                def window(lo_: float, hi_: float) -> bool:
                    return bool(GUIDE_RATIO / 2 <= lo_ and hi_ <= GUIDE_RATIO * 2)

                null = None
                if null_fpp:
                    nv, nci, _ = self._interval(list(null_fpp.values()), None, "")
                    null = (nv, window(*(nci if nci is not None else (nv, nv))))
                out.append(self.judge(
                    cfg, "facts-per-param", value=value, passed=window(lo, hi),
                    ci=ci, ci_kind=kind, n_seeds=len(fpp), null=null,
                    details={"per_seed_median": fpp, "guide": GUIDE_RATIO, "window": [GUIDE_RATIO / 2, GUIDE_RATIO * 2],
                             "null_per_seed_median (untrained models)": null_fpp},
                    note=f"{cfg.steps} steps of batch {cfg.batch_size} here; the paper's 0.15 is after 16,384 steps "
                         "of batch 1,024."))
        tr = results[results["kind"] == "tradeoff"] if "kind" in results else results.iloc[0:0]
        if not tr.empty:
            out.append(self._tradeoff_verdict(cfg, tr))
        return out

    def figures(self, cfg: FactualRecallConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib.pyplot as plt

        figs = []
        cap = self._cap(results)
        if not cap.empty:
            fig, ax = plt.subplots(figsize=(6.4, 4.8))
            use = self._usable(cap)
            colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
            try:
                pooled = loglog_fit(use["params"].values, use["facts"].values, use["family"].values)
            except ValueError:
                pooled = None
            for i, fam in enumerate(sorted(cap["family"].unique())):
                c = colors[i % len(colors)]
                sub = cap[cap["family"] == fam].sort_values("params")
                good = sub[(sub["censored"] == "") & (sub["facts"] > 0)]
                bad = sub[~sub.index.isin(good.index) & (sub["facts"] > 0)]
                for j, (_, g) in enumerate(self._seeds(good)):  # one line per training seed
                    ax.plot(g["params"], g["facts"], "o-", color=c, alpha=1 if j == 0 else 0.5, lw=1,
                            label=fam if j == 0 else None)
                if "facts_next_failed" in good:  # the search bracket: stored .. first failed above it
                    up = (good["facts_next_failed"].fillna(good["facts"]) - good["facts"]).clip(lower=0)
                    ax.errorbar(good["params"], good["facts"], yerr=[np.zeros(len(good)), up.values], fmt="none",
                                ecolor=c, alpha=0.5, capsize=2)
                if not bad.empty:
                    ax.plot(bad["params"], bad["facts"], "x", color=c, ms=8, label=f"{fam} (censored)")
                try:
                    f = loglog_fit(good["params"].values, good["facts"].values)
                    xs = np.geomspace(good["params"].min(), good["params"].max(), 20)
                    ax.plot(xs, np.exp(f["intercept"]) * xs ** f["slope"], ":", color=c, lw=1,
                            label=f"  fit slope {f['slope']:.2f} [{f['ci_lo']:.2f}, {f['ci_hi']:.2f}]")
                except ValueError:
                    pass
            lo, hi = cap["params"].min() / 1.5, cap["params"].max() * 1.5
            xs = np.geomspace(lo, hi, 20)
            ax.plot(xs, GUIDE_RATIO * xs, "k--", lw=1, label=f"guide: facts = {GUIDE_RATIO} x params")
            ax.set_xscale("log")
            ax.set_yscale("log")
            from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

            for axis in (ax.xaxis, ax.yaxis):
                axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
                axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                axis.set_minor_formatter(NullFormatter())
            ax.set_xlabel("parameters (4·H·d_h·d + 2·m·d)")
            ax.set_ylabel(f"facts stored (S·R at ≥ {cfg.threshold:g} accuracy)")
            title = "Facts stored vs parameters"
            if pooled:
                title += f" — pooled slope {pooled['slope']:.2f} [{pooled['ci_lo']:.2f}, {pooled['ci_hi']:.2f}]"
            ax.set_title(title, fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7, loc="upper left")
            figs.append(save_figure(fig, run, "facts_vs_params.png",
                                    "Facts stored vs parameters (log-log) with per-family fits and the authors' "
                                    "guide line facts ≈ 0.15 × params (cf. Fig. 4 left); bars reach the smallest "
                                    "fact count that failed", dpi=120))
            # search trace: best accuracy vs probed size, one panel per family
            fams = sorted(cap["family"].unique())
            fig, axes = plt.subplots(1, len(fams), figsize=(5 * len(fams), 3.8), squeeze=False)
            for ax, fam in zip(axes[0], fams):
                sub = cap[cap["family"] == fam].sort_values("d_model")
                if "seed_index" in sub:  # the first training seed only
                    sub = sub[sub["seed_index"].fillna(0).astype(int) == 0]
                for i, (_, r) in enumerate(sub.iterrows()):
                    tr = pd.DataFrame(json.loads(r["trials"]))
                    if tr.empty:
                        continue
                    best = tr.groupby("facts")["acc"].max()
                    ax.plot(best.index, best.values, "o-", color=colors[i % len(colors)], ms=3,
                            label=f"d={r['d_model']} ({r['params']} params)")
                ax.axhline(cfg.threshold, color="k", ls="--", lw=1)
                ax.set_xscale("log")
                ax.set_xlabel("facts S·R probed")
                ax.set_ylabel("best test accuracy over LRs")
                ax.set_title(fam, fontsize=10)
                ax.legend(fontsize=7)
                ax.grid(True, alpha=0.3)
            figs.append(save_figure(fig, run, "capacity_search.png",
                                    "The capacity search: best test accuracy (over learning rates) at each probed "
                                    "fact count; the dashed line is the storage threshold"))
        tr = results[results["kind"] == "tradeoff"] if "kind" in results else results.iloc[0:0]
        if not tr.empty:
            piv = tr.pivot_table(index="mlp_params", columns="attn_params", values="accuracy")
            fig, ax = plt.subplots(figsize=(6.4, 4.8))
            im = ax.imshow(piv.values, origin="lower", aspect="auto", cmap="viridis", vmin=0, vmax=1)
            ax.set_xticks(range(len(piv.columns)), [str(int(c)) for c in piv.columns], rotation=45)
            ax.set_yticks(range(len(piv.index)), [str(int(i)) for i in piv.index])
            for (yi, xi), v in np.ndenumerate(piv.values):
                if not np.isnan(v):
                    ax.text(xi, yi, f"{v:.2f}", ha="center", va="center", fontsize=7,
                            color="k" if v > 0.6 else "w", fontweight="bold" if v >= cfg.threshold else None)
            for j, (k, sub) in enumerate(self._seeds(tr)):  # each seed's boundary, in grid coordinates
                b = self.boundary(cfg, sub)
                if b.empty:
                    continue
                xs = [list(piv.columns).index(a) for a in b["attn_params"]]
                ys = [list(piv.index).index(m) for m in b["min_mlp_params"]]
                ax.plot(xs, ys, "o-", color="r", ms=3, lw=1, alpha=0.8, label="boundary per seed" if j == 0 else None)
            if not tr.empty and ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7, loc="upper right")
            ax.set_xlabel(f"attention parameters d·d_h·H (d={cfg.tradeoff_d_model}, d_h={cfg.tradeoff_d_head})")
            ax.set_ylabel("MLP parameters d·m")
            ax.set_title(f"Mean accuracy over seeds storing {cfg.tradeoff_size ** 2} facts (S=R={cfg.tradeoff_size}, "
                         f"D={cfg.answers_per_relation})", fontsize=10)
            fig.colorbar(im, ax=ax, label="test accuracy")
            figs.append(save_figure(fig, run, "tradeoff_map.png",
                                    "Attention/MLP trade-off: accuracy over (attention params × MLP params) at a "
                                    "fixed fact count, mean over training seeds; bold = stored on average; red: each "
                                    "seed's boundary (smallest stored MLP per head count) (cf. Fig. 4 right)",
                                    dpi=120))
        return figs

    def report_sections(self, cfg: FactualRecallConfig, results: pd.DataFrame, run: RunDir) -> str:
        from lmsci.report import markdown_table

        parts = ["## Method\n",
                 f"World: S subjects and R relations, D = {cfg.answers_per_relation} answers per relation "
                 f"(disjoint blocks), n_noise = S + R, T = {cfg.seq_len}; facts = S·R. Model: one-layer "
                 f"transformer, frozen random embeddings, H = {cfg.n_heads} heads, d_h = alpha·d/H, "
                 "MLP width m = beta·d (beta = 0: attention-only); params = 4·H·d_h·d + 2·m·d. "
                 f"Training: AdamW (wd 0), batch {cfg.batch_size}, up to {cfg.steps} steps, LR schedule "
                 f"`{cfg.lr_schedule}`, test set {cfg.n_eval} fresh sequences, stop at test accuracy "
                 f"≥ {cfg.threshold:g}. A fact set is stored if any LR in {cfg.lrs} reaches the threshold. "
                 f"Capacity = the largest stored S·R, found by a k-ary search (k = {cfg.probes_per_round}) over "
                 f"the `{cfg.fact_grid}` grid of (S, R) with S, R ∈ [{cfg.size_min}, {cfg.size_max}] "
                 "('square': S = R; 'near-square': S = R or S = R + 1). The fit is ordinary least squares of log facts on "
                 "log params, one fit per family and training seed (the pooled fit: one intercept per family); the "
                 f"verdict intervals are 95% Student-t CIs across the {cfg.n_seeds} training seed(s) of the per-seed "
                 "slopes. Trade-off map: per seed, the boundary is the smallest stored MLP params per head count, up "
                 "to the first H whose attention-only cell stores; its OLS slope on attention params is taken per "
                 "seed. Each seed draws its own fact tables and initial weights.\n"]
        cap = self._cap(results)
        if not cap.empty:
            cols = ["family", "seed_index", "d_model", "n_heads", "d_head", "d_mlp", "params", "S", "R", "facts",
                    "facts_per_param", "facts_next_failed", "censored", "runs"]
            parts.append("## Capacity per model\n")
            parts.append(markdown_table(cap[[c for c in cols if c in cap]].sort_values(["family", "params"])))
        tr = results[results["kind"] == "tradeoff"] if "kind" in results else results.iloc[0:0]
        if not tr.empty:
            parts.append("## Trade-off map: smallest MLP that stores the facts, per head count\n")
            rows = []
            for (k, h), sub in tr.groupby([tr["seed_index"].fillna(0).astype(int) if "seed_index" in tr else
                                           pd.Series(0, index=tr.index), "n_heads"]):
                ok = sub[sub["accuracy"] >= cfg.threshold]
                rows.append({"seed_index": k, "n_heads": h, "attn_params": int(sub["attn_params"].iloc[0]),
                             "min_mlp_params_stored": int(ok["mlp_params"].min()) if not ok.empty else "none",
                             "best_accuracy": float(sub["accuracy"].max())})
            parts.append(markdown_table(pd.DataFrame(rows)))
        return "\n".join(parts)
