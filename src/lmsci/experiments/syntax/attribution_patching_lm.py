"""Experiment ``attribution-patching-lm``: on a pretrained LM (SmolLM2-135M) doing IOI, the gradient estimate of
every attention head's activation-patching effect (attribution patching) agrees with exact activation patching.

Sources: Nanda 2023, "Attribution Patching: Activation Patching At Industrial Scale" (neelnanda.io); Syed, Rager &
Conmy, arXiv 2310.10348, sec. 3-4 (attribution patching approximates activation patching well enough to recover
circuits, e.g. IOI, at a fraction of the cost); the task: Wang et al., arXiv 2211.00593 (IOI, logit difference,
ABC corruption). Kramar et al., arXiv 2403.00745, sec. 3, document its failure modes (saturated attention).

Method. The model is fixed (nothing is trained): a "seed" is an independent prompt sample drawn with
``derive_seed(seed, "sample", seed_index)`` (:func:`lmsci.experiments.syntax._lm_common.sample_seed`), the same for
both arms. A sample holds ``n_per_template`` prompts of each of the first ``n_templates`` IOI templates (ABBA and
BABA alternating, names single tokens), each with its ABC twin (IO, S1, S2 replaced by three other names at the same
positions), as in ``ioi-circuit-lm``. The metric is the mean logit difference logit(IO) - logit(S) at END (nats).
Attribution patching (:func:`lmsci.measure.attribution_patching.attribution_patching`, one clean forward + backward
and one ABC forward) estimates, for every head, the change of the metric when the head's ABC output (every
position) is patched into the clean run; exact activation patching
(:func:`~lmsci.measure.attribution_patching.exact_patching`, ``n_layers * n_heads`` forwards) measures it, each
patched forward started at the patched layer from the clean run's residual stream and read at END only (the same
values as the full forward: :mod:`lmsci.models.resume`; the exact time is of this cheaper form). Statistics
over the ``n_layers * n_heads`` heads: the Pearson correlation of the two effect maps, and the top-k agreement (the
share of the ``top_k`` heads of largest |exact effect| among the ``top_k`` of largest |estimate|). Both methods are
timed (wall clock and CPU time of the process) and the speed-up (exact / attribution) reported.

The claims are gated on the model doing the task (every sample's clean logit difference >= 1 nat, as in
``ioi-circuit-lm``). The quick preset's prompt count is sized by cost alone (``n_layers * n_heads + 1`` forwards per
sample on one CPU thread), with no run of this experiment.

Null arm (the same ``run_point`` on arm ``null``): the same two statistics with the estimates permuted across heads
(one permutation per prompt sample, seeded by the sample): an estimate that carries no head-specific information.
Both arms of a sample share one computation (cached in the process; the arms differ only in the permutation).
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
from lmsci.experiments.syntax import _ioi_lm_measures as M
from lmsci.experiments.syntax._lm_common import check_model, load_lm, sample_seed
from lmsci.measure.attribution_patching import agreement, attribution_patching, exact_patching, head_shape
from lmsci.runs import RunDir

R_MIN = 0.5       # registered: Pearson r (attribution vs exact, over heads), 95% CI lower end above 0.5 (Cohen's "large")
TOPK_MIN = 0.5    # registered: top-k agreement, 95% CI lower end above 0.5 (most of the exact top-k found)
TOP_K = 10        # registered: k of the top-k agreement on the real model (of 270 heads)
LD_GATE = 1.0     # registered gate (as ioi-circuit-lm): every sample's clean logit difference >= 1 nat

_CACHE: dict[tuple, dict[str, Any]] = {}


class AttributionPatchingLMConfig(ExperimentConfig):
    """Configuration of ``attribution-patching-lm`` (defaults = the quick preset).

    Attributes:
        model: a zoo name (``smollm2-135m``), a local HF directory, a ``.gguf`` file, or ``tiny-random-llama``.
        n_per_template, n_templates: the prompt sample (``n_per_template * n_templates`` prompts).
        top_k: k of the top-k agreement (at most ``n_layers * n_heads``).
    """

    model: str = Field("smollm2-135m", description="zoo name, HF directory, .gguf file, or tiny-random-llama")
    n_per_template: int = Field(1, ge=1)
    n_templates: int = Field(15, ge=1, le=15)
    top_k: int = Field(TOP_K, ge=1)
    n_seeds: int = Field(3, ge=1, le=100)
    threads: int = Field(1, ge=0)

    PRESETS = {
        "smoke": {"model": "tiny-random-llama", "n_per_template": 2, "n_templates": 2, "top_k": 2, "n_seeds": 1},
        "quick": {},
        "gpu": {"n_per_template": 8, "n_seeds": 5, "threads": 0},
        "paper": {"n_per_template": 16, "n_seeds": 10, "threads": 0},
    }


def _compute(cfg: AttributionPatchingLMConfig, point: Point, ctx: PointContext) -> dict[str, Any]:
    """Attribution and exact per-head effects ``[n_layers, n_heads]`` on one prompt sample, with timings."""
    key = (cfg.model, str(ctx.device), sample_seed(cfg, point, "prompts"), cfg.n_per_template, cfg.n_templates)
    lm = load_lm(cfg.model, ctx.device)
    L, H = head_shape(lm)
    if cfg.top_k > L * H:  # before any patching (the model's head count is known once it is loaded)
        raise ConfigError("top_k", cfg.top_k, f"1..{L * H} (n_layers * n_heads of {cfg.model})")
    if key in _CACHE:
        return _CACHE[key]
    ctx.run.record_model(lm.provenance)
    rng = np.random.default_rng(sample_seed(cfg, point, "prompts"))
    p = M.make_prompts(lm.tokenizer, cfg.n_per_template, cfg.n_templates, rng).to(ctx.device)
    args = (lm, p.clean, p.abc, p.end, p.io, p.s)
    w0, c0 = time.perf_counter(), time.process_time()
    est = attribution_patching(*args).sum(-1)
    w1, c1 = time.perf_counter(), time.process_time()
    exact = exact_patching(*args, per="head")
    w2, c2 = time.perf_counter(), time.process_time()
    ld = float(M.forward(lm, p.clean, p).ld.mean())
    out = {"est": est.float().cpu().numpy(), "exact": exact.float().cpu().numpy(), "n_layers": L, "n_heads": H,
           "n_prompts": int(len(p.end)), "ld_clean": ld, "time_attribution_s": w1 - w0, "time_exact_s": w2 - w1,
           "cpu_attribution_s": c1 - c0, "cpu_exact_s": c2 - c1}
    _CACHE[key] = out
    return out


@register("attribution-patching-lm")
class AttributionPatchingLM(Experiment):
    """Attribution patching vs exact activation patching of every head, on IOI in a pretrained LM."""

    claim = ("On IOI in a pretrained LM, attribution patching's per-head estimates agree with exact activation "
             "patching (correlation and top-k heads) at a fraction of its cost.")
    source = "Nanda 2023 (attribution patching); Syed et al., arXiv 2310.10348"
    Config = AttributionPatchingLMConfig
    time_estimate = {"smoke": "~5 s",
                     "quick": "~5m CPU estimated (3 samples x 270 patched forwards of 15 IOI prompts from the "
                              "patched layer on: 0.33 CPU-s each on one thread, 2026-12-06, was 1.0 CPU-s for a "
                              "full forward; 11.7m measured before)",
                     "gpu": "~2 min on one H100 (estimated)", "paper": "~5 min on one H100 (estimated)"}
    _SRC = "Syed, Rager & Conmy, arXiv 2310.10348, sec. 3-4; Nanda 2023"
    _GATE = (Gate("does-ioi", every_at_least(LD_GATE), arm="real",
                  stat=Stat("ld_clean", words="mean clean logit difference IO - S at END over the sample, nats")),)
    _NULL = "the same statistic with the attribution estimates permuted across heads (one permutation per sample)"
    claims = [
        Claim("attr-pearson", f"Over all heads, attribution patching's estimates correlate with exact activation "
              f"patching's effects with Pearson r above {R_MIN}.", _SRC,
              "attribution patching approximates activation patching closely on IOI (Syed et al.; Nanda 2023)",
              statistic=Stat("pearson", words="per prompt sample of n_per_template x n_templates IOI prompts, the "
                                              "Pearson correlation over the n_layers x n_heads heads of the "
                                              "attribution estimate and the exact patching effect (ABC into clean, "
                                              "every position; mean logit difference, nats)"),
              rule=ci_above(R_MIN), gates=_GATE, null=_NULL,
              null_can_meet="if a few heads dominated both maps by a shared artefact of scale (e.g. a constant "
                            "offset per layer) a permuted map could still correlate; with 270 heads it should not"),
        Claim("attr-top-k", f"Attribution patching finds most of the {TOP_K} heads of largest exact effect among its "
              f"own top {TOP_K} (agreement above {TOPK_MIN}).", _SRC,
              "attribution patching recovers the IOI circuit's important heads (Syed et al., sec. 4)",
              statistic=Stat("top_k", words="per prompt sample, the share of the top_k heads of largest |exact "
                                            "effect| among the top_k heads of largest |attribution estimate|"),
              rule=ci_above(TOPK_MIN), gates=_GATE, null=_NULL,
              null_can_meet="with few heads (top_k close to n_layers x n_heads) a random ranking overlaps by chance"),
    ]

    def validate(self, cfg: AttributionPatchingLMConfig) -> None:
        check_model(cfg.model)

    def points(self, cfg: AttributionPatchingLMConfig) -> list[Point]:
        return cross_arms([Point("ioi")], ("real", "null"))

    def run_point(self, cfg: AttributionPatchingLMConfig, point: Point, ctx: PointContext) -> dict[str, Any]:
        r = _compute(cfg, point, ctx)
        est, exact = r["est"].ravel(), r["exact"].ravel()
        if point.arm == "null":
            est = np.random.default_rng(sample_seed(cfg, point, "permute")).permutation(est)
        ag = agreement(est, exact, top_k=cfg.top_k, n_perm=200, seed=sample_seed(cfg, point, "perm-null"))
        row = {k: r[k] for k in ("n_layers", "n_heads", "n_prompts", "ld_clean", "time_attribution_s",
                                 "time_exact_s", "cpu_attribution_s", "cpu_exact_s")}
        row.update(pearson=ag["pearson"], top_k=ag["top_k"], k=ag["k"], pearson_p=ag["pearson_p"],
                   top_k_p=ag["top_k_p"], pearson_null_q95=ag["pearson_null_q95"],
                   spearman=float(pd.Series(est).corr(pd.Series(exact), method="spearman")),
                   speedup=r["time_exact_s"] / max(r["time_attribution_s"], 1e-12),
                   cpu_speedup=r["cpu_exact_s"] / max(r["cpu_attribution_s"], 1e-12),
                   est_heads=json.dumps(np.round(est, 6).tolist()), exact_heads=json.dumps(np.round(exact, 6).tolist()))
        return row

    def figures(self, cfg: AttributionPatchingLMConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib.pyplot as plt

        from lmsci.report.figures import head_heatmap

        ok = results[results["status"] == "ok"] if "status" in results else results
        real = ok[ok["arm"] == "real"] if "arm" in ok else ok[:0]
        if real.empty or "est_heads" not in real:
            return []
        fig, ax = plt.subplots(figsize=(4.8, 4.2))
        for k, (_, r) in enumerate(real.iterrows()):
            ax.scatter(json.loads(r["exact_heads"]), json.loads(r["est_heads"]), s=8, alpha=0.6, color=f"C{k}",
                       label=f"sample {r['seed_index']}: r = {r['pearson']:.2f}")
        lim = ax.get_xlim()
        ax.plot(lim, lim, "k:", lw=1)
        ax.set(xlabel="exact patching effect (nats)", ylabel="attribution estimate (nats)")
        ax.legend(fontsize=6)
        figs = [save_figure(fig, run, "attribution_vs_exact.png", "Attribution estimate vs exact activation "
                            "patching effect of every head (ABC into clean), per prompt sample; dotted: y = x",
                            claims=("attr-pearson", "attr-top-k"))]
        L, H = int(real["n_layers"].iloc[0]), int(real["n_heads"].iloc[0])
        mean_exact = np.mean([json.loads(x) for x in real["exact_heads"]], axis=0).reshape(L, H)
        figs.append(save_figure(head_heatmap(mean_exact, label="exact patching effect (nats)", center=True),
                                run, "exact_heads.png", "Exact activation-patching effect per head, mean over samples"))
        return figs

    def report_sections(self, cfg: AttributionPatchingLMConfig, results: pd.DataFrame, run: RunDir) -> str:
        from lmsci.report import markdown_table

        cols = ["point", "arm", "seed_index", "n_prompts", "ld_clean", "pearson", "spearman", "top_k", "k",
                "pearson_p", "time_attribution_s", "time_exact_s", "speedup", "cpu_attribution_s", "cpu_exact_s",
                "cpu_speedup"]
        return "## Results\n\n" + markdown_table(results[[c for c in cols if c in results]])
