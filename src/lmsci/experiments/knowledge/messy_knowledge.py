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

Registered items (issue 29), each measured in the same run on the same model:

- ``negation-curse`` (a design check): cos(fact, negation) minus cos(fact, another person's fact of the same
  relation and template) > 0. Reported beside: a second such other-person fact in the negation's place (0 by
  symmetry) and the same difference on an untrained model of the same shape, which already meets the rule (the
  fact and its negation share their subject and object tokens): it holds by construction, so it is a check.
- ``cross-lingual-barrier`` (a design check): cos(fact, translation) minus cos(fact, another person's fact in
  language 2) below 0.05. Reported beside: the same difference for the language-1 paraphrase (no language change)
  and on an untrained model, which already shows no excess alignment (the translation shares no token).
- ``over-ripple`` (a claim): the rise of log P(Y' | "X worked in") minus the rise of log P(Y' | "Z worked in") for another
  person Z (the same false object for another person decides); null arm: the same paired difference with X
  replaced by a second other person Z2 (0 by symmetry). ``over-ripple-raw`` (X's rise against 0, the first
  registration's statistic) is an ablation; the earlier ``over-ripple-specific`` ablation is now the claim.

Arms (issue 44): ``real`` and ``null`` are two arms of the sweep computed from ONE trained model per seed
(:meth:`MessyKnowledge.groups` pairs them; nothing is trained twice). The null row holds the same registered
columns measured with the partner replaced: ``negation_vs_same_template`` with a second other person's fact in the
negation's place, ``translation_vs_same_template_l2`` with the language-1 paraphrase (less its paraphrase-template
comparator) in the translation's place, ``ripple_specific`` and ``ripple_related_dlogp`` with a second other person
Z2 in X's place, and the ``init_*`` differences likewise on the untrained model. The claims engine judges every
item (the two checks need no null arm: their null rows are reported beside). Gates: ``memorised`` (fact recall
>= 0.9 in every seed) and ``edit-learned`` (mean P(new object) after fine-tuning >= 0.5 in every seed) read the
real arm's rows. No escape hatch.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, ci_above, ci_below, every_at_least
from lmsci.config import ExperimentConfig
from lmsci.contract import Experiment, Figure, Point, PointContext, cross_arms, save_figure
from lmsci.experiments.knowledge._gates import RECALL_MIN
from lmsci.experiments.knowledge._specs import PhaseSpec
from lmsci.models.gpt import GPT, GPTSpec
from lmsci.report import markdown_table
from lmsci.train.packed import train_packed
from lmsci.experiments.registry import register
from lmsci.measure.accuracy import exact_match
from lmsci.measure.grad_overlap import span_logprobs, statement_gradients
from lmsci.runs import RunDir
from lmsci.worlds.bios_datasets import Packed
from lmsci.worlds.bios_messy import RELATIONS, MessyBiosWorld, Statement, statement_batch

PAIR_KINDS = ("negation", "translation", "unrelated", "paraphrase", "two_hop")
"""Partner of each fact in the overlap pairs: its (false) negation, its language-2 translation, an unrelated fact
(another person, another relation, same language), its other-template paraphrase, and (for employer facts) the
two-hop statement of the employer's city."""
BARRIER_MARGIN = 0.05
EDIT_LEARNED_MIN = 0.5
EDIT_LEARNED = Gate("edit-learned", every_at_least(EDIT_LEARNED_MIN),
                    stat=Stat("ripple_p_after", words="fine-tuning learned the new fact: mean P(new object | prompt) "
                                                      "after fine-tuning"))
MEMORISED_FACTS = Gate("memorised", every_at_least(RECALL_MIN),
                       stat=Stat("fact_recall", words="fact recall (greedy exact match of the object of every training "
                                                      "fact statement, both languages, both templates)"))
#: the registered columns whose null-arm value replaces the partner (real column -> the null arm's measurement)
NULL_OF = {"negation_vs_same_template": "second_other_vs_same_template",
           "translation_vs_same_template_l2": "paraphrase_vs_same_template_para",
           "init_negation_vs_same_template": "init_second_other_vs_same_template",
           "init_translation_vs_same_template_l2": "init_paraphrase_vs_same_template_para",
           "ripple_specific": "ripple_specific_z2", "ripple_related_dlogp": "ripple_control2_dlogp"}
