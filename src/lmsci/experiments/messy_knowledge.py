"""``messy-knowledge``: a fact shares parameters with its negation, little with its translation, and drags
related-but-false statements along when it is learned.

Source: seed lecture 000 ("Where is knowledge stored", slides "Knowledge seems to be stored messily"): the
negation curse ("Leonardo is from USA" / "Leonardo is not from USA" positively align parameters), over-ripple
(learning "Leonardo is from USA" raises "Leonardo speaks USA"), the cross-lingual barrier (the same fact in
another language shares few parameters) and the logical-distance barrier (a fact a few logical steps away).

World: :mod:`lmsci.worlds.bios_messy` (bioS people; birth city, employer, employer's city; two templates each;
true negations; a second language through a permuted vocabulary; two-hop statements). A GPT memorises every
statement (gate: fact recall >= 0.9). Parameter overlap is the cosine of the gradients of
``log p(object | subject, relation)`` over all parameters (:mod:`lmsci.measure.grad_overlap`; per layer in the
report). Over-ripple: the model is fine-tuned on one counterfactual fact ("X was born in Y'") and the log-probability
of the related-but-false "X worked in Y'" is compared before and after (paired over facts).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field

from lmsci.claims import Claim, Gate, Verdict, across_seeds
from lmsci.config import ExperimentConfig
from lmsci.experiments.base import Experiment, Figure, Point, PointContext, save_figure
from lmsci.experiments.knowledge_common import (
    MEMORISED, ModelSpec, TrainSpec, check_model, make_model, md_table, recall_gate, seed_values, train_packed,
)
from lmsci.experiments.registry import register
from lmsci.measure.accuracy import exact_match
from lmsci.measure.grad_overlap import span_logprobs, statement_gradients
from lmsci.runs import RunDir
from lmsci.worlds.bios import Packed
from lmsci.worlds.bios_messy import RELATIONS, MessyBiosWorld, Statement, statement_batch

PAIR_KINDS = ("negation", "translation", "unrelated", "paraphrase", "two_hop")
"""Partner of each fact in the overlap pairs: its (false) negation, its language-2 translation, an unrelated fact
(another person, another relation, same language), its other-template paraphrase, and (for employer facts) the
two-hop statement of the employer's city."""
BARRIER_MARGIN = 0.05
EDIT_LEARNED_MIN = 0.5
EDIT_LEARNED = Gate("edit-learned", f"fine-tuning learned the new fact: mean P(new object | prompt) after fine-tuning "
                                    f">= {EDIT_LEARNED_MIN} in every seed")
MEMORISED_FACTS = Gate("memorised", "fact recall (greedy exact match of the object of every training fact statement, "
                                    "both languages, both templates) >= 0.9 in every seed")


class MessyKnowledgeConfig(ExperimentConfig):
    """Configuration of ``messy-knowledge`` (defaults = quick preset).

    Attributes:
        n_people: people of the world (each: 3 relations x 2 templates facts, 3 true negations, 1 two-hop statement,
            in 2 languages).
        model: the GPT. epochs: passes over the statements (budget; training stops once recall >= memorise_stop).
        pretrain: optimizer settings. memorise_check_every / memorise_stop: recall checks.
        n_pairs: facts whose overlap pairs are measured per seed. n_matrix: facts shown in the overlap matrix figure.
        n_ripple: facts fine-tuned on (each alone, from the pretrained model). ripple_steps / ripple_lr: Adam
            fine-tuning on the new fact's object tokens.
    """

    n_people: int = Field(48, ge=4)
    model: ModelSpec = ModelSpec(d_model=64, n_layers=4, n_heads=4)
    epochs: int = Field(100, ge=1)
    pretrain: TrainSpec = TrainSpec(lr=3e-3, batch_size=32)
    memorise_check_every: int = Field(200, ge=0)
    memorise_stop: float | None = Field(0.97, gt=0, le=1)
    n_pairs: int = Field(32, ge=2)
    n_matrix: int = Field(8, ge=1)
    n_ripple: int = Field(16, ge=1)
    ripple_steps: int = Field(10, ge=1)
    ripple_lr: float = Field(1e-3, gt=0)

    PRESETS = {
        "smoke": {"n_people": 6, "model": {"d_model": 16, "n_layers": 2, "n_heads": 2}, "epochs": 1,
                  "memorise_check_every": 0, "n_pairs": 3, "n_matrix": 2, "n_ripple": 2, "ripple_steps": 2},
        "quick": {"n_seeds": 3},
        # one H100 (estimated, not measured): 2000 people, 8-layer d_model 256
        "gpu": {"n_people": 2000, "model": {"d_model": 256, "n_layers": 8, "n_heads": 8}, "epochs": 200,
                "pretrain": {"lr": 1e-3, "batch_size": 128}, "memorise_check_every": 1000, "n_pairs": 200,
                "n_ripple": 100, "n_seeds": 3},
        # the seed's setting is pretrained LLMs; a world-scale stand-in: 20k people, GPT-2 small
        "paper": {"n_people": 20_000, "model": {"d_model": 768, "n_layers": 12, "n_heads": 12}, "epochs": 200,
                  "pretrain": {"lr": 3e-4, "batch_size": 256}, "memorise_check_every": 5000, "n_pairs": 500,
                  "n_ripple": 200, "n_seeds": 3},
    }


