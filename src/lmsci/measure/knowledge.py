"""Knowledge capacity: bits of knowledge a model demonstrably stores about a bioS world.

Source: Allen-Zhu & Li, "Physics of Language Models: Part 3.3, Knowledge Capacity Scaling Laws",
arXiv 2404.05405, Section 3 (bit-complexity lower bound, Theorem 3.2 for bioD(N, K, C, D, L, T)),
specialised to bioS(N) as in ``physics_of_lms.md`` Section 3.4:

    bits(model) = N * max(0, log2(N0 - N) - p1)                          (name term)
                + sum_a N * max(0, log2|pool_a| - CE_a)                   (one term per attribute)

with every loss in bits:

* ``p1``: the model's mean cross-entropy (summed over the name's tokens) of generating a person's
  full name at the start of a biography (given ``<bos>``); a model that has learned exactly the
  set of N names has ``p1 = log2 N`` and the term is ``log2((N0 - N) / N)`` bits per person; a
  model at chance over the ``N0`` possible names has ``p1 = log2 N0`` and the term clips to 0.
* ``CE_a``: the mean cross-entropy (summed over the value's tokens) of attribute ``a``'s value
  given the name and the preceding sentences, measured only on value tokens, never on template
  tokens. Attributes are scored in the biography's canonical order, so by the chain rule the sum
  of the ``CE_a`` is the cross-entropy of all attributes jointly given the name.
  ``company_city`` is determined by ``company`` (which precedes it), so its pool term is 0 bits.
* The bioD dictionary term is 0: bioS pools are fixed and not learned from data.
* The He/She pronoun bit: with pronouns (bioS without ``fullname``), the first pronoun after the name
  reveals the person's gender, one uniformly drawn bit per person (``He`` for even ids, ``She`` for
  odd ids, independent of the name), so the term ``N * max(0, 1 - CE_pronoun)`` is added, with
  ``CE_pronoun`` the bits of that pronoun token given the name and the first sentence.

Each term is clipped at zero after averaging over people (the conservative form of the bound).
The capacity ratio is bits / parameters; :func:`bits_per_param` counts **all** parameters
(token and position embeddings and the unembedding included, tied weights once) by default
and also reports the ratio over non-embedding parameters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from lmsci.models.device import resolve_model_device
import torch.nn.functional as F

from lmsci.errors import ConfigError
from lmsci.measure.accuracy import forward_in_batches, inverse_accuracy, qa_accuracy

LN2 = math.log(2.0)


def span_ce_bits(model: torch.nn.Module, docs: Sequence[Any], keys: Sequence[str], batch_size: int = 256,
                 device: str | torch.device | None = None) -> dict[str, np.ndarray]:
    """Cross-entropy in bits of each document's value tokens (first span of each key), teacher forced.

    Args:
        model: ``input_ids [batch, seq] -> logits [batch, seq, vocab]``.
        docs: objects with ``ids`` and ``spans`` (``{key: [(start, end), ...]}``).
        keys: which spans to score (e.g. ``"name"``, ``"birth_date"``).

    Returns:
        key -> float array ``[len(docs)]`` of summed -log2 p over the span's tokens.
    """
    device = resolve_model_device(model, device)
    def fn(logits, ids, rows):
        logp = F.log_softmax(logits, -1)  # [b, T, V]
        tok = logp[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]  # [b, T-1]: log p(ids[t+1] | <= t)
        res = []
        for b, r in enumerate(rows):
            row = {}
            for k in keys:
                s, e = docs[r].spans[k][0]
                row[k] = float(-tok[b, s - 1:e - 1].sum()) / LN2
            res.append(row)
        return res

    rows = forward_in_batches(model, [d.ids for d in docs], fn, batch_size, device)
    return {k: np.array([r[k] for r in rows]) for k in keys}


def stored_bits(n_people: int, n0: int, name_ce_bits: float, attr_ce_bits: dict[str, float],
                pool_bits: dict[str, float]) -> dict[str, float]:
    """The Part 3.3 lower bound on stored bits for bioS(N) (module docstring), term by term.

    Args:
        n_people: N.
        n0: the number of possible full names (1.6e8 for bioS).
        name_ce_bits: mean bits to generate a person's name (p1 in bits).
        attr_ce_bits: attribute -> mean bits of its value given the name.
        pool_bits: attribute -> log2 of its pool size (0 for a determined attribute).

    Returns:
        ``{"name": ..., <attr>: ..., "total": ...}`` in bits (whole population).

    Raises:
        ConfigError: ``n_people`` not in [1, n0), or an attribute without a pool size.
    """
    if not 1 <= n_people < n0:
        raise ConfigError("n_people", n_people, f"an integer in [1, n0={n0})")
    out = {"name": n_people * max(0.0, math.log2(n0 - n_people) - float(name_ce_bits))}
    for a, ce in attr_ce_bits.items():
        if a not in pool_bits:
            raise ConfigError("attr_ce_bits", a, f"one of {sorted(pool_bits)}")
        out[a] = n_people * max(0.0, float(pool_bits[a]) - float(ce))
    out["total"] = sum(v for k, v in out.items())
    return out


def ideal_bits(n_people: int, n0: int, pool_bits: dict[str, float]) -> float:
    """Stored bits of a perfect model (``p1 = log2 N``, every ``CE_a = 0``)."""
    return stored_bits(n_people, n0, math.log2(n_people), {a: 0.0 for a in pool_bits}, pool_bits)["total"]


def count_params(model: torch.nn.Module, non_embedding: bool = False) -> int:
    """Parameters counted for the capacity ratio (bits per parameter, Allen-Zhu & Li, Physics of LMs Part 3.3,
    arXiv 2404.05405, Sec. 2): all (default) or without embeddings/unembedding.

    Uses ``model.num_params`` when present (lmsci GPT), otherwise counts unique tensors (tied weights once).

    Raises:
        ConfigError: ``non_embedding=True`` for a model without ``num_params`` (which would not know its embeddings).
    """
    if hasattr(model, "num_params"):
        return int(model.num_params(non_embedding=non_embedding))
    if non_embedding:
        raise ConfigError("non_embedding", True, "False for models without num_params()")
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def bits_per_param(bits: float, model: torch.nn.Module) -> dict[str, float]:
    """Capacity ratio R = bits / params, over all parameters and over non-embedding parameters."""
    n_all, n_ne = count_params(model), count_params(model, non_embedding=True)
    return {"params": n_all, "params_non_embedding": n_ne, "bits_per_param": bits / n_all,
            "bits_per_param_non_embedding": bits / max(n_ne, 1)}


def measure_bits(model: torch.nn.Module, world: Any, *, seed: int, attrs: Sequence[str],
                 people: Sequence[int] | None = None, fullname: bool = False, pronoun: bool = False,
                 batch_size: int = 256, device: str | torch.device | None = None,
                 prefix: Sequence[int] = ()) -> dict[str, Any]:
    """Stored bits of ``model`` about ``world`` (a :class:`lmsci.worlds.bios.BiosWorld`).

    Renders one evaluation biography per person (canonical order, templates drawn from ``seed``,
    pronouns unless ``fullname``), scores the name and each attribute's value tokens, and applies
    :func:`stored_bits`. When ``people`` is a subset, the mean losses over it are extrapolated to
    all ``world.n`` people.

    Args:
        attrs: the attributes whose value tokens are scored (for bioS, ``lmsci.worlds.bios.ATTRS``; the
            world's ``value_bits()`` must cover them).
        pronoun: add the He/She bit (module docstring; ``knowledge-capacity`` counts it); ignored with
            ``fullname`` (no pronouns).
        prefix: token ids put right after ``<bos>`` of every evaluation biography (the domain token of a model
            trained with ``lmsci.worlds.bios_junk.JunkBioStream``: its ``eval_prefix()``); spans shift with it.

    Returns:
        ``{"bits": {...terms..., "total"}, "name_ce_bits": p1, "ce_bits": {attr: CE_a},
        "ideal_bits": perfect-model total}``.
    """
    device = resolve_model_device(model, device)
    attrs = list(attrs)
    people = range(world.n) if people is None else people
    docs = [world.bio(int(i), np.random.default_rng([seed, 31, int(i)]), fullname=fullname) for i in people]
    if len(prefix):
        insert_after_bos(docs, prefix)
    keys = ["name", *attrs]
    if pronoun and not fullname:
        add_pronoun_spans(world, docs)
        keys.append("pronoun")
    ce = span_ce_bits(model, docs, keys, batch_size, device)
    pool = dict(world.value_bits())
    name_ce = float(ce["name"].mean())
    attr_ce = {a: float(ce[a].mean()) for a in attrs}
    if "pronoun" in ce:
        pool["pronoun"] = PRONOUN_BITS
        attr_ce["pronoun"] = float(ce["pronoun"].mean())
    bits = stored_bits(world.n, world.pools.n0, name_ce, attr_ce, pool)
    return {"bits": bits, "name_ce_bits": name_ce, "ce_bits": attr_ce,
            "ideal_bits": ideal_bits(world.n, world.pools.n0, pool)}


def insert_after_bos(docs: Sequence[Any], tokens: Sequence[int]) -> None:
    """Put ``tokens`` right after the first token (``<bos>``) of every document (objects with ``ids``,
    ``loss_mask`` and ``spans``, e.g. :class:`lmsci.worlds.bios.Doc`), in place; spans shift, the inserted
    tokens are loss targets."""
    k, tokens = len(tokens), [int(t) for t in tokens]
    for d in docs:
        d.ids = d.ids[:1] + tokens + d.ids[1:]
        d.loss_mask = d.loss_mask[:1] + [1] * k + d.loss_mask[1:]
        d.spans = {key: [(a + k, b + k) for a, b in v] for key, v in d.spans.items()}


PRONOUN_BITS = 1.0
"""Bits of the He/She choice per person: one uniformly drawn bit (bioS: by id parity)."""


def add_pronoun_spans(world: Any, docs: Sequence[Any]) -> None:
    """Set ``doc.spans["pronoun"]`` to the first He/She token after the name in each biography.

    Raises:
        ValueError: a biography without a pronoun after its name (e.g. a ``fullname`` one).
    """
    ids = {world.vocab.encode([w])[0] for w in ("He", "She")}
    for d in docs:
        start = d.spans["name"][0][1]
        pos = next((t for t in range(start, len(d.ids)) if d.ids[t] in ids), None)
        if pos is None:
            raise ValueError(f"no He/She after the name in the biography of person {d.person}")
        d.spans["pronoun"] = [(pos, pos + 1)]


def completion_gap_bits(model: torch.nn.Module, right: Sequence[Any], wrong: Sequence[Any], key: str = "answer",
                        batch_size: int = 256, device: str | torch.device | None = None) -> np.ndarray:
    """Per prompt: bits of a wrong completion minus bits of the right one (> 0: the right one is likelier).

    Berglund et al.'s log-probability test (arXiv 2309.12288, Section 2.1, the ``randomized`` controls): the
    same prompt completed with the correct name and with another person's name; under the reversal curse
    the correct name is no more likely than a random one (gap ~ 0).

    Args:
        right, wrong: documents paired by index, identical up to the ``key`` span (same token positions).

    Returns:
        float array ``[len(right)]`` of ``-log2 p(wrong) + log2 p(right)`` summed over the span's tokens.

    Raises:
        ValueError: different lengths, or a pair whose ``key`` spans differ.
    """
    device = resolve_model_device(model, device)
    if len(right) != len(wrong):
        raise ValueError(f"{len(right)} right vs {len(wrong)} wrong completions")
    for a, b in zip(right, wrong):
        if a.spans[key][0] != b.spans[key][0]:
            raise ValueError(f"span {key!r} differs between paired documents: {a.spans[key][0]} vs {b.spans[key][0]}")
    r = span_ce_bits(model, right, [key], batch_size, device)[key]
    w = span_ce_bits(model, wrong, [key], batch_size, device)[key]
    return w - r


# -- recall and QA of a bioS model (the knowledge experiments' instruments) -----------------------------------


def recall_of_docs(model: torch.nn.Module, docs: Sequence[Any], *, attrs: Sequence[str],
                   device: str = "cpu") -> float:
    """Mean over (document, attribute) of the greedy exact match of the attribute's value tokens given
    the document's prefix (teacher forcing, one forward pass per batch; Allen-Zhu & Li, Part 3.1,
    arXiv 2309.14316, Section 3: a biography is memorised when every attribute value is reproduced).

    Args:
        model: ``input_ids [batch, seq] -> logits [batch, seq, vocab]``.
        docs: objects with ``ids`` (token ids) and ``spans`` (``{attribute: [(start, end), ...]}``; the first
            span of each attribute is scored), e.g. :class:`lmsci.worlds.bios.Doc`.
        attrs: the attributes scored (e.g. :data:`lmsci.worlds.bios.ATTRS`).
        device: where the forward passes run.

    Returns:
        the exact-match rate in [0, 1]; NaN for no documents.
    """
    if not docs:
        return float("nan")

    def fn(logits, ids, rows):
        pred = logits.argmax(-1)
        out = []
        for b, r in enumerate(rows):
            for a in attrs:
                s, e = docs[r].spans[a][0]
                out.append(bool(torch.equal(pred[b, s - 1:e - 1], ids[b, s:e])))
        return out

    return float(np.mean(forward_in_batches(model, [d.ids for d in docs], fn, device=device)))


def qa_metrics(model: torch.nn.Module, world: Any, train_people, test_people, *, attrs: Sequence[str],
               prefix: str = "", device: str = "cpu", inverse: bool = False) -> dict[str, float]:
    """Forward QA accuracy (mean and per attribute) on P_train and P_test, optionally inverse search
    (:func:`lmsci.measure.accuracy.qa_accuracy`, :func:`~lmsci.measure.accuracy.inverse_accuracy`; Allen-Zhu & Li,
    Part 3.1, arXiv 2309.14316, Section 4; Part 3.2, arXiv 2309.14402, Section 5).

    Args:
        world: the bioS world asked about (a :class:`lmsci.worlds.bios.BiosWorld`).
        train_people, test_people: person ids of P_train and P_test.
        attrs: the attributes asked (e.g. :data:`lmsci.worlds.bios.ATTRS`).
        prefix: prepended to every key.

    Returns:
        ``{f"{prefix}qa_{tag}": mean, f"{prefix}qa_{tag}_{attr}": accuracy, ...}`` for ``tag`` in train, test (exact
        match in [0, 1]), plus ``f"{prefix}inverse_{tag}"`` with ``inverse``.
    """
    out: dict[str, float] = {}
    for tag, ppl in (("train", train_people), ("test", test_people)):
        acc = qa_accuracy(model, world, ppl, attrs, device=device)
        out[f"{prefix}qa_{tag}"] = acc["mean"]
        for a in attrs:
            out[f"{prefix}qa_{tag}_{a}"] = acc[a]
        if inverse:
            out[f"{prefix}inverse_{tag}"] = inverse_accuracy(model, world, ppl, device=device)
    return out
