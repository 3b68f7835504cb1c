"""Shared machinery of the knowledge experiments (bioS): configs, data streams, protocols, gates.

Used by ``knowledge-extraction``, ``celebrity-helps-minority``, ``reversal-curse`` and
``knowledge-capacity``. Source: Allen-Zhu & Li, Physics of Language Models Parts 3.1 / 3.2 / 3.3
(arXiv 2309.14316, 2309.14402, 2404.05405); Berglund et al., arXiv 2309.12288.

A pretraining *stream* is a list of epochs; each epoch renders biographies (the same ones every
epoch for bioS single / multiM, freshly drawn ones when ``fresh``), optionally adds QA documents
(mixed training), shuffles them across people and packs them into ``seq_len`` windows with no
person twice in a window (:func:`lmsci.worlds.bios.pack`). ``exposures`` counts biographies per
person actually consumed by the optimizer steps.

The papers' protocol (issue 11): QA fine-tuning is LoRA through ``peft`` (:func:`finetune_qa`,
:mod:`lmsci.train.finetune`; ``finetune.method = "full"`` is the ablation); extraction is judged only
when the pretrained model has memorised the biographies of the people tested (:data:`MEMORISED`,
recall >= 0.9; :func:`lmsci.train.packed.train_packed` checks recall during pretraining and can stop once a target
holds, recording the steps it took); mixed training puts biographies and QA in separate windows
with QA at 80% of the tokens (:func:`mixed_stream`, Part 3.1 Appendix C).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import torch
import pandas as pd
from pydantic import Field

from lmsci.claims import Gate, across_seeds
from lmsci.config import ExperimentConfig, StrictModel
from lmsci.errors import ConfigError
from lmsci.experiments.base import PointContext
from lmsci.measure.knowledge import qa_metrics, recall_of_docs
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.train.estimate import GPU_ASSUMPTIONS, GPU_BUDGET_S, STEP_OVERHEAD_S, gpu_seconds  # noqa: F401
from lmsci.train.estimate import flops_per_token as _flops_per_token
from lmsci.train.finetune import FinetuneSpec, finetune, trainable_parameters
from lmsci.train.packed import train_packed
from lmsci.worlds.bios import ATTRS, MONTHS, BiosWorld, Doc, Packed, bio_docs, pack, qa_docs
from lmsci.stats import wilson_interval


class ModelSpec(StrictModel):
    """A GPT-2-style model with rotary positions, no dropout (Part 3.1 / 3.3: "GPT2 with rotary")."""

    d_model: int = Field(64, ge=8)
    n_layers: int = Field(2, ge=1)
    n_heads: int = Field(4, ge=1)
    pos: Literal["rope", "learned"] = "rope"
    tie_embeddings: bool = True  # GPT-2 ties the input and output embeddings


class DataSpec(StrictModel):
    """How biographies are written (Part 3.1, Section 2): multiplicity M, permute, fullname."""

    multiplicity: int = Field(1, ge=1, le=100)
    permute: bool = False
    fullname: bool = False


SINGLE = DataSpec()
AUGMENTED = DataSpec(multiplicity=5, permute=True, fullname=True)


def check_model(spec: ModelSpec, field: str = "model") -> None:
    """Raise ConfigError when ``d_model`` is not divisible into even-sized heads."""
    if spec.d_model % spec.n_heads or (spec.d_model // spec.n_heads) % 2:
        raise ConfigError(f"{field}.d_model", spec.d_model,
                          f"a multiple of 2*n_heads={2 * spec.n_heads} (even head size for rotary)")


def make_model(world: BiosWorld, spec: ModelSpec, seq_len: int, seed: int) -> GPT:
    """A fresh GPT for ``world``'s vocabulary."""
    return GPT(GPTConfig(vocab_size=len(world.vocab), seq_len=seq_len, n_layers=spec.n_layers,
                         n_heads=spec.n_heads, d_model=spec.d_model, pos=spec.pos,
                         tie_embeddings=spec.tie_embeddings), seed=seed)


