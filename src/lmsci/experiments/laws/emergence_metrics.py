"""``emergence-metrics``: "emergent" exact match and smooth per-token loss on the same models over compute.

Sources: Schaeffer, Miranda & Koyejo, "Are Emergent Abilities of Large Language Models a Mirage?", arXiv
2304.15004, Section 2 (a discontinuous metric, exact match of an L-token answer ~ p^L, makes a smooth per-token
improvement look sharp; a continuous metric on the same outputs changes smoothly); Wei et al., "Emergent Abilities
of Large Language Models", arXiv 2206.07682 (the sharp exact-match curves); seed 000, "Downstream Performance Scales
with Training Compute" (a sigmoid law over compute; "Potential Cause: non-linearity nature of metric functions").

Method: a family of small GPTs (:mod:`lmsci.models.gpt`, ``n_layers`` layers, widths ``widths``) trained for the
same number of steps on multi-digit addition (:mod:`lmsci.worlds.addition`: ``digits``-digit operands, the
``digits + 1``-token sum written least significant first); training compute C = 6 x parameters (all) x training
tokens. Each model is scored on the same ``n_eval`` fresh problems by :func:`lmsci.measure.emergence.answer_metrics`
(greedy decoding after the prompt): exact match of the whole answer (discontinuous), and the per-token negative
log-likelihood of the answer in nats (teacher forced; continuous) and the token edit distance (reported). Per
training seed the two laws of :mod:`lmsci.laws.emergence` are fitted over the family (``compare_metric_laws``:
the sigmoid in log compute ``logistic_c`` against the power law ``power_c``, AIC on every point, and both fitted on
all but the two largest-compute models to predict those two).

Arms: ``multi`` (the multi-token answer) and the null arm ``single``: the same prompts and models, trained and scored
on a one-token answer (the sum's units digit), where exact match is the greedy accuracy of one token and so
carries no p^L sharpening; both arms are judged by the same statistic.

Claims (decided at quick, gpu and paper; >= 3 seeds; gpu: 5 digits, 9 widths x 2500 steps, within 10 minutes of
one H100):

* ``exact-match-sharp``: per seed, AIC(power law) - AIC(sigmoid in log compute) of the exact match over the family;
  the 95% CI across seeds lies above ``AIC_MARGIN`` (10: Burnham & Anderson's "essentially no support" for the
  worse model).
* ``continuous-smooth``: per seed, the held-out RMSE of the power law fitted to the per-token NLL of all but the two
  largest-compute models, at those two, relative to their mean NLL; the 95% CI lies below ``HELDOUT_BOUND``.
  Its null arm (single-token NLL) is expected to meet the rule as well (a per-token loss is smooth in either task),
  so this claim is inconclusive whenever it holds on both: it is recorded for the value, the contrast is in
  ``exact-match-sharp``.

The downstream sigmoid law of seed 000 is fitted on master seed's first training seed as ``logistic_c`` (the
sigmoid in log compute; seed 000's form in N and D needs a grid over both, this family varies N only) with a
bootstrap interval, and its prediction of the two largest-compute models is reported (not a claim).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from lmsci.claims import Claim, Stat, ci_above, ci_below
from lmsci.config import ExperimentConfig
from lmsci.contract import Experiment, Figure, Point, PointContext, cross_arms, save_figure
from lmsci.errors import ConfigError, DataError
from lmsci.experiments.registry import register
from lmsci.laws.emergence import compare_metric_laws
from lmsci.measure.emergence import answer_metrics
from lmsci.models.gpt import GPT, GPTSpec
from lmsci.runs import RunDir, derive_seed
from lmsci.train.adaptor import train_lm
from lmsci.train.trainer import TrainSpec
from lmsci.worlds.addition import AdditionWorld

AIC_MARGIN = 10.0
HELDOUT_BOUND = 0.2
N_HELDOUT = 2
N_BOOT = 50
ARMS = ("multi", "single")


class EmergenceMetricsConfig(ExperimentConfig):
    """Configuration of ``emergence-metrics`` (defaults = quick preset).

    Attributes:
        digits: operand digits of the addition task (the multi-token answer has ``digits + 1`` tokens).
        widths: d_model of each model of the family (>= 7: the sigmoid needs 5 points besides the 2 held out).
        model: the rest of the architecture (its ``d_model`` is replaced by each width).
        train: optimizer and schedule (the same for every model).
        n_eval: fresh evaluation problems (the same for every model of a seed).
    """

    digits: int = Field(3, ge=1, le=9)
    widths: list[int] = [8, 12, 16, 24, 32, 48, 64]
    model: GPTSpec = GPTSpec(n_layers=2, n_heads=2, pos="learned")
    train: TrainSpec = TrainSpec(steps=600, batch_size=64, lr=3e-3, warmup_frac=0.05, weight_decay=0.0)
    n_eval: int = Field(512, ge=16)
    threads: int = Field(1, ge=0)
    n_seeds: int = Field(3, ge=1, le=100, description="training seeds per point (the claims need 3)")

    PRESETS = {
        "smoke": {"widths": [2, 4, 6, 8, 10, 12, 14], "train.steps": 20, "n_eval": 32, "n_seeds": 3,
                  "model.n_heads": 2, "model.n_layers": 1, "digits": 2},
        "quick": {},
        "gpu": {"digits": 5, "widths": [16, 24, 32, 48, 64, 96, 128, 192, 256], "model.n_layers": 4,
                "model.n_heads": 4, "train": {"steps": 2500, "batch_size": 256}, "n_eval": 4096, "threads": 0},
        "paper": {"digits": 8, "widths": [32, 48, 64, 96, 128, 192, 256, 384, 512], "model.n_layers": 6,
                  "model.n_heads": 8, "train": {"steps": 50_000, "batch_size": 256}, "n_eval": 8192, "threads": 0},
    }


def _per_seed(rows: pd.DataFrame, metric: str, what: str) -> pd.Series:
    """Per seed, a number from :func:`compare_metric_laws` on ``metric`` over the seed's models (nan when too few
    models finished): ``what`` = ``"delta_aic"`` or ``"power_heldout_rel"``."""
    out = {}
    for k, g in rows.groupby("seed_index"):
        g = g.sort_values("compute")
        try:
            r = compare_metric_laws(g["compute"], g[metric], n_heldout=N_HELDOUT, n_boot=N_BOOT, seed=int(k))
        except DataError:
            out[k] = np.nan
            continue
        if what == "delta_aic":
            out[k] = float(r["delta_aic"])
        else:
            y = g[metric].to_numpy()[-N_HELDOUT:]
            out[k] = float(r["laws"]["power_c"]["rmse_heldout"] / max(abs(float(np.mean(y))), 1e-12))
    return pd.Series(out, dtype=float)


def em_delta_aic(rows: pd.DataFrame) -> pd.Series:
    """Per seed: AIC(power law) - AIC(sigmoid in log compute) of exact match over the family."""
    return _per_seed(rows, "exact_match", "delta_aic")


def nll_heldout_rel(rows: pd.DataFrame) -> pd.Series:
    """Per seed: the power law's held-out RMSE on the per-token NLL of the two largest models over their mean."""
    return _per_seed(rows, "token_nll", "power_heldout_rel")


