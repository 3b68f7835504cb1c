"""Shared machinery of the knowledge experiments (bioS): configs, data streams, training, evaluation.

Used by ``knowledge-extraction``, ``celebrity-helps-minority``, ``reversal-curse`` and
``knowledge-capacity``. Source: Allen-Zhu & Li, Physics of Language Models Parts 3.1 / 3.2 / 3.3
(arXiv 2309.14316, 2309.14402, 2404.05405); Berglund et al., arXiv 2309.12288.

A pretraining *stream* is a list of epochs; each epoch renders biographies (the same ones every
epoch for bioS single / multiM, freshly drawn ones when ``fresh``), optionally adds QA documents
(mixed training), shuffles them across people and packs them into ``seq_len`` windows with no
person twice in a window (:func:`lmsci.worlds.bios.pack`). ``exposures`` counts biographies per
person actually consumed by the optimizer steps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch
import pandas as pd
from pydantic import Field

from lmsci.claims import Gate, across_seeds
from lmsci.config import ExperimentConfig, StrictModel
from lmsci.errors import ConfigError
from lmsci.experiments.base import PointContext
from lmsci.measure.accuracy import exact_match, inverse_accuracy, qa_accuracy
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.train.trainer import TrainConfig, train
from lmsci.worlds.bios import ATTRS, MONTHS, BiosWorld, Doc, Packed, bio_docs, pack, qa_docs


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
    return Packed(torch.cat([p.input_ids for p in parts]), torch.cat([p.targets for p in parts]),
                  [x for p in parts for x in p.people], [x for p in parts for x in p.kinds])


def bio_stream(world: BiosWorld, *, exposures: int, seed: int, seq_len: int,
               specs: Sequence[tuple[Sequence[int], DataSpec]], fresh: bool = False, reverse: bool = False,
               extra_docs: Sequence[Doc] = (), extra_epochs: int | None = None, shuffle: bool = True,
               order_seed: int | None = None) -> Packed:
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
    for e in range(epochs):
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



class BiosQAConfig(ExperimentConfig):
    """Fields shared by the bioS experiments that pretrain on biographies and then ask questions.

    Attributes:
        n_people: N individuals in the world.
        model: the GPT trained (``d_model``, ``n_layers``, ``n_heads``).
        exposures: biographies per person seen in pretraining.
        seq_len: pretraining window length in tokens; ``qa_seq_len`` the QA fine-tuning window.
        pretrain, finetune: optimizer settings of the two phases; ``ft_epochs`` QA fine-tuning epochs.
    """

    n_people: int = Field(160, ge=4, le=1_000_000)
    model: ModelSpec = ModelSpec(d_model=64, n_layers=2, n_heads=4)
    exposures: int = Field(100, ge=1)
    seq_len: int = Field(256, ge=64)
    qa_seq_len: int = Field(96, ge=32)
    pretrain: TrainSpec = TrainSpec(lr=1e-2, batch_size=4)
    finetune: TrainSpec = TrainSpec(lr=3e-3, batch_size=4, weight_decay=0.0)
    ft_epochs: int = Field(30, ge=1)


def train_packed(model: torch.nn.Module, packed: Packed, spec: TrainSpec, *, seed: int, ctx: PointContext | None,
                 phase: str, device: str = "cpu", eval_fn=None, eval_every: int = 0) -> dict[str, Any]:
    """Train on all windows of ``packed`` once, in order (the windows are already shuffled).

    Returns:
        ``{"steps", "tokens_seen", "final_loss", "seconds", "tokens_per_s"}``.
    """
    B = spec.batch_size
    W = packed.input_ids.shape[0]
    steps = max(1, W // B)
    cfg = TrainConfig(steps=steps, batch_size=B, lr=spec.lr, warmup_steps=int(spec.warmup_frac * steps),
                      min_lr_ratio=0.1, weight_decay=spec.weight_decay, grad_clip=1.0, device=device,
                      log_every=max(1, steps // 50), eval_every=eval_every)
    x, y = packed.input_ids, packed.targets

    def get_batch(step: int, g: torch.Generator):
        idx = torch.arange(step * B, step * B + B) % W
        return x[idx], y[idx]

    log = (lambda m: ctx.log(phase=phase, **m)) if ctx is not None else None
    bar = ctx.progress(steps, phase) if ctx is not None else None
    try:
        res = train(model, get_batch, cfg, seed=seed, log=log, progress=bar, eval_fn=eval_fn)
    finally:
        if bar is not None:
            bar.close()
    return {"steps": res.steps, "tokens_seen": res.tokens_seen, "final_loss": float(res.final.get("loss", float("nan"))),
            "seconds": res.seconds, "tokens_per_s": res.tokens_seen / max(res.seconds, 1e-9), "windows_used": steps * B}


def exposures_of(packed: Packed, n_people: int, windows_used: int, people: Sequence[int] | None = None) -> float:
    """Mean number of biographies per person (of ``people``) in the first ``windows_used`` windows."""
    c = packed.exposures(n_people, windows_used)
    return float(c[np.asarray(people)].mean() if people is not None else c.mean())


def bio_recall(model: torch.nn.Module, world: BiosWorld, people: Sequence[int], *, seed: int, spec: DataSpec,
               device: str = "cpu") -> float:
    """Memorisation: exact match of every attribute value inside each person's first *training* biography
    (the rendering :func:`lmsci.worlds.bios.bio_docs` made for pretraining), given its prefix."""
    docs = [world.bio(int(i), np.random.default_rng([seed, 17, int(i), 0]), permute=spec.permute,
                      fullname=spec.fullname) for i in people]
    hits = []
    for a in ATTRS:
        for d in docs:
            d.spans["_v"] = d.spans[a]
        hits.append(exact_match(model, docs, span_key="_v", stop=0, device=device))
    return float(np.mean(hits))


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


def qa_metrics(model: torch.nn.Module, world: BiosWorld, train_people, test_people, prefix: str = "",
               device: str = "cpu", inverse: bool = False) -> dict[str, float]:
    """Forward QA accuracy (mean and per attribute) on P_train and P_test, optionally inverse search."""
    out: dict[str, float] = {}
    for tag, ppl in (("train", train_people), ("test", test_people)):
        acc = qa_accuracy(model, world, ppl, ATTRS, device=device)
        out[f"{prefix}qa_{tag}"] = acc["mean"]
        for a in ATTRS:
            out[f"{prefix}qa_{tag}_{a}"] = acc[a]
        if inverse:
            out[f"{prefix}inverse_{tag}"] = inverse_accuracy(model, world, ppl, device=device)
    return out


# -- verdicts: per-seed statistics and the shared gate -------------------------------------------------
MEMORISED = Gate("memorised", "biography recall (exact match of each of the 6 attribute values given the "
                              "biography prefix, on the pretrained model) of the people tested >= 0.9 in every "
                              "model trained (every condition, every seed)")
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
            "per_seed": {int(k): [v, *binom_ci(v, n)] for k, v in per_seed.items()}}


def seed_summary(per_seed: dict[int, float]) -> dict[str, Any]:
    """``{"mean", "ci95", "per_seed", "kind"}`` of a per-seed accuracy, for the verdict's details."""
    if not per_seed:
        return {}
    st = across_seeds(per_seed.values())
    return {"mean": st.mean, "ci95": st.ci, "kind": st.kind, "per_seed": dict(per_seed)}


def binom_ci(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson 95% interval of a proportion ``p`` over ``n`` trials."""
    if n <= 0:
        return (float("nan"), float("nan"))
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))
