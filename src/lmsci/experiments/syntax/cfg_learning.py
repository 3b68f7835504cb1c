"""Experiment ``cfg-learning``: a GPT trained on strings of a layered random CFG generates valid strings; position
variants compared.

Source: Allen-Zhu & Li, "Physics of Language Models: Part 1, Learning Hierarchical Language Structures",
arXiv 2305.13673 (TMLR 2025), sec. 3 (generation accuracy "cut0 / cut50", temperature 1, near 100% for
cfg3b-f with GPT_rel / GPT_rot; the absolute-position GPT weaker on the hardest grammars; GPT_pos and GPT_uni
"surprisingly effective"), KL to the true next-token distribution (``demo2_advanced_dp.py``). Spec:
physics_of_lms.md sec. 1 (grammar family, training recipe, variants, metrics, pitfalls).

Protocol. The grammar (:mod:`lmsci.worlds.cfg`, :func:`~lmsci.worlds.cfg_grammars.get_grammar`) is ``grammar``: a
published table (``cfg3b`` .. ``cfg3k``, the paper's own grammars; ``grammar_seed`` unused), a random draw of the
cfg3 generator (``cfg3f-draw:SEED``), lmsci's small draws ``cfg3b-small`` / ``cfg3f-small`` (drawn with
``grammar_seed``) or an official ``cfg3*.json`` path. The model is
lmsci's GPT (:mod:`lmsci.models.gpt`) with ``pos`` = ``rope`` (GPT_rot), ``learned`` (GPT), ``relative`` (T5
bias, the stand-in for the paper's DeBERTa-style GPT_rel), ``uni`` (GPT_uni) or ``posonly`` (GPT_pos: attention
logits from the causal distance only). Training data are always fresh samples: each window is ``BOS`` followed by
EOS-separated strings (packing as physics_of_lms.md sec. 1.3 recommends), next-token loss on every target,
AdamW (betas 0.9/0.98, weight decay 0.1; warmup + cosine decay). Measurements after training, on fresh samples:

* generation accuracy from BOS (``cut0``) and from the first ``cut`` tokens of a fresh valid string, sampling at
  temperature 1 until EOS (at most the grammar's longest string, capped by the context); a string is correct
  when the DP accepts it (:meth:`CFG.member`);
* mean per-position KL(true || model) over ``n_kl`` strings (every prefix, EOS position included, epsilon
  1e-5), with the sanity value of sec. 1.5 computed on the same strings (truth except EOS with probability 1
  at the end; the paper's demo gives 0.015178 on one cfg3f sample);
* test NLL per token of the model and of the grammar itself (``-log P(w) / (n + 1)``, the entropy floor).

Arms (issue 44): ``real`` (the trained model of every variant; point ids are the variants'), ``null`` (the same
variant at its random initialisation, seed ``rand-init``, measured the same way with no training: ids ``null-<variant>``,
paired with the real arm by seed, so the same prompts), ``shuffled`` (GPT_rot, point ``shuffled-rope``, with the real
GPT_rot's initialisation and data stream, trained on the same strings with the tokens of each string in a random
order: tokens, lengths and EOS kept, order removed) and, where absolute positions are run, ``rope2`` (a second
GPT_rot, point ``rope-null`` with its own seeds). The null arm of ``gen-accuracy`` is ``shuffled`` (a random-init
model could not meet its rule even if the DP accepted any order; a model of each string's bag of tokens could, were
the grammar's acceptance blind to order); of ``uni-effective`` / ``pos-effective`` (since 2026-12-06, issue 44 item 4;
before, the random-init GPT_uni / GPT_pos, ~0 while the gate holds GPT_rot >= 0.9) also ``shuffled``: its GPT_rot in
GPT_uni's / GPT_pos's place over the trained GPT_rot, the same ratio (:func:`uni_or_shuffled_rot_acc`,
:func:`pos_or_shuffled_rot_acc`; no extra training). The ``null`` arm (random init) is a contrast in the figure,
no claim's null. ``rot-beats-abs``
reads ``rope2``: its second GPT_rot takes GPT's place in the paired gap (two GPT_rot differ by seed noise only, so the
rule must not find a gap). The claims engine judges every claim; none is judged by hand.

Presets (S52): the claims are decided at quick (``gen-accuracy``, cfg3b-small) and paper. Quick trains 2000 steps
(S54, issue 46: 3000 before; within 15 minutes of one core per master seed). The gpu preset is a
values-only run that fits 10 minutes of one H100: GPT_rot and its shuffled arm on cfg3f at 3000 steps, one seed
(the four variants, their second GPT_rot and 3 seeds at that scale are 18 trainings, ~80 minutes).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, ci_above, mean_at_least
from lmsci.claims.engine import finished
from lmsci.contract import Experiment, Figure, Point, PointContext, save_figure
from lmsci.experiments.registry import register
from lmsci.experiments.syntax._common import (VARIANT_NAMES, CFGModelConfig, build_grammar, make_model, train_model,
                                             validate_model_config)
from lmsci.measure.cfg_lm import generate_strings, generation_accuracy, mean_kl
from lmsci.models.gpt import GPT
from lmsci.runs import RunDir, derive_seed
from lmsci.worlds.cfg import CFG

GEN_ACC_MIN = 0.9          # registered: generation accuracy of GPT_rot at least 0.9
UNI_RATIO_MIN = 0.8        # registered: GPT_uni reaches at least 0.8 of GPT_rot's accuracy

#: the trained GPT_rot's generation accuracy per seed, read from the real arm whatever arm is judged
ROT_ACC = Stat("acc", where={"variant": "rope"}, arm="real", words="trained GPT_rot generation accuracy")
ROT_LEARNED = Gate("rot-learned", mean_at_least(GEN_ACC_MIN), arm="real",
                   stat=Stat("acc", where={"variant": "rope"},
                             words="GPT_rot's generation accuracy (the reference learned the grammar)"))


def rot_rival_acc(rows: pd.DataFrame) -> pd.Series:
    """Per seed, the generation accuracy of the model set against the trained GPT_rot in ``rot-beats-abs``: GPT
    (absolute, variant ``learned``) on the real arm, the second GPT_rot (variant ``rope``) on the ``rope2`` arm."""
    if rows.empty or "arm" not in rows:
        return pd.Series(dtype=float)
    real = rows["arm"] == "real"
    keep = (real & (rows["variant"] == "learned")) | (~real & (rows["variant"] == "rope"))
    return rows[keep].groupby("seed_index")["acc"].mean()


def uni_or_shuffled_rot_acc(rows: pd.DataFrame) -> pd.Series:
    """Per seed, the numerator of ``uni-effective``'s ratio on one arm's rows: GPT_uni's generation accuracy
    (variant ``uni``) on the real arm, the order-shuffled GPT_rot's (variant ``rope``) on the ``shuffled`` arm (the
    claim's null arm since 2026-12-06, issue 44 item 4)."""
    if rows.empty or "arm" not in rows:
        return pd.Series(dtype=float)
    keep = ((rows["arm"] == "real") & (rows["variant"] == "uni")) | (
        (rows["arm"] == "shuffled") & (rows["variant"] == "rope"))
    return rows[keep].groupby("seed_index")["acc"].mean()