REAL_ONLY = ("overlap_matrix", "cos_per_layer")

class MessyKnowledgeConfig(ExperimentConfig):
    """Configuration of ``messy-knowledge`` (defaults = quick preset).

    Attributes:
        n_people: people of the world (each: 3 relations x 2 templates facts, 3 true negations, 1 two-hop statement,
            in 2 languages).
        model: the GPT (GPTSpec). epochs: passes over the statements (budget; training stops once recall >=
            memorise_stop).
        pretrain: optimizer settings (PhaseSpec). memorise_check_every / memorise_stop: recall checks.
        n_pairs: facts whose overlap pairs are measured per seed. n_matrix: facts shown in the overlap matrix figure.
        n_ripple: facts fine-tuned on (each alone, from the pretrained model). ripple_steps / ripple_lr: Adam
            fine-tuning on the new fact's object tokens.
    """

    n_people: int = Field(48, ge=4)
    model: GPTSpec = GPTSpec(d_model=64, n_layers=4, n_heads=4, pos="rope", tie_embeddings=True)
    epochs: int = Field(100, ge=1)
    pretrain: PhaseSpec = PhaseSpec(lr=3e-3, batch_size=32)
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
        # 5 seeds (3 until issue 29): the across-seed interval then depends less on the master seed; ~6 minutes
        "quick": {"n_seeds": 5},
        # one H100 <= 9 min (estimated, not measured; _messy_knowledge_estimate): 1000 people, 8-layer d_model 256,
        # a 100-epoch budget (session 52: 2000 people x 200 epochs were ~30 min at the whole budget)
        "gpu": {"n_people": 1000, "model": {"d_model": 256, "n_layers": 8, "n_heads": 8}, "epochs": 100,
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


#: the blocks of :func:`overlap_statements`, in order (each ``n_pairs`` statements; block k pairs with the fact at
#: the same position, the two-hop block with the employer fact)
BLOCKS = ("fact", "negation", "translation", "unrelated", "paraphrase", "two_hop", "employer", "same_template",
          "same_template_2", "same_template_l2", "same_template_para")
EXTRA_KINDS = ("same_template", "same_template_2", "same_template_l2", "same_template_para")
"""Comparators of the registered statistics (issue 29): another person's fact of the same relation and template
(``same_template``; a second other person: ``same_template_2``), that fact in language 2 (``same_template_l2``) and
in the paraphrase template (``same_template_para``)."""


def overlap_statements(world: MessyBiosWorld, n_pairs: int, rng: np.random.Generator) -> tuple[list[Statement], list[str]]:
    """``n_pairs`` facts (template 0, language 1, relations in turn) and their partners: blocks of statements in the
    order of :data:`BLOCKS` (two-hop partners are paired with the person's employer fact). The other people of
    the ``same_template`` blocks are two distinct people other than the fact's (drawn after the rest, so that
    the earlier blocks are those of the first registration)."""
    people = rng.permutation(world.n)[:n_pairs]
    b: dict[str, list[Statement]] = {k: [] for k in BLOCKS}
    for k, i in enumerate(people):
        i = int(i)
        r = RELATIONS[k % len(RELATIONS)]
        b["fact"].append(world.statement(i, r))
        b["negation"].append(world.statement(i, r, kind="negation"))
        b["translation"].append(world.statement(i, r, lang=2))
        j = int(rng.choice([p for p in range(world.n) if p != i]))
        r2 = RELATIONS[(k + 1 + int(rng.integers(len(RELATIONS) - 1))) % len(RELATIONS)]
        b["unrelated"].append(world.statement(j, r2))
        b["paraphrase"].append(world.statement(i, r, template=1))
        b["employer"].append(world.statement(i, "company"))
        b["two_hop"].append(world.statement(i, "company_city", kind="two_hop"))
    for k, i in enumerate(people):
        i = int(i)
        r = RELATIONS[k % len(RELATIONS)]
        j1, j2 = (int(v) for v in rng.choice([p for p in range(world.n) if p != i], 2, replace=False))
        b["same_template"].append(world.statement(j1, r))
        b["same_template_2"].append(world.statement(j2, r))
        b["same_template_l2"].append(world.statement(j1, r, lang=2))
        b["same_template_para"].append(world.statement(j1, r, template=1))
    label = {"employer": "employer fact"}
    blocks = [s for k in BLOCKS for s in b[k]]
    labels = [label.get(k, k) for k in BLOCKS for _ in b[k]]
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
    time_estimate = {"smoke": "~3 s", "quick": "~6 min estimated for 5 seeds (3.3 min measured for 3 seeds: 199 s wall, 182 s CPU, one thread "
                              "beside another run, 2026-11-23; issue 29 added two seeds and 4 x n_pairs gradients)",
                     "gpu": "~8 min on one H100 (7.6 min), estimated by _messy_knowledge_estimate for the whole "
                            "100-epoch budget (an upper bound: training stops at the recall gate); not measured: no GPU "
                            "in the session (was ~15 min documented; 2000 people x 200 epochs, 30 min by that estimate)",
                     "paper": "GPT-2 small on 20k people: ~3 GPU-hours per seed (estimated)"}
    claims = [
        Claim("negation-curse",
              "The gradient of a fact is more aligned with that of its negation than with that of another person's "
              "fact written in the same template (the negation curse: 'X' and 'not X' share parameters).",
              "seed lecture 000, 'Knowledge seems to be stored messily: incompatible sentences positively align "
              "parameters'",
              "qualitative: 'X' and 'not X' positively align parameters",
              statistic=Stat("negation_vs_same_template",
                             words="per fact: cos(grad log p(object | prompt) of 'X was born in Y .', that of 'X was "
                                   "not born in Y .') minus cos(the fact's gradient, that of 'Z was born in W .': "
                                   "another person Z, same relation, same template, same language), gradients over "
                                   "all parameters; mean over the measured facts. A design check (issue 29): the fact "
                                   "and its negation share the subject and object tokens and an untrained model of "
                                   "the same shape already meets the rule (init_* columns, reported beside)"),
              rule=ci_above(0.0), gates=(MEMORISED_FACTS,), kind="check"),
        Claim("cross-lingual-barrier",
              "The gradient of a fact is barely more aligned with that of its language-2 translation than with that "
              "of another person's fact in language 2 (the cross-lingual barrier).",
              "seed lecture 000, 'similar sentences with low parameter overlap: cross-lingual barrier'",
              "qualitative: the same fact in two languages shares few parameters",
              statistic=Stat("translation_vs_same_template_l2",
                             words="per fact: cos(fact, its language-2 translation) minus cos(fact, another person's "
                                   "fact of the same relation and template in language 2), gradients over all "
                                   "parameters; mean over facts. A design check (issue 29): the translation shares no "
                                   "token with the fact and an untrained model of the same shape already shows no "
                                   "excess alignment (init_* columns, reported beside)"),
              rule=ci_below(BARRIER_MARGIN), gates=(MEMORISED_FACTS,), kind="check"),
        Claim("over-ripple",
              "After fine-tuning on a fact about X, the probability of X's related-but-false statement rises more "
              "than that of the same false object for another person (over-ripple follows the subject, not only the "
              "object).",
              "seed lecture 000, 'Over-ripple: X: Leonardo is from USA; Leonardo speaks USA'",
              "qualitative: the related false statement's probability rises",
              statistic=Stat("ripple_specific",
                             words="per fine-tuned counterfactual fact 'X was born in Y'' (Adam on its object tokens, "
                                   "from the pretrained model): [log P(Y' | 'X worked in') after minus before] minus "
                                   "[log P(Y' | 'Z worked in') after minus before] for a random other person Z "
                                   "(nats); mean over facts"),
              rule=ci_above(0.0), gates=(MEMORISED_FACTS, EDIT_LEARNED),
              null="the same paired difference with X replaced by a second other person Z2 (neither Z nor Z2 was "
                   "edited: expected 0 by symmetry), on the same fine-tuned models",
              null_can_meet="only by chance: Z and Z2 are two other people drawn the same way, so their paired "
                            "difference is noise of the facts and people drawn (a few people whose prompt the "
                            "fine-tuning moves a lot weigh heavily), and its CI lies above 0 about 1 run in 40 at a "
                            "95% interval"),
        Claim("over-ripple-raw",
              "After fine-tuning on a fact, the probability of the related-but-false statement rises (the first "
              "registration's over-ripple statistic, without the other-person comparator).",
              "seed lecture 000, 'Over-ripple: X: Leonardo is from USA; Leonardo speaks USA'",
              "qualitative: the related false statement's probability rises",
              statistic=Stat("ripple_related_dlogp",
                             words="per fine-tuned fact: log P(Y' | 'X worked in') after minus before (nats); mean "
                                   "over facts"),
              rule=ci_above(0.0), gates=(MEMORISED_FACTS, EDIT_LEARNED), ablation=True),
    ]

    def points(self, cfg: MessyKnowledgeConfig) -> list[Point]:
        return cross_arms([Point("messy", {})], ("real", "null"))

    def groups(self, cfg: MessyKnowledgeConfig, points: list[Point]) -> list[list[Point]]:
        """The two arms of one training seed form one group: both are read off one trained model."""
        by: dict[int, list[Point]] = {}
        for p in points:
            by.setdefault(p.seed_index, []).append(p)
        return list(by.values())

    def run_group(self, cfg: MessyKnowledgeConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict]:
        """One model per seed (the arms share the seed: :meth:`point_seed`); a row per arm (see the module
        docstring: the null row holds the registered columns with the partner replaced)."""
        row = self._measure(cfg, ctxs[0])
        base = {k: v for k, v in row.items() if k not in set(NULL_OF.values()) - {"ripple_control2_dlogp"}}
        null = {**{k: v for k, v in base.items() if k not in REAL_ONLY}, **{k: row[v] for k, v in NULL_OF.items()}}
        return [{"arm": p.arm, **(null if p.arm == "null" else base)} for p in points]

    def _measure(self, cfg: MessyKnowledgeConfig, ctx: PointContext) -> dict:
        import torch

        world = MessyBiosWorld(cfg.n_people, seed=cfg.seed)
        train_st = world.training_statements(seed=cfg.seed)
        x, y = statement_batch(train_st, world.vocab.pad_id)
        g = np.random.default_rng([ctx.seed, 3])
        perm = torch.from_numpy(np.concatenate([g.permutation(len(train_st)) for _ in range(cfg.epochs)]))
        packed = Packed(x[perm], y[perm], [[train_st[i].person] for i in perm.tolist()],
                        [[train_st[i].kind] for i in perm.tolist()])
        model = GPT(cfg.model.gpt_config(len(world.vocab), max(32, x.shape[1])), seed=ctx.seed).to(ctx.device)
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
        idx = {k: np.arange(n) + n * b for b, k in enumerate(BLOCKS)}
        pairs = {k: (idx["fact"], idx[k]) for k in (*PAIR_KINDS, *EXTRA_KINDS) if k != "two_hop"}
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
        # the registered statistics (issue 29) and their null arms' values, per fact then averaged
        c = {k: cos[a, b] for k, (a, b) in pairs.items()}
        row["negation_vs_same_template"] = float(np.mean(c["negation"] - c["same_template"]))
        row["second_other_vs_same_template"] = float(np.mean(c["same_template_2"] - c["same_template"]))
        row["translation_vs_same_template_l2"] = float(np.mean(c["translation"] - c["same_template_l2"]))
        row["paraphrase_vs_same_template_para"] = float(np.mean(c["paraphrase"] - c["same_template_para"]))
        # reported beside (decides nothing): the same two statistics on an untrained model of the same shape, which
        # shows how much of them the shared tokens give before any training
        init = GPT(cfg.model.gpt_config(len(world.vocab), max(32, x.shape[1])), seed=ctx.seed + 11).to(ctx.device)
        ci0 = statement_gradients(init, [s.ids for s in sts], [s.span for s in sts]).cosine()
        c0 = {k: ci0[a_, b_] for k, (a_, b_) in pairs.items()}
        row["init_negation_vs_same_template"] = float(np.mean(c0["negation"] - c0["same_template"]))
        row["init_translation_vs_same_template_l2"] = float(np.mean(c0["translation"] - c0["same_template_l2"]))
        row["init_second_other_vs_same_template"] = float(np.mean(c0["same_template_2"] - c0["same_template"]))
        row["init_paraphrase_vs_same_template_para"] = float(np.mean(c0["paraphrase"] - c0["same_template_para"]))
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
        d_rel, d_ctl, d_ctl2, d_tgt, p_after = [], [], [], [], []
        for i in cand[:cfg.n_ripple]:
            i = int(i)
            own = {tuple(world.value_words(i, r)) for r in ("birth_city", "company_city")}
            new = next(cities[int(k)] for k in rng.permutation(len(cities)) if tuple(cities[int(k)]) not in own)
            target = world.statement(i, "birth_city", value=new)
            related = world.related_false(i, "birth_city", value=new)
            j, j2 = (int(v) for v in rng.choice([p for p in range(world.n) if p != i], 2, replace=False))
            control = world.related_false(j, "birth_city", value=new)
            control2 = world.related_false(j2, "birth_city", value=new)
            probe = [target, related, control, control2]

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
            d_ctl2.append(after[3] - before[3])
            p_after.append(float(np.exp(after[0])))
        k = len(d_rel)
        return {"n_ripple": k, "ripple_target_dlogp": float(np.mean(d_tgt)) if k else np.nan,
                "ripple_related_dlogp": float(np.mean(d_rel)) if k else np.nan,
                "ripple_related_dlogp_sd": float(np.std(d_rel, ddof=1)) if k > 1 else np.nan,
                "ripple_control_dlogp": float(np.mean(d_ctl)) if k else np.nan,
                "ripple_control2_dlogp": float(np.mean(d_ctl2)) if k else np.nan,
                "ripple_specific": float(np.mean(np.subtract(d_rel, d_ctl))) if k else np.nan,
                "ripple_specific_z2": float(np.mean(np.subtract(d_ctl2, d_ctl))) if k else np.nan,
                "ripple_p_after": float(np.mean(p_after)) if k else np.nan}

    def report_sections(self, cfg: MessyKnowledgeConfig, results: pd.DataFrame, run: RunDir) -> str:
        if not len(results):
            return ""
        cols = [c for c in ("arm", "point", "pretrain_steps", "fact_recall", "negation_recall", "cos_negation",
                            "cos_same_template", "cos_same_template_2", "negation_vs_same_template", "cos_translation",
                            "cos_same_template_l2", "translation_vs_same_template_l2", "cos_paraphrase",
                            "cos_same_template_para", "init_negation_vs_same_template",
                            "init_translation_vs_same_template_l2", "cos_unrelated", "cos_two_hop", "barrier_diff",
                            "ripple_p_after", "ripple_target_dlogp", "ripple_related_dlogp", "ripple_control_dlogp",
                            "ripple_control2_dlogp", "ripple_specific")
                if c in results]
        return "\n".join(["## Per arm and seed", "", markdown_table(results, None, cols=cols, float_format=".3f"),
                          "Cosines of grad log p(object | prompt) over all parameters; `cos_same_template` (and `_2`): "
                          "another person's fact of the same relation and template; `_l2`: that fact in language 2; "
                          "`_para`: in the paraphrase template. The null arm's rows (the same model) hold the "
                          "registered differences with the partner replaced: `negation_vs_same_template` with a second "
                          "other person's fact in the negation's place, `translation_vs_same_template_l2` with the "
                          "language-1 paraphrase (less `cos_same_template_para`), `ripple_specific` and "
                          "`ripple_related_dlogp` with a second other person Z2 in X's place; `init_*` the same "
                          "differences on an untrained model of the same shape (reported only: what the shared tokens "
                          "give before training). `cos_unrelated` is another person's fact of another relation; "
                          "`cos_two_hop` pairs a person's employer fact with the two-hop statement of the employer's "
                          "city. Over-ripple changes are in nats; `ripple_specific` (X's rise minus Z's, the same false "
                          "object for another person) is over-ripple's statistic.", ""])

    def figures(self, cfg: MessyKnowledgeConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        if "arm" in results:
            results = results[results["arm"] == "real"]  # the overlap matrices are measured once per model
        if not len(results) or "overlap_matrix" not in results:
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
