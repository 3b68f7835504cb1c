"""Data of ``sae-bios``: the bioS world, its training biographies, the SAE's rows and the true features.

Private to :mod:`lmsci.experiments.knowledge.sae_bios` (session 51: the family's shared modules are frozen, so the
pieces this experiment needs beside :func:`lmsci.experiments.knowledge.common.train_bios_model` live here).

The true features are read from the world's ground truth (:class:`lmsci.worlds.bios.BiosWorld`): at the *value
position* of an attribute (the token right before its value in a biography: the position whose next-token prediction
is the value's first token, where a model that memorised the biography must have retrieved the person's value), the
feature ``"<attr>=<w>"`` is on when the biography is about to write attribute ``attr`` and the person's value of it
starts with the word ``w`` (a month, a city stem, a university / major / company first word: the classes of the
P-probe, :func:`lmsci.experiments.knowledge.common.first_value_words`), off at every other value position.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from lmsci.experiments.knowledge.common import BiosModelSpec
from lmsci.measure.accuracy import pad_batch
from lmsci.measure.sae import gather_activations
from lmsci.models.device import device_of
from lmsci.models.gpt import GPT
from lmsci.worlds.bios import ATTRS, BiosWorld, Doc
from lmsci.worlds.bios_datasets import bio_docs


def world_and_docs(spec: BiosModelSpec, data_seed: int) -> tuple[BiosWorld, list[list[Doc]]]:
    """The world and each person's training biographies exactly as
    :func:`lmsci.experiments.knowledge.common.train_bios_model` builds them (``docs[i]``: person ``i``'s
    ``spec.multiplicity`` renderings); for the random-init arm, which trains nothing."""
    world = BiosWorld(spec.n_people, seed=data_seed)
    flat = bio_docs(world, np.arange(spec.n_people), multiplicity=spec.multiplicity, permute=spec.permute,
                    fullname=spec.fullname, seed=data_seed)
    m = spec.multiplicity
    return world, [flat[i * m:(i + 1) * m] for i in range(spec.n_people)]


def init_model(spec: BiosModelSpec, world: BiosWorld, train_seed: int, device: str) -> torch.nn.Module:
    """The GPT of ``spec`` at the initialisation ``train_bios_model`` starts from (same config, same seed), in
    eval mode on ``device``: the null arm's model."""
    return GPT(spec.model.gpt_config(len(world.vocab), spec.seq_len), seed=train_seed).to(device).eval()


def split_people(n_people: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint halves ``(sae_people, eval_people)`` (sorted) of ``range(n_people)``: the SAE and PCA are fitted
    on the first half's activations, every dictionary is scored on the second's."""
    perm = np.random.default_rng([int(seed), 53]).permutation(n_people)
    h = n_people // 2
    return np.sort(perm[:h]), np.sort(perm[h:])


def value_rows(world: BiosWorld, docs: Sequence[Doc], attrs: Sequence[str] = ATTRS) -> tuple[list[int], list[str],
                                                                                                list[str]]:
    """Per (biography, attribute): its value position (the token before the value), the attribute and the first
    word of the person's value (``"@@"`` removed). Returns ``(positions, attrs, words)`` of equal length,
    ``len(docs) * len(attrs)``, biography-major."""
    pos, at, words = [], [], []
    for d in docs:
        for a in attrs:
            pos.append(int(d.spans[a][0][0]) - 1)
            at.append(a)
            words.append(world.value_words(int(d.person), a)[0].replace("@@", ""))
    return pos, at, words


def feature_matrix(at: Sequence[str], words: Sequence[str], names: Sequence[str]) -> np.ndarray:
    """``[rows, F]`` bool: row ``r`` has feature ``"<a>=<w>"`` when its attribute is ``a`` and its word ``w``."""
    keys = np.array([f"{a}={w}" for a, w in zip(at, words)])
    return np.stack([keys == n for n in names], 1) if len(names) else np.zeros((len(keys), 0), bool)


def feature_names(train_keys: tuple[Sequence[str], Sequence[str]], eval_keys: tuple[Sequence[str], Sequence[str]],
                  min_count: int) -> list[str]:
    """The ``"<attr>=<word>"`` features with at least ``min_count`` positives and negatives among both the SAE
    people's and the evaluation people's value positions (attribute order, then word), so that every kept
    feature is both present and absent where it is scored."""
    out = []
    for a in ATTRS:
        cand = sorted({w for x, w in zip(*train_keys) if x == a} | {w for x, w in zip(*eval_keys) if x == a})
        for w in cand:
            ok = True
            for at, words in (train_keys, eval_keys):
                pos = sum(1 for x, y in zip(at, words) if x == a and y == w)
                ok &= pos >= min_count and len(at) - pos >= min_count
            if ok:
                out.append(f"{a}={w}")
    return out


def all_token_acts(model: torch.nn.Module, docs: Sequence[Doc], hook: str, batch_size: int = 64) -> Tensor:
    """Activations ``[tokens, d_model]`` (float32, CPU) of ``hook`` at every token of ``docs`` (right-padded
    batches, padding masked out; the model is causal, so padding does not change the kept positions)."""
    batches = []
    for s in range(0, len(docs), batch_size):
        seqs = [d.ids for d in docs[s:s + batch_size]]
        ids = pad_batch(seqs)
        mask = torch.zeros_like(ids)
        for i, q in enumerate(seqs):
            mask[i, :len(q)] = 1
        batches.append((ids, mask))
    return gather_activations(model, batches, hook)


@torch.no_grad()
def value_acts(model: torch.nn.Module, docs: Sequence[Doc], positions: Sequence[int], hook: str,
               batch_size: int = 64) -> Tensor:
    """Activations ``[len(positions), d_model]`` (float32, CPU) of ``hook`` at the value positions of
    :func:`value_rows` (``len(positions) = len(docs) * per``, biography-major: ``per`` positions per biography),
    one forward pass per biography."""
    per = len(positions) // max(len(docs), 1)
    if per * len(docs) != len(positions) or per < 1:
        raise ValueError(f"{len(positions)} positions for {len(docs)} biographies")
    dev = device_of(model)
    pos = torch.as_tensor(list(positions), dtype=torch.long).reshape(len(docs), per)
    was = model.training
    model.eval()
    out = []
    try:
        for s in range(0, len(docs), batch_size):
            ids = pad_batch([d.ids for d in docs[s:s + batch_size]]).to(dev)
            _, cache = model.run_with_cache(ids, [hook])
            h = cache[hook]  # [b, T, d_model]
            p = pos[s:s + batch_size].to(h.device)
            rows = torch.arange(len(p), device=h.device)[:, None].expand_as(p)
            out.append(h[rows, p].reshape(-1, h.shape[-1]).float().cpu())
    finally:
        model.train(was)
    return torch.cat(out)


__all__ = ["world_and_docs", "init_model", "split_people", "value_rows", "feature_matrix", "feature_names",
           "all_token_acts", "value_acts"]