_SRC = "Schaeffer, Miranda & Koyejo, arXiv 2304.15004, Section 2; Wei et al., arXiv 2206.07682; seed 000"
_NULL = ("the single-token task: the same prompts and model family trained and scored on a one-token answer (the "
         "sum's units digit), where exact match is one token's greedy accuracy (no p^L); same statistic")

CLAIMS = [
    Claim("exact-match-sharp", f"Exact match of the multi-token answer over compute is sharp: a sigmoid in log compute "
          f"fits it better than a power law by more than {AIC_MARGIN:g} AIC.", _SRC,
          "exact-match curves look emergent (sharp) over scale (Wei et al.); Schaeffer et al.: an artefact of the "
          "metric's non-linearity",
          statistic=Stat(fn=em_delta_aic, words="per seed: AIC(power law E + A C^-alpha) - AIC(sigmoid b + a / (1 + "
                         "exp(-k (ln C - m)))) of exact match (share of fresh problems answered exactly, greedy) over "
                         "the model family, C = 6 x params x training tokens"),
          rule=ci_above(AIC_MARGIN), null=_NULL,
          null_can_meet="yes: if one-token accuracy itself jumps over the family (a genuinely abrupt ability), the "
                        "single-token exact match is sharp too", arms=ARMS),
    Claim("continuous-smooth", f"The per-token NLL of the same answers follows a power law in compute: fitted on all "
          f"but the two largest models, it predicts them within {HELDOUT_BOUND:g} relative RMSE.", _SRC,
          "continuous metrics change smoothly and predictably with scale (Schaeffer et al., Fig. 3)",
          statistic=Stat(fn=nll_heldout_rel, words="per seed: RMSE of the power law E + A C^-alpha fitted to per-token "
                         "answer NLL (nats, teacher forced) of all but the two largest-compute models, at those two, "
                         "over their mean NLL"),
          rule=ci_below(HELDOUT_BOUND), null=_NULL,
          null_can_meet="yes, expected: a per-token loss is smooth on a one-token answer too (the claim is then "
                        "inconclusive; the contrast between the metrics is exact-match-sharp)", arms=ARMS),
]


