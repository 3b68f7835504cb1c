"""Experiment ``cfg-learning``: a GPT trained on strings of a layered random CFG generates valid strings; position
variants compared.

Source: Allen-Zhu & Li, "Physics of Language Models: Part 1, Learning Hierarchical Language Structures",
arXiv 2305.13673 (TMLR 2025), sec. 3 (generation accuracy "cut0 / cut50", temperature 1, near 100% for
cfg3b-f with GPT_rel / GPT_rot; the absolute-position GPT weaker on the hardest grammars; GPT_pos and GPT_uni
"surprisingly effective"), KL to the true next-token distribution (``demo2_advanced_dp.py``). Spec:
physics_of_lms.md sec. 1 (grammar family, training recipe, variants, metrics, pitfalls).

Protocol. The grammar (:mod:`lmsci.worlds.cfg`, :func:`~lmsci.worlds.cfg.get_grammar`) is ``grammar``: a
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

Null arms (issue 29), measured in the same run with the same statistic: every point also scores the generation
accuracy of a random-init model of its variant (same architecture, seed ``rand-init``): the null arm of
``gen-accuracy`` (random-init GPT_rot) and of ``uni-effective`` / ``pos-effective`` (random-init GPT_uni / GPT_pos
over the trained GPT_rot); where absolute positions are run (``rot-beats-abs``), a second GPT_rot (point
``rope-null``, its own seeds) takes GPT's place in the paired gap: two GPT_rot differ by seed noise only, so the
rule must not find a gap.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from lmsci.claims import Claim, Gate, Verdict
from lmsci.stats import across_seeds
from lmsci.experiments.base import Experiment, Figure, Point, PointContext, save_figure
from lmsci.experiments.registry import register
from lmsci.experiments.syntax._common import (VARIANT_NAMES, CFGModelConfig, build_grammar, make_model, train_model,
                                             validate_model_config)
from lmsci.measure.cfg_lm import generate_strings, generation_accuracy, mean_kl
from lmsci.models.gpt import GPT
from lmsci.runs import RunDir, derive_seed
from lmsci.worlds.cfg import CFG

GEN_ACC_MIN = 0.9          # registered: generation accuracy of GPT_rot at least 0.9
UNI_RATIO_MIN = 0.8        # registered: GPT_uni reaches at least 0.8 of GPT_rot's accuracy


class CFGLearningConfig(CFGModelConfig):
    """Configuration of ``cfg-learning``."""

    cut: int = Field(10, ge=0, description="prefix length for the second generation accuracy (paper: 50)")
    n_gen: int = Field(200, ge=1, description="generations per accuracy (from BOS and from the cut prefix)")
    n_kl: int = Field(40, ge=1, description="fresh strings for KL(true || model) and the NLLs")

    PRESETS = {
        "smoke": {"train.steps": 4, "train.batch_size": 4, "train.warmup_steps": 1, "model.n_layers": 1,
                  "model.d_model": 16, "model.n_heads": 2, "seq_len": 32, "n_gen": 6, "n_kl": 2, "n_seeds": 1,
                  "variants": ["rope", "posonly"]},
        "quick": {},
        "gpu": {"grammar": "cfg3f", "variants": ["rope", "learned", "uni", "posonly"], "model.n_layers": 6,
                "model.n_heads": 8, "model.d_model": 256, "seq_len": 512, "train.batch_size": 64, "train.steps": 3000,
                "train.lr": 1e-3, "train.warmup_steps": 200, "cut": 50, "n_gen": 500, "n_kl": 8, "threads": 0},
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
    time_estimate = {"smoke": "~10 s",
                     "quick": "711 s measured (3 seeds of 3000 steps on cfg3b-small, threads=2, nothing else running), "
                              "before the null arm's random-init generations (2 x 200 per seed: ~+10 s, estimated)",
                     "gpu": "~31 min estimated on one H100, not measured (cfg3f, 4 variants + the null arm's second "
                            "GPT_rot x 3 seeds, 3000 steps of "
                            "a 6-layer d256 GPT, batch 64 x 512; the exact KL DP runs on the CPU, ~5-10 s per cfg3f "
                            "string, hence n_kl = 8)",
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
            "per training seed, the lower of the two generation accuracies of GPT_rot (from BOS; from the first `cut` "
            "tokens of a fresh valid string), n_gen samples each, judged by the exact DP; mean over seeds with a 95% "
            "Student-t CI; mean per-position KL(true || model) reported beside it",
            f"mean over at least 3 training seeds of the lower generation accuracy >= {GEN_ACC_MIN}",
            null="the same generation accuracy (the lower of from-BOS and from-prefix, same n_gen) of a random-init "
                 "GPT_rot of the same shape, per seed: untrained, it does not know the grammar",
        ),
        Claim(
            "rot-beats-abs",
            "On the hard grammar (cfg3f), rotary positions give a higher generation accuracy than learned absolute "
            "positions.",
            _SRC + " (GPT is weaker than GPT_rot/GPT_rel on cfg3g/cfg3f)",
            "GPT (absolute) below GPT_rot on cfg3f (exact numbers to be read off Fig. 4)",
            "per training seed, GPT_rot minus GPT (absolute) generation accuracy (the lower of cut0/cut), paired by "
            "seed index; mean with a 95% Student-t CI across seeds",
            "the lower end of the 95% CI across at least 3 seeds is above 0",
            presets=("gpu", "paper"),
            null="the same paired gap with a second GPT_rot (point rope-null, its own seeds) in place of GPT "
                 "(absolute): two GPT_rot differ by seed noise only, so the gap must not appear",
        ),
        Claim(
            "uni-effective",
            "GPT_uni (fixed uniform attention over windows 1, 3, 7, ... per head) is surprisingly effective: it reaches "
            "at least 0.8 of GPT_rot's generation accuracy on the hard grammar.",
            _SRC + " and sec. 5 (GPT_pos / GPT_uni 'surprisingly effective')",
            "GPT_uni close to GPT_rot on cfg3b-f",
            "per training seed, GPT_uni generation accuracy divided by GPT_rot's (the lower of cut0/cut, paired by "
            "seed index); mean across seeds with a 95% Student-t CI",
            f"mean ratio over at least 3 seeds >= {UNI_RATIO_MIN}",
            gates=(Gate("rot-learned", f"GPT_rot's mean generation accuracy >= {GEN_ACC_MIN} (the reference learned "
                        "the grammar)"),),
            presets=("gpu", "paper"),
            null="the same ratio with a random-init GPT_uni of the same shape (per seed) over the trained GPT_rot: an "
                 "untrained GPT_uni is not effective",
        ),
        Claim(
            "pos-effective",
            "GPT_pos (attention weights from the relative position only, no query-key product) is surprisingly "
            "effective: it reaches at least 0.8 of GPT_rot's generation accuracy on the hard grammar.",
            _SRC + " and sec. 5 (GPT_pos / GPT_uni 'surprisingly effective')",
            "GPT_pos close to GPT_rot on cfg3b-f",
            "per training seed, GPT_pos generation accuracy divided by GPT_rot's (the lower of cut0/cut, paired by "
            "seed index); mean across seeds with a 95% Student-t CI",
            f"mean ratio over at least 3 seeds >= {UNI_RATIO_MIN}",
            gates=(Gate("rot-learned", f"GPT_rot's mean generation accuracy >= {GEN_ACC_MIN} (the reference learned "
                        "the grammar)"),),
            presets=("gpu", "paper"),
            null="the same ratio with a random-init GPT_pos of the same shape (per seed) over the trained GPT_rot: an "
                 "untrained GPT_pos is not effective",
        ),
    ]

    def validate(self, cfg: CFGLearningConfig) -> None:
        validate_model_config(cfg)

    def points(self, cfg: CFGLearningConfig) -> list[Point]:
        pts = [Point(v, {"variant": v}) for v in cfg.variants]
        if "rope" in cfg.variants and "learned" in cfg.variants:  # rot-beats-abs's null arm: a second GPT_rot
            pts.append(Point("rope-null", {"variant": "rope", "arm": "null"}))
        return pts

    def run_point(self, cfg: CFGLearningConfig, point: Point, ctx: PointContext) -> dict[str, Any]:
        g = build_grammar(cfg)
        variant = point.params["variant"]
        model, final = train_model(cfg, g, variant, ctx)
        lo, hi = g.length_range()
        max_len = min(hi, cfg.seq_len - 2)
        rng = np.random.default_rng(derive_seed(ctx.seed, "eval"))
        pref = []
        while len(pref) < cfg.n_gen:
            s = g.sample(rng).tokens
            if len(s) > cfg.cut:
                pref.append(s[: cfg.cut])

        def gen_acc(m):
            b = generate_strings(m, g, [[]] * cfg.n_gen, max_len=max_len, seed=derive_seed(ctx.seed, "gen0"),
                                 device=ctx.device)
            c = generate_strings(m, g, pref, max_len=max_len, seed=derive_seed(ctx.seed, "gencut"), device=ctx.device)
            return b, generation_accuracy(g, b), generation_accuracy(g, c)

        from_bos, acc0, acc_cut = gen_acc(model)
        # null arm: a random-init model of the same variant, the same prompts
        rand = make_model(cfg, g, variant, derive_seed(ctx.seed, "rand-init")).to(ctx.device).eval()
        _, racc0, racc_cut = gen_acc(rand)
        kl_strings = [g.sample(rng).tokens for _ in range(cfg.n_kl)]
        kl_strings = [s for s in kl_strings if len(s) + 1 <= cfg.seq_len] or kl_strings[:1]
        kl = mean_kl(model, g, kl_strings, ctx.device)
        nll_m, nll_g = nll_per_token(model, g, kl_strings, ctx.device)
        gen_ok = [s for s in from_bos if s is not None]
        return {"variant": variant, "arm": point.params.get("arm", "main"), "grammar": g.name, "acc_bos": acc0,
                "acc_cut": acc_cut, "acc": min(acc0, acc_cut), "rand_acc_bos": racc0, "rand_acc_cut": racc_cut,
                "rand_acc": min(racc0, racc_cut), "kl": kl["kl"], "kl_sanity": kl["kl_sanity"],
                "kl_positions": kl["n_positions"], "nll_model": nll_m, "nll_grammar": nll_g,
                "train_loss": float(final.get("loss", float("nan"))),
                "distinct_frac": len({tuple(s) for s in gen_ok}) / max(len(gen_ok), 1),
                "mean_gen_len": float(np.mean([len(s) for s in gen_ok])) if gen_ok else float("nan")}

    # -- verdicts ------------------------------------------------------------------------------------------
    @staticmethod
    def _by_variant(results: pd.DataFrame, arm: str = "main") -> dict[str, pd.DataFrame]:
        """The finished rows per variant of one arm (``main``, or ``null``: rot-beats-abs's second GPT_rot; tables
        from before the null arms have no ``arm`` column: all main)."""
        ok = results[results.get("status", "ok") == "ok"] if "status" in results else results
        if "seed_index" not in ok:
            ok = ok.assign(seed_index=0)
        arms = ok["arm"].fillna("main") if "arm" in ok else pd.Series("main", index=ok.index)
        ok = ok[arms == arm]
        return {v: sub.sort_values("seed_index") for v, sub in ok.groupby("variant")} if len(ok) else {}

    def verdicts(self, cfg: CFGLearningConfig, results: pd.DataFrame, run: RunDir) -> list[Verdict]:
        by = self._by_variant(results)
        out = []
        rope = by.get("rope")
        if rope is None or rope.empty:
            return [self.judge(cfg, c.id, value=None, passed=None, why_not_computed="GPT_rot (variant 'rope') was "
                               "not run") for c in self.claims]
        st = across_seeds(rope["acc"])
        null_gen = None
        if "rand_acc" in rope and rope["rand_acc"].notna().any():
            sn = across_seeds(rope["rand_acc"])
            null_gen = (sn.mean, bool(sn.mean >= GEN_ACC_MIN))
        out.append(self.judge(
            cfg, "gen-accuracy", value=st.mean, passed=bool(st.mean >= GEN_ACC_MIN), ci=st.ci, ci_kind=st.kind,
            n_seeds=st.n, null=null_gen,
            details={"acc_bos_mean": float(rope["acc_bos"].mean()), "acc_cut_mean": float(rope["acc_cut"].mean()),
                     "kl_mean": float(rope["kl"].mean()), "kl_sanity_mean": float(rope["kl_sanity"].mean()),
                     "paper_kl_sanity (one cfg3f sample)": 0.015178, "nll_model": float(rope["nll_model"].mean()),
                     "nll_grammar": float(rope["nll_grammar"].mean()), "grammar": str(rope["grammar"].iloc[0]),
                     "per_seed_acc": [round(float(x), 4) for x in rope["acc"]],
                     "null_random_init_acc": None if null_gen is None else round(null_gen[0], 4)},
            note=f"grammar {rope['grammar'].iloc[0]}, {cfg.train.steps} steps of a {cfg.model.n_layers}-layer "
                 f"d_model {cfg.model.d_model} GPT_rot; test NLL {rope['nll_model'].mean():.3f} nats/token vs the "
                 f"grammar's own {rope['nll_grammar'].mean():.3f} (the entropy floor): a gap this size means the model "
                 "is still learning at this budget (the paper trains 100k steps of batch 96 x 512)",
        ))
        rope_acc = dict(zip(rope["seed_index"].astype(int), rope["acc"].astype(float)))

        def paired(sub, f, col: str = "acc"):
            if sub is None or sub.empty or col not in sub or not sub[col].notna().any():
                return None
            vals = [f(rope_acc[int(k)], float(a)) for k, a in zip(sub["seed_index"], sub[col]) if int(k) in rope_acc]
            return vals or None

        def gap_rule(sd) -> bool:
            return bool(sd.n >= 2 and sd.lo > 0)

        diffs = paired(by.get("learned"), lambda r, a: r - a)
        # null arm: a second GPT_rot in GPT's place (GPT_rot minus GPT_rot)
        null_diffs = paired(self._by_variant(results, "null").get("rope"), lambda r, a: r - a)
        null_gap = None
        if null_diffs is not None:
            sn = across_seeds(null_diffs)
            null_gap = (sn.mean, gap_rule(sn))
        if diffs is None:
            out.append(self.judge(cfg, "rot-beats-abs", value=None, passed=None, null=null_gap,
                                  why_not_computed="GPT (absolute, variant 'learned') was not run in this preset"))
        else:
            sd = across_seeds(diffs)
            out.append(self.judge(cfg, "rot-beats-abs", value=sd.mean, passed=gap_rule(sd),
                                  ci=sd.ci, ci_kind=sd.kind, n_seeds=sd.n, null=null_gap,
                                  details={"per_seed_diff": [round(x, 4) for x in diffs],
                                           "null_per_seed_diff_rot_minus_rot": None if null_diffs is None else
                                           [round(x, 4) for x in null_diffs]}))

        def ratio(r, a):
            return a / r if r > 0 else float("nan")

        for cid, v in (("uni-effective", "uni"), ("pos-effective", "posonly")):
            ratios = paired(by.get(v), ratio)
            # null arm: a random-init model of the variant over the trained GPT_rot
            null_ratios = paired(by.get(v), ratio, "rand_acc")
            null_r = None
            if null_ratios is not None and np.isfinite(null_ratios).any():
                sn = across_seeds(null_ratios)
                null_r = (sn.mean, bool(sn.mean >= UNI_RATIO_MIN))
            if ratios is None or not np.isfinite(ratios).any():
                out.append(self.judge(cfg, cid, value=None, passed=None, null=null_r,
                                      why_not_computed=f"{VARIANT_NAMES[v]} (variant '{v}') was not run in this preset, "
                                                       "or GPT_rot's accuracy was 0",
                                      gates={"rot-learned": (st.mean, st.mean >= GEN_ACC_MIN)}))
            else:
                sr = across_seeds(ratios)
                out.append(self.judge(cfg, cid, value=sr.mean, passed=bool(sr.mean >= UNI_RATIO_MIN), ci=sr.ci,
                                      ci_kind=sr.kind, n_seeds=sr.n, null=null_r,
                                      gates={"rot-learned": (st.mean, st.mean >= GEN_ACC_MIN)},
                                      details={"per_seed_ratio": [round(x, 4) for x in ratios],
                                               "null_per_seed_ratio_random_init": null_ratios}))
        return out

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
                            "to the true next-token distribution, per variant and seed (cf. Fig. 4 of the paper)")]

    def report_sections(self, cfg: CFGLearningConfig, results: pd.DataFrame, run: RunDir) -> str:
        from lmsci.report import markdown_table

        g = build_grammar(cfg)
        lo, hi = g.length_range()
        cols = ["point", "variant", "arm", "seed_index", "acc_bos", "acc_cut", "acc", "rand_acc", "kl", "kl_sanity",
                "nll_model", "nll_grammar", "train_loss", "distinct_frac", "mean_gen_len"]
        return (f"## Method\n\nGrammar {g.name}: sizes {list(g.sizes)}, strings of {lo}-{hi} tokens. "
                f"{cfg.model.n_layers}-layer GPT, d_model {cfg.model.d_model}, {cfg.model.n_heads} heads, context "
                f"{cfg.seq_len}; {cfg.train.steps} AdamW steps of {cfg.train.batch_size} windows of fresh "
                f"EOS-separated samples, lr {cfg.train.lr}. "
                f"Generation accuracy over {cfg.n_gen} samples from BOS and from a {cfg.cut}-token prefix; KL over "
                f"{cfg.n_kl} fresh strings. GPT_pos learns one attention logit per (head, distance); GPT_rel here is "
                "the T5 relative bias, not DeBERTa's. Null arms: `rand_acc` is the generation accuracy of a random-init "
                "model of the row's variant; arm `null` is a second GPT_rot (rot-beats-abs's null arm).\n\n"
                "## Results\n\n"
                + markdown_table(results[[c for c in cols if c in results]]))
