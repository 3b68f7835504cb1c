"""Experiment ``attribution-patching``: in a small GPT trained on the toy IOI world, the gradient estimate of every
attention head's activation-patching effect (attribution patching) agrees with exact activation patching.

Sources: Nanda 2023, "Attribution Patching: Activation Patching At Industrial Scale" (neelnanda.io); Syed, Rager &
Conmy, arXiv 2310.10348, sec. 3-4; the task: Wang et al., arXiv 2211.00593 (IOI, logit difference, ABC corruption).
The real-model twin is ``attribution-patching-lm`` (SmolLM2-135M); this is its toy half (issue 40 item 5), with the
same claim ids, statistics, rules and null arm, so the two reports line up (its published quick rows are shown
beside this report's).

Method (per training seed). The world is :mod:`lmsci.worlds.ioi` (word-level; the paper's 15 templates and their
ABBA twins). A GPT is trained exactly as in ``ioi-circuit`` (the same function,
:func:`~lmsci.experiments.syntax._ioi_train.train_ioi_gpt`, as its ``train_arm``'s ``ioi`` arm; here the stream is
IOI sentences only, ``ioi_fraction`` 1, so that a quick-sized model learns the task in few steps). On
``n_prompts`` held-out prompts (drawn from ``derive_seed(seed, "prompts", seed_index)``), each with its ABC twin
(IO, S1, S2 replaced by three other names), the metric is the mean logit difference logit(IO) - logit(S) at END
(nats). Attribution patching
(:func:`lmsci.measure.attribution_patching.attribution_patching`, one clean forward + backward and one ABC forward)
estimates, for every head, the change of the metric when the head's ABC output (every position) is patched into the
clean run; exact activation patching (:func:`~lmsci.measure.attribution_patching.exact_patching`,
``n_layers * n_heads`` forwards) measures it. Statistics over the heads: the Pearson correlation of the two maps,
and the top-k agreement (the share of the ``top_k`` heads of largest |exact effect| among the ``top_k`` of largest
|estimate|). Both methods are timed (wall clock and process CPU time); the speed-up (exact / attribution) is a
column (on a 12-head toy it is small: exact patching costs only 12 forwards).

Gate ``learned``: every seed's held-out clean logit difference IO - S above 0 (at least 0.05 nats): a model that has
not learned the task has no IOI effect to attribute. ``ioi-circuit`` found that its quick model barely leaves chance
in 1200 steps (its claims are decided at gpu and paper); here the gate is weaker (IO preferred at all), and a seed that
fails it makes the claims inconclusive, not reproduced.

Null arm (the same computation on arm ``null``): the same two statistics with the estimates permuted across heads
(one permutation per seed): an estimate carrying no head-specific information. Both arms of a seed are one group
(one model trained, one computation; the arms differ only in the permutation).

Sizing (timing pilot, 2026-12-06, master seed 1000000, nice 10, one thread, the machine shared with the lead's
publication runs, so the rate is pessimistic): one seed of the quick preset (1800 steps) took 94 s wall (0.052 s a
step, everything included; attribution 0.15 s, exact 0.61 s), so quick (3 seeds) is ~4.7 min per master seed. A
400-step pilot (22 s) left the model at chance (logit difference -0.003 nats), the 1800-step one did not (2.9 nats,
IO above S on 87% of prompts): the steps are the fewest that passed the gate in the pilot; only timing and the gate's
value were read, never a claim statistic.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, ci_above, every_at_least
from lmsci.config import ExperimentConfig
from lmsci.contract import Experiment, Figure, Point, PointContext, cross_arms, save_figure
from lmsci.errors import ConfigError
from lmsci.experiments.registry import register
from lmsci.experiments.syntax._ioi_train import train_ioi_gpt
from lmsci.measure.attribution_patching import agreement, attribution_patching, exact_patching
from lmsci.measure.patching import logit_diff
from lmsci.models.gpt import GPTSpec
from lmsci.report.published import toy_rows_section
from lmsci.runs import RunDir, derive_seed
from lmsci.train.trainer import TrainSpec
from lmsci.worlds.ioi import IOIWorld

R_MIN = 0.5       # registered (as attribution-patching-lm): Pearson r, 95% CI lower end above 0.5
TOPK_MIN = 0.5    # registered (as attribution-patching-lm): top-k agreement, 95% CI lower end above 0.5
LD_GATE = 0.05    # registered gate: every seed's held-out clean logit difference IO - S >= 0.05 nats (above 0)


class AttributionPatchingConfig(ExperimentConfig):
    """Configuration of ``attribution-patching`` (defaults = the quick preset).

    Attributes:
        model, train, seq_len, stream_tokens, ioi_fraction, n_names, n_templates: the toy GPT and its training, as
            in ``ioi-circuit`` (:class:`~lmsci.experiments.syntax.ioi_circuit.IOICircuitConfig`).
        n_prompts: held-out IOI prompts (each with its ABC twin) on which both methods run.
        top_k: k of the top-k agreement (below ``n_layers * n_heads``).
    """

    n_names: int = Field(48, ge=5, le=48)
    n_templates: int = Field(15, ge=1, le=15)
    ioi_fraction: float = Field(1.0, gt=0, le=1, description="share of IOI sentences in the training stream")
    stream_tokens: int = Field(300_000, ge=100)
    model: GPTSpec = GPTSpec(n_layers=3, n_heads=4, d_model=64, tie_embeddings=True)
    seq_len: int = Field(48, ge=24)
    train: TrainSpec = TrainSpec(steps=1800, batch_size=32, lr=3e-3, warmup_steps=50, weight_decay=0.1)
    n_prompts: int = Field(200, ge=2)
    top_k: int = Field(3, ge=1)
    n_seeds: int = Field(3, ge=1, le=100)
    threads: int = Field(1, ge=0)

    PRESETS = {
        "smoke": {"model.n_layers": 2, "model.n_heads": 2, "model.d_model": 16, "train.steps": 6,
                  "train.batch_size": 4, "train.warmup_steps": 1, "seq_len": 32, "stream_tokens": 3000,
                  "n_prompts": 8, "top_k": 2, "n_seeds": 1},
        "quick": {},
        "gpu": {"model.n_layers": 4, "model.n_heads": 8, "model.d_model": 256, "train.batch_size": 128,
                "train.steps": 10_000, "train.lr": 1e-3, "train.warmup_steps": 300, "stream_tokens": 8_000_000,
                "n_prompts": 400, "top_k": 8, "n_seeds": 5, "threads": 0},
        "paper": {"model.n_layers": 12, "model.n_heads": 12, "model.d_model": 768, "train.batch_size": 128,
                  "train.steps": 50_000, "train.lr": 3e-4, "train.warmup_steps": 1000, "seq_len": 256,
                  "stream_tokens": 50_000_000, "n_prompts": 1000, "top_k": 10, "n_seeds": 5, "threads": 0},
    }


def compute(cfg: AttributionPatchingConfig, seed_index: int, ctx: PointContext) -> dict[str, Any]:
    """Train one toy GPT (``ctx``'s seed) and run both methods on its held-out prompts: the per-head maps
    ``[n_layers * n_heads]`` (nats), the clean logit difference and the timings (seconds)."""
    world = IOIWorld(cfg.n_names, cfg.n_templates)
    p = world.sample_prompts(cfg.n_prompts, np.random.default_rng(derive_seed(cfg.seed, "prompts", seed_index)))
    p = p.to(ctx.device)
    model, final = train_ioi_gpt(cfg, world, cfg.ioi_fraction, ctx)
    args = (model, p.clean, p.corrupt, p.end, p.io, p.s)
    w0, c0 = time.perf_counter(), time.process_time()
    est = attribution_patching(*args).sum(-1)
    w1, c1 = time.perf_counter(), time.process_time()
    exact = exact_patching(*args, per="head")
    w2, c2 = time.perf_counter(), time.process_time()
    ld = logit_diff(model, p.clean, p.end, p.io, p.s)
    return {"est": est.float().cpu().numpy().ravel(), "exact": exact.float().cpu().numpy().ravel(),
            "n_layers": cfg.model.n_layers, "n_heads": cfg.model.n_heads, "n_prompts": cfg.n_prompts,
            "train_loss": float(final.get("loss", float("nan"))), "ld_clean": float(ld.mean()),
            "acc": float((ld > 0).float().mean()), "time_attribution_s": w1 - w0, "time_exact_s": w2 - w1,
            "cpu_attribution_s": c1 - c0, "cpu_exact_s": c2 - c1}


def arm_row(cfg: AttributionPatchingConfig, r: dict[str, Any], arm: str, seed_index: int) -> dict[str, Any]:
    """One arm's row from a seed's computation (arm ``null``: the estimates permuted across heads)."""
    est, exact = r["est"], r["exact"]
    if arm == "null":
        est = np.random.default_rng(derive_seed(cfg.seed, "permute", seed_index)).permutation(est)
    ag = agreement(est, exact, top_k=cfg.top_k, n_perm=200, seed=derive_seed(cfg.seed, "perm-null", seed_index))
    row = {k: r[k] for k in ("n_layers", "n_heads", "n_prompts", "train_loss", "ld_clean", "acc",
                             "time_attribution_s", "time_exact_s", "cpu_attribution_s", "cpu_exact_s")}
    row.update(pearson=ag["pearson"], top_k=ag["top_k"], k=ag["k"], pearson_p=ag["pearson_p"], top_k_p=ag["top_k_p"],
               pearson_null_q95=ag["pearson_null_q95"],
               spearman=float(pd.Series(est).corr(pd.Series(exact), method="spearman")),
               speedup=r["time_exact_s"] / max(r["time_attribution_s"], 1e-12),
               cpu_speedup=r["cpu_exact_s"] / max(r["cpu_attribution_s"], 1e-12),
               est_heads=json.dumps(np.round(est, 6).tolist()), exact_heads=json.dumps(np.round(exact, 6).tolist()))
    return row


@register("attribution-patching")
class AttributionPatching(Experiment):
    """Attribution patching vs exact activation patching of every head, on IOI in a toy GPT."""

    claim = ("In a small GPT trained on the toy IOI world, attribution patching's per-head estimates agree with exact "
             "activation patching (correlation and top-k heads).")
    source = "Nanda 2023 (attribution patching); Syed et al., arXiv 2310.10348"
    Config = AttributionPatchingConfig
    time_estimate = {"smoke": "~10 s", "quick": "~4.7 min per master seed estimated (3 seeds x 1800 steps; timing pilot at master "
                              "seed 1000000, one seed, nice 10, one thread, shared machine: 94 s a seed, 0.052 s a "
                              "step including stream, prompts and both methods; pessimistic)",
                     "gpu": "~10 min on one H100 (estimated: 5 seeds x 10,000 steps of a 4-layer d256 GPT)",
                     "paper": "~2 h per seed on one H100 (estimated, as ioi-circuit's paper preset)"}
    _SRC = "Syed, Rager & Conmy, arXiv 2310.10348, sec. 3-4; Nanda 2023"
    _GATE = (Gate("learned", every_at_least(LD_GATE), arm="real",
                  stat=Stat("ld_clean", words="mean held-out clean logit difference IO - S at END, nats (a model "
                                              "that has not learned IOI has no effect to attribute)")),)
    _NULL = "the same statistic with the attribution estimates permuted across heads (one permutation per seed)"
    claims = [
        Claim("attr-pearson", f"Over all heads of a toy IOI GPT, attribution patching's estimates correlate with "
              f"exact activation patching's effects with Pearson r above {R_MIN}.", _SRC,
              "attribution patching approximates activation patching closely on IOI (Syed et al.; Nanda 2023)",
              statistic=Stat("pearson", words="per training seed, on n_prompts held-out IOI prompts, the Pearson "
                                              "correlation over the n_layers x n_heads heads of the attribution "
                                              "estimate and the exact patching effect (ABC into clean, every "
                                              "position; mean logit difference, nats)"),
              rule=ci_above(R_MIN), gates=_GATE, null=_NULL,
              null_can_meet="with only n_layers x n_heads = 12 heads (quick) a random permutation correlates by "
                            "chance with r ~ N(0, 1/sqrt(11)); a few dominant heads make such chance r larger"),
        Claim("attr-top-k", f"Attribution patching finds most of the top_k heads of largest exact effect among its "
              f"own top_k (agreement above {TOPK_MIN}).", _SRC,
              "attribution patching recovers the IOI circuit's important heads (Syed et al., sec. 4)",
              statistic=Stat("top_k", words="per training seed, the share of the top_k heads of largest |exact "
                                            "effect| among the top_k heads of largest |attribution estimate|"),
              rule=ci_above(TOPK_MIN), gates=_GATE, null=_NULL,
              null_can_meet="with top_k = 3 of 12 heads (quick) a random ranking overlaps by 0.25 on average and "
                            "fully now and then"),
    ]

    def validate(self, cfg: AttributionPatchingConfig) -> None:
        heads = cfg.model.n_layers * cfg.model.n_heads
        if cfg.top_k >= heads:
            raise ConfigError("top_k", cfg.top_k, f"1..{heads - 1} (below n_layers * n_heads)")
        if cfg.stream_tokens < cfg.seq_len + 2:
            raise ConfigError("stream_tokens", cfg.stream_tokens, f">= seq_len + 2 = {cfg.seq_len + 2}")

    def points(self, cfg: AttributionPatchingConfig) -> list[Point]:
        return cross_arms([Point("ioi")], ("real", "null"))

    def groups(self, cfg: AttributionPatchingConfig, points: list[Point]) -> list[list[Point]]:
        """Both arms of one seed are one group: one model trained, one computation."""
        by: dict[int, list[Point]] = {}
        for p in points:
            by.setdefault(p.seed_index, []).append(p)
        return list(by.values())

    def run_point(self, cfg: AttributionPatchingConfig, point: Point, ctx: PointContext) -> dict[str, Any]:
        return self.run_group(cfg, [point], [ctx])[0]

    def run_group(self, cfg: AttributionPatchingConfig, points: list[Point],
                  ctxs: list[PointContext]) -> list[dict[str, Any]]:
        ctx = next((c for p, c in zip(points, ctxs) if p.arm == "real"), ctxs[0])
        r = compute(cfg, points[0].seed_index, ctx)
        return [arm_row(cfg, r, p.arm, p.seed_index) for p in points]

    def figures(self, cfg: AttributionPatchingConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib.pyplot as plt

        ok = results[results["status"] == "ok"] if "status" in results else results
        real = ok[ok["arm"] == "real"] if "arm" in ok else ok[:0]
        if real.empty or "est_heads" not in real:
            return []
        fig, ax = plt.subplots(figsize=(4.8, 4.2))
        for k, (_, r) in enumerate(real.iterrows()):
            ax.scatter(json.loads(r["exact_heads"]), json.loads(r["est_heads"]), s=12, alpha=0.7, color=f"C{k}",
                       label=f"seed {r['seed_index']}: r = {r['pearson']:.2f}")
        lim = ax.get_xlim()
        ax.plot(lim, lim, "k:", lw=1)
        ax.set(xlabel="exact patching effect (nats)", ylabel="attribution estimate (nats)")
        ax.legend(fontsize=6)
        return [save_figure(fig, run, "attribution_vs_exact.png", "Attribution estimate vs exact activation patching "
                            "effect of every head of the toy IOI GPT (ABC into clean), per training seed; dotted: y = x",
                            claims=("attr-pearson", "attr-top-k"))]

    def report_sections(self, cfg: AttributionPatchingConfig, results: pd.DataFrame, run: RunDir) -> str:
        from lmsci.report import markdown_table

        cols = ["point", "arm", "seed_index", "train_loss", "ld_clean", "acc", "pearson", "spearman", "top_k", "k",
                "pearson_p", "time_attribution_s", "time_exact_s", "speedup", "cpu_attribution_s", "cpu_exact_s",
                "cpu_speedup"]
        return ("## Results\n\n" + markdown_table(results[[c for c in cols if c in results]])
                + toy_rows_section("attribution-patching-lm").replace("The toy experiment", "The real-model experiment"))
