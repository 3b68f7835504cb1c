"""Shared machinery of the knowledge experiments (bioS): configs and protocols, and the front of the family's
shared modules.

Used by ``knowledge-extraction``, ``celebrity-helps-minority``, ``reversal-curse`` and
``knowledge-capacity``. Source: Allen-Zhu & Li, Physics of Language Models Parts 3.1 / 3.2 / 3.3
(arXiv 2309.14316, 2309.14402, 2404.05405); Berglund et al., arXiv 2309.12288.

This module holds the configs (:class:`BiosQAConfig`, :class:`MemoriseFirstConfig`) and the protocols (QA
fine-tuning, the null arm, memorisation-first pretraining, biography recall); the other shared pieces live in
their own modules, split by concept (import them from there):

* :mod:`._specs`: :class:`DataSpec` (``SINGLE``, ``AUGMENTED``), :class:`PhaseSpec` (one training phase, sized by
  exposures); the GPT trained is a library :class:`lmsci.models.gpt.GPTSpec` (rotary, tied embeddings);
* :mod:`._bios_streams`: the data streams (:func:`bio_stream`, :func:`qa_stream`, :func:`mixed_stream`,
  :func:`pretraining_data`, :func:`token_fractions`, :func:`exposures_of`, :func:`training_bios`);
* :mod:`._estimates`: the gpu presets' time estimators (:func:`h100_seconds`, :func:`model_seconds`, ...);
* :mod:`._gates`: the shared gates and per-seed statistics (:data:`MEMORISED`, :func:`recall_gate`, ...).

A pretraining *stream* is a list of epochs; each epoch renders biographies (the same ones every
epoch for bioS single / multiM, freshly drawn ones when ``fresh``), optionally adds QA documents
(mixed training), shuffles them across people and packs them into ``seq_len`` windows with no
person twice in a window (:func:`lmsci.worlds.bios_datasets.pack`). ``exposures`` counts biographies per
person actually consumed by the optimizer steps.

The papers' protocol (issue 11): QA fine-tuning is LoRA through ``peft`` (:func:`finetune_qa`,
:mod:`lmsci.train.finetune`; ``finetune.method = "full"`` is the ablation); extraction is judged only
when the pretrained model has memorised the biographies of the people tested (:data:`MEMORISED`,
recall >= 0.9; :func:`lmsci.train.packed.train_packed` checks recall during pretraining and can stop once a target
holds, recording the steps it took); mixed training puts biographies and QA in separate windows
with QA at 80% of the tokens (:func:`mixed_stream`, Part 3.1 Appendix C).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field

from lmsci.config import ExperimentConfig, StrictModel
from lmsci.errors import ConfigError
from lmsci.experiments.base import PointContext
from lmsci.experiments.knowledge._bios_streams import bio_stream, qa_stream, training_bios
from lmsci.experiments.knowledge._specs import AUGMENTED, DataSpec, PhaseSpec
from lmsci.measure.knowledge import qa_metrics, recall_of_docs
from lmsci.models.gpt import GPT, GPTSpec
from lmsci.train.finetune import FinetuneSpec, finetune, trainable_parameters
from lmsci.train.packed import train_packed
from lmsci.worlds.bios import ATTRS, BiosWorld, Doc
from lmsci.worlds.bios_datasets import Packed, bio_docs
from lmsci.worlds.bios_pools import MONTHS


class BiosModelSpec(StrictModel):
    """A bioS world and a GPT pretrained on it until its biographies are memorised.

    Attributes:
        n_people: N. multiplicity, permute, fullname: how biographies are written (Part 3.1 augmentations).
        model: the GPT (GPTSpec). exposures: biographies per person in the pretraining budget. seq_len: window length.
        pretrain: optimizer (PhaseSpec). check_every: recall check every this many steps. stop_at: stop once the checked
            recall reaches this (None: the whole budget).
    """

    n_people: int = Field(100, ge=4, le=1_000_000)
    multiplicity: int = Field(3, ge=1, le=100)
    permute: bool = True
    fullname: bool = True
    model: GPTSpec = GPTSpec(d_model=64, n_layers=4, n_heads=4, pos="rope", tie_embeddings=True)
    exposures: int = Field(150, ge=1)
    seq_len: int = Field(256, ge=64)
    pretrain: PhaseSpec = PhaseSpec(lr=1e-2, batch_size=8)
    check_every: int = Field(100, ge=0)
    stop_at: float | None = Field(0.97, gt=0, le=1)


def train_bios_model(spec: BiosModelSpec, *, data_seed: int, train_seed: int, ctx: PointContext | None,
                     device: str) -> tuple[torch.nn.Module, BiosWorld, list[list[Doc]], dict[str, Any]]:
    """Pretrain a GPT on a bioS world until memorised (:func:`lmsci.train.packed.train_packed`).

    Returns:
        ``(model in eval mode, world, docs, info)``: ``docs[i]`` are person ``i``'s training biographies (the
        renderings of the pretraining data); ``info`` has ``pretrain_steps``, ``steps_to_gate``, ``recall``
        (exact match of every attribute value given its prefix, over all of ``docs``), ``params``.
    """
    world = BiosWorld(spec.n_people, seed=data_seed)
    ds = DataSpec(multiplicity=spec.multiplicity, permute=spec.permute, fullname=spec.fullname)
    people = np.arange(spec.n_people)
    stream = bio_stream(world, exposures=spec.exposures, seed=data_seed, seq_len=spec.seq_len, specs=[(people, ds)],
                        order_seed=train_seed)
    docs_flat = bio_docs(world, people, multiplicity=spec.multiplicity, permute=spec.permute,
                         fullname=spec.fullname, seed=data_seed)
    docs = [docs_flat[i * spec.multiplicity:(i + 1) * spec.multiplicity] for i in range(spec.n_people)]
    model = GPT(spec.model.gpt_config(len(world.vocab), spec.seq_len), seed=train_seed).to(device)
    check_docs = [d for ds_ in docs for d in ds_]
    pre = train_packed(model, stream, spec.pretrain, seed=train_seed, ctx=ctx, phase="pretrain", device=device,
                       recall_fn=lambda m: recall_of_docs(m, check_docs, attrs=ATTRS, device=device),
                       check_every=spec.check_every, stop_at=spec.stop_at)
    model.eval()
    recall = recall_of_docs(model, check_docs, attrs=ATTRS, device=device)
    return model, world, docs, {"pretrain_steps": pre["steps"], "pretrain_steps_budget": pre["steps_budget"],
                                "steps_to_gate": pre["steps_to_gate"], "recall": recall,
                                "pretrain_seconds": pre["seconds"], "params": model.num_params()}


class BiosQAConfig(ExperimentConfig):
    """Fields shared by the bioS experiments that pretrain on biographies and then ask questions.

    Attributes:
        n_people: N individuals in the world.
        model: the GPT trained (:class:`~lmsci.models.gpt.GPTSpec`; GPT-2 with rotary positions, tied embeddings).
        exposures: biographies per person seen in pretraining (the budget: with ``memorise_stop`` set,
            pretraining may stop earlier, see :func:`train_packed`).
        seq_len: pretraining window length in tokens; ``qa_seq_len`` the QA fine-tuning window.
        pretrain: optimizer settings of pretraining (:class:`PhaseSpec`; its length is ``exposures``).
        finetune: QA fine-tuning (:class:`lmsci.train.finetune.FinetuneSpec`: ``method`` ``"lora"`` (the
            papers' protocol, Part 3.1 Section 4.1) or ``"full"`` (the ablation), rank, lr, ...).
        ft_epochs: passes over the QA of the fine-tuned people (each pass its own shuffle).
        memorise_check_every: check biography recall of the tested people every this many pretraining
            steps (0: only at the end); the steps it took to reach the gate are recorded.
        memorise_stop: stop pretraining at the first check whose recall (on up to ``memorise_check_people``
            tested people) is at least this; None: always train the whole ``exposures`` budget.
        memorise_check_people: how many tested people the in-training checks use.
        max_distinct_epochs: cap on distinct packings of fixed biographies (:func:`bio_stream`).
    """

    n_people: int = Field(160, ge=4, le=1_000_000)
    model: GPTSpec = GPTSpec(d_model=64, n_layers=2, n_heads=4, pos="rope", tie_embeddings=True)
    exposures: int = Field(100, ge=1)
    seq_len: int = Field(256, ge=64)
    qa_seq_len: int = Field(96, ge=32)
    pretrain: PhaseSpec = PhaseSpec(lr=1e-2, batch_size=4)
    finetune: FinetuneSpec = FinetuneSpec(batch_size=16)
    ft_epochs: int = Field(30, ge=1)
    memorise_check_every: int = Field(0, ge=0)
    memorise_stop: float | None = Field(None, gt=0, le=1)
    memorise_check_people: int = Field(300, ge=1)
    max_distinct_epochs: int | None = Field(None, ge=1)

    PRECISIONS = ("fp32", "bf16")  # the base field ``precision`` goes to the trainer (pretraining, fine-tuning)


class MemoriseFirstConfig(BiosQAConfig):
    """:class:`BiosQAConfig` with the quick-scale protocol that knowledge-extraction and celebrity-helps-minority
    share (issue 11): N = 600, pretraining at lr 1e-2 with batch 8, recall checks of 150 tested people every 100
    steps, stopping once 95% of them are recalled (the gate itself is >= 0.9 on every tested person), then LoRA
    QA fine-tuning (rank 16, embedding rank 128) at lr 3e-3 for 20 epochs (the papers' 3e-4 is for ~50k steps;
    here there are ~400). ``augmented`` is how augmented biographies are written; ``pipeline`` is ``"packed"``
    (whole epochs packed in memory) or ``"stream"`` (:mod:`lmsci.worlds.bios_stream`, rendered and packed on the
    fly; the gpu and paper presets)."""

    augmented: DataSpec = AUGMENTED
    pipeline: Literal["packed", "stream"] = "packed"
    n_people: int = Field(600, ge=4, le=1_000_000)
    pretrain: PhaseSpec = PhaseSpec(lr=1e-2, batch_size=8)
    finetune: FinetuneSpec = FinetuneSpec(rank=16, embedding_rank=128, lr=3e-3, weight_decay=0.01, batch_size=16)
    ft_epochs: int = Field(20, ge=1)
    memorise_check_every: int = Field(100, ge=0)
    memorise_stop: float | None = Field(0.95, gt=0, le=1)
    memorise_check_people: int = Field(150, ge=1)



def finetune_qa(model: torch.nn.Module, world: BiosWorld, people: Sequence[int], spec: FinetuneSpec, *,
                epochs: int, seed: int, seq_len: int, ctx: PointContext | None = None, phase: str = "qa_finetune",
                device: str = "cpu", inverse: bool = False, forward: bool = True,
                precision: str = "fp32", pipeline: str = "packed") -> tuple[torch.nn.Module, dict]:
    """QA fine-tuning on ``people`` (their six forward questions and/or the inverse question), LoRA or
    full per ``spec.method`` (:func:`lmsci.train.finetune.finetune`; ``precision`` ``"fp32"`` or ``"bf16"``).
    ``pipeline="packed"`` packs the QA windows in Python (:func:`qa_stream`, ~250 us per document);
    ``"stream"`` renders and packs them with :class:`lmsci.worlds.bios_stream.QAStream` (the gpu and paper
    presets: 5k people x 6 questions x 40 epochs would take ~5 minutes to pack in Python).

    Returns:
        ``(model, info)``: the fine-tuned model (a ``peft.PeftModel`` for LoRA; use it for every later
        measurement) and ``{"ft_steps", "ft_seconds", "ft_trainable_params", "ft_final_loss"}``.
    """
    if pipeline == "stream":
        from lmsci.worlds.bios_stream import QAStream

        packed = QAStream(world, np.asarray(people, dtype=np.int64), seq_len=seq_len, batch_size=spec.batch_size,
                          epochs=epochs, order_seed=seed, forward=forward, inverse=inverse).to_packed()
    elif pipeline == "packed":
        packed = qa_stream(world, people, epochs=epochs, seed=seed, seq_len=seq_len, inverse=inverse, forward=forward)
    else:
        raise ConfigError("pipeline", pipeline, "'packed' or 'stream'")
    log = (lambda m: ctx.log(phase=phase, **m)) if ctx is not None else None
    steps = max(1, -(-packed.input_ids.shape[0] // spec.batch_size)) * spec.epochs
    bar = ctx.progress(steps, phase) if ctx is not None else None
    try:
        model, res = finetune(model, (packed.input_ids, packed.targets), spec, seed=seed, device=device, log=log,
                              progress=bar, precision=precision)
    finally:
        if bar is not None:
            bar.close()
    return model, {"ft_steps": res.steps, "ft_seconds": res.seconds,
                   "ft_trainable_params": trainable_parameters(model)["trainable"],
                   "ft_final_loss": float(res.final.get("loss", float("nan")))}


#: offset of the null arm's initialisation seed from the point's training seed (the P-probe baseline uses + 7)
NULL_INIT_OFFSET = 11


def null_arm_finetune(cfg: BiosQAConfig, world: BiosWorld, ctx: PointContext, *, finetune_people: Sequence[int],
                      tested: Sequence[int], inverse: bool = False,
                      before_finetune: Callable[[torch.nn.Module], dict[str, Any]] | None = None) -> dict[str, Any]:
    """The null arm of the bioS extraction claims (issue 29): a randomly initialised GPT of the same shape (seed
    ``ctx.seed + NULL_INIT_OFFSET``) that never read a biography, QA fine-tuned exactly as the real arms
    (:func:`finetune_qa`: the same people, spec, epochs and fine-tuning seed), then scored on the people tested.
    Whatever it answers about them comes from the question format and the answer pools, not from stored
    knowledge: the knowledge the claims are about is absent by construction.

    Args:
        finetune_people: the QA-trained people (P_train / the celebrities).
        tested: the held-out people whose QA is the claims' statistic.
        inverse: also fine-tune on (and score) the inverse question (reversal-curse).
        before_finetune: ``fn(untrained model) -> dict`` merged into the result before fine-tuning.

    Returns:
        ``{"null_qa_train", "null_qa_test", "null_ft_seconds"}`` (and ``null_inverse_train`` /
        ``null_inverse_test`` with ``inverse``; ``null_qa_*_<attr>`` per attribute) plus ``before_finetune``'s keys.
    """
    dev = ctx.device
    model = GPT(cfg.model.gpt_config(len(world.vocab), cfg.seq_len), seed=ctx.seed + NULL_INIT_OFFSET).to(dev)
    out: dict[str, Any] = dict(before_finetune(model)) if before_finetune is not None else {}
    model, info = finetune_qa(model, world, finetune_people, cfg.finetune, epochs=cfg.ft_epochs, seed=ctx.seed + 1,
                              seq_len=cfg.qa_seq_len, ctx=ctx, phase="null_qa_finetune", device=dev, inverse=inverse,
                              precision=cfg.precision, pipeline=getattr(cfg, "pipeline", "packed"))
    out["null_ft_seconds"] = info["ft_seconds"]
    out.update(qa_metrics(model, world, finetune_people, tested, attrs=ATTRS, prefix="null_", device=dev,
                          inverse=inverse))
    return out


def pretrain_check_finetune(cfg: BiosQAConfig, world: BiosWorld, windows: Packed | Any,
                            bios_fn: Callable[[np.ndarray], list[Doc]], ctx: PointContext, *,
                            tested: Sequence[int], tested_spec: DataSpec,
                            recall: dict[str, tuple[Sequence[int], DataSpec]],
                            finetune_people: Sequence[int] | None = None, forgetting: Sequence[str] = (),
                            before_finetune: Callable[[torch.nn.Module], dict[str, Any]] | None = None,
                            ) -> tuple[torch.nn.Module, dict[str, Any], dict[str, Any]]:
    """The memorisation-first protocol of issue 11: pretrain a fresh GPT on ``windows``, checking the biography
    recall of ``tested`` people during training (:func:`recall_checker`, stopping at ``cfg.memorise_stop``,
    checkpointing so that a killed run resumes), measure recall on the pretrained model, then (when
    ``finetune_people`` is given) QA fine-tune on them (:func:`finetune_qa`, LoRA by default) and measure
    recall again (forgetting). Shared by ``knowledge-extraction`` and ``celebrity-helps-minority``
    (Allen-Zhu & Li, Part 3.1, arXiv 2309.14316, Sections 3-4; Part 3.3, arXiv 2404.05405, Remark A.2).

    Args:
        windows, bios_fn: from :func:`pretraining_data`.
        tested, tested_spec: the people whose recall gates the claim, and how their biographies are written.
        recall: ``{name: (people, spec)}``: ``row["bio_recall_<name>"]`` on the pretrained model.
        finetune_people: the people whose QA is fine-tuned on (None: no fine-tuning, e.g. mixed training).
        forgetting: names in ``recall`` measured again after fine-tuning: ``row["bio_recall_<name>_after_ft"]``
            and ``row["forgetting_<name>"]`` (before minus after).
        before_finetune: ``fn(pretrained model) -> dict`` merged into the row before fine-tuning (probes).

    Returns:
        ``(model, pretrain, row)``: the final model (a ``peft.PeftModel`` after LoRA fine-tuning), the
        :func:`train_packed` record, and the row: ``params``, the pretraining record (``pretrain_tokens``,
        ``pretrain_steps``, ``pretrain_steps_budget``, ``steps_to_gate``, ``stopped_early``, ``recall_checks``
        (JSON), ``pretrain_seconds``, ``tokens_per_s``, ``resumed_from``), the recalls, and after fine-tuning
        ``ft_steps``, ``ft_seconds``, ``ft_trainable_params``, ``ft_final_loss``, ``ft_method`` and the
        forgetting columns.
    """
    import json

    dev = ctx.device
    model = GPT(cfg.model.gpt_config(len(world.vocab), cfg.seq_len), seed=ctx.seed).to(dev)
    check = recall_checker(world, tested, seed=cfg.seed, spec=tested_spec, n=cfg.memorise_check_people, device=dev,
                           bios_fn=bios_fn)
    pre = train_packed(model, windows, cfg.pretrain, seed=ctx.seed, ctx=ctx, phase="pretrain", device=dev,
                       recall_fn=check, check_every=cfg.memorise_check_every, stop_at=cfg.memorise_stop,
                       checkpoint=True, precision=cfg.precision)
    row: dict[str, Any] = {
        "params": model.num_params(), "pretrain_tokens": pre["tokens_seen"], "pretrain_steps": pre["steps"],
        "pretrain_steps_budget": pre["steps_budget"], "steps_to_gate": pre["steps_to_gate"],
        "stopped_early": pre["stopped_early"], "recall_checks": json.dumps(pre["recall_checks"]),
        "pretrain_seconds": pre["seconds"], "tokens_per_s": pre["tokens_per_s"], "resumed_from": pre["resumed_from"]}
    for name, (people, spec) in recall.items():
        row[f"bio_recall_{name}"] = bio_recall(model, world, people, seed=cfg.seed, spec=spec, device=dev,
                                               bios_fn=bios_fn)
    if before_finetune is not None:
        row.update(before_finetune(model))
    if finetune_people is None:
        return model, pre, row
    model, info = finetune_qa(model, world, finetune_people, cfg.finetune, epochs=cfg.ft_epochs, seed=ctx.seed + 1,
                              seq_len=cfg.qa_seq_len, ctx=ctx, device=dev, precision=cfg.precision,
                              pipeline=getattr(cfg, "pipeline", "packed"))
    row.update(info)
    row["ft_method"] = cfg.finetune.method
    for name in forgetting:
        people, spec = recall[name]
        after = bio_recall(model, world, people, seed=cfg.seed, spec=spec, device=dev, bios_fn=bios_fn)
        row[f"bio_recall_{name}_after_ft"] = after
        row[f"forgetting_{name}"] = row[f"bio_recall_{name}"] - after
    return model, pre, row


def recall_checker(world: BiosWorld, people: Sequence[int], *, seed: int, spec: DataSpec, n: int,
                   device: str = "cpu", check_seed: int = 0,
                   bios_fn: Callable[[np.ndarray], list[Doc]] | None = None) -> Callable[[torch.nn.Module], float]:
    """``recall_fn`` for :func:`train_packed`: :func:`bio_recall` on a fixed random subset of at most
    ``n`` of ``people`` (``bios_fn(people) -> docs``: the training biographies of another pipeline,
    e.g. ``BioStream.training_bios``; default :func:`training_bios`)."""
    people = np.asarray(people)
    if len(people) > n:
        people = np.sort(np.random.default_rng([check_seed, 97]).choice(people, n, replace=False))
    docs = bios_fn(people) if bios_fn is not None else training_bios(world, people, seed=seed, spec=spec)
    return lambda m: recall_of_docs(m, docs, attrs=ATTRS, device=device)



def bio_recall(model: torch.nn.Module, world: BiosWorld, people: Sequence[int], *, seed: int, spec: DataSpec,
               device: str = "cpu", bios_fn: Callable[[np.ndarray], list[Doc]] | None = None) -> float:
    """Memorisation: exact match of every attribute value inside each person's first *training* biography
    (the rendering :func:`lmsci.worlds.bios_datasets.bio_docs` made for pretraining, or ``bios_fn(people)`` for
    another pipeline such as ``BioStream.training_bios``), given its prefix."""
    docs = bios_fn(np.asarray(people)) if bios_fn is not None else training_bios(world, people, seed=seed, spec=spec)
    return recall_of_docs(model, docs, attrs=ATTRS, device=device)


def first_value_words(world: BiosWorld) -> dict[str, list[str]]:
    """Attribute -> the candidate first words of its values in ``world`` (the classes of the P- and
    Q-probes of :mod:`lmsci.measure.probes`): months for birth dates, ``"<city>@@"`` for cities, the
    first word of each university, major and company."""
    p = world.pools
    first = {"birth_date": list(MONTHS), "birth_city": [a + "@@" for a, _, _ in p.cities],
             "company_city": [a + "@@" for a, _, _ in p.cities]}
    first.update({k: [v[0] for v in pool] for k, pool in
                  (("university", p.universities), ("major", p.majors), ("company", p.companies))})
    return {a: first[a] for a in ATTRS}

