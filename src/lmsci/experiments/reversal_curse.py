"""``reversal-curse``: knowledge learned as "name -> attributes" is not retrievable as "attributes -> name".

Sources: Allen-Zhu & Li, "Physics of Language Models: Part 3.2, Knowledge Manipulation",
arXiv 2309.14402, Section 5 (inverse knowledge search is ~0% unless the reversed direction is in
the training data); Berglund et al., "The Reversal Curse", arXiv 2309.12288, Section 2 (Table 1:
reverse-direction exact match 0.0%; the correct name is no more likely than a random name).

Design on bioS: biographies state name -> attributes (augmented: multiM+permute+fullname, so that
forward extraction works). QA fine-tuning on P_train uses the six forward questions and the
inverse question "Who was born on DATE in CITY ? Answer : NAME". P_test is scored on both.
Condition ``with_reverse`` adds to every biography one sentence with the reversed direction
("Born on DATE in CITY was NAME ."). Secondary metric (Berglund et al.): the mean log-likelihood
(bits) of the correct name minus that of another P_test person's name under the inverse question.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lmsci.experiments.base import Experiment, Figure, Point, PointContext, save_figure
from lmsci.experiments.knowledge_common import (
    BiosQAConfig,
    AUGMENTED, MEMORISED, DataSpec, bio_recall, bio_stream, check_model, exposures_of,
    make_model, paired, qa_metrics, qa_stream, recall_gate, seed_summary, seed_values, train_packed, within_run,
)
from lmsci.experiments.registry import register
from lmsci.measure.accuracy import exact_match
from lmsci.measure.knowledge import span_ce_bits
from lmsci.claims import Claim, Gate, Verdict, across_seeds
from lmsci.runs import RunDir
from lmsci.worlds.bios import BiosWorld, Doc, qa_split


class ReversalCurseConfig(BiosQAConfig):
    """Configuration of ``reversal-curse`` (defaults = quick preset)."""

    data: DataSpec = AUGMENTED

    PRESETS = {
        "smoke": {"n_people": 12, "exposures": 2, "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
                  "ft_epochs": 1, "seq_len": 160, "qa_seq_len": 64},
        "quick": {"n_seeds": 3},  # 159 s per seed measured (2026-11-23): 3 seeds fit the 15-minute budget
        "paper": {"n_people": 100_000, "exposures": 1000, "model": {"d_model": 768, "n_layers": 12, "n_heads": 12},
                  "seq_len": 512, "qa_seq_len": 512, "pretrain": {"lr": 1e-3, "batch_size": 192},
                  "finetune": {"lr": 3e-4, "batch_size": 48, "weight_decay": 0.0}, "ft_epochs": 50, "n_seeds": 3},
    }

FORWARD_QA = Gate("forward-qa", "forward QA exact match (name -> attributes) on the tested people (P_test) >= 0.5 in "
                                "every model trained (both conditions, every seed)")
FORWARD_QA_MIN = 0.5


def _swap_answer(doc: Doc, name_ids: list[int]) -> Doc:
    s, e = doc.spans["answer"][0]
    ids = doc.ids[:s] + name_ids + doc.ids[e:]
    return Doc(ids, doc.loss_mask, doc.person, {"answer": [(s, s + len(name_ids))]}, doc.kind)


def name_logprob_gap(model, world: BiosWorld, people, seed: int, device: str = "cpu") -> float:
    """Mean over ``people`` of [bits(random other name) - bits(correct name)] under the inverse question.

    Near 0 means the correct name is no more likely than a random one (the curse); source:
    Berglund et al., arXiv 2309.12288, Section 2.1 ("randomized" controls).
    """
    people = [int(i) for i in people]
    rng = np.random.default_rng([seed, 61])
    other = np.roll(np.asarray(people), 1 + int(rng.integers(max(len(people) - 1, 1))))
    right = [world.inverse_qa(i) for i in people]
    wrong = [_swap_answer(d, world.vocab.encode(world.name_words(int(j)))) for d, j in zip(right, other)]
    a = span_ce_bits(model, right, ["answer"], device=device)["answer"]
    b = span_ce_bits(model, wrong, ["answer"], device=device)["answer"]
    return float((b - a).mean())


@register("reversal-curse")
class ReversalCurse(Experiment):
    """Forward vs inverse knowledge search on bioS, with and without the reversed direction in training.

    Sources: Allen-Zhu & Li, arXiv 2309.14402, Section 5; Berglund et al., arXiv 2309.12288.
    """

    claim = ("A model trained on 'name -> attributes' cannot answer 'attributes -> name' for held-out people "
             "(inverse search near 0%) unless the reversed direction is in its training data.")
    source = "Allen-Zhu & Li, Part 3.2, arXiv 2309.14402, Section 5; Berglund et al., arXiv 2309.12288, Table 1"
    Config = ReversalCurseConfig
    time_estimate = {"smoke": "~8 s", "quick": "8.7 min measured (3 seeds, one thread beside the test suite)",
                     "paper": "~days on 8 GPUs per seed, 3 seeds (estimated)"}
    claims = [
        Claim("reversal",
              "Knowledge learned as 'name -> attributes' cannot be searched inversely ('attributes -> name') for "
              "held-out people, unless the training text also states the names after the attributes.",
              "Allen-Zhu & Li, Part 3.2, arXiv 2309.14402, Section 5; Berglund et al., arXiv 2309.12288, Table 1",
              "inverse search ~0% (Part 3.2); reverse-direction exact match 0.0% (Berglund et al., Table 1); "
              "inverse search works when the reversed direction is in the training data",
              "P_test inverse-search exact match (birth date + city -> name) after QA fine-tuning on P_train, per "
              "seed: forward-only, with the reversed sentence in pretraining, and their difference; value = mean "
              "over seeds of the difference",
              "mean over seeds: forward-only <= 0.1 and with-reverse >= 0.5, and the 95% Student-t CI across seeds "
              "of (with-reverse - forward-only) above 0",
              gates=(MEMORISED, FORWARD_QA)),
        Claim("reverse-sentence",
              "Before QA fine-tuning, completing 'Born on DATE in CITY was ___' for P_test people works only when "
              "such sentences were in pretraining.",
              "Berglund et al., arXiv 2309.12288, Section 2 (same-format test); Allen-Zhu & Li, arXiv 2309.14402, "
              "Section 5",
              "reverse-direction exact match 0.0% without the reversed direction in training",
              "P_test exact match of the name in the reversed sentence on the pretrained model, with-reverse minus "
              "forward-only, per seed; mean over seeds",
              "mean over seeds: forward-only <= 0.1 and with-reverse - forward-only >= 0.3 (ablation: decides "
              "nothing)",
              gates=(MEMORISED,), ablation=True),
    ]

    def validate(self, cfg: ReversalCurseConfig) -> None:
        check_model(cfg.model)

    def points(self, cfg: ReversalCurseConfig) -> list[Point]:
        return [Point("forward_only", {"reverse": False}), Point("with_reverse", {"reverse": True})]

    def run_point(self, cfg: ReversalCurseConfig, point: Point, ctx: PointContext) -> dict:
        world = BiosWorld(cfg.n_people, seed=cfg.seed)
        world.write_pools(ctx.run.path / "bios_pools.json")
        tr, te = qa_split(cfg.n_people, cfg.seed)
        rev = bool(point.params["reverse"])
        stream = bio_stream(world, exposures=cfg.exposures, seed=cfg.seed, seq_len=cfg.seq_len,
                            specs=[(range(cfg.n_people), cfg.data)], reverse=rev, order_seed=ctx.seed)
        model = make_model(world, cfg.model, cfg.seq_len, ctx.seed)
        pre = train_packed(model, stream, cfg.pretrain, seed=ctx.seed, ctx=ctx, phase="pretrain", device=ctx.device)
        row = {"reverse_in_training": rev, "n_people": cfg.n_people, "params": model.num_params(),
               "exposures": exposures_of(stream, cfg.n_people, pre["windows_used"]),
               "pretrain_steps": pre["steps"]}
        # memorisation on the pretrained model, for the QA-test people (the gate) and the QA-train people
        rec_tr = bio_recall(model, world, tr, seed=cfg.seed, spec=cfg.data, device=ctx.device)
        rec_te = bio_recall(model, world, te, seed=cfg.seed, spec=cfg.data, device=ctx.device)
        row.update({"bio_recall_train": rec_tr, "bio_recall_test": rec_te,
                    "bio_recall": (rec_tr * len(tr) + rec_te * len(te)) / (len(tr) + len(te))})
        # the reversed sentence itself ("Born on DATE in CITY was NAME ."), completed on P_test before QA
        # fine-tuning: the trained format of the inverse direction (Berglund et al.'s same-format test)
        rdocs = [world.bio(int(i), np.random.default_rng([cfg.seed, 17, int(i), 0]), permute=cfg.data.permute,
                           fullname=cfg.data.fullname, reverse=True) for i in te]
        for d in rdocs:
            d.spans["answer"] = d.spans["reverse_name"]
        row["reverse_sentence_name_test"] = float(exact_match(model, rdocs, device=ctx.device).mean())
        ft = qa_stream(world, tr, epochs=cfg.ft_epochs, seed=ctx.seed, seq_len=cfg.qa_seq_len, inverse=True)
        train_packed(model, ft, cfg.finetune, seed=ctx.seed + 1, ctx=ctx, phase="qa_finetune", device=ctx.device)
        row.update(qa_metrics(model, world, tr, te, device=ctx.device, inverse=True))
        row["name_logprob_gap_bits_test"] = name_logprob_gap(model, world, te, cfg.seed, ctx.device)
        row["n_test"] = len(te)
        return row

    def verdicts(self, cfg: ReversalCurseConfig, results: pd.DataFrame, run: RunDir) -> list[Verdict]:
        def per(col: str, rev: bool) -> dict[int, float]:
            return seed_values(results, col, reverse_in_training=rev)

        inv_f, inv_r = per("inverse_test", False), per("inverse_test", True)
        seeds = paired(inv_f, inv_r)
        if not seeds:
            return []
        n = int(results["n_test"].iloc[0])
        rec_f, rec_r = per("bio_recall_test", False), per("bio_recall_test", True)
        fwd_f, fwd_r = per("qa_test", False), per("qa_test", True)
        fwd = [v for d in (fwd_f, fwd_r) for v in d.values()]
        fwd_gate = (min(fwd), min(fwd) >= FORWARD_QA_MIN) if fwd else (None, None)
        diff = across_seeds([inv_r[k] - inv_f[k] for k in seeds])
        mf, mr = across_seeds([inv_f[k] for k in seeds]).mean, across_seeds([inv_r[k] for k in seeds]).mean
        ok = mf <= 0.1 and mr >= 0.5 and (diff.ci is None or diff.ci[0] > 0)
        scale = f"N={cfg.n_people}, d_model={cfg.model.d_model}, {cfg.exposures} exposures"
        out = [self.judge(
            cfg, "reversal", value=diff.mean, passed=ok, ci=diff.ci, ci_kind=diff.kind, n_seeds=diff.n,
            gates={"memorised": recall_gate(rec_f, rec_r), "forward-qa": fwd_gate},
            details={"inverse_test_forward_only": seed_summary(inv_f), "inverse_test_with_reverse": seed_summary(inv_r),
                     "inverse_train_forward_only": per("inverse_train", False),
                     "forward_qa_test": {"forward_only": fwd_f, "with_reverse": fwd_r},
                     "bio_recall_test": {"forward_only": rec_f, "with_reverse": rec_r},
                     "name_logprob_gap_bits": {"forward_only": per("name_logprob_gap_bits_test", False),
                                               "with_reverse": per("name_logprob_gap_bits_test", True)},
                     "forward_only_within_run": within_run(inv_f, n), "with_reverse_within_run": within_run(inv_r, n),
                     "paper": {"gpt3_reverse_exact_match": 0.0, "part3.2_inverse_search": "~0%"}},
            note="" if ok else (f"At {scale}: inverse search with the reverse trained = {mr:.2f}, forward-only = "
                                f"{mf:.2f}. The lift needs the reversed sentences memorised, e.g. N >= 10k with a "
                                "~10M-parameter model and >= 100 exposures."))]
        sf, sr = per("reverse_sentence_name_test", False), per("reverse_sentence_name_test", True)
        seeds = paired(sf, sr)
        if seeds:
            d = across_seeds([sr[k] - sf[k] for k in seeds])
            f = across_seeds([sf[k] for k in seeds]).mean
            out.append(self.judge(
                cfg, "reverse-sentence", value=d.mean, passed=f <= 0.1 and d.mean >= 0.3, ci=d.ci, ci_kind=d.kind,
                n_seeds=d.n, gates={"memorised": recall_gate(rec_f, rec_r)},
                details={"forward_only": seed_summary(sf), "with_reverse": seed_summary(sr),
                         "forward_only_within_run": within_run(sf, n), "with_reverse_within_run": within_run(sr, n)}))
        return out

    def figures(self, cfg: ReversalCurseConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        x = np.arange(len(results))
        cols = [("qa_test", "forward QA (P_test)"), ("inverse_train", "inverse (P_train, fine-tuned)"),
                ("inverse_test", "inverse (P_test)")]
        for k, (c, lab) in enumerate(cols):
            ax.bar(x + (k - 1) * 0.27, results[c], 0.27, label=lab)
        multi = "seed_index" in results and results["seed_index"].max() > 0
        ax.set_xticks(x, [("reverse in training" if r.reverse_in_training else "forward only") +
                          (f"\nseed {r.seed_index}" if multi else "") for r in results.itertuples()])
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("exact-match accuracy")
        ax.legend(fontsize=8)
        ax.set_title("Reversal curse on bioS")
        return [save_figure(fig, run, "reversal.png",
                            "Forward QA and inverse search (birth date + city -> name) with and without "
                            "the reversed direction in the pretraining biographies.")]