def fact_recall(model, statements: list[Statement], device: str) -> float:
    """Greedy exact match of the object of each fact statement (mean)."""
    facts = [s for s in statements if s.kind == "fact"]
    return float(exact_match(model, facts, stop=0, device=device).mean()) if facts else float("nan")


def overlap_statements(world: MessyBiosWorld, n_pairs: int, rng: np.random.Generator) -> tuple[list[Statement], list[str]]:
    """``n_pairs`` facts (template 0, language 1, relations in turn) and their partners: blocks of statements in the
    order fact, :data:`PAIR_KINDS` (two-hop partners are paired with the person's employer fact, which comes last)."""
    people = rng.permutation(world.n)[:n_pairs]
    facts, neg, tr, un, para, emp, hop = [], [], [], [], [], [], []
    for k, i in enumerate(people):
        i = int(i)
        r = RELATIONS[k % len(RELATIONS)]
        facts.append(world.statement(i, r))
        neg.append(world.statement(i, r, kind="negation"))
        tr.append(world.statement(i, r, lang=2))
        j = int(rng.choice([p for p in range(world.n) if p != i]))
        r2 = RELATIONS[(k + 1 + int(rng.integers(len(RELATIONS) - 1))) % len(RELATIONS)]
        un.append(world.statement(j, r2))
        para.append(world.statement(i, r, template=1))
        emp.append(world.statement(i, "company"))
        hop.append(world.statement(i, "company_city", kind="two_hop"))
    blocks = facts + neg + tr + un + para + hop + emp
    labels = (["fact"] * len(facts) + ["negation"] * len(neg) + ["translation"] * len(tr) + ["unrelated"] * len(un)
              + ["paraphrase"] * len(para) + ["two_hop"] * len(hop) + ["employer fact"] * len(emp))
    return blocks, labels


