"""The bioS pretraining and QA data streams of the knowledge experiments (front: :mod:`.common`).

A pretraining *stream* is a list of epochs; each epoch renders biographies (the same ones every
epoch for bioS single / multiM, freshly drawn ones when ``fresh``), optionally adds QA documents
(mixed training), shuffles them across people and packs them into ``seq_len`` windows with no
person twice in a window (:func:`lmsci.worlds.bios_datasets.pack`). ``exposures`` counts biographies per
person actually consumed by the optimizer steps. Mixed training puts biographies and QA in separate windows
with QA at 80% of the tokens (:func:`mixed_stream`, Allen-Zhu & Li, Part 3.1, arXiv 2309.14316, Appendix C).
Windows are :class:`~lmsci.worlds.bios_datasets.Packed` (ids and targets ``[windows, seq_len]``) or, for the
``"stream"`` pipeline, :mod:`lmsci.worlds.bios_stream` objects.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from lmsci.errors import ConfigError
from lmsci.experiments.knowledge._specs import DataSpec
from lmsci.worlds.bios import BiosWorld, Doc
from lmsci.worlds.bios_datasets import Packed, bio_docs, pack, qa_docs


def concat_packed(parts: Sequence[Packed]) -> Packed:
    """The windows of ``parts`` one after another, as one :class:`~lmsci.worlds.bios_datasets.Packed` (ids and targets
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
        :class:`~lmsci.worlds.bios_datasets.Packed` (``kinds`` per window: all ``"bio"`` or all ``"qa"``).

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
            :class:`~lmsci.worlds.bios_datasets.Packed` in memory) or ``"stream"`` (:mod:`lmsci.worlds.bios_stream`:
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



def exposures_of(packed: Packed | Any, n_people: int, windows_used: int, people: Sequence[int] | None = None) -> float:
    """Mean number of biographies per person (of ``people``) in the first ``windows_used`` windows (for a
    stream: in the batches it yielded, which :func:`train_packed` stops drawing when training stops)."""
    c = packed.exposures(n_people, windows_used) if isinstance(packed, Packed) else np.asarray(packed.exposures)
    return float(c[np.asarray(people)].mean() if people is not None else c.mean())


def training_bios(world: BiosWorld, people: Sequence[int], *, seed: int, spec: DataSpec,
                  reverse: bool = False) -> list[Doc]:
    """Each person's first *training* biography: the rendering :func:`lmsci.worlds.bios_datasets.bio_docs` made
    for pretraining (same rng stream), one :class:`~lmsci.worlds.bios.Doc` per person."""
    return [world.bio(int(i), np.random.default_rng([seed, 17, int(i), 0]), permute=spec.permute,
                      fullname=spec.fullname, reverse=reverse) for i in people]

