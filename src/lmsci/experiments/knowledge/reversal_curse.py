"""``reversal-curse``: knowledge learned as "name -> attributes" is not retrievable as "attributes -> name".

Sources: Allen-Zhu & Li, "Physics of Language Models: Part 3.2, Knowledge Manipulation",
arXiv 2309.14402, Section 5 (inverse knowledge search is ~0% unless the training data states the
knowledge in the reversed direction); Berglund et al., "The Reversal Curse", arXiv 2309.12288,
Section 2 (Table 1: reverse-direction exact match 0.0%; the correct name is no more likely than a
random name, Figure 4).

Design on bioS. Every person has augmented forward biographies (multi5 + permute + fullname, so that
forward extraction works). Condition ``with_reverse`` adds, as documents of their own, *reversed*
biographies (:meth:`lmsci.worlds.bios.BiosWorld.bio_reversed`): the attributes come first and the full
name only after them ("The person that was born on DATE , that grew up in CITY , ... is NAME ."), in
1, 2 or 6 sentences (``reverse_groups``: lmsci's reading of the paper's reverse1 / reverse2 / reverse6
data). A reversed document never contains the name before the attributes it follows, and the packer
never puts two documents of one person in a window, so the name cannot be copied from context: the
model has to store attributes -> name.

Measured on the people held out of QA fine-tuning (P_test):

* before any fine-tuning, from an *attributes-only* prompt written in a held-out reversed template
  (:meth:`~lmsci.worlds.bios.BiosWorld.reverse_prompt`, the only occurrence of the name is the answer):
  greedy exact match of the name (Berglund et al.'s held-out-template test) and the log-probability
  gap in bits between the correct name and another P_test person's name (their ``randomized``
  control);
* after QA fine-tuning on P_train (the six forward questions and the inverse question "Who was born
  on DATE in CITY ? Answer : NAME"; LoRA through peft by default, the papers' protocol, see
  :func:`lmsci.experiments.knowledge.common.finetune_qa`): inverse-search exact match (Part 3.2's test)
  and forward QA.

The three claims (``reversal``, ``reverse-completion``, ``name-logprob``) are decided at the gpu and paper presets
only (issue 29: at quick, a 15-minute CPU run, the memorisation gates cannot pass; quick still reports the values).
Their null arm (issue 44 item 4): the with-reverse model replaced by a second forward-only model (pretraining, the
held-out prompts and LoRA QA fine-tuning exactly as ``forward_only``: same world, biographies, budget and protocol)
at a seed of its own (initialisation, data order and fine-tuning order: :meth:`ReversalCurse.point_seed`), in the
same statistic (minus the same seed's real forward-only model) and rule. No factor differs between the two terms,
so the null meets a rule only if forward-only training alone sometimes retrieves attributes -> name (a seed-to-seed
spread as large as the claimed lift, or a leak, e.g. the name reachable from the prompt or the answer pools).

Arms (issue 44): the two conditions are the ``real`` arm's points (ids unchanged); the null arm is its own point,
``null-forward_only`` (a separate model: nothing is trained twice); a row's ``condition`` is ``forward_only``,
``with_reverse`` or (the null arm) ``forward_only_second``. The gates read the real arm. The claims engine judges all three
claims (issue 44 item 1): the lift :func:`lift_stat` under its rule (``reversal``: CI above 0;
``reverse-completion`` and ``name-logprob``: ``all_of`` a mean threshold and the CI above 0) and, with
``Claim.also`` at the lift's seeds, the forward-only mean (:func:`forward_stat`, on the real arm whatever arm is
judged) and, for ``reversal``, the with-reverse mean (:func:`treated_stat`: the null arm's second forward-only model
in the with-reverse model's place). With one seed the interval collapses to the value; each rule's mean condition
then implies the CI condition, as before.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field

from lmsci.contract import Experiment, Figure, Point, PointContext
from lmsci.experiments.knowledge import _reversal_curse_figures as _f
from lmsci.experiments.knowledge._bios_streams import concat_packed, exposures_of
from lmsci.experiments.knowledge._estimates import H100_ASSUMPTIONS, h100_seconds, mean_tokens, vocab_size
from lmsci.experiments.knowledge._gates import RECALL_MIN
from lmsci.experiments.knowledge._specs import AUGMENTED, DataSpec
from lmsci.experiments.knowledge.common import BiosQAConfig, bio_recall, finetune_qa
from lmsci.measure.knowledge import qa_metrics
from lmsci.models.gpt import GPT
from lmsci.train.packed import train_packed
from lmsci.experiments.registry import register
from lmsci.measure.accuracy import exact_match
from lmsci.measure.knowledge import completion_gap_bits
from lmsci.claims import Claim, Gate, Stat, all_of, ci_above, every_at_least, mean_at_least, mean_at_most
from lmsci.runs import RunDir, derive_seed
from lmsci.worlds.bios import ATTRS, BiosWorld, Doc
from lmsci.worlds.bios_datasets import Packed, bio_docs, pack, qa_split


class ReversalCurseConfig(BiosQAConfig):
    """Configuration of ``reversal-curse`` (defaults = quick preset).

    Attributes:
        data: how the forward biographies are written (augmented: multi5 + permute + fullname).
        reverse_groups: sentences per reversed biography (1: the name once, after all six attributes;
            2: after each half; 6: after every attribute).
        reverse_multiplicity: reversed biographies per person (fixed renderings, seen every epoch like
            the forward multiM biographies), in the ``with_reverse`` condition.
        pipeline: ``"packed"`` (the quick preset: Python renderings, whole epochs packed in memory,
            :func:`pretraining_stream`) or ``"stream"`` (gpu and paper presets: the forward and reversed
            biographies rendered once by the vectorised :class:`lmsci.worlds.bios_render.BiosRenderer` and
            shuffled and packed on the fly by :class:`lmsci.worlds.bios_stream.DocStream`; constant memory in the
            exposures). The packed path renders ~75 us and packs ~250 us per document in Python and holds every
            epoch in RAM: at the gpu preset's N = 10k with reversed biographies (100k documents, 60 epochs) it
            spent minutes before the first step and would hold ~6.7 GB of windows.
        null_arm: the claims' null arm, its own point per seed: a second forward-only model (pretraining, held-out
            prompts, LoRA QA fine-tuning as ``forward_only``) at another seed.
    """

    data: DataSpec = AUGMENTED
    reverse_groups: Literal[1, 2, 3, 6] = 1
    reverse_multiplicity: int = Field(5, ge=1, le=100)
    pipeline: Literal["packed", "stream"] = "packed"
    null_arm: bool = True

    PRECISIONS = ("fp32", "bf16")

    PRESETS = {
        "smoke": {"n_people": 12, "exposures": 2, "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
                  "ft_epochs": 1, "seq_len": 160, "qa_seq_len": 64, "reverse_multiplicity": 1,
                  "finetune": {"batch_size": 4, "rank": 2, "embedding_rank": 4}},
        "quick": {"n_seeds": 3},
        # the configuration to settle the claims, at N = 1.2k (600 QA-train; the 10k was estimated at
        # 45 min with the throughput measured on an H200 on 2026-11-26, N = 5k at 30.8 min: session 52 sized it to
        # the 10 minutes of one H100), a 4-layer
        # d_model 256 RoPE GPT, 300 exposures, 24 x 512-token batches, lr 1e-3, wd 0.1; the streaming pipeline
        # (vectorised rendering, DocStream packing: the Python packer spent minutes before the first step) and
        # bf16 autocast; pretraining checkpoints every 10% of its steps, so commands of <= 10 minutes chain
        # (rerun into the same --out)
        "gpu": {"n_people": 1_200, "exposures": 300, "model": {"d_model": 256, "n_layers": 4, "n_heads": 4},
                "seq_len": 512, "qa_seq_len": 128, "pretrain": {"lr": 1e-3, "batch_size": 24, "weight_decay": 0.1},
                "finetune": {"method": "lora", "lr": 3e-4, "batch_size": 48, "weight_decay": 0.01}, "ft_epochs": 10,
                "n_seeds": 3, "threads": 0, "pipeline": "stream", "precision": "bf16"},
        "paper": {"n_people": 100_000, "exposures": 1000, "model": {"d_model": 768, "n_layers": 12, "n_heads": 12},
                  "seq_len": 512, "qa_seq_len": 512, "pretrain": {"lr": 1e-3, "batch_size": 192},
                  "finetune": {"method": "lora", "lr": 3e-4, "batch_size": 48, "weight_decay": 0.01},
                  "ft_epochs": 50, "n_seeds": 3, "pipeline": "stream", "precision": "bf16",
                  "threads": 0},
    }


FORWARD_QA_MIN = 0.5
GAP_FORWARD_MAX, GAP_LIFT_MIN = 1.0, 3.0
REAL_CONDITIONS = ("forward_only", "with_reverse")
NULL_CONDITION = "forward_only_second"  # the null arm: a second forward-only model at its own seed


def forward_stat(col: str, words: str = "") -> Stat:
    """``col`` of the real forward-only model (the lift's subtrahend, on the real arm whatever arm is judged)."""
    return Stat(col, where={"condition": "forward_only"}, arm="real", words=words)


def treated_stat(col: str, words: str = "") -> Stat:
    """``col`` of the with-reverse model (real arm) or of the second forward-only model (null arm)."""
    return Stat(col, where={"condition": ("with_reverse", NULL_CONDITION)}, words=words)


def lift_stat(col: str, words: str = "") -> Stat:
    """Per seed, :func:`treated_stat` minus :func:`forward_stat` (paired by seed)."""
    return Stat(col, where={"condition": ("with_reverse", NULL_CONDITION)}, minus=forward_stat(col), words=words)


_TREATED = " (the null arm: the second forward-only model)"


MEMORISED_BOTH = Gate("memorised", every_at_least(RECALL_MIN), arm="real",
                      stat=Stat("bio_recall_test", agg="min", where={"condition": REAL_CONDITIONS},
                                words="biography recall (exact match of each of the 6 attribute values given the "
                                      "biography prefix, on the pretrained model) of the people tested, lowest of "
                                      "the two conditions"))
FORWARD_QA = Gate("forward-qa", every_at_least(FORWARD_QA_MIN), arm="real",
                  stat=Stat("qa_test", agg="min", where={"condition": REAL_CONDITIONS},
                            words="forward QA exact match (name -> attributes) on the tested people (P_test), lowest "
                                  "of the two conditions"))
REVERSE_MEMORISED = Gate("reverse-memorised", every_at_least(RECALL_MIN), arm="real",
                         stat=Stat("reverse_recall_test", where={"condition": "with_reverse"},
                                   words="name recall in the reversed training biographies (greedy exact match of the "
                                         "name given the attributes before it, first reversed rendering, pretrained "
                                         "model) of the people tested, with-reverse model"))
SOURCE = "Allen-Zhu & Li, Part 3.2, arXiv 2309.14402, Section 5; Berglund et al., arXiv 2309.12288"
NULL_WORDS = ("the with-reverse arm replaced by a second forward-only model (pretraining, held-out prompts and LoRA QA "
              "fine-tuning as the real forward-only arm, same world, budget and protocol) at another seed "
              "(initialisation, data and fine-tuning order); same seed's real forward-only arm subtracted, same "
              "statistic and rule")
CAN_MEET = ("no factor differs between the two forward-only models, so it meets the rule only if forward-only training "
            "alone sometimes retrieves attributes -> name (a seed-to-seed spread as large as the claimed lift, or a "
            "leak: the name reachable from the prompt, the packing or the answer pools), i.e. ")


def _swap_answer(doc: Doc, name_ids: list[int]) -> Doc:
    s, e = doc.spans["answer"][0]
    if e - s != len(name_ids):
        raise ValueError(f"names of different lengths ({e - s} vs {len(name_ids)} tokens)")
    ids = doc.ids[:s] + list(name_ids) + doc.ids[e:]
    return Doc(ids, doc.loss_mask, doc.person, {"answer": [(s, e)]}, doc.kind)


def random_name_docs(world: BiosWorld, docs: list[Doc], seed: int) -> list[Doc]:
    """The same prompts completed with another listed person's name (a random derangement of the people;
    Berglund et al.'s ``randomized`` control)."""
    people = np.asarray([d.person for d in docs])
    rng = np.random.default_rng([seed, 61])
    other = np.roll(people, 1 + int(rng.integers(max(len(people) - 1, 1))))
    return [_swap_answer(d, world.vocab.encode(world.name_words(int(j)))) for d, j in zip(docs, other)]


def reversed_docs(world: BiosWorld, people, *, seed: int, groups: int, multiplicity: int) -> list[Doc]:
    """``multiplicity`` reversed biographies per person (fixed renderings: rng ``[seed, 19, person]``)."""
    out = []
    for i in people:
        rng = np.random.default_rng([seed, 19, int(i)])
        out += [world.bio_reversed(int(i), rng, groups=groups) for _ in range(multiplicity)]
    return out


def reverse_recall(model, docs: list[Doc], device: str = "cpu") -> float:
    """Exact match of the first name span of each reversed training biography, given what precedes it."""
    for d in docs:
        d.spans["_name"] = [d.spans["name"][0]]
    return float(exact_match(model, docs, span_key="_name", device=device).mean())


def streamed_pretraining(world: BiosWorld, cfg: ReversalCurseConfig, reverse: bool, order_seed: int):
    """The ``"stream"`` pipeline: ``(stream, forward_bios_fn, reversed_bios_fn)``. Every person's
    ``data.multiplicity`` forward biographies and (with ``reverse``) ``reverse_multiplicity`` reversed ones are
    rendered once by :class:`~lmsci.worlds.bios_render.BiosRenderer` (counter-based choices keyed by
    ``cfg.seed``), then seen ``ceil(exposures / M)`` times in a :class:`~lmsci.worlds.bios_stream.DocStream`
    (each pass its own order, keyed by ``order_seed``; no person twice in a window). ``forward_bios_fn(people)``
    and ``reversed_bios_fn(people)`` give each person's first rendering of each kind, as trained on."""
    from lmsci.worlds.bios_render import BiosRenderer, Docs
    from lmsci.worlds.bios_stream import DocStream

    r = BiosRenderer(world)
    n, m, rm = cfg.n_people, cfg.data.multiplicity, cfg.reverse_multiplicity
    people = np.arange(n, dtype=np.int64)
    docs = r.bios(np.repeat(people, m), np.tile(np.arange(m), n), cfg.seed, permute=cfg.data.permute,
                  fullname=cfg.data.fullname)
    if reverse:
        docs = Docs.concat(docs, r.bios_reversed(np.repeat(people, rm), np.tile(np.arange(rm), n), cfg.seed,
                                                 groups=cfg.reverse_groups))
    stream = DocStream(world, docs, seq_len=cfg.seq_len, batch_size=cfg.pretrain.batch_size,
                       epochs=math.ceil(cfg.exposures / m), order_seed=order_seed)

    def fwd(ppl):
        return r.to_doc_list(r.bios(np.asarray(ppl, dtype=np.int64), 0, cfg.seed, permute=cfg.data.permute,
                                    fullname=cfg.data.fullname))

    def rev(ppl):
        return r.to_doc_list(r.bios_reversed(np.asarray(ppl, dtype=np.int64), 0, cfg.seed, groups=cfg.reverse_groups))

    return stream, fwd, rev


def pretraining_stream(world: BiosWorld, cfg: ReversalCurseConfig, extra: list[Doc], order_seed: int) -> Packed:
    """The pretraining windows: every epoch packs the fixed forward biographies (multiM) plus ``extra`` (the
    reversed biographies), shuffled across people, no person twice in a window; ``ceil(exposures / M)``
    epochs. The same windows as :func:`~lmsci.experiments.knowledge.common.bio_stream` with ``extra_docs``,
    except that with ``cfg.max_distinct_epochs`` only that many epochs are packed (each its own shuffle)
    and then repeated cyclically (the Python packer costs ~250 us per document: the gpu preset's 10k
    people x 10 documents x 60 epochs would take ~40 minutes to pack)."""
    fwd = bio_docs(world, range(cfg.n_people), multiplicity=cfg.data.multiplicity, permute=cfg.data.permute,
                   fullname=cfg.data.fullname, seed=cfg.seed)
    epochs = math.ceil(cfg.exposures / cfg.data.multiplicity)
    distinct = min(epochs, cfg.max_distinct_epochs or epochs)
    parts = [pack(fwd + list(extra), cfg.seq_len, seed=order_seed * 100003 + e) for e in range(distinct)]
    return concat_packed([parts[e % distinct] for e in range(epochs)])


#: what the gpu preset's first point did on CPU (part of the gpu time estimate)
CPU_CHECK = (
    "CPU check (2026-11-23, no GPU lent; a loaded 2-core machine): `lmsci run reversal-curse --preset gpu"
    " --set device=cpu --set threads=1 --set precision=fp32 --set pretrain.batch_size=2 --set exposures=5"
    "` under `timeout 150` (faulthandler stack dumps every 10 s) rendered the 100k forward and reversed b"
    "iographies of N = 10k and was in the training loop from ~50 s on (the registry's imports took ~25 s)"
    ", running steps until the timeout; before the streaming pipeline the same first point had not reache"
    "d a step in 100 s")


def estimate_h100_seconds(cfg: ReversalCurseConfig) -> float:
    """Estimated wall seconds of a whole run on one H100 (:func:`knowledge_common.h100_seconds`): per seed, the
    forward-only model (and, with ``null_arm``, a second one) trains on N x ceil(exposures / M) x M forward
    biographies, the with-reverse model also on as many passes over ``reverse_multiplicity`` reversed ones; LoRA fine-tuning on the N/2 QA-train people
    (seven questions each); evaluation of ~12 documents per person (recall, held-out prompts with the correct
    and a random name, forward and inverse QA), rendered in Python (~75 us each, a quarter of the packing rate)."""
    V, T = vocab_size(), cfg.seq_len
    m = cfg.data.multiplicity
    epochs = math.ceil(cfg.exposures / m)
    fwd = cfg.n_people * epochs * m
    rev = cfg.n_people * epochs * cfg.reverse_multiplicity
    tf, tr = mean_tokens("bio", cfg.data), mean_tokens("bio_reverse", groups=cfg.reverse_groups)
    qa = (6 * mean_tokens("qa") + mean_tokens("inverse_qa")) / 7
    stream = cfg.pipeline == "stream"
    total = 0.0
    models = [(fwd, fwd * tf), (fwd + rev, fwd * tf + rev * tr)]
    if cfg.null_arm:  # the null arm: a second forward-only model
        models.append((fwd, fwd * tf))
    for docs, tokens in models:
        mean_doc = tokens / docs
        steps = tokens / (cfg.pretrain.batch_size * T * (1 - mean_doc / (2 * T)))
        # the host: the stream packs every document twice (lengths-only count + the pass); the packed path renders
        # and packs each once per distinct epoch in Python; evaluation documents are rendered in Python
        host = 2 * docs if stream else 0.0
        py = 12 * cfg.n_people / 4 + (0.0 if stream else docs / epochs * min(epochs, cfg.max_distinct_epochs or epochs))
        total += h100_seconds(cfg.model, V, T, tokens=tokens, steps=steps, eval_tokens=12 * cfg.n_people * 60,
                              host_docs=host, python_docs=py)
        ft_docs = (cfg.n_people // 2) * 7 * cfg.ft_epochs
        ft_steps = ft_docs * qa / (cfg.finetune.batch_size * cfg.qa_seq_len * (1 - qa / (2 * cfg.qa_seq_len)))
        total += h100_seconds(cfg.model, V, cfg.qa_seq_len, tokens=ft_docs * qa, steps=ft_steps,
                              **({"host_docs": ft_docs} if stream else {"python_docs": ft_docs}))
    return total * cfg.n_seeds


@register("reversal-curse")
class ReversalCurse(Experiment):
    """Forward vs inverse knowledge search on bioS, with and without reversed biographies in training.

    Sources: Allen-Zhu & Li, arXiv 2309.14402, Section 5; Berglund et al., arXiv 2309.12288.
    """

    claim = ("A model trained on 'name -> attributes' cannot retrieve 'attributes -> name' (inverse search, "
             "completion from an attributes-only prompt) unless its training text states names after attributes.")
    source = SOURCE
    Config = ReversalCurseConfig
    time_estimate = {"smoke": "~10 s", "quick": "12.6 CPU-min measured for the two real arms (757 s CPU, 1233 s wall at one thread beside two other runs on the 2-core machine, 2026-11-26; 3 seeds; 784 s wall beside one other run, 2026-11-23), plus the null arm, a second forward-only model per seed (issue 44 item 4; not measured)",
                     "gpu": "~7 min on one H100 (7.4 min), estimated by estimate_h100_seconds; not measured: no GPU in "
                            "the session (3 seeds x (2 x forward-only + with-reverse) models of N = 1.2k people at 22.9 "
                            "MFLOP/token, 0.24x the tokens of the N = 5k preset (30.8 min); streaming pipeline; a LoRA "
                            "fine-tuning per model; " + H100_ASSUMPTIONS + "). The old packed pipeline spent "
                            "minutes in Python before the first step (measured on this loaded CPU: 162 s to render "
                            "the 50k forward and 110 s the 50k reversed biographies, 27 s to pack each epoch, and "
                            "60 epochs of windows held in RAM, ~8 GB). " + CPU_CHECK,
                     "paper": "~days on 8 GPUs per seed, 3 seeds (estimated)"}
    claims = [
        Claim("reversal",
              "Knowledge learned as 'name -> attributes' cannot be searched inversely ('attributes -> name') for "
              "people held out of QA fine-tuning, unless the training text also states the names after the "
              "attributes (reversed biographies).",
              SOURCE + ", Table 1",
              "inverse search ~0% (Part 3.2); reverse-direction exact match 0.0% (Berglund et al., Table 1); "
              "inverse search works when the reversed direction is in the training data",
              lift_stat("inverse_test", "P_test inverse-search exact match (birth date + city -> name, an "
                        "attributes-only question) after QA fine-tuning on P_train: with reversed biographies in "
                        "pretraining (name after the attributes; the null arm: a second forward-only model) minus "
                        "forward-only"),
              ci_above(0.0),
              also=((forward_stat("inverse_test", "forward-only inverse search"), mean_at_most(0.1)),
                    (treated_stat("inverse_test", "with-reverse inverse search" + _TREATED), mean_at_least(0.5))),
              gates=(MEMORISED_BOTH, REVERSE_MEMORISED, FORWARD_QA), presets=("gpu", "paper"),
              null=NULL_WORDS,
              null_can_meet=CAN_MEET + "inverse search of 0.5 after the same QA fine-tuning"),
        Claim("reverse-completion",
              "Before any fine-tuning, completing an attributes-only prompt written in a held-out template with the "
              "person's name works only when the training text states names after attributes.",
              "Berglund et al., arXiv 2309.12288, Section 2, Table 1 (held-out prompt templates); Allen-Zhu & Li, "
              "arXiv 2309.14402, Section 5",
              "reverse-direction exact match 0.0% (GPT-3, name -> description training); 96.7% in the trained "
              "direction (description -> name) with held-out templates",
              lift_stat("reverse_completion_test", "P_test greedy exact match of the full name after the held-out "
                        "reversed prompt (attributes only, no name before the answer) on the pretrained model: "
                        "with-reverse (the null arm: a second forward-only model) minus forward-only"),
              all_of(mean_at_least(0.3), ci_above(0.0)),
              also=((forward_stat("reverse_completion_test", "forward-only held-out reversed completion"),
                     mean_at_most(0.1)),),
              gates=(MEMORISED_BOTH, REVERSE_MEMORISED), presets=("gpu", "paper"),
              null=NULL_WORDS,
              null_can_meet=CAN_MEET + "held-out-prompt completion of 0.3 above the first forward-only model"),
        Claim("name-logprob",
              "From an attributes-only prompt, a model trained forward-only gives the correct name no more "
              "probability than a random other person's name; trained with reversed biographies it does.",
              "Berglund et al., arXiv 2309.12288, Section 2.1 and Figure 4 (log-probability of the correct vs a "
              "random name)",
              "no detectable difference between the correct and a random name after name -> description training",
              lift_stat("name_gap_bits_test", "mean over P_test of log2 p(correct name) - log2 p(another P_test "
                        "person's name) after the held-out reversed prompt, on the pretrained model (bits): "
                        "with-reverse (the null arm: a second forward-only model) minus forward-only"),
              all_of(mean_at_least(GAP_LIFT_MIN), ci_above(0.0)),
              also=((forward_stat("name_gap_bits_test", "forward-only correct-vs-random name gap (bits)"),
                     mean_at_most(GAP_FORWARD_MAX)),),
              gates=(MEMORISED_BOTH, REVERSE_MEMORISED), presets=("gpu", "paper"),
              null=NULL_WORDS,
              null_can_meet=CAN_MEET + f"a correct-vs-random name gap {GAP_LIFT_MIN} bits above the first "
                                       "forward-only model"),
    ]

    def points(self, cfg: ReversalCurseConfig) -> list[Point]:
        pts = [Point("forward_only", {"reverse": False}, arm="real"), Point("with_reverse", {"reverse": True}, arm="real")]
        if cfg.null_arm:  # the claims' null arm: a second forward-only model (point_seed gives it its own seed)
            pts.append(Point("null-forward_only", {"reverse": False}, arm="null"))
        return pts

    def point_seed(self, cfg: ReversalCurseConfig, point: Point) -> int:
        """The real points' seeds as before; the null point (a second forward-only model) gets its own, derived from
        the paired real point's, so that its initialisation, data order and fine-tuning order differ."""
        seed = super().point_seed(cfg, point)
        return derive_seed(seed, "second-control-model") if point.arm == "null" else seed

    def run_point(self, cfg: ReversalCurseConfig, point: Point, ctx: PointContext) -> dict:
        world = BiosWorld(cfg.n_people, seed=cfg.seed)
        world.write_pools(ctx.run.path / "bios_pools.json")
        tr, te = qa_split(cfg.n_people, cfg.seed)
        rev = bool(point.params["reverse"])
        if cfg.pipeline == "stream":
            stream, bios_fn, rev_fn = streamed_pretraining(world, cfg, rev, order_seed=ctx.seed)
        else:
            rdocs = (reversed_docs(world, range(cfg.n_people), seed=cfg.seed, groups=cfg.reverse_groups,
                                   multiplicity=cfg.reverse_multiplicity) if rev else [])
            stream = pretraining_stream(world, cfg, rdocs, order_seed=ctx.seed)
            bios_fn = None
            first = {d.person: d for d in rdocs[::cfg.reverse_multiplicity]}
            rev_fn = lambda ppl: [first[int(i)] for i in ppl]  # noqa: E731
        model = GPT(cfg.model.gpt_config(len(world.vocab), cfg.seq_len), seed=ctx.seed)
        pre = train_packed(model, stream, cfg.pretrain, seed=ctx.seed, ctx=ctx, phase="pretrain", device=ctx.device,
                           checkpoint=True, precision=cfg.precision)
        rexp = (stream.exposures(cfg.n_people, pre["windows_used"], kind="bio_reverse") if isinstance(stream, Packed)
                else stream.reverse_exposures)
        cond = NULL_CONDITION if point.arm == "null" else REAL_CONDITIONS[rev]
        row = {"reverse_in_training": rev, "condition": cond, "reverse_groups": cfg.reverse_groups if rev else 0,
               "n_people": cfg.n_people, "params": model.num_params(), "pipeline": cfg.pipeline,
               "exposures": exposures_of(stream, cfg.n_people, pre["windows_used"]),
               "reverse_exposures": float(np.asarray(rexp).mean()),
               "pretrain_steps": pre["steps"], "pretrain_tokens": pre["tokens_seen"], "resumed_from": pre["resumed_from"]}
        # memorisation gates on the pretrained model: forward biographies, and the reversed ones (with reverse)
        rec_tr = bio_recall(model, world, tr, seed=cfg.seed, spec=cfg.data, device=ctx.device, bios_fn=bios_fn)
        rec_te = bio_recall(model, world, te, seed=cfg.seed, spec=cfg.data, device=ctx.device, bios_fn=bios_fn)
        row.update({"bio_recall_train": rec_tr, "bio_recall_test": rec_te,
                    "bio_recall": (rec_tr * len(tr) + rec_te * len(te)) / (len(tr) + len(te))})
        row["reverse_recall_test"] = reverse_recall(model, rev_fn(te), ctx.device) if rev else float("nan")
        # attributes-only prompt in the held-out reversed template, before any fine-tuning
        for tag, ppl in (("test", te), ("train", tr)):
            prompts = [world.reverse_prompt(int(i)) for i in ppl]
            row[f"reverse_completion_{tag}"] = float(exact_match(model, prompts, device=ctx.device).mean())
            gap = completion_gap_bits(model, prompts, random_name_docs(world, prompts, cfg.seed), device=ctx.device)
            row[f"name_gap_bits_{tag}"] = float(gap.mean())
        # QA fine-tuning on P_train (forward and inverse questions), then inverse search on P_test
        model, info = finetune_qa(model, world, tr, cfg.finetune, epochs=cfg.ft_epochs, seed=ctx.seed + 1,
                                  seq_len=cfg.qa_seq_len, ctx=ctx, device=ctx.device, inverse=True,
                                  precision=cfg.precision, pipeline=cfg.pipeline)
        row.update(info)
        row["ft_method"] = cfg.finetune.method
        # forgetting: the held-out people's biography recall after fine-tuning, and its drop
        row["bio_recall_test_after_ft"] = bio_recall(model, world, te, seed=cfg.seed, spec=cfg.data, device=ctx.device,
                                                     bios_fn=bios_fn)
        row["forgetting_test"] = rec_te - row["bio_recall_test_after_ft"]
        row.update(qa_metrics(model, world, tr, te, attrs=ATTRS, device=ctx.device, inverse=True))
        row["n_test"] = len(te)
        return row

    #: claim -> (column, rule(forward-only mean, treated mean, lift's SeedStat)); the CI condition applies when there
    #: is an interval (>= 2 seeds), as in the first registration
    def report_sections(self, cfg: ReversalCurseConfig, results: pd.DataFrame, run: RunDir) -> str:
        """Memorisation, QA fine-tuning and forgetting (``_reversal_curse_figures.report_sections``)."""
        return _f.report_sections(cfg, results, run)

    def figures(self, cfg: ReversalCurseConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        """reversal.png (:func:`lmsci.experiments.knowledge._reversal_curse_figures.figures`)."""
        return _f.figures(cfg, results, run)
