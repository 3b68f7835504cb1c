"""Experiment ``cfg-probing``: linear probes recover the parse tree (NT ancestors, NT ends) from the last layer of
a GPT trained on a layered random CFG, far above the same probe on a random-init model.

Source: Allen-Zhu & Li, "Physics of Language Models: Part 1", arXiv 2305.13673, sec. 4 (probing NT ancestors
and NT boundaries; "predict NT ancestor (%)" table: 86-100% per level NT2..NT6 on cfg3f-b for GPT, GPT_rel,
GPT_rot, GPT_pos, GPT_uni; GPT_rand as the baseline). Spec: physics_of_lms.md sec. 1.2 and 1.5.

Protocol. The model is trained as in ``cfg-learning`` (same fields and recipe, :mod:`lmsci.experiments.syntax.cfg_learning`).
Then, frozen, its last-layer hidden state (hook point ``final``) at every token of ``n_probe_train`` fresh strings
trains one probe per NT level ``l = 1 .. depth-1`` (the paper's NT2 .. NT{depth}) for three targets: the level-``l``
NT ancestor of the token (generation-time parse), the ancestor at level-``l`` NT-end positions only, and the NT-end
bit. The probe is the paper's multi-head linear probe (sec. 4.1; :class:`lmsci.measure.probes.PositionMixingProbe`):
linear in the hidden states of positions ``k <= i``, mixed by position-only attention weights. The same targets
with a linear probe on position ``i`` alone are reported beside (``*_pw_*`` columns; the protocol until
2026-11-26, see CLAIMS.md). Accuracies on ``n_probe_test`` other fresh strings. The same probes on a model of the
same architecture at its random initialisation (GPT_rand) are the baseline.
The generation accuracy from BOS (as in ``cfg-learning``) gates the claims: a model that did not learn the
grammar is not the paper's subject.

Null arms (issue 29), measured in the same run with the same statistic: ``probe-ancestor`` and
``probe-ancestor-at-end`` -- the same probes on the random-init model (GPT_rand, the classic control);
``probe-beats-random`` -- the same gap with GPT_rand in the trained model's place against a second random-init model
(another seed; only the ancestor mixing probes of levels 1 and 2 are fitted on it): random against random, so no
gap may appear. ``probe-beats-random-at-end`` is an ablation (no null arm).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field

from lmsci.claims import Claim, Gate, Verdict
from lmsci.stats import across_seeds
from lmsci.experiments.base import Experiment, Figure, Point, PointContext, save_figure
from lmsci.experiments.syntax._common import (VARIANT_NAMES, CFGModelConfig, build_grammar, make_model, train_model,
                                             validate_model_config)
from lmsci.experiments.registry import register
from lmsci.measure.cfg_lm import generate_strings, generation_accuracy, hidden_states, probe_parse
from lmsci.measure.probes import fit_mixing_probe
from lmsci.runs import RunDir, derive_seed

PROBE_MIN = 0.9         # registered: mean probe accuracy over NT levels >= 0.9
GAP_MIN = 0.20          # registered: trained minus random-init >= 0.20 at the two levels nearest the root
LEARNED_GATE = 0.8      # registered gate: generation accuracy from BOS >= 0.8


class CFGProbingConfig(CFGModelConfig):
    """Configuration of ``cfg-probing`` (model and training fields as ``cfg-learning``)."""

    n_probe_train: int = Field(300, ge=2, description="fresh strings whose tokens train the probes")
    n_probe_test: int = Field(100, ge=1, description="fresh strings whose tokens test the probes")
    probe_steps: int = Field(200, ge=1, description="AdamW steps of each multi-head position-mixing probe")
    probe_heads: int = Field(4, ge=1, description="heads of each multi-head position-mixing probe")
    n_gen: int = Field(100, ge=1, description="generations from BOS for the 'learned' gate")
    l2: float = Field(1e-3, ge=0)

    PRESETS = {
        "smoke": {"train.steps": 4, "train.batch_size": 4, "train.warmup_steps": 1, "model.n_layers": 1,
                  "model.d_model": 16, "model.n_heads": 2, "seq_len": 32, "n_probe_train": 6, "n_probe_test": 4,
                  "n_gen": 4, "n_seeds": 1},
        "quick": {},
        "gpu": {"grammar": "cfg3f", "variants": ["rope", "learned"], "model.n_layers": 6, "model.n_heads": 8,
                "model.d_model": 256, "seq_len": 512, "train.batch_size": 64, "train.steps": 3000, "train.lr": 1e-3,
                "train.warmup_steps": 200, "n_probe_train": 150, "n_probe_test": 50, "n_gen": 200, "threads": 0},
        "paper": {"grammar": "cfg3f", "variants": ["rope", "learned", "relative", "uni", "posonly"],
                  "model.n_layers": 12, "model.n_heads": 12, "model.d_model": 768, "seq_len": 512,
                  "train.batch_size": 96, "train.steps": 100_000, "train.lr": 3e-4, "train.warmup_steps": 1000,
                  "n_probe_train": 2000, "n_probe_test": 500, "n_gen": 1000, "threads": 0},
    }


@register("cfg-probing")
class CFGProbing(Experiment):
    """Linear probes for NT ancestors / NT ends on a CFG-trained GPT vs its random initialisation."""

    claim = ("The last layer of a GPT trained on a layered random CFG linearly encodes the parse: NT ancestors at "
             "every level are decodable with >= 90% accuracy, at least 20 points above a random-init model at the "
             "levels nearest the root.")
    source = "Allen-Zhu & Li, Physics of Language Models Part 1, arXiv 2305.13673, sec. 4 (NT-ancestor probing table)"
    Config = CFGProbingConfig
    time_estimate = {"smoke": "~10 s",
                     "quick": "752 s measured (3 seeds of 3000 steps on cfg3b-small, mixing probes, threads=2, "
                              "nothing else running), before the null arm's second random-init model (2 more mixing "
                              "probes per seed: ~+60 s estimated from a timed fit on the loaded machine)",
                     "gpu": "~20 min estimated on one H100, not measured (cfg3f, 2 variants x 3 seeds; the mixing "
                            "and L-BFGS probes fit on the device of the hidden states)",
                     "paper": "~1 day per model on 4xA100 (GPT2-small, 100k steps)"}

    _SRC = "Allen-Zhu & Li, arXiv 2305.13673, sec. 4, 'predict NT ancestor (%)' table"
    _GATE = Gate("learned", f"GPT_rot's mean generation accuracy from BOS >= {LEARNED_GATE} (the probed model learned "
                 "the grammar)")
    claims = [
        Claim(
            "probe-ancestor",
            "A linear probe on the last layer of a CFG-trained GPT_rot predicts the NT ancestor of each token at every "
            "NT level with accuracy at least 90% on average over levels.",
            _SRC,
            "86-100% per level NT2..NT6 on cfg3f-b (cfg3b: 100% at every level; cfg3f GPT_rot: 100/97.7/95.2/93.3/94.2)",
            "per training seed, the test accuracy of the per-level linear probe (NT ancestor at every token), averaged "
            "over NT levels 1..depth-1; mean over seeds with a 95% Student-t CI",
            f"mean over at least 3 seeds >= {PROBE_MIN}",
            gates=(_GATE,),
            null="the same probes (same strings, levels and fit) on the random-init model of the same architecture "
                 "(GPT_rand, the classic control): untrained, it has not learned the parse",
        ),
        Claim(
            "probe-ancestor-at-end",
            "At NT-end positions the NT ancestor is linearly decodable from the last layer with accuracy at least 90% "
            "on average over levels.",
            _SRC + " and sec. 4.2 (NT-end positions)",
            "almost perfect at NT ends (the paper's sec. 4 'especially at NT-end positions')",
            "per training seed, probe test accuracy of the level-l ancestor on level-l NT-end tokens only, averaged over "
            "NT levels 1..depth-1; mean over seeds with a 95% Student-t CI",
            f"mean over at least 3 seeds >= {PROBE_MIN}",
            gates=(_GATE,),
            null="the same at-end probes on the random-init model of the same architecture (GPT_rand, the classic "
                 "control): untrained, it has not learned the parse",
        ),
        Claim(
            "probe-beats-random",
            "The parse is learned, not a property of the architecture: at the two NT levels nearest the root the probe "
            "on the trained GPT_rot beats the same probe on the random-init model by at least 20 points.",
            _SRC + " (GPT_rand baseline)",
            "trained 86-100% vs GPT_rand far lower at the deep levels",
            "per training seed and level l in {1, 2} (the paper's NT2, NT3), trained minus random-init probe accuracy "
            "(NT ancestor at every token); mean over seeds per level, with 95% Student-t CIs; the statistic is the "
            "smaller of the two level means",
            f"the smaller of the two level means over at least 3 seeds >= {GAP_MIN}",
            gates=(_GATE,),
            null="the same gap with the random-init model in the trained model's place, against a second random-init "
                 "model of the same architecture (another seed): random against random, no gap by construction",
        ),
        Claim(
            "probe-beats-random-at-end",
            "At NT-end positions, the probe on the trained GPT_rot beats the same probe on the random-init model by at "
            "least 20 points at the two NT levels nearest the root.",
            _SRC + " (GPT_rand baseline; NT-end positions)",
            "trained near 100% at NT ends vs GPT_rand far lower at the deep levels",
            "as probe-beats-random, with the ancestor probes trained and tested on level-l NT-end tokens only (a causal "
            "model cannot know the ancestor of a token before its subtree is read; added after the first quick run, "
            "decides nothing)",
            f"the smaller of the two level means over at least 3 seeds >= {GAP_MIN}",
            gates=(_GATE,),
            ablation=True,
        ),
    ]

    def validate(self, cfg: CFGProbingConfig) -> None:
        g = validate_model_config(cfg)
        if g.depth < 3:
            from lmsci.errors import ConfigError

            raise ConfigError("grammar", cfg.grammar, "a grammar with at least 2 NT levels below the root (depth >= 3)")

    def points(self, cfg: CFGProbingConfig) -> list[Point]:
        return [Point(v, {"variant": v}) for v in cfg.variants]

    def run_point(self, cfg: CFGProbingConfig, point: Point, ctx: PointContext) -> dict[str, Any]:
        g = build_grammar(cfg)
        variant = point.params["variant"]
        model, final = train_model(cfg, g, variant, ctx)
        rand = make_model(cfg, g, variant, derive_seed(ctx.seed, "rand-init")).to(ctx.device).eval()
        rng = np.random.default_rng(derive_seed(ctx.seed, "probe-data"))

        def fresh(n):
            out = []
            while len(out) < n:
                s = g.sample(rng)
                if len(s.tokens) + 1 <= cfg.seq_len:
                    out.append(s)
            return out

        tr, te = fresh(cfg.n_probe_train), fresh(cfg.n_probe_test)
        levels = list(range(1, g.depth))
        row: dict[str, Any] = {"variant": variant, "grammar": g.name, "depth": g.depth,
                               "train_loss": float(final.get("loss", float("nan")))}
        for tag, m in (("", model), ("rand_", rand)):
            htr = hidden_states(m, g, [s.tokens for s in tr], device=ctx.device)
            hte = hidden_states(m, g, [s.tokens for s in te], device=ctx.device)
            res = probe_parse(htr, tr, hte, te, levels, g.sizes, l2=cfg.l2, mixing_steps=cfg.probe_steps,
                              mixing_heads=cfg.probe_heads, seed=derive_seed(ctx.seed, "probe"))
            for l, d in res.items():
                row[f"{tag}anc_L{l}"] = d["ancestor"]
                row[f"{tag}anc_end_L{l}"] = d["ancestor_at_end"]
                row[f"{tag}bnd_L{l}"] = d["boundary"]
                row[f"{tag}anc_pw_L{l}"] = d["ancestor_pointwise"]
                row[f"{tag}anc_end_pw_L{l}"] = d["ancestor_at_end_pointwise"]
                row[f"{tag}bnd_pw_L{l}"] = d["boundary_pointwise"]
                if not tag:
                    row[f"chance_anc_L{l}"] = d["ancestor_chance"]
                    row[f"chance_bnd_L{l}"] = d["boundary_chance"]
        # probe-beats-random's null arm: the ancestor mixing probes of levels 1, 2 on a second random-init model
        rand2 = make_model(cfg, g, variant, derive_seed(ctx.seed, "rand-init-2")).to(ctx.device).eval()
        h2tr = hidden_states(rand2, g, [s.tokens for s in tr], device=ctx.device)
        h2te = hidden_states(rand2, g, [s.tokens for s in te], device=ctx.device)
        for l in (1, 2):
            if l < g.depth:
                r2 = fit_mixing_probe(h2tr, [s.ancestor[l] for s in tr], h2te, [s.ancestor[l] for s in te],
                                      int(g.sizes[l]), steps=cfg.probe_steps, n_heads=cfg.probe_heads,
                                      seed=derive_seed(ctx.seed, "probe"))
                row[f"rand2_anc_L{l}"] = r2["test_acc"]
        _, hi = g.length_range()
        gen = generate_strings(model, g, [[]] * cfg.n_gen, max_len=min(hi, cfg.seq_len - 2),
                               seed=derive_seed(ctx.seed, "gen0"), device=ctx.device)
        row["acc_bos"] = generation_accuracy(g, gen)
        row["anc_mean"] = float(np.mean([row[f"anc_L{l}"] for l in levels]))
        row["anc_end_mean"] = float(np.mean([row[f"anc_end_L{l}"] for l in levels]))
        row["rand_anc_mean"] = float(np.mean([row[f"rand_anc_L{l}"] for l in levels]))
        row["rand_anc_end_mean"] = float(np.mean([row[f"rand_anc_end_L{l}"] for l in levels]))
        row["anc_pw_mean"] = float(np.mean([row[f"anc_pw_L{l}"] for l in levels]))
        row["rand_anc_pw_mean"] = float(np.mean([row[f"rand_anc_pw_L{l}"] for l in levels]))
        return row

    def verdicts(self, cfg: CFGProbingConfig, results: pd.DataFrame, run: RunDir) -> list[Verdict]:
        ok = results[results["status"] == "ok"] if "status" in results else results
        rope = ok[ok["variant"] == "rope"] if "variant" in ok else ok.iloc[0:0]
        if rope.empty:
            return [self.judge(cfg, c.id, value=None, passed=None, why_not_computed="GPT_rot (variant 'rope') was "
                               "not run") for c in self.claims]
        learned = across_seeds(rope["acc_bos"])
        gate = {"learned": (learned.mean, learned.mean >= LEARNED_GATE)}
        depth = int(rope["depth"].iloc[0])
        levels = list(range(1, depth))
        per_level = {f"NT{l + 1} (level {l})": {
            "ancestor": round(float(rope[f"anc_L{l}"].mean()), 4),
            "ancestor_at_end": round(float(rope[f"anc_end_L{l}"].mean()), 4),
            "boundary": round(float(rope[f"bnd_L{l}"].mean()), 4),
            "random_init_ancestor": round(float(rope[f"rand_anc_L{l}"].mean()), 4)} for l in levels}
        out = []
        for cid, col in (("probe-ancestor", "anc_mean"), ("probe-ancestor-at-end", "anc_end_mean")):
            st = across_seeds(rope[col])
            rcol = "rand_" + col
            if rcol not in rope and all(f"rand_{col[:-5]}_L{l}" in rope for l in levels):  # older tables
                rope = rope.assign(**{rcol: rope[[f"rand_{col[:-5]}_L{l}" for l in levels]].mean(axis=1)})
            null = None
            if rcol in rope and rope[rcol].notna().any():
                sn = across_seeds(rope[rcol])
                null = (sn.mean, bool(sn.mean >= PROBE_MIN))
            out.append(self.judge(cfg, cid, value=st.mean, passed=bool(st.mean >= PROBE_MIN), ci=st.ci, ci_kind=st.kind,
                                  n_seeds=st.n, gates=gate, null=null,
                                  details={"per_level": per_level, "grammar": str(rope["grammar"].iloc[0]),
                                           "null_random_init_mean": None if null is None else round(null[0], 4)}))
        for cid, col in (("probe-beats-random", "anc"), ("probe-beats-random-at-end", "anc_end")):
            gaps = {}
            for l in (1, 2):
                if f"{col}_L{l}" in rope and f"rand_{col}_L{l}" in rope:
                    gaps[l] = across_seeds(rope[f"{col}_L{l}"] - rope[f"rand_{col}_L{l}"])
            if len(gaps) < 2:
                out.append(self.judge(cfg, cid, value=None, passed=None, gates=gate,
                                      why_not_computed="the grammar has fewer than 2 NT levels below the root, or the "
                                                       "random-init probes were not recorded"))
                continue
            worst = min(gaps, key=lambda l: gaps[l].mean)
            v = gaps[worst]
            details = {f"gap_NT{l + 1}": {"mean": round(s.mean, 4), "ci": s.ci} for l, s in gaps.items()}
            null = None
            if cid == "probe-beats-random" and all(f"rand2_anc_L{l}" in rope and rope[f"rand2_anc_L{l}"].notna().any()
                                                   for l in (1, 2)):
                ngaps = {l: across_seeds(rope[f"rand_anc_L{l}"] - rope[f"rand2_anc_L{l}"]) for l in (1, 2)}
                nw = min(ngaps, key=lambda l: ngaps[l].mean)
                null = (ngaps[nw].mean, bool(ngaps[nw].mean >= GAP_MIN))
                details.update({f"null_gap_random_minus_random_NT{l + 1}": round(s.mean, 4) for l, s in ngaps.items()})
            out.append(self.judge(cfg, cid, value=v.mean, passed=bool(v.mean >= GAP_MIN), ci=v.ci,
                                  ci_kind=v.kind + f" (level {worst}, the smaller gap)", n_seeds=v.n, gates=gate,
                                  details=details, null=null))
        return out

    def figures(self, cfg: CFGProbingConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib.pyplot as plt

        ok = results[results["status"] == "ok"] if "status" in results else results
        if ok.empty:
            return []
        depth = int(ok["depth"].iloc[0])
        levels = list(range(1, depth))
        fig, ax = plt.subplots(figsize=(6.4, 3.8))
        for k, (v, sub) in enumerate(ok.groupby("variant", sort=False)):
            ax.plot([l + 1 for l in levels], [sub[f"anc_L{l}"].mean() for l in levels], "o-", color=f"C{k}",
                    label=f"{VARIANT_NAMES.get(v, v)}: ancestor")
            ax.plot([l + 1 for l in levels], [sub[f"anc_end_L{l}"].mean() for l in levels], "s:", color=f"C{k}",
                    label=f"{VARIANT_NAMES.get(v, v)}: ancestor at NT end")
            ax.plot([l + 1 for l in levels], [sub[f"rand_anc_L{l}"].mean() for l in levels], "x--", color=f"C{k}",
                    alpha=0.6, label=f"{VARIANT_NAMES.get(v, v)} random init: ancestor")
        ax.plot([l + 1 for l in levels], [ok[f"chance_anc_L{l}"].mean() for l in levels], "k:", lw=1, label="majority class")
        ax.axhline(PROBE_MIN, color="gray", ls="--", lw=1)
        ax.set_xlabel("NT level (paper's numbering: NT2 = children of the root)")
        ax.set_ylabel("probe test accuracy")
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=6)
        return [save_figure(fig, run, "probe_accuracy.png",
                            "Linear-probe accuracy of the NT ancestor per level (mean over seeds), trained vs random "
                            "initialisation (cf. the paper's 'predict NT ancestor (%)' table)")]

    def report_sections(self, cfg: CFGProbingConfig, results: pd.DataFrame, run: RunDir) -> str:
        from lmsci.report import markdown_table

        keep = [c for c in results.columns if c.startswith(("anc_", "rand_anc_", "rand2_anc_", "bnd_", "chance_"))]
        cols = ["point", "variant", "seed_index", "acc_bos", "train_loss", *sorted(keep)]
        return ("## Method\n\nProbes: the paper's multi-head linear probe (last-layer states of positions k <= i, "
                "mixed by position-only attention weights, {heads} heads, {steps} AdamW steps) and, in the `*_pw_*` "
                "columns, multinomial logistic regression (L2 {l2}) on the state at position i alone; "
                "{ntr} training strings, {nte} test strings, one probe per NT level and target; the random-init "
                "model has the same architecture and is untrained; `rand2_*`: a second random-init model (probe-beats-random's "
                "null arm). Level l here is the paper's NT(l+1).\n\n"
                "## Results\n\n").format(l2=cfg.l2, ntr=cfg.n_probe_train, nte=cfg.n_probe_test,
                                          steps=cfg.probe_steps, heads=cfg.probe_heads) + \
            markdown_table(results[[c for c in cols if c in results]])