@register("messy-knowledge")
class MessyKnowledge(Experiment):
    """Negation curse, cross-lingual barrier and over-ripple on a memorised bioS statement world.

    Source: seed lecture 000, "Knowledge seems to be stored messily".
    """

    claim = ("Knowledge is stored messily: a fact and its negation align parameters, a fact and its translation "
             "barely do, and learning a fact raises related but false statements.")
    source = "seed lecture 000 ('Where is knowledge stored': negation curse, over-ripple, cross-lingual barrier)"
    Config = MessyKnowledgeConfig
    time_estimate = {"smoke": "~3 s", "quick": "3.3 min measured (199 s wall, 182 s CPU, 3 seeds, one thread beside another run, 2026-11-23)",
                     "gpu": "~15 min on one H100 (estimated, not measured)",
                     "paper": "GPT-2 small on 20k people: ~3 GPU-hours per seed (estimated)"}
    claims = [
        Claim("negation-curse",
              "The gradients of a fact and of its negation are positively aligned (the negation curse).",
              "seed lecture 000, 'Knowledge seems to be stored messily: incompatible sentences positively align "
              "parameters'",
              "qualitative: 'X' and 'not X' positively align parameters",
              "cosine of grad log p(object | prompt) over all parameters between 'X was born in Y .' and 'X was not "
              "born in Y .' (same template, same object), mean over the measured facts, per seed",
              "mean over seeds > 0 with the 95% Student-t CI across seeds entirely above 0",
              gates=(MEMORISED_FACTS,)),
        Claim("cross-lingual-barrier",
              "The gradients of a fact and of its translation are less aligned than those of a fact and an unrelated "
              "fact of the same language plus 0.05 (the cross-lingual barrier).",
              "seed lecture 000, 'similar sentences with low parameter overlap: cross-lingual barrier'",
              "qualitative: the same fact in two languages shares few parameters",
              "per seed: mean over facts of cos(fact, its language-2 translation) minus mean of cos(fact, an "
              "unrelated fact: another person, another relation, same language)",
              f"95% Student-t CI across seeds entirely below {BARRIER_MARGIN}",
              gates=(MEMORISED_FACTS,)),
        Claim("over-ripple",
              "After fine-tuning on a fact, the probability of the related-but-false statement rises with it "
              "(over-ripple).",
              "seed lecture 000, 'Over-ripple: X: Leonardo is from USA; Leonardo speaks USA'",
              "qualitative: the related false statement's probability rises",
              "per fine-tuned counterfactual fact 'X was born in Y'' (Adam on its object tokens, from the pretrained "
              "model): log P(Y' | 'X worked in') after minus before (nats); mean over facts, per seed",
              "95% Student-t CI across seeds of the mean change entirely above 0",
              gates=(MEMORISED_FACTS, EDIT_LEARNED)),
        Claim("over-ripple-specific",
              "The related-but-false statement of the fine-tuned person rises more than the same false object for "
              "another person (the ripple follows the subject, not only the object).",
              "lmsci control for seed lecture 000's over-ripple",
              "(not in the seed)",
              "per fine-tuned fact: [log P(Y' | 'X worked in') change] minus [log P(Y' | 'Z worked in') change] for a "
              "random other person Z (nats); mean over facts, per seed",
              "95% Student-t CI across seeds entirely above 0",
              gates=(MEMORISED_FACTS, EDIT_LEARNED), ablation=True),
    ]

    def validate(self, cfg: MessyKnowledgeConfig) -> None:
        check_model(cfg.model)

    def points(self, cfg: MessyKnowledgeConfig) -> list[Point]:
        return [Point("messy", {})]

    def run_point(self, cfg: MessyKnowledgeConfig, point: Point, ctx: PointContext) -> dict:
        import torch

        world = MessyBiosWorld(cfg.n_people, seed=cfg.seed)
        train_st = world.training_statements(seed=cfg.seed)
        x, y = statement_batch(train_st, world.vocab.pad_id)
        g = np.random.default_rng([ctx.seed, 3])
        perm = torch.from_numpy(np.concatenate([g.permutation(len(train_st)) for _ in range(cfg.epochs)]))
        packed = Packed(x[perm], y[perm], [[train_st[i].person] for i in perm.tolist()],
                        [[train_st[i].kind] for i in perm.tolist()])
        model = make_model(world, cfg.model, max(32, x.shape[1]), ctx.seed).to(ctx.device)
        pre = train_packed(model, packed, cfg.pretrain, seed=ctx.seed, ctx=ctx, phase="pretrain", device=ctx.device,
                           recall_fn=lambda m: fact_recall(m, train_st, ctx.device),
                           check_every=cfg.memorise_check_every, stop_at=cfg.memorise_stop,
                           precision=cfg.precision)
        model.eval()
        recall = fact_recall(model, train_st, ctx.device)
        rng = np.random.default_rng([ctx.seed, 505])
        n = min(cfg.n_pairs, world.n)
        sts, labels = overlap_statements(world, n, rng)
        G = statement_gradients(model, [s.ids for s in sts], [s.span for s in sts])
        cos = G.cosine()
        idx = {k: np.arange(n) + n * b for b, k in enumerate(["fact", *PAIR_KINDS, "employer"])}
        pairs = {k: (idx["fact"], idx[k]) for k in PAIR_KINDS if k != "two_hop"}
        pairs["two_hop"] = (idx["employer"], idx["two_hop"])
        row: dict[str, Any] = {"n_people": cfg.n_people, "params": model.num_params(), "pretrain_steps": pre["steps"],
                               "pretrain_steps_budget": pre["steps_budget"], "fact_recall": recall,
                               "recall_checks": json.dumps(pre["recall_checks"]), "n_pairs": n,
                               "negation_recall": float(exact_match(model, [s for s in train_st if s.kind == "negation"],
                                                                    stop=0, device=ctx.device).mean())}
        per_layer: dict[str, dict[str, float]] = {}
        for k, (a, b) in pairs.items():
            vals = cos[a, b]
            row[f"cos_{k}"] = float(vals.mean())
            row[f"cos_{k}_sd"] = float(vals.std(ddof=1)) if len(vals) > 1 else float("nan")
            per_layer[k] = {grp: float(G.cosine(grp)[a, b].mean()) for grp in G.groups}
        row["cos_per_layer"] = json.dumps(per_layer)
        row["barrier_diff"] = row["cos_translation"] - row["cos_unrelated"]
        m = min(cfg.n_matrix, n)
        sel = np.concatenate([idx[k][:m] for k in ["fact", *PAIR_KINDS]])
        row["overlap_matrix"] = json.dumps({"labels": [labels[i] for i in sel], "cos": cos[np.ix_(sel, sel)].tolist()})
        row.update(self._ripple(cfg, world, model, rng, ctx))
        return row

    def _ripple(self, cfg: MessyKnowledgeConfig, world: MessyBiosWorld, model, rng: np.random.Generator,
                ctx: PointContext) -> dict[str, Any]:
        import torch

        cities = world.pool("birth_city")
        cand = [i for i in rng.permutation(world.n)
                if world.value_words(int(i), "birth_city") != world.value_words(int(i), "company_city")]
        d_rel, d_ctl, d_tgt, p_after = [], [], [], []
        for i in cand[:cfg.n_ripple]:
            i = int(i)
            own = {tuple(world.value_words(i, r)) for r in ("birth_city", "company_city")}
            new = next(cities[int(k)] for k in rng.permutation(len(cities)) if tuple(cities[int(k)]) not in own)
            target = world.statement(i, "birth_city", value=new)
            related = world.related_false(i, "birth_city", value=new)
            j = int(rng.choice([p for p in range(world.n) if p != i]))
            control = world.related_false(j, "birth_city", value=new)
            probe = [target, related, control]

            def lps(m):
                return span_logprobs(m, [s.ids for s in probe], [s.span for s in probe])

            before = lps(model)
            tuned = copy.deepcopy(model)
            tuned.train()
            opt = torch.optim.Adam(tuned.parameters(), lr=cfg.ripple_lr)
            ids = torch.as_tensor(target.ids, device=ctx.device)[None]
            s, e = target.span
            for _ in range(cfg.ripple_steps):
                opt.zero_grad()
                lp = torch.log_softmax(tuned(ids)[0, s - 1:e - 1].float(), -1)
                loss = -lp.gather(-1, ids[0, s:e, None]).sum()
                loss.backward()
                opt.step()
            tuned.eval()
            after = lps(tuned)
            d_tgt.append(after[0] - before[0])
            d_rel.append(after[1] - before[1])
            d_ctl.append(after[2] - before[2])
            p_after.append(float(np.exp(after[0])))
        k = len(d_rel)
        return {"n_ripple": k, "ripple_target_dlogp": float(np.mean(d_tgt)) if k else np.nan,
                "ripple_related_dlogp": float(np.mean(d_rel)) if k else np.nan,
                "ripple_related_dlogp_sd": float(np.std(d_rel, ddof=1)) if k > 1 else np.nan,
                "ripple_control_dlogp": float(np.mean(d_ctl)) if k else np.nan,
                "ripple_specific": float(np.mean(np.subtract(d_rel, d_ctl))) if k else np.nan,
                "ripple_p_after": float(np.mean(p_after)) if k else np.nan}

    # ---- verdicts ------------------------------------------------------------------------------
    def verdicts(self, cfg: MessyKnowledgeConfig, results: pd.DataFrame, run: RunDir) -> list[Verdict]:
        if not len(results):
            return []
        mem = recall_gate(seed_values(results, "fact_recall"))
        out = []
        neg = seed_values(results, "cos_negation")
        st = across_seeds(list(neg.values()))
        out.append(self.judge(cfg, "negation-curse", value=st.mean, passed=bool(st.n >= 2 and st.ci[0] > 0),
                              ci=st.ci, ci_kind=st.kind, n_seeds=st.n, gates={"memorised": mem},
                              details={"per_seed": neg, "within_run_sd_over_facts": seed_values(results, "cos_negation_sd"),
                                       "paraphrase": seed_values(results, "cos_paraphrase"),
                                       "unrelated": seed_values(results, "cos_unrelated")}))
        diff = seed_values(results, "barrier_diff")
        st = across_seeds(list(diff.values()))
        out.append(self.judge(cfg, "cross-lingual-barrier", value=st.mean,
                              passed=bool(st.n >= 2 and st.ci[1] < BARRIER_MARGIN), ci=st.ci, ci_kind=st.kind,
                              n_seeds=st.n, gates={"memorised": mem},
                              details={"per_seed": diff, "translation": seed_values(results, "cos_translation"),
                                       "unrelated": seed_values(results, "cos_unrelated"),
                                       "two_hop": seed_values(results, "cos_two_hop")}))
        rel = {k: v for k, v in seed_values(results, "ripple_related_dlogp").items() if np.isfinite(v)}
        pa = seed_values(results, "ripple_p_after")
        learned = (min(pa.values()), min(pa.values()) >= EDIT_LEARNED_MIN) if pa else (None, None)
        if not rel:
            out.append(self.judge(cfg, "over-ripple", value=None, passed=None,
                                  gates={"memorised": mem, "edit-learned": learned},
                                  why_not_computed="no fact with a related-but-false statement was fine-tuned"))
            return out
        st = across_seeds(list(rel.values()))
        out.append(self.judge(cfg, "over-ripple", value=st.mean, passed=bool(st.n >= 2 and st.ci[0] > 0), ci=st.ci,
                              ci_kind=st.kind, n_seeds=st.n, gates={"memorised": mem, "edit-learned": learned},
                              details={"per_seed": rel, "target_dlogp": seed_values(results, "ripple_target_dlogp"),
                                       "control_dlogp (another person, same false object)":
                                           seed_values(results, "ripple_control_dlogp"),
                                       "p_new_after": pa}))
        spec = {k: v for k, v in seed_values(results, "ripple_specific").items() if np.isfinite(v)}
        if spec:
            st = across_seeds(list(spec.values()))
            out.append(self.judge(cfg, "over-ripple-specific", value=st.mean, passed=bool(st.n >= 2 and st.ci[0] > 0),
                                  ci=st.ci, ci_kind=st.kind, n_seeds=st.n,
                                  gates={"memorised": mem, "edit-learned": learned}, details={"per_seed": spec}))
        return out

    def report_sections(self, cfg: MessyKnowledgeConfig, results: pd.DataFrame, run: RunDir) -> str:
        if not len(results):
            return ""
        cols = [c for c in ("point", "pretrain_steps", "fact_recall", "negation_recall", "cos_negation",
                            "cos_translation", "cos_unrelated", "cos_paraphrase", "cos_two_hop", "barrier_diff",
                            "ripple_p_after", "ripple_target_dlogp", "ripple_related_dlogp", "ripple_control_dlogp", "ripple_specific")
                if c in results]
        return "\n".join(["## Per seed", "", md_table(results, cols), "",
                          "Cosines of grad log p(object | prompt) over all parameters; `cos_two_hop` pairs a person's "
                          "employer fact with the two-hop statement of the employer's city. Over-ripple changes are in "
                          "nats; the control is the same false object for another person.", ""])

    def figures(self, cfg: MessyKnowledgeConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        if not len(results):
            return []
        figs = []
        for r in results.itertuples():
            om = json.loads(r.overlap_matrix)
            fig, ax = plt.subplots(figsize=(7.5, 6.5))
            im = ax.imshow(np.array(om["cos"]), cmap="RdBu_r", vmin=-1, vmax=1)
            labs = om["labels"]
            ticks = [i for i in range(len(labs)) if i == 0 or labs[i] != labs[i - 1]]
            ax.set_xticks(ticks, [labs[i] for i in ticks], rotation=45, ha="right", fontsize=8)
            ax.set_yticks(ticks, [labs[i] for i in ticks], fontsize=8)
            ax.set_title(f"gradient cosine, all parameters ({r.point})")
            plt.colorbar(im, ax=ax, fraction=0.046)
            figs.append(save_figure(fig, run, f"overlap_matrix_{r.point}.png",
                                    f"Parameter overlap (cosine of grad log p(object)) between facts and their partners "
                                    f"({r.point}); blocks: facts, negations, translations, unrelated facts, paraphrases, "
                                    "two-hop statements."))
        per = [json.loads(s) for s in results["cos_per_layer"]]
        groups = list(per[0][PAIR_KINDS[0]])
        fig, ax = plt.subplots(figsize=(8, 4))
        w = 0.8 / len(PAIR_KINDS)
        for k, kind in enumerate(PAIR_KINDS):
            vals = np.array([[p[kind][gname] for gname in groups] for p in per])
            ax.bar(np.arange(len(groups)) + k * w, vals.mean(0), w, yerr=vals.std(0) if len(per) > 1 else None,
                   label=kind)
        ax.axhline(0, color="k", lw=0.5)
        ax.set_xticks(np.arange(len(groups)) + 0.4 - w / 2, groups)
        ax.set_ylabel("mean gradient cosine")
        ax.legend(fontsize=8)
        figs.append(save_figure(fig, run, "overlap_per_layer.png",
                                "Per-layer parameter overlap of a fact with each partner (mean over facts; bars: seeds' "
                                "spread)."))
        return figs
