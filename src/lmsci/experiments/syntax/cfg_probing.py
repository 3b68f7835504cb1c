"""Experiment ``cfg-probing``: linear probes recover the parse tree (NT ancestors, NT ends) from the last layer of
a GPT trained on a layered random CFG, far above the same probe on a random-init model.

Source: Allen-Zhu & Li, "Physics of Language Models: Part 1", arXiv 2305.13673, sec. 4 (probing NT ancestors
and NT boundaries; "predict NT ancestor (%)" table: 86-100% per level NT2..NT6 on cfg3f-b for GPT, GPT_rel,
GPT_rot, GPT_pos, GPT_uni; GPT_rand as the baseline). Spec: physics_of_lms.md sec. 1.2 and 1.5.

Protocol. The model is trained as in ``cfg-learning`` (same fields and recipe, :mod:`lmsci.experiments.syntax.cfg_learning`),
and since 2026-12-07 with its seeds too (``training_scope``: a point's seed is the one ``cfg-learning``
gives the same point id at the same master seed): where the two presets agree on grammar, model and recipe (smoke,
quick, paper) the models probed are the very models ``cfg-learning`` trains and judges, and a run with the training
cache (``lmsci suite``; ``lmsci run --training-cache DIR``) loads them instead of training them again.
Then, frozen, its last-layer hidden state (hook point ``final``) at every token of ``n_probe_train`` fresh strings
trains one probe per NT level ``l = 1 .. depth-1`` (the paper's NT2 .. NT{depth}) for three targets: the level-``l``
NT ancestor of the token (generation-time parse), the ancestor at level-``l`` NT-end positions only, and the NT-end
bit. The probe is the paper's multi-head linear probe (sec. 4.1; :class:`lmsci.measure.probes.PositionMixingProbe`):
linear in the hidden states of positions ``k <= i``, mixed by position-only attention weights. The same targets
with a linear probe on position ``i`` alone are reported beside (``*_pw_*`` columns; the protocol until
2026-11-26, see CLAIMS.md). Accuracies on ``n_probe_test`` other fresh strings. The same probes on a model of the
same architecture at its random initialisation (GPT_rand) are the baseline.
The generation accuracy from BOS (as in ``cfg-learning``) gates the claims: a model that did not learn the
grammar is not the paper's subject. The gpu preset (S52: 10 minutes of one H100) trains GPT_rot only (the claims
read it alone), 2000 steps on cfg3f, 3 seeds, without the shuffled arm (below).

Null arms (issue 29; ``probe-beats-random``'s since 2026-12-06, issue 44 item 4), measured in the same run with the
same statistic: ``probe-ancestor`` and ``probe-ancestor-at-end`` -- the same probes on the random-init model
(GPT_rand, the classic control; arm ``null``); ``probe-beats-random`` -- the same gap for GPT_rot trained on
order-shuffled strings (arm ``shuffled``: ``cfg-learning``'s shuffled arm, the same initialisation, data stream and
recipe as the trained GPT_rot, each training string's tokens in a random order: tokens and lengths kept, order
removed) minus the same GPT_rand, probed on the same (unshuffled) strings; only the ancestor mixing probes of levels
1 and 2 are fitted on it. It meets the rule if the strings' token statistics alone make the ancestors nearest the
root 20 points more decodable than at random init, i.e. if the gap is not the parse. Until 2026-12-06 this null was
GPT_rand minus a second random-init model (random against random: no gap by construction). ``shuffled_arm``: on at
``smoke``, ``quick`` and ``paper``, off at ``gpu``, whose second training per seed would take it to ~13 min of one
H100 estimated (over its 10 minutes); ``probe-beats-random`` is therefore decided at ``quick`` and ``paper`` only.
``probe-beats-random-at-end`` is an ablation (no null arm).

Arms (issue 44): ``real`` (the trained model of each variant; point ids are the variants'), ``null`` (GPT_rand: the
variant at its random initialisation, points ``null-<variant>``) and ``shuffled`` (GPT_rot only, point
``shuffled-rope``), paired by seed: the same strings and probe seeds. A row's probe columns are its own model's (the
shuffled arm: ``anc_L1``, ``anc_L2`` only); its ``gap_*`` columns are its model minus GPT_rand at levels 1 and 2
(trained on the real arm, order-shuffled-trained on the shuffled arm, ancestor at every token only; none on the
null arm). The arms of a point and seed are one group (:meth:`CFGProbing.groups`): GPT_rand's probes are fitted once
and serve every row. The claims engine judges every claim; none is judged by hand.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, mean_at_least
from lmsci.claims.engine import finished
from lmsci.contract import Experiment, Figure, Point, PointContext, save_figure
from lmsci.experiments.syntax._common import (VARIANT_NAMES, CFGModelConfig, build_grammar, make_model, train_model,
                                             validate_model_config)
from lmsci.experiments.registry import register
from lmsci.measure.cfg_lm import generate_strings, generation_accuracy, hidden_states, probe_parse
from lmsci.measure.probes import fit_mixing_probe
from lmsci.runs import RunDir, derive_seed

PROBE_MIN = 0.9         # registered: mean probe accuracy over NT levels >= 0.9
GAP_MIN = 0.20          # registered: trained minus random-init >= 0.20 at the two levels nearest the root
LEARNED_GATE = 0.8      # registered gate: generation accuracy from BOS >= 0.8
ROPE = {"variant": "rope"}


def _smaller_level_gap(rows: pd.DataFrame, col: str) -> pd.Series:
    """Per seed, the arm's ``gap_<col>_L{l}`` at whichever of levels 1, 2 has the smaller mean over seeds (level 1 on
    a tie); empty when either level is missing."""
    cols = [f"gap_{col}_L{l}" for l in (1, 2)]
    if rows.empty or not all(c in rows for c in cols):
        return pd.Series(dtype=float)
    per = rows.groupby("seed_index")[cols].mean()
    means = per.mean()
    if means.isna().any():
        return pd.Series(dtype=float)
    return per[cols[int(means[cols[1]] < means[cols[0]])]]


def smaller_gap(rows: pd.DataFrame) -> pd.Series:
    """Per seed, the ancestor probe's gap (model minus its baseline, every token) at the level of 1, 2 with the
    smaller mean gap."""
    return _smaller_level_gap(rows, "anc")


def smaller_gap_at_end(rows: pd.DataFrame) -> pd.Series:
    """As :func:`smaller_gap`, for the ancestor probes on level-l NT-end tokens only."""
    return _smaller_level_gap(rows, "anc_end")


class CFGProbingConfig(CFGModelConfig):
    """Configuration of ``cfg-probing`` (model and training fields as ``cfg-learning``)."""

    n_probe_train: int = Field(300, ge=2, description="fresh strings whose tokens train the probes")
    n_probe_test: int = Field(100, ge=1, description="fresh strings whose tokens test the probes")
    probe_steps: int = Field(200, ge=1, description="AdamW steps of each multi-head position-mixing probe")
    probe_heads: int = Field(4, ge=1, description="heads of each multi-head position-mixing probe")
    n_gen: int = Field(100, ge=1, description="generations from BOS for the 'learned' gate")
    l2: float = Field(1e-3, ge=0)
    shuffled_arm: bool = Field(True, description="train GPT_rot on order-shuffled strings and probe it (the shuffled "
                               "arm, the null of probe-beats-random; off at gpu: see the module)")

    PRESETS = {
        "smoke": {"train.steps": 4, "train.batch_size": 4, "train.warmup_steps": 1, "model.n_layers": 1,
                  "model.d_model": 16, "model.n_heads": 2, "seq_len": 32, "n_probe_train": 6, "n_probe_test": 4,
                  "n_gen": 4, "n_seeds": 1},
        # quick: 2000 steps, not cfg-learning's 3000 (S54): the shuffled arm adds a training per seed
        "quick": {"train.steps": 2000},
        # gpu (S52): within 10 minutes of one H100; the claims read GPT_rot only; no shuffled arm (a second training)
        "gpu": {"grammar": "cfg3f", "variants": ["rope"], "model.n_layers": 6, "model.n_heads": 8,
                "model.d_model": 256, "seq_len": 512, "train.batch_size": 64, "train.steps": 2000, "train.lr": 1e-3,
                "train.warmup_steps": 200, "n_probe_train": 150, "n_probe_test": 50, "n_gen": 200, "threads": 0,
                "shuffled_arm": False},
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
    training_scope = "cfg-learning"  # point seeds as cfg-learning's: its trainings (see the module docstring)
    time_estimate = {"smoke": "~10 s",
                     "quick": "14.5 min measured with --backend processes on the 2 cores of the AMD EPYC host (S57, "
                              "master seed 10: its 3 groups, one seed's real and shuffled GPT_rot each, on 2 workers at "
                              "one thread; results bit-identical to the same seed one after another); 21.6 min measured "
                              "one after another at one thread (S57 whole-suite run); "
                              "~15-18 min estimated, not measured (S54, from benchmarks/results/"
                              "cfg_phases_2026-12-06.md: 6 trainings of 2000 steps (3 seeds x real + shuffled) at "
                              "64-76 ms/step = 770-910 s, probe fits ~100 s, hidden states, generation and data "
                              "~25 s, one thread); was 752-825 s measured with 3 trainings of 3000 steps and no "
                              "shuffled arm",
                     "gpu": "~8 min on one H100, estimated, not measured (no GPU in S52; was ~20 min with GPT (absolute) "
                            "as well and 3000 steps): GPT_rot on cfg3f x 3 seeds, 2000 steps of batch 64 x 512, 97 s "
                            "each by lmsci.train.estimate + 24 s of host sampling (12 ms per batch in a CPU pilot); "
                            "2 probe fits per seed (trained, random init) on the device, ~5 s each; 200 generations "
                            "per seed judged by the DP (~28 ms per string in the pilot). No shuffled arm: its 3 more "
                            "trainings would take it to ~13 min",
                     "paper": "~1 day per model on 4xA100 (GPT2-small, 100k steps), and as much again for the "
                              "shuffled arm's GPT_rot"}

    _SRC = "Allen-Zhu & Li, arXiv 2305.13673, sec. 4, 'predict NT ancestor (%)' table"
    _GATE = Gate("learned", mean_at_least(LEARNED_GATE), arm="real",
                 stat=Stat("acc_bos", where=ROPE, words="GPT_rot's generation accuracy from BOS (the probed model "
                                                        "learned the grammar)"))
    claims = [
        Claim(
            "probe-ancestor",
            "A linear probe on the last layer of a CFG-trained GPT_rot predicts the NT ancestor of each token at every "
            "NT level with accuracy at least 90% on average over levels.",
            _SRC,
            "86-100% per level NT2..NT6 on cfg3f-b (cfg3b: 100% at every level; cfg3f GPT_rot: 100/97.7/95.2/93.3/94.2)",
            statistic=Stat("anc_mean", where=ROPE, words="the test accuracy of the per-level linear probe (NT "
                                                         "ancestor at every token) on GPT_rot, averaged over NT levels "
                                                         "1..depth-1"),
            rule=mean_at_least(PROBE_MIN),
            gates=(_GATE,),
            null="the same probes (same strings, levels and fit) on the random-init model of the same architecture "
                 "(GPT_rand, the classic control): untrained, it has not learned the parse",
            null_can_meet="yes, if a token's NT ancestor is mostly fixed by the token and the tokens before it: the "
                          "random-init model's last layer still carries each token's embedding, mixed by random "
                          "attention, and the position-mixing probe reads every earlier position (quick: 0.65 "
                          "against 0.9)",
        ),
        Claim(
            "probe-ancestor-at-end",
            "At NT-end positions the NT ancestor is linearly decodable from the last layer with accuracy at least 90% "
            "on average over levels.",
            _SRC + " and sec. 4.2 (NT-end positions)",
            "almost perfect at NT ends (the paper's sec. 4 'especially at NT-end positions')",
            statistic=Stat("anc_end_mean", where=ROPE, words="probe test accuracy of the level-l ancestor on level-l "
                                                             "NT-end tokens only (GPT_rot), averaged over NT levels "
                                                             "1..depth-1"),
            rule=mean_at_least(PROBE_MIN),
            gates=(_GATE,),
            null="the same at-end probes on the random-init model of the same architecture (GPT_rand, the classic "
                 "control): untrained, it has not learned the parse",
            null_can_meet="yes: at a level-l NT end the subtree has been read, so the token and the tokens before it "
                          "pin down much of its ancestor, and the position-mixing probe reads them from the random-init "
                          "model's last layer (token embeddings mixed by random attention; quick: 0.81 against 0.9)",
        ),
        Claim(
            "probe-beats-random",
            "The parse is learned, not a property of the architecture: at the two NT levels nearest the root the probe "
            "on the trained GPT_rot beats the same probe on the random-init model by at least 20 points.",
            _SRC + " (GPT_rand baseline)",
            "trained 86-100% vs GPT_rand far lower at the deep levels",
            statistic=Stat(fn=smaller_gap, where=ROPE,
                           words="at level l in {1, 2} (the paper's NT2, NT3), trained minus random-init probe accuracy "
                                 "(NT ancestor at every token), at the level whose mean over seeds is the smaller: its "
                                 "mean is the smaller of the two level means"),
            rule=mean_at_least(GAP_MIN),
            gates=(_GATE,),
            presets=("quick", "paper"),  # gpu runs no shuffled arm (its 10 minutes hold one training per seed)
            null="the same gap with GPT_rot trained on order-shuffled strings (arm shuffled: the same initialisation, "
                 "data stream and recipe as the trained GPT_rot, each string's tokens in a random order, its tokens "
                 "and length kept) in the trained model's place, over the same random-init model, probed on the "
                 "same unshuffled strings: it learns the strings' token statistics, not their order, so not the parse",
            null_can_meet="yes, if the level-1/2 ancestors are mostly readable from which tokens have occurred and "
                          "how many: the NT ancestors nearest the root fix the sets of terminals below them, a model "
                          "trained on bags of tokens learns which tokens occur together in a string and how long "
                          "strings are, and the position-mixing probe reads every earlier position; training on the "
                          "token statistics alone could then lift the ancestors 20 points above the random-init model without any parse",
            arms=("real", "shuffled"),
        ),
        Claim(
            "probe-beats-random-at-end",
            "At NT-end positions, the probe on the trained GPT_rot beats the same probe on the random-init model by at "
            "least 20 points at the two NT levels nearest the root.",
            _SRC + " (GPT_rand baseline; NT-end positions)",
            "trained near 100% at NT ends vs GPT_rand far lower at the deep levels",
            statistic=Stat(fn=smaller_gap_at_end, where=ROPE,
                           words="as probe-beats-random, with the ancestor probes trained and tested on level-l NT-end "
                                 "tokens only (a causal model cannot know the ancestor of a token before its subtree is "
                                 "read; added after the first quick run, decides nothing)"),
            rule=mean_at_least(GAP_MIN),
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
        pts = [Point(v, {"variant": v}, arm="real") for v in cfg.variants]
        pts += [Point(f"null-{v}", {"variant": v}, arm="null") for v in cfg.variants]  # GPT_rand, paired by seed
        if cfg.shuffled_arm and "rope" in cfg.variants:  # probe-beats-random's null: GPT_rot on order-shuffled strings
            pts.append(Point("shuffled-rope", {"variant": "rope"}, arm="shuffled"))
        return pts

    def groups(self, cfg: CFGProbingConfig, points: list[Point]) -> list[list[Point]]:
        """The arms (real, null, shuffled) of one variant and seed form one group (GPT_rand's probes serve every
        row)."""
        by: dict[tuple[str, int], list[Point]] = {}
        for p in points:
            by.setdefault((p.params["variant"], p.seed_index), []).append(p)
        return list(by.values())

    def run_point(self, cfg: CFGProbingConfig, point: Point, ctx: PointContext) -> dict[str, Any]:
        return self.run_group(cfg, [point], [ctx])[0]

    def run_group(self, cfg: CFGProbingConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict[str, Any]]:
        """The rows of the arms of one variant and seed (same strings, probe seeds and GPT_rand): the real arm's
        trained model, GPT_rand (null) and, on the shuffled arm, GPT_rot trained on order-shuffled strings (the same
        initialisation and data stream as the real arm's; ancestor mixing probes of levels 1 and 2 only)."""
        g, variant, ctx = build_grammar(cfg), points[0].params["variant"], ctxs[0]
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

        def probes(m) -> tuple[dict[str, Any], dict[str, Any]]:
            """(the model's probe columns, the chance columns)."""
            htr = hidden_states(m, g, [s.tokens for s in tr], device=ctx.device)
            hte = hidden_states(m, g, [s.tokens for s in te], device=ctx.device)
            res = probe_parse(htr, tr, hte, te, levels, g.sizes, l2=cfg.l2, mixing_steps=cfg.probe_steps,
                              mixing_heads=cfg.probe_heads, seed=derive_seed(ctx.seed, "probe"))
            row, chance = {}, {}
            for l, d in res.items():
                row.update({f"anc_L{l}": d["ancestor"], f"anc_end_L{l}": d["ancestor_at_end"], f"bnd_L{l}": d["boundary"],
                            f"anc_pw_L{l}": d["ancestor_pointwise"], f"anc_end_pw_L{l}": d["ancestor_at_end_pointwise"],
                            f"bnd_pw_L{l}": d["boundary_pointwise"]})
                chance.update({f"chance_anc_L{l}": d["ancestor_chance"], f"chance_bnd_L{l}": d["boundary_chance"]})
            for key in ("anc", "anc_end", "anc_pw"):
                row[f"{key}_mean"] = float(np.mean([row[f"{key}_L{l}"] for l in levels]))
            return row, chance

        def gen_acc(m) -> float:
            _, hi = g.length_range()
            gen = generate_strings(m, g, [[]] * cfg.n_gen, max_len=min(hi, cfg.seq_len - 2),
                                   seed=derive_seed(ctx.seed, "gen0"), device=ctx.device)
            return generation_accuracy(g, gen)

        base = {"variant": variant, "grammar": g.name, "depth": g.depth}
        rand_row, chance = probes(rand)
        out = []
        for p, c in zip(points, ctxs):
            if p.arm == "real":
                model, final = train_model(cfg, g, variant, c)
                row, _ = probes(model)
                gaps = {f"gap_{k}_L{l}": row[f"{k}_L{l}"] - rand_row[f"{k}_L{l}"] for k in ("anc", "anc_end")
                        for l in (1, 2) if l < g.depth}
                out.append({**base, "train_loss": float(final.get("loss", float("nan"))), **row, **chance, **gaps,
                            "acc_bos": gen_acc(model)})
            elif p.arm == "shuffled":  # GPT_rot on order-shuffled strings; its gap over GPT_rand, levels 1 and 2
                model, final = train_model(cfg, g, variant, c, shuffle_within=True)
                hstr = hidden_states(model, g, [s.tokens for s in tr], device=ctx.device)
                hste = hidden_states(model, g, [s.tokens for s in te], device=ctx.device)
                row, gaps = {}, {}
                for l in (1, 2):
                    if l < g.depth:
                        r = fit_mixing_probe(hstr, [s.ancestor[l] for s in tr], hste, [s.ancestor[l] for s in te],
                                             int(g.sizes[l]), steps=cfg.probe_steps, n_heads=cfg.probe_heads,
                                             seed=derive_seed(ctx.seed, "probe"))
                        row[f"anc_L{l}"] = r["test_acc"]
                        gaps[f"gap_anc_L{l}"] = r["test_acc"] - rand_row[f"anc_L{l}"]
                out.append({**base, "train_loss": float(final.get("loss", float("nan"))), **row, **chance, **gaps,
                            "acc_bos": gen_acc(model)})
            else:  # GPT_rand: its own probes, no gap
                out.append({**base, "train_loss": float("nan"), **rand_row, **chance, "acc_bos": gen_acc(rand)})
        return out

    # no verdicts method: the claims engine judges every claim from its Stat and Rule, on both arms

    def figures(self, cfg: CFGProbingConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib.pyplot as plt

        ok = finished(results)
        if ok.empty or "arm" not in ok:
            return []
        null, shuf = ok[ok["arm"] == "null"], ok[ok["arm"] == "shuffled"]
        ok = ok[ok["arm"] == "real"]
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
            rs = null[null["variant"] == v]
            if len(rs):
                ax.plot([l + 1 for l in levels], [rs[f"anc_L{l}"].mean() for l in levels], "x--", color=f"C{k}",
                        alpha=0.6, label=f"{VARIANT_NAMES.get(v, v)} random init (null arm): ancestor")
            sh = shuf[shuf["variant"] == v]
            sl = [l for l in (1, 2) if f"anc_L{l}" in sh]
            if len(sh) and sl:
                ax.plot([l + 1 for l in sl], [sh[f"anc_L{l}"].mean() for l in sl], "^-.", color=f"C{k}", alpha=0.6,
                        label=f"{VARIANT_NAMES.get(v, v)} trained on order-shuffled strings (shuffled arm): ancestor")
        ax.plot([l + 1 for l in levels], [ok[f"chance_anc_L{l}"].mean() for l in levels], "k:", lw=1, label="majority class")
        ax.axhline(PROBE_MIN, color="gray", ls="--", lw=1)
        ax.set_xlabel("NT level (paper's numbering: NT2 = children of the root)")
        ax.set_ylabel("probe test accuracy")
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=6)
        return [save_figure(fig, run, "probe_accuracy.png",
                            "Linear-probe accuracy of the NT ancestor per level (mean over seeds), trained vs random "
                            "initialisation and, at levels 1-2, vs training on order-shuffled strings (cf. the paper's "
                            "'predict NT ancestor (%)' table)",
                            claims=("probe-ancestor", "probe-ancestor-at-end", "probe-beats-random"))]

    def report_sections(self, cfg: CFGProbingConfig, results: pd.DataFrame, run: RunDir) -> str:
        from lmsci.report import markdown_table

        keep = [c for c in results.columns if c.startswith(("anc_", "gap_", "bnd_", "chance_"))]
        cols = ["point", "arm", "variant", "seed_index", "acc_bos", "train_loss", *sorted(keep)]
        return ("## Setup\n\nProbes: the paper's multi-head linear probe (last-layer states of positions k <= i, "
                "mixed by position-only attention weights, {heads} heads, {steps} AdamW steps) and, in the `*_pw_*` "
                "columns, multinomial logistic regression (L2 {l2}) on the state at position i alone; "
                "{ntr} training strings, {nte} test strings, one probe per NT level and target; the null arm's "
                "random-init model has the same architecture and is untrained; the shuffled arm's GPT_rot is trained "
                "as the real one on strings whose tokens are shuffled within each string (levels 1-2 ancestor probes "
                "only); `gap_*`: the row's model minus the random-init model (trained on the real arm, "
                "order-shuffled-trained on the shuffled arm). "
                "Level l here is the paper's NT(l+1).\n\n"
                "## Results\n\n").format(l2=cfg.l2, ntr=cfg.n_probe_train, nte=cfg.n_probe_test,
                                          steps=cfg.probe_steps, heads=cfg.probe_heads) + \
            markdown_table(results[[c for c in cols if c in results]])