def pos_or_shuffled_rot_acc(rows: pd.DataFrame) -> pd.Series:
    """Per seed, the numerator of ``pos-effective``'s ratio on one arm's rows: GPT_pos's generation accuracy
    (variant ``posonly``) on the real arm, the order-shuffled GPT_rot's (variant ``rope``) on the ``shuffled`` arm
    (the claim's null arm since 2026-12-06, issue 44 item 4)."""
    if rows.empty or "arm" not in rows:
        return pd.Series(dtype=float)
    keep = ((rows["arm"] == "real") & (rows["variant"] == "posonly")) | (
        (rows["arm"] == "shuffled") & (rows["variant"] == "rope"))
    return rows[keep].groupby("seed_index")["acc"].mean()


class CFGLearningConfig(CFGModelConfig):
    """Configuration of ``cfg-learning``."""

    cut: int = Field(10, ge=0, description="prefix length for the second generation accuracy (paper: 50)")
    n_gen: int = Field(200, ge=1, description="generations per accuracy (from BOS and from the cut prefix)")
    n_kl: int = Field(40, ge=1, description="fresh strings for KL(true || model) and the NLLs")

    PRESETS = {
        "smoke": {"train.steps": 4, "train.batch_size": 4, "train.warmup_steps": 1, "model.n_layers": 1,
                  "model.d_model": 16, "model.n_heads": 2, "seq_len": 32, "n_gen": 6, "n_kl": 2, "n_seeds": 1,
                  "variants": ["rope", "posonly"]},
        # quick (S54, issue 46 item 3): 2000 steps instead of the shared default's 3000, so that quick fits 15 minutes of
        # one core per master seed (6 trainings); a helper's probe at master seed 0 (seen, disclosed in CLAIMS.md) gave
        # GPT_rot 0.97 at 2000 steps against the rule's 0.9 (0.82 at 1500)
        "quick": {"train.steps": 2000},
        # gpu (S52): values only, within 10 minutes of one H100: GPT_rot and its shuffled arm on cfg3f, one seed
        "gpu": {"grammar": "cfg3f", "variants": ["rope"], "n_seeds": 1, "model.n_layers": 6,
                "model.n_heads": 8, "model.d_model": 256, "seq_len": 512, "train.batch_size": 64, "train.steps": 3000,
                "train.lr": 1e-3, "train.warmup_steps": 200, "cut": 50, "n_gen": 200, "n_kl": 2, "threads": 0},
        "paper": {"grammar": "cfg3f", "variants": ["rope", "learned", "relative", "uni", "posonly"],
                  "model.n_layers": 12, "model.n_heads": 12, "model.d_model": 768, "seq_len": 512,
                  "train.batch_size": 96, "train.steps": 100_000, "train.lr": 3e-4, "train.warmup_steps": 1000,
                  "cut": 50, "n_gen": 2000, "n_kl": 100, "threads": 0},
    }


