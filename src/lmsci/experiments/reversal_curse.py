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
    AUGMENTED, DataSpec, binom_ci, bio_recall, bio_stream, check_model, exposures_of,
    make_model, qa_metrics, qa_stream, train_packed,
)
from lmsci.experiments.registry import register
from lmsci.measure.accuracy import exact_match
from lmsci.measure.knowledge import span_ce_bits
from lmsci.runs import RunDir, Verdict
from lmsci.worlds.bios import BiosWorld, Doc, qa_split


class ReversalCurseConfig(BiosQAConfig):
    """Configuration of ``reversal-curse`` (defaults = quick preset)."""

    data: DataSpec = AUGMENTED

    PRESETS = {
        "smoke": {"n_people": 12, "exposures": 2, "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
                  "ft_epochs": 1, "seq_len": 160, "qa_seq_len": 64},
        "quick": {},
        "paper": {"n_people": 100_000, "exposures": 1000, "model": {"d_model": 768, "n_layers": 12, "n_heads": 12},
                  "seq_len": 512, "qa_seq_len": 512, "pretrain": {"lr": 1e-3, "batch_size": 192},
                  "finetune": {"lr": 3e-4, "batch_size": 48, "weight_decay": 0.0}, "ft_epochs": 50},
    }


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
    time_estimate = {"smoke": "~8 s", "quick": "10 min wall measured (188 s CPU) on 2 shared cores", "paper": "~days on 8 GPUs"}

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
                            specs=[(range(cfg.n_people), cfg.data)], reverse=rev)
        model = make_model(world, cfg.model, cfg.seq_len, ctx.seed)
        pre = train_packed(model, stream, cfg.pretrain, seed=ctx.seed, ctx=ctx, phase="pretrain", device=ctx.device)
        row = {"reverse_in_training": rev, "n_people": cfg.n_people, "params": model.num_params(),
               "exposures": exposures_of(stream, cfg.n_people, pre["windows_used"]),
               "bio_recall": bio_recall(model, world, range(cfg.n_people), seed=cfg.seed, spec=cfg.data,
                                        device=ctx.device)}
        # the reversed sentence itself ("Born on DATE in CITY was NAME ."), completed on P_test before QA
        # fine-tuning: the trained format of the inverse direction (Berglund et al.'s same-format test)
        rdocs = [world.bio(int(i), np.random.default_rng([cfg.seed, 17, int(i), 0]), permute=cfg.data.permute,
                           fullname=cfg.data.fullname, reverse=True) for i in te]
        for d in rdocs:
            d.spans["answer"] = d.spans["reverse_name"]
        row["reverse_sentence_name_test"] = float(exact_match(model, rdocs, device=ctx.device).mean())
        ft = qa_stream(world, tr, epochs=cfg.ft_epochs, seed=cfg.seed, seq_len=cfg.qa_seq_len, inverse=True)
        train_packed(model, ft, cfg.finetune, seed=ctx.seed + 1, ctx=ctx, phase="qa_finetune", device=ctx.device)
        row.update(qa_metrics(model, world, tr, te, device=ctx.device, inverse=True))
        row["name_logprob_gap_bits_test"] = name_logprob_gap(model, world, te, cfg.seed, ctx.device)
        row["n_test"] = len(te)
        return row

    def verdicts(self, cfg: ReversalCurseConfig, results: pd.DataFrame, run: RunDir) -> list[Verdict]:
        r = results.set_index("reverse_in_training")
        if True not in r.index or False not in r.index:
            return []
        inv_f, inv_r = float(r.loc[False, "inverse_test"]), float(r.loc[True, "inverse_test"])
        fwd_f = float(r.loc[False, "qa_test"])
        n = int(r.loc[False, "n_test"])
        ok = inv_f <= 0.1 and inv_r - inv_f >= 0.3
        note = ""
        if not ok:
            note = (f"Not reproduced at CPU scale: inverse search on P_test with the reverse trained = {inv_r:.2f} "
                    f"(biography recall {float(r.loc[True, 'bio_recall']):.2f}). The curse half (forward-only inverse "
                    f"= {inv_f:.2f}) is the robust part; the lift needs full memorisation of the reversed sentences, "
                    "e.g. N >= 10k with a ~10M-parameter model and >= 100 exposures.")
        return [Verdict(self.claim, "inverse-search exact match on P_test: forward-only, and lift when reverse is trained",
                        inv_f, "forward-only <= 0.10 and (with_reverse - forward-only) >= 0.30", ok,
                        ci=binom_ci(inv_f, n),
                        details={"inverse_test_forward_only": inv_f, "inverse_test_with_reverse": inv_r,
                                 "inverse_train_forward_only": float(r.loc[False, "inverse_train"]),
                                 "forward_qa_test_forward_only": fwd_f,
                                 "name_logprob_gap_bits_forward_only": float(r.loc[False, "name_logprob_gap_bits_test"]),
                                 "name_logprob_gap_bits_with_reverse": float(r.loc[True, "name_logprob_gap_bits_test"]),
                                 "paper": {"gpt3_reverse_exact_match": 0.0, "part3.2_inverse_search": "~0%"}},
                        note=note),
                Verdict("Only the trained direction is recalled: completing 'Born on DATE in CITY was ___' for "
                        "P_test people works when such sentences were in pretraining and not otherwise.",
                        "exact match of the name in the reversed sentence on P_test (before QA fine-tuning): "
                        "with_reverse minus forward_only",
                        float(r.loc[True, "reverse_sentence_name_test"] - r.loc[False, "reverse_sentence_name_test"]),
                        "forward_only <= 0.10 and difference >= 0.30",
                        bool(r.loc[False, "reverse_sentence_name_test"] <= 0.1 and
                             r.loc[True, "reverse_sentence_name_test"] - r.loc[False, "reverse_sentence_name_test"] >= 0.3),
                        details={"forward_only": float(r.loc[False, "reverse_sentence_name_test"]),
                                 "with_reverse": float(r.loc[True, "reverse_sentence_name_test"])})]

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
        ax.set_xticks(x, ["reverse in training" if v else "forward only" for v in results["reverse_in_training"]])
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("exact-match accuracy")
        ax.legend(fontsize=8)
        ax.set_title("Reversal curse on bioS")
        return [save_figure(fig, run, "reversal.png",
                            "Forward QA and inverse search (birth date + city -> name) with and without "
                            "the reversed direction in the pretraining biographies.")]