def concat_packed(parts: Sequence[Packed]) -> Packed:
    """The windows of ``parts`` one after another, as one :class:`~lmsci.worlds.bios.Packed` (ids and targets
    ``[sum of windows, seq_len]``, people and kinds per window)."""
    return Packed(torch.cat([p.input_ids for p in parts]), torch.cat([p.targets for p in parts]),
                  [x for p in parts for x in p.people], [x for p in parts for x in p.kinds])


def bio_stream(world: BiosWorld, *, exposures: int, seed: int, seq_len: int,
               specs: Sequence[tuple[Sequence[int], DataSpec]], fresh: bool = False, reverse: bool = False,
               extra_docs: Sequence[Doc] = (), extra_epochs: int | None = None, shuffle: bool = True,
               order_seed: int | None = None, max_distinct_epochs: int | None = None) -> Packed:
    """Pretraining windows giving every person ``exposures`` biographies.

    Args:
        specs: ``[(people, DataSpec), ...]``: who gets which kind of biography (celebrities can be
            augmented while the minority is single).
        fresh: render new biographies (new templates, new order) every epoch.
        reverse: add the reversed-direction sentence to every biography.
        extra_docs: documents added to the epochs (QA of P_train for mixed training).
        extra_epochs: in how many epochs (spread evenly) ``extra_docs`` appear; default all.
        order_seed: seed of the shuffle across people (default ``seed``); a training seed passes its own
            ``ctx.seed`` so that separately pretrained models see the same biographies in their own order.
        max_distinct_epochs: with fixed biographies (not ``fresh``) and no ``extra_docs``, pack at most this
            many epochs (each its own shuffle) and repeat them cyclically; the Python packer costs ~250 us
            per document, so a 10k-person, 400-exposure stream would otherwise spend ~15 minutes packing.

    The number of epochs is ``ceil(exposures / M)`` for the largest multiplicity M; a person with a
    smaller M repeats their biographies proportionally so that everyone gets ``exposures``.
    """
    m_max = max(s.multiplicity for _, s in specs)
    epochs = math.ceil(exposures / m_max)
    fixed: list[Doc] = []
    if not fresh:
        for people, s in specs:
            docs = bio_docs(world, people, multiplicity=s.multiplicity, permute=s.permute, fullname=s.fullname,
                            seed=seed, reverse=reverse)
            fixed += docs * (m_max // s.multiplicity)
    parts = []
    cap = max_distinct_epochs if (max_distinct_epochs and not fresh and not extra_docs) else None
    for e in range(epochs):
        if cap is not None and e >= cap:
            parts.append(parts[e % cap])
            continue
        if fresh:
            docs = []
            for people, s in specs:
                docs += bio_docs(world, people, multiplicity=m_max, permute=s.permute, fullname=s.fullname,
                                 seed=seed, reverse=reverse, epoch=e + 1)
        else:
            docs = fixed
        k = epochs if extra_epochs is None else max(1, min(extra_epochs, epochs))
        extra = list(extra_docs) if (e * k) // epochs != ((e + 1) * k) // epochs else []
        o = seed if order_seed is None else order_seed
        parts.append(pack(list(docs) + extra, seq_len, seed=o * 100003 + e, shuffle=shuffle))
    return concat_packed(parts)


def qa_stream(world: BiosWorld, people: Sequence[int], *, epochs: int, seed: int, seq_len: int,
              inverse: bool = False, forward: bool = True) -> Packed:
    """QA fine-tuning windows: the six forward questions (and/or the inverse question) of ``people``;
    ``seed`` orders them (a training seed passes its own)."""
    docs: list[Doc] = []
    if forward:
        docs += qa_docs(world, people)
    if inverse:
        docs += [world.inverse_qa(int(i)) for i in people]
    return concat_packed([pack(docs, seq_len, seed=seed * 7919 + e) for e in range(epochs)])


class TrainSpec(StrictModel):
    """Optimizer settings of one training phase (AdamW, warmup + cosine, lmsci.train.trainer)."""

    lr: float = Field(3e-3, gt=0)
    batch_size: int = Field(32, ge=1)
    weight_decay: float = Field(0.1, ge=0)
    warmup_frac: float = Field(0.05, ge=0, le=0.5)



# -- time estimates of the gpu presets (one H100): lmsci.train.estimate, plus the host's data work -------------
#: Host work (data) is added serially: ``HOST_DOCS_PER_S`` documents/s for the vectorised renderer and packer of
#: :mod:`lmsci.worlds.bios_stream` (measured 473k biographies per CPU-second in benchmarks/bench_bios_pipeline.py),
#: ``PY_DOCS_PER_S`` for the Python renderer + packer (75 + 250 us).
H100_ASSUMPTIONS = GPU_ASSUMPTIONS + " + host data at 400k documents/s (knowledge_common.HOST_DOCS_PER_S)"
HOST_DOCS_PER_S = 400_000
PY_DOCS_PER_S = 3_000


def flops_per_token(spec: ModelSpec, vocab_size: int, seq_len: int, train: bool = True) -> float:
    """:func:`lmsci.train.estimate.flops_per_token` of ``spec``."""
    return _flops_per_token(spec.d_model, spec.n_layers, vocab_size, seq_len, train)


def h100_seconds(spec: ModelSpec, vocab_size: int, seq_len: int, *, tokens: float, steps: float,
                 eval_tokens: float = 0.0, host_docs: float = 0.0, python_docs: float = 0.0) -> float:
    """Estimated wall seconds on one H100 for ``tokens`` training tokens in ``steps`` optimizer steps, plus
    ``eval_tokens`` of forward-only evaluation (:func:`lmsci.train.estimate.gpu_seconds`) and the host's data work
    (:data:`HOST_DOCS_PER_S`, :data:`PY_DOCS_PER_S`)."""
    return gpu_seconds(spec.d_model, spec.n_layers, vocab_size, seq_len, tokens=tokens, steps=steps,
                       eval_tokens=eval_tokens) + host_docs / HOST_DOCS_PER_S + python_docs / PY_DOCS_PER_S


def mean_tokens(kind: str, spec: DataSpec | None = None, groups: int = 1, n: int = 400) -> float:
    """Mean tokens of one document of ``kind`` (``"bio"`` written as ``spec``, ``"bio_reverse"`` in ``groups``
    sentences, ``"qa"`` (the six questions), ``"inverse_qa"``), from ``n`` renderings of a small world (the
    vocabulary, templates and value lengths do not depend on N); for the estimates."""
    from lmsci.worlds.bios_stream import INVERSE, BiosRenderer

    r = BiosRenderer(BiosWorld(n, seed=0))
    ppl = np.arange(n)
    if kind == "bio":
        sp = spec or SINGLE
        d = r.bios(ppl, 0, 0, permute=sp.permute, fullname=sp.fullname, lengths_only=True)
    elif kind == "bio_reverse":
        d = r.bios_reversed(ppl, 0, 0, groups=groups, lengths_only=True)
    elif kind in ("qa", "inverse_qa"):
        d = r.qa(ppl, ppl % len(ATTRS) if kind == "qa" else INVERSE, lengths_only=True)
    else:
        raise ConfigError("kind", kind, "bio, bio_reverse, qa or inverse_qa")
    return float(d.length.mean())


def model_seconds(cfg: BiosQAConfig, *, bio_tokens: float, bio_docs: float, qa_tokens: float = 0.0,
                  ft_people: int = 0, ft_questions: int = 6, eval_docs: float = 0.0) -> float:
    """Estimated H100 seconds of one model of a bioS QA experiment (:func:`h100_seconds`): pretraining on
    ``bio_tokens`` tokens of ``bio_docs`` biographies plus ``qa_tokens`` of mixed-in QA, the memorisation
    checks (``memorise_check_people`` biographies every ``memorise_check_every`` steps), QA fine-tuning of
    ``ft_people`` x ``ft_questions`` questions for ``ft_epochs``, and ``eval_docs`` evaluated documents (~60
    tokens each). Windows hold ``seq_len * (1 - mean document / (2 seq_len))`` tokens on average. Host work at
    :data:`HOST_DOCS_PER_S` for the ``"stream"`` pipeline, :data:`PY_DOCS_PER_S` otherwise."""
    V, T, qa = vocab_size(), cfg.seq_len, mean_tokens("qa")
    stream = getattr(cfg, "pipeline", "packed") == "stream"
    docs = bio_docs + qa_tokens / qa
    mean_doc = (bio_tokens + qa_tokens) / max(docs, 1.0)
    tokens = bio_tokens + qa_tokens
    steps = tokens / (cfg.pretrain.batch_size * T * (1 - mean_doc / (2 * T)))
    checks = (steps / cfg.memorise_check_every if cfg.memorise_check_every else 1) * cfg.memorise_check_people
    ev = (eval_docs + checks) * 60.0
    host = {"host_docs": docs} if stream else {"python_docs": docs}
    secs = h100_seconds(cfg.model, V, T, tokens=tokens, steps=steps, eval_tokens=ev, **host)
    if ft_people:
        ft_docs = ft_people * ft_questions * cfg.ft_epochs
        ft_tok = ft_docs * qa
        ft_steps = ft_tok / (cfg.finetune.batch_size * cfg.qa_seq_len * (1 - qa / (2 * cfg.qa_seq_len)))
        host = {"host_docs": ft_docs} if stream else {"python_docs": ft_docs}
        secs += h100_seconds(cfg.model, V, cfg.qa_seq_len, tokens=ft_tok, steps=ft_steps, **host)
    return secs


def vocab_size() -> int:
    """The bioS vocabulary size (built from the pools, the same for every N)."""
    return len(BiosWorld(4, seed=0).vocab)


class BiosQAConfig(ExperimentConfig):
    """Fields shared by the bioS experiments that pretrain on biographies and then ask questions.

    Attributes:
        n_people: N individuals in the world.
        model: the GPT trained (``d_model``, ``n_layers``, ``n_heads``).
        exposures: biographies per person seen in pretraining (the budget: with ``memorise_stop`` set,
            pretraining may stop earlier, see :func:`train_packed`).
        seq_len: pretraining window length in tokens; ``qa_seq_len`` the QA fine-tuning window.
        pretrain: optimizer settings of pretraining.
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
    model: ModelSpec = ModelSpec(d_model=64, n_layers=2, n_heads=4)
    exposures: int = Field(100, ge=1)
    seq_len: int = Field(256, ge=64)
    qa_seq_len: int = Field(96, ge=32)
    pretrain: TrainSpec = TrainSpec(lr=1e-2, batch_size=4)
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
    pretrain: TrainSpec = TrainSpec(lr=1e-2, batch_size=8)
    finetune: FinetuneSpec = FinetuneSpec(rank=16, embedding_rank=128, lr=3e-3, weight_decay=0.01, batch_size=16)
    ft_epochs: int = Field(20, ge=1)
    memorise_check_every: int = Field(100, ge=0)
    memorise_stop: float | None = Field(0.95, gt=0, le=1)
    memorise_check_people: int = Field(150, ge=1)


def mixed_stream(world: BiosWorld, *, exposures: int, seed: int, seq_len: int,
                 specs: Sequence[tuple[Sequence[int], DataSpec]], qa: Sequence[Doc], qa_ratio: float = 0.8,
                 order_seed: int | None = None, max_distinct_epochs: int | None = None,
                 max_distinct_qa: int = 8) -> Packed:
    """Mixed training windows (Part 3.1, Appendix C): every window holds only biographies or only QA
    documents, and QA windows carry ``qa_ratio`` of all document tokens (QA_r = 0.8 in the paper).

    The biography windows are those of :func:`bio_stream` (every person ``exposures`` biographies); QA
    windows are packings of ``qa`` (each its own shuffle; at most ``max_distinct_qa`` distinct packings,
    repeated cyclically) until their tokens reach ``qa_ratio / (1 - qa_ratio)`` times the biography
    tokens; then all windows are put in one seeded random order.

    Returns:
        :class:`~lmsci.worlds.bios.Packed` (``kinds`` per window: all ``"bio"`` or all ``"qa"``).

    Raises:
        ConfigError: ``qa_ratio`` outside ``[0, 1)``; no QA documents with ``qa_ratio > 0``.
    """
    if not 0.0 <= qa_ratio < 1.0:
        raise ConfigError("qa_ratio", qa_ratio, "a fraction in [0, 1)")
    bio = bio_stream(world, exposures=exposures, seed=seed, seq_len=seq_len, specs=specs, order_seed=order_seed,
                     max_distinct_epochs=max_distinct_epochs)
    if qa_ratio == 0.0:
        return bio
    if not qa:
        raise ConfigError("qa", 0, "QA documents when qa_ratio > 0")
    pad = world.vocab.pad_id
    need = qa_ratio / (1.0 - qa_ratio) * int((bio.input_ids != pad).sum())
    o = seed if order_seed is None else order_seed
    packs: list[Packed] = []
    parts: list[Packed] = []
    have = 0
    while have < need:
        k = len(parts)
        if k < max_distinct_qa:
            packs.append(pack(list(qa), seq_len, seed=o * 7919 + 104729 + k))
        p = packs[k % len(packs)]
        n_tok = (p.input_ids != pad).sum(1)
        csum = torch.cumsum(n_tok, 0)
        if have + int(csum[-1]) <= need:
            parts.append(p)
            have += int(csum[-1])
        else:  # the last, partial packing: as many windows as bring the QA tokens closest to the target
            rem = need - have
            j = int((csum <= rem).sum())
            if j < len(csum) and abs(int(csum[j]) - rem) < abs((int(csum[j - 1]) if j > 0 else 0) - rem):
                j += 1
            if j > 0:
                parts.append(Packed(p.input_ids[:j], p.targets[:j], p.people[:j], p.kinds[:j]))
                have += int(csum[j - 1])
            break
    allw = concat_packed([bio, *parts])
    perm = torch.from_numpy(np.random.default_rng([o, 31, 0x51]).permutation(allw.input_ids.shape[0]))
    return Packed(allw.input_ids[perm], allw.targets[perm], [allw.people[i] for i in perm.tolist()],
                  [allw.kinds[i] for i in perm.tolist()])


def pretraining_data(world: BiosWorld, *, pipeline: str, exposures: int, seed: int, seq_len: int, batch_size: int,
                     specs: Sequence[tuple[Sequence[int], DataSpec]], order_seed: int,
                     qa: Sequence[int] | None = None, qa_ratio: float = 0.8,
                     max_distinct_epochs: int | None = None) -> tuple[Any, Callable[[np.ndarray], list[Doc]]]:
    """The pretraining windows and the function giving each person's (first) training biography.

    Args:
        pipeline: ``"packed"`` (:func:`bio_stream` / :func:`mixed_stream`, a whole
            :class:`~lmsci.worlds.bios.Packed` in memory) or ``"stream"`` (:mod:`lmsci.worlds.bios_stream`:
            rendered, tokenised and packed on the fly, constant memory; for the gpu and paper presets).
        qa: the people whose QA is mixed in (mixed training, every window all biographies or all QA,
            QA at ``qa_ratio`` of the tokens); None: biographies only.

    Returns:
        ``(windows, bios_fn)``; ``windows`` goes to :func:`train_packed`, ``bios_fn(people)`` to
        :func:`bio_recall` / :func:`recall_checker` / the probes.
    """
    if pipeline == "stream":
        from lmsci.worlds.bios_stream import BioStream, MixedStream, QAStream

        groups = [(np.asarray(list(p), dtype=np.int64), sp) for p, sp in specs]
        bio = BioStream(world, seq_len=seq_len, batch_size=batch_size, exposures=exposures, seed=seed,
                        people=groups, order_seed=order_seed)
        bios_fn = lambda people: bio.training_bios(np.asarray(people, dtype=np.int64), 0)  # noqa: E731
        if qa is None:
            return bio, bios_fn
        qs = QAStream(world, np.asarray(qa, dtype=np.int64), seq_len=seq_len, batch_size=batch_size, epochs=None,
                      order_seed=order_seed)
        return MixedStream(bio, qs, qa_fraction=qa_ratio, batch_size=batch_size), bios_fn
    if pipeline != "packed":
        raise ConfigError("pipeline", pipeline, "'packed' or 'stream'")
    spec_of = {}
    for p, sp in specs:
        for i in p:
            spec_of[int(i)] = sp

    def bios_fn(people: np.ndarray) -> list[Doc]:
        return [training_bios(world, [int(i)], seed=seed, spec=spec_of[int(i)])[0] for i in people]

    if qa is None:
        return bio_stream(world, exposures=exposures, seed=seed, seq_len=seq_len, specs=specs, order_seed=order_seed,
                          max_distinct_epochs=max_distinct_epochs), bios_fn
    return mixed_stream(world, exposures=exposures, seed=seed, seq_len=seq_len, specs=specs,
                        qa=qa_docs(world, qa), qa_ratio=qa_ratio, order_seed=order_seed,
                        max_distinct_epochs=max_distinct_epochs), bios_fn


def token_fractions(packed: Packed, pad_id: int = 0) -> dict[str, float]:
    """Share of document tokens (non-pad) in windows of each kind, plus ``"mixed_windows"``: the share
    of windows holding more than one kind (0 for :func:`mixed_stream`). For a ``bios_stream`` stream:
    its ``qa_token_fraction`` over the batches yielded (every window is one kind by construction)."""
    if not isinstance(packed, Packed):
        q = float(getattr(packed, "qa_token_fraction", 0.0))
        return {"qa": q, "bio": 1.0 - q, "mixed_windows": 0.0}
    n_tok = (packed.input_ids != pad_id).sum(1).tolist()
    total = max(1, sum(n_tok))
    out: dict[str, float] = {}
    mixed = 0
    for n, ks in zip(n_tok, packed.kinds):
        kinds = set(ks)
        if len(kinds) > 1:
            mixed += 1
            continue
        k = next(iter(kinds)) if kinds else "empty"
        out[k] = out.get(k, 0.0) + n / total
    out["mixed_windows"] = mixed / max(1, len(n_tok))
    return out


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
    model = make_model(world, cfg.model, cfg.seq_len, ctx.seed + NULL_INIT_OFFSET).to(dev)
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
    model = make_model(world, cfg.model, cfg.seq_len, ctx.seed).to(dev)
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


def exposures_of(packed: Packed | Any, n_people: int, windows_used: int, people: Sequence[int] | None = None) -> float:
    """Mean number of biographies per person (of ``people``) in the first ``windows_used`` windows (for a
    stream: in the batches it yielded, which :func:`train_packed` stops drawing when training stops)."""
    c = packed.exposures(n_people, windows_used) if isinstance(packed, Packed) else np.asarray(packed.exposures)
    return float(c[np.asarray(people)].mean() if people is not None else c.mean())


def training_bios(world: BiosWorld, people: Sequence[int], *, seed: int, spec: DataSpec,
                  reverse: bool = False) -> list[Doc]:
    """Each person's first *training* biography: the rendering :func:`lmsci.worlds.bios.bio_docs` made
    for pretraining (same rng stream), one :class:`~lmsci.worlds.bios.Doc` per person."""
    return [world.bio(int(i), np.random.default_rng([seed, 17, int(i), 0]), permute=spec.permute,
                      fullname=spec.fullname, reverse=reverse) for i in people]


def bio_recall(model: torch.nn.Module, world: BiosWorld, people: Sequence[int], *, seed: int, spec: DataSpec,
               device: str = "cpu", bios_fn: Callable[[np.ndarray], list[Doc]] | None = None) -> float:
    """Memorisation: exact match of every attribute value inside each person's first *training* biography
    (the rendering :func:`lmsci.worlds.bios.bio_docs` made for pretraining, or ``bios_fn(people)`` for
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


# -- verdicts: per-seed statistics and the shared gate -------------------------------------------------
MEMORISED = Gate("memorised", "biography recall (exact match of each of the 6 attribute values given the "
                              "biography prefix, on the pretrained model) of the people tested >= 0.9 in every "
                              "model trained (every condition, every seed)")
QA_LEARNED_MIN = 0.5
QA_LEARNED = Gate("qa-learned", "QA exact match on the QA-trained people (P_train) after fine-tuning >= 0.5 in "
                                "the arm the claim expects to extract (augmented biographies / with celebrities), "
                                "every seed: the fine-tuning learned the question format")
QA_LEARNED_MIXED = Gate("qa-learned", "QA exact match on the QA-trained people (P_train) at the end of mixed training "
                                      ">= 0.5, every seed: the mixed model learned the question format")


def qa_learned_gate(*per_seed: dict[int, float]) -> tuple[float | None, bool | None]:
    """The ``qa-learned`` gate: the lowest QA accuracy on the QA-trained people over every (condition,
    seed) given, >= :data:`QA_LEARNED_MIN`; None when not measured."""
    vals = [v for d in per_seed for v in d.values() if np.isfinite(v)]
    if not vals:
        return (None, None)
    lo = float(min(vals))
    return (lo, lo >= QA_LEARNED_MIN)
RECALL_MIN = 0.9


def seed_values(results: pd.DataFrame, col: str, **where: Any) -> dict[int, float]:
    """``{seed_index: value of col}`` for the rows matching ``where`` (column == value), one per seed
    (rows of one seed averaged; a table without ``seed_index`` is seed 0)."""
    m = results
    for k, v in where.items():
        m = m[m[k] == v]
    if col not in m or not len(m):
        return {}
    if "seed_index" not in m:
        return {0: float(m[col].mean())}
    return {int(s): float(g[col].mean()) for s, g in m.groupby("seed_index")}


def paired(*per_seed: dict[int, float]) -> list[int]:
    """The seed indices present in every one of ``per_seed`` (sorted)."""
    common = set(per_seed[0]) if per_seed else set()
    for d in per_seed[1:]:
        common &= set(d)
    return sorted(common)


def recall_gate(*per_seed: dict[int, float]) -> tuple[float | None, bool | None]:
    """The ``memorised`` gate: the lowest recall over every (condition, seed); None when not measured."""
    vals = [v for d in per_seed for v in d.values() if np.isfinite(v)]
    if not vals:
        return (None, None)
    lo = float(min(vals))
    return (lo, lo >= RECALL_MIN)


def within_run(per_seed: dict[int, float], n: int) -> dict[str, Any]:
    """Within-run binomial intervals for reports (they decide nothing): per seed, the Wilson 95% interval
    of an accuracy over ``n`` questions."""
    return {"kind": f"within-run Wilson 95% CI over {n} questions, per seed",
            "per_seed": {int(k): [v, *wilson_interval(v, n)] for k, v in per_seed.items()}}


def seed_summary(per_seed: dict[int, float]) -> dict[str, Any]:
    """``{"mean", "ci95", "per_seed", "kind"}`` of a per-seed accuracy, for the verdict's details."""
    if not per_seed:
        return {}
    st = across_seeds(per_seed.values())
    return {"mean": st.mean, "ci95": st.ci, "kind": st.kind, "per_seed": dict(per_seed)}