@torch.no_grad()
def nll_per_token(model: GPT, g: CFG, strings: list[np.ndarray], device: str) -> tuple[float, float]:
    """(model NLL, grammar NLL) in nats per token over ``BOS + w + EOS`` targets (``n + 1`` per string)."""
    tot_m, tot_g, n = 0.0, 0.0, 0
    for s in strings:
        ids = torch.tensor([[g.bos, *s.tolist(), g.eos]], device=device)
        logits = model(ids[:, :-1])[0].double()
        tot_m += float(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum"))
        tot_g += -g.string_logprob(s)
        n += len(s) + 1
    return tot_m / n, tot_g / n


@register("cfg-learning")
class CFGLearning(Experiment):
    """GPT generation accuracy and KL on a layered random CFG; position variants (Physics of LMs Part 1)."""

    claim = ("A GPT with rotary positions trained on samples of a layered random CFG generates strings the grammar "
             "accepts (>= 90%), from BOS and from a prefix; absolute positions are worse on the hard grammar; "
             "uniform attention (GPT_uni) is surprisingly effective.")
    source = "Allen-Zhu & Li, Physics of Language Models Part 1, arXiv 2305.13673, sec. 3 (Fig. 4), sec. 5"
    Config = CFGLearningConfig
    time_estimate = {"smoke": "~25 s",
                     "quick": "10.4 min measured with --backend ray on the 2 cores of the AMD EPYC host (S56, master "
                              "seed 9: its 6 trainings, one group per core; --backend processes places them the same "
                              "way; the same accuracies as one after another); 20.9 min measured one after another at "
                              "one thread (S57 whole-suite run, master seed 10); "
                              "~14 min of one core per master seed estimated (S54): 6 trainings (3 seeds of GPT_rot and "
                              "of the shuffled arm's GPT_rot) x 2000 steps at ~66 ms per step (benchmarks/results/"
                              "cfg_phases_2026-12-06.md) ~13.2 min, plus generation, DP and KL ~0.5 min; 22.8 min "
                              "measured at 3000 steps (S51)",
                     "gpu": "~8 min on one H100, values only (S52; was ~37 min estimated, ~80 min by the estimate "
                            "below with 18 trainings): GPT_rot and the shuffled arm's GPT_rot, 3000 steps of a 6-layer "
                            "d256 GPT, batch 64 x 512 on cfg3f, one seed: 2 x (146 s by lmsci.train.estimate + 36 s "
                            "of host sampling, 12 ms per batch in a CPU pilot) + evaluation (~28 ms per DP membership "
                            "test in the pilot, 400 per trained model; the exact KL DP ~5-10 s per cfg3f string, "
                            "n_kl = 2) + the random-init point; not measured: no GPU in the session",
                     "paper": "~1 day per model on 4xA100 (GPT2-small, batch 96 x 512, 100k steps; physics_of_lms.md "
                              "sec. 1.3)"}

    _SRC = "Allen-Zhu & Li, arXiv 2305.13673, sec. 3 and Fig. 4 (generation accuracy cut0/cut50)"
    claims = [
        Claim(
            "gen-accuracy",
            "A GPT with rotary positions (GPT_rot) trained on fresh samples of a layered random CFG generates, at "
            "temperature 1, strings the grammar accepts at least 90% of the time, from BOS and from a prefix of a "
            "valid string.",
            _SRC,
            "near 100% (cut0 and cut50) for cfg3b-f with GPT_rel/GPT_rot; KL sanity value 0.015178 (sec. 1.5)",
            statistic=Stat("acc", where={"variant": "rope"},
                           words="the lower of the two generation accuracies of GPT_rot (from BOS; from the first "
                                 "`cut` tokens of a fresh valid string), n_gen samples each, judged by the exact DP "
                                 "(fraction)"),
            rule=mean_at_least(GEN_ACC_MIN),
            presets=("quick", "paper"),
            null="the same generation accuracy (the lower of from-BOS and from-prefix, same n_gen, same prompts) of a "
                 "GPT_rot with the same initialisation, data stream and training, trained on the grammar's strings "
                 "with the tokens of each string shuffled (arm shuffled): it learns each string's tokens and length, "
                 "not their order",
            null_can_meet="were the grammar's acceptance blind to token order (a language closed under permutation, "
                          "or one accepting almost every string of its alphabet and lengths), a model of each "
                          "string's bag of tokens would be accepted as often as the real one and meet the rule; it "
                          "fails only if the rule needs the order the grammar imposes",
            arms=("real", "shuffled"),
        ),
        Claim(
            "rot-beats-abs",
            "On the hard grammar (cfg3f), rotary positions give a higher generation accuracy than learned absolute "
            "positions.",
            _SRC + " (GPT is weaker than GPT_rot/GPT_rel on cfg3g/cfg3f)",
            "GPT (absolute) below GPT_rot on cfg3f (exact numbers to be read off Fig. 4)",
            statistic=Stat("acc", where={"variant": "rope"}, arm="real", minus=Stat(fn=rot_rival_acc),
                           words="GPT_rot minus GPT (absolute) generation accuracy (the lower of cut0/cut), paired by "
                                 "seed index (fraction)"),
            rule=ci_above(0.0),
            presets=("paper",),
            null="the same paired gap with a second GPT_rot (point rope-null, its own seeds) in place of GPT "
                 "(absolute): two GPT_rot differ by seed noise only, so the gap must not appear",
            null_can_meet="only by chance: the paired gap between two GPT_rot trained from different seeds has mean 0 "
                          "and its 95% CI lies above 0 in about 1 run in 40, more often when some seeds learn the "
                          "grammar and others do not and the failures fall unevenly on the two sides",
            arms=("real", "rope2"),
        ),
        Claim(
            "uni-effective",
            "GPT_uni (fixed uniform attention over windows 1, 3, 7, ... per head) is surprisingly effective: it reaches "
            "at least 0.8 of GPT_rot's generation accuracy on the hard grammar.",
            _SRC + " and sec. 5 (GPT_pos / GPT_uni 'surprisingly effective')",
            "GPT_uni close to GPT_rot on cfg3b-f",
            statistic=Stat(fn=uni_or_shuffled_rot_acc, over=ROT_ACC,
                           words="GPT_uni generation accuracy divided by GPT_rot's (the lower of cut0/cut, paired by "
                                 "seed index); on the shuffled arm the order-shuffled GPT_rot's in GPT_uni's place"),
            rule=mean_at_least(UNI_RATIO_MIN),
            gates=(ROT_LEARNED,),
            presets=("paper",),
            null="the same ratio and rule with the GPT_rot of arm shuffled (same initialisation, data stream and "
                 "training as the real GPT_rot, on the grammar's strings with the tokens of each string shuffled: it "
                 "learns each string's tokens and length, not their order; already trained for gen-accuracy) in "
                 "GPT_uni's place, over the trained GPT_rot, paired by seed (until 2026-12-06 a random-init GPT_uni)",
            null_can_meet="yes, where generation accuracy does not need the order the grammar imposes: were the "
                          "grammar's acceptance blind to token order, or the trained GPT_rot itself little better "
                          "than a bag-of-tokens model, the order-shuffled GPT_rot would reach 0.8 of the trained "
                          "GPT_rot's accuracy and meet the rule, so the ratio would not show that GPT_uni learned the "
                          "grammar's structure; the claim says so only if this null fails",
            arms=("real", "shuffled"),
        ),
        Claim(
            "pos-effective",
            "GPT_pos (attention weights from the relative position only, no query-key product) is surprisingly "
            "effective: it reaches at least 0.8 of GPT_rot's generation accuracy on the hard grammar.",
            _SRC + " and sec. 5 (GPT_pos / GPT_uni 'surprisingly effective')",
            "GPT_pos close to GPT_rot on cfg3b-f",
            statistic=Stat(fn=pos_or_shuffled_rot_acc, over=ROT_ACC,
                           words="GPT_pos generation accuracy divided by GPT_rot's (the lower of cut0/cut, paired by "
                                 "seed index); on the shuffled arm the order-shuffled GPT_rot's in GPT_pos's place"),
            rule=mean_at_least(UNI_RATIO_MIN),
            gates=(ROT_LEARNED,),
            presets=("paper",),
            null="the same ratio and rule with the GPT_rot of arm shuffled (same initialisation, data stream and "
                 "training as the real GPT_rot, on the grammar's strings with the tokens of each string shuffled: it "
                 "learns each string's tokens and length, not their order; already trained for gen-accuracy) in "
                 "GPT_pos's place, over the trained GPT_rot, paired by seed (until 2026-12-06 a random-init GPT_pos)",
            null_can_meet="yes, where generation accuracy does not need the order the grammar imposes: were the "
                          "grammar's acceptance blind to token order, or the trained GPT_rot itself little better "
                          "than a bag-of-tokens model, the order-shuffled GPT_rot would reach 0.8 of the trained "
                          "GPT_rot's accuracy and meet the rule, so the ratio would not show that GPT_pos learned the "
                          "grammar's structure; the claim says so only if this null fails",
            arms=("real", "shuffled"),
        ),
    ]

    def validate(self, cfg: CFGLearningConfig) -> None:
        validate_model_config(cfg)

    def points(self, cfg: CFGLearningConfig) -> list[Point]:
        pts = [Point(v, {"variant": v}, arm="real") for v in cfg.variants]
        pts += [Point(f"null-{v}", {"variant": v}, arm="null") for v in cfg.variants]  # random init, paired by seed
        if "rope" in cfg.variants:  # gen-accuracy's null arm: GPT_rot trained on order-shuffled strings
            pts.append(Point("shuffled-rope", {"variant": "rope"}, arm="shuffled"))
        if "rope" in cfg.variants and "learned" in cfg.variants:  # rot-beats-abs's null arm: a second GPT_rot
            pts.append(Point("rope-null", {"variant": "rope"}, arm="rope2"))
        return pts

    def run_point(self, cfg: CFGLearningConfig, point: Point, ctx: PointContext) -> dict[str, Any]:
        g = build_grammar(cfg)
        variant = point.params["variant"]
        if point.arm == "null":  # the variant at its random initialisation: nothing trained
            model, final = make_model(cfg, g, variant, derive_seed(ctx.seed, "rand-init")).to(ctx.device).eval(), {}
        else:
            model, final = train_model(cfg, g, variant, ctx, shuffle_within=point.arm == "shuffled")
        lo, hi = g.length_range()
        max_len = min(hi, cfg.seq_len - 2)
        rng = np.random.default_rng(derive_seed(ctx.seed, "eval"))
        pref = []
        while len(pref) < cfg.n_gen:
            s = g.sample(rng).tokens
            if len(s) > cfg.cut:
                pref.append(s[: cfg.cut])
        from_bos = generate_strings(model, g, [[]] * cfg.n_gen, max_len=max_len, seed=derive_seed(ctx.seed, "gen0"),
                                    device=ctx.device)
        from_cut = generate_strings(model, g, pref, max_len=max_len, seed=derive_seed(ctx.seed, "gencut"),
                                    device=ctx.device)
        acc0, acc_cut = generation_accuracy(g, from_bos), generation_accuracy(g, from_cut)
        gen_ok = [s for s in from_bos if s is not None]
        row = {"variant": variant, "grammar": g.name, "acc_bos": acc0, "acc_cut": acc_cut, "acc": min(acc0, acc_cut),
               "train_loss": float(final.get("loss", float("nan"))),
               "distinct_frac": len({tuple(s) for s in gen_ok}) / max(len(gen_ok), 1),
               "mean_gen_len": float(np.mean([len(s) for s in gen_ok])) if gen_ok else float("nan")}
        if point.arm == "null":  # the claims read the generation accuracies only; the exact KL DP is costly
            return row
        kl_strings = [g.sample(rng).tokens for _ in range(cfg.n_kl)]
        kl_strings = [s for s in kl_strings if len(s) + 1 <= cfg.seq_len] or kl_strings[:1]
        kl = mean_kl(model, g, kl_strings, ctx.device)
        nll_m, nll_g = nll_per_token(model, g, kl_strings, ctx.device)
        return {**row, "kl": kl["kl"], "kl_sanity": kl["kl_sanity"], "kl_positions": kl["n_positions"],
                "nll_model": nll_m, "nll_grammar": nll_g}

    # no verdicts method: the claims engine judges every claim from its Stat and Rule, on both arms

    @staticmethod
    def _by_variant(results: pd.DataFrame, arm: str = "real") -> dict[str, pd.DataFrame]:
        """The finished rows per variant of one arm, sorted by seed."""
        ok = finished(results)
        if "arm" not in ok or "variant" not in ok:
            return {}
        ok = ok[ok["arm"] == arm]
        return {v: sub.sort_values("seed_index") for v, sub in ok.groupby("variant")} if len(ok) else {}

    def figures(self, cfg: CFGLearningConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib.pyplot as plt

        by = self._by_variant(results)
        if not by:
            return []
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
        names = list(by)
        for k, v in enumerate(names):
            sub = by[v]
            for j, (col, lab) in enumerate((("acc_bos", "from BOS"), ("acc_cut", f"from {cfg.cut}-token prefix"))):
                axes[0].scatter(np.full(len(sub), k + 0.15 * (2 * j - 1)), sub[col], color=f"C{j}",
                                label=lab if k == 0 else None)
            null = self._by_variant(results, "null").get(v)
            if null is not None:
                axes[0].scatter(np.full(len(null), k), null["acc"], color="grey", marker="x",
                                label="null: random init (lower of the two)" if k == 0 else None)
            axes[1].scatter(np.full(len(sub), k), sub["kl"], color="C2")
        axes[0].axhline(GEN_ACC_MIN, color="k", ls="--", lw=1, label=f"rule {GEN_ACC_MIN}")
        axes[0].set_xlim(-0.6, len(names) - 0.4)
        for ax in axes:
            ax.set_xticks(range(len(names)), [VARIANT_NAMES.get(v, v) for v in names], fontsize=8)
        axes[0].set_ylabel("generation accuracy (DP-accepted)")
        axes[0].set_ylim(-0.02, 1.02)
        axes[0].legend(fontsize=7)
        axes[1].set_ylabel("mean KL(true || model), nats")
        axes[1].set_yscale("log")
        fig.suptitle(f"{results['grammar'].iloc[0]}: one point per training seed", fontsize=10)
        return [save_figure(fig, run, "generation_accuracy.png",
                            "Generation accuracy (temperature 1, judged by the exact DP) and mean per-position KL "
                            "to the true next-token distribution, per variant and seed (cf. Fig. 4 of the paper); "
                            "grey crosses: arm null (the variant at its random initialisation, a contrast; the "
                            "claims' null is arm shuffled)",
                            claims=("gen-accuracy", "uni-effective", "pos-effective"))]

    def report_sections(self, cfg: CFGLearningConfig, results: pd.DataFrame, run: RunDir) -> str:
        from lmsci.report import markdown_table

        g = build_grammar(cfg)
        lo, hi = g.length_range()
        cols = ["point", "variant", "arm", "seed_index", "acc_bos", "acc_cut", "acc", "kl", "kl_sanity",
                "nll_model", "nll_grammar", "train_loss", "distinct_frac", "mean_gen_len"]
        return (f"## Setup\n\nGrammar {g.name}: sizes {list(g.sizes)}, strings of {lo}-{hi} tokens. "
                f"{cfg.model.n_layers}-layer GPT, d_model {cfg.model.d_model}, {cfg.model.n_heads} heads, context "
                f"{cfg.seq_len}; {cfg.train.steps} AdamW steps of {cfg.train.batch_size} windows of fresh "
                f"EOS-separated samples, lr {cfg.train.lr}. "
                f"Generation accuracy over {cfg.n_gen} samples from BOS and from a {cfg.cut}-token prefix; KL over "
                f"{cfg.n_kl} fresh strings. GPT_pos learns one attention logit per (head, distance); GPT_rel here is "
                "the T5 relative bias, not DeBERTa's. Arm `null`: the variant at its random initialisation (generation "
                "accuracies only; a contrast); arm `shuffled`: GPT_rot trained on order-shuffled strings (the null arm of "
                "gen-accuracy, uni-effective and pos-effective); arm "
                "`rope2`: a second GPT_rot (rot-beats-abs's null arm).\n\n"
                "## Results\n\n"
                + markdown_table(results[[c for c in cols if c in results]]))