@register("emergence-metrics")
class EmergenceMetrics(Experiment):
    """Exact match looks emergent while per-token NLL follows a power law, on the same models (arXiv 2304.15004)."""

    claim = ("Exact match of a multi-token answer is sharp over compute (a sigmoid in log compute) while the "
             "per-token log-likelihood of the same models follows a smooth power law.")
    source = _SRC
    Config = EmergenceMetricsConfig
    claims = CLAIMS
    time_estimate = {"smoke": "~15 s", "quick": "~5 min CPU (estimated from 11 ms per step averaged over widths 8 and 64: "
                                                       "42 models x 600 steps, one thread)",
                     "gpu": "~8 min on one H100 (54 models x 2500 steps: 452 s of training by "
                            "lmsci.train.estimate, ~3 ms per step, plus host sampling and evaluation; not measured: "
                            "no GPU in the session; S52: was ~30 min at 10k steps)",
                     "paper": "~4 h on one H100 (estimated: 54 models x 50k steps at ~5 ms per step)"}

    def validate(self, cfg: EmergenceMetricsConfig) -> None:
        if len(cfg.widths) < 5 + N_HELDOUT or len(set(cfg.widths)) != len(cfg.widths):
            raise ConfigError("widths", cfg.widths, f">= {5 + N_HELDOUT} distinct widths (the sigmoid needs 5 fitted "
                              f"points besides the {N_HELDOUT} held out)")
        bad = [w for w in cfg.widths if w < 1 or w % cfg.model.n_heads]
        if bad:
            raise ConfigError("widths", cfg.widths, f"positive multiples of model.n_heads = {cfg.model.n_heads}")

    def points(self, cfg: EmergenceMetricsConfig) -> list[Point]:
        return cross_arms([Point(f"d{w}", {"d_model": w}) for w in cfg.widths], ARMS)

    def run_point(self, cfg: EmergenceMetricsConfig, point: Point, ctx: PointContext) -> dict:
        world = AdditionWorld(cfg.digits, point.arm)
        model = GPT(cfg.model.gpt_config(world.vocab_size, world.seq_len, d_model=int(point.params["d_model"])),
                    seed=derive_seed(ctx.seed, "init"))
        res = train_lm(model, lambda n, gen: world.sample(n, gen), cfg.train, ctx)
        # one evaluation set per training seed and arm (the same for every model of the family)
        seed_index = point.seed_index or 0
        gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "eval", point.arm, seed_index))
        prompts, answers = world.split(world.sample(cfg.n_eval, gen))
        model.eval()
        m = answer_metrics(model, prompts, answers, device=ctx.device)["mean"]
        params = int(model.num_params())
        tokens = cfg.train.steps * cfg.train.batch_size * (world.seq_len - 1)
        return {"d_model": int(point.params["d_model"]), "params": params, "tokens": tokens,
                "compute": 6.0 * params * tokens, "answer_len": world.answer_len,
                "exact_match": m["exact_match"], "token_nll": -m["token_logprob"],
                "token_edit_distance": m["token_edit_distance"], "token_accuracy": m["token_accuracy"],
                "p_to_the_L": m["token_accuracy"] ** world.answer_len,
                "final_loss": float(res.final.get("loss", np.nan))}

    def figures(self, cfg: EmergenceMetricsConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        from lmsci.report.figures import _plt

        plt = _plt()
        fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
        for (arm, k), g in results.groupby(["arm", "seed_index"]):
            g = g.sort_values("compute")
            ls = "o-" if arm == "multi" else "s--"
            for a, col in zip(ax, ("exact_match", "token_nll", "token_edit_distance")):
                a.plot(g["compute"], g[col], ls, ms=3, lw=1, label=f"{arm}, seed {k}")
        for a, lab in zip(ax, ("exact match (share)", "per-token answer NLL (nats)", "token edit distance")):
            a.set_xscale("log")
            a.set_xlabel("training compute C = 6 N D (FLOPs)")
            a.set_ylabel(lab)
        ax[1].set_yscale("log")
        ax[0].legend(fontsize=6)
        return [save_figure(fig, run, "metrics_over_compute.png", "The same models scored by exact match "
                            "(discontinuous), per-token NLL and token edit distance (continuous), over training "
                            "compute; solid: multi-token answer, dashed: single-token answer (the null arm)",
                            claims=("exact-match-sharp", "continuous-smooth"))]

    def report_sections(self, cfg: EmergenceMetricsConfig, results: pd.DataFrame, run: RunDir) -> str:
        lines = ["## Seed 000's downstream sigmoid law (logistic in log compute), first training seed", ""]
        for arm, g in results[results.get("seed_index", 0) == 0].groupby("arm"):
            g = g.sort_values("compute")
            try:
                r = compare_metric_laws(g["compute"], g["exact_match"], n_heldout=N_HELDOUT, n_boot=200, seed=0)
            except DataError as e:
                lines.append(f"- {arm}: not fitted ({e})")
                continue
            lg = r["laws"]["logistic_c"]
            h = lg["heldout"]
            pred = "; ".join(f"C = {c:.3g}: measured {y:.3f}, predicted {p:.3f} (90% interval {lo:.3f} - {hi:.3f})"
                             for c, y, p, lo, hi in zip(h["compute"], h["y"], h["pred"], h["lo"], h["hi"]))
            params = ", ".join(f"{k} = {v:.3g}" for k, v in lg["params"].items())
            lines.append(f"- {arm}: fit on all models: {params}; RMSE {lg['rmse']:.4f}; delta AIC (power - sigmoid) "
                         f"{r['delta_aic']:.1f}. Fitted without the two largest: {pred}.")
        return "\n".join(lines)
