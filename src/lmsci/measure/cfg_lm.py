"""Instruments for a language model trained on a context-free grammar: generation accuracy, KL(true || model)
per position, and linear probes of the parse (NT ancestors and NT ends) on hidden states.

Source: Allen-Zhu & Li, "Physics of Language Models: Part 1", arXiv 2305.13673, sec. 3 (generation accuracy
from BOS and from a cut prefix, temperature 1; KL to the true next-token distribution with epsilon = 1e-5
smoothing, ``demo2_advanced_dp.py``) and sec. 4 (probing NT ancestors and NT boundaries on the last layer).
Spec: physics_of_lms.md sec. 1.5.

The grammar is passed in duck-typed (this package does not import ``lmsci.worlds``): ``member(tokens) -> bool``,
``next_token_dists(tokens) -> [n+1, |T|+1]`` over ``(EOS, t_1..t_|T|)``, ``eos``, ``bos``, ``n_terminals``
(:class:`lmsci.worlds.cfg.CFG` has them).

The probe here is multinomial logistic regression on the frozen model's hidden state at the token itself
(:func:`lmsci.measure.probes.fit_linear_probe`); the paper's probe also mixes positions ``k <= i`` with
position-only weights, so it is at least as strong as this one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from lmsci.models.device import resolve_model_device

from lmsci.measure.probes import fit_linear_probe


@torch.no_grad()
def generate_strings(model: torch.nn.Module, grammar: Any, prefixes: Sequence[Sequence[int]], *, max_len: int,
                     temperature: float = 1.0, seed: int = 0, batch_size: int = 128,
                     device: str | torch.device | None = None) -> list[np.ndarray | None]:
    """Sample a completion of ``BOS + prefix`` until EOS; prefixes of one call must have equal length.

    Args:
        model: an lmsci GPT (``generate``).
        grammar: provides ``bos`` and ``eos``.
        prefixes: ``[m]`` token lists (terminals), all of one length ``c`` (``c = 0``: from BOS).
        max_len: at most this many tokens in the string (prefix included) before EOS; longer is a failure.
        temperature: sampling temperature (the paper uses 1).

    Returns:
        ``[m]``: the string (prefix + completion, terminals only, without EOS) or None when no EOS came within
        ``max_len`` tokens.
    """
    device = resolve_model_device(model, device)
    lens = {len(p) for p in prefixes}
    if len(lens) > 1:
        raise ValueError(f"generate_strings: prefixes of several lengths {sorted(lens)}")
    c = lens.pop() if lens else 0
    gen = torch.Generator(device=device).manual_seed(seed)
    out: list[np.ndarray | None] = []
    for s in range(0, len(prefixes), batch_size):
        chunk = prefixes[s:s + batch_size]
        ids = torch.tensor([[grammar.bos] + list(map(int, p)) for p in chunk], dtype=torch.long, device=device)
        seqs = model.generate(ids, max_new_tokens=max_len - c + 1, temperature=temperature,
                              generator=gen).cpu().numpy()[:, 1:]
        for row in seqs:
            hit = np.flatnonzero(row[c:] == grammar.eos)
            out.append(row[: c + int(hit[0])].astype(np.int64) if len(hit) else None)
    return out


def generation_accuracy(grammar: Any, strings: Sequence[np.ndarray | None]) -> float:
    """Fraction of generated strings in the language (a string without EOS, or holding BOS/EOS inside, fails)."""
    ok = 0
    for s in strings:
        if s is None or len(s) == 0 or (s < 1).any() or (s > grammar.n_terminals).any():
            continue
        ok += bool(grammar.member(s))
    return ok / max(len(strings), 1)


@torch.no_grad()
def model_next_token_dists(model: torch.nn.Module, grammar: Any, tokens: Sequence[int],
                           device: str | torch.device | None = None) -> np.ndarray:
    """The model's next-token distribution after every prefix of ``tokens`` (fed as ``BOS + tokens``), restricted
    to ``(EOS, t_1..t_|T|)`` and renormalised: ``[n + 1, |T| + 1]`` (column order as the grammar's)."""
    device = resolve_model_device(model, device)
    was = model.training
    model.eval()
    try:
        ids = torch.tensor([[grammar.bos] + list(map(int, tokens))], dtype=torch.long, device=device)
        p = torch.softmax(model(ids)[0].double(), -1).cpu().numpy()  # [n+1, vocab]
    finally:
        model.train(was)
    cols = [grammar.eos] + list(range(1, grammar.n_terminals + 1))
    q = p[:, cols]
    return q / q.sum(1, keepdims=True)


def kl_per_position(p_true: np.ndarray, q_model: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """``KL(p || q)`` in nats per row, both smoothed by ``eps`` and renormalised (``demo2_advanced_dp.py``)."""
    p = (p_true + eps) / (p_true + eps).sum(1, keepdims=True)
    q = (q_model + eps) / (q_model + eps).sum(1, keepdims=True)
    return (p * (np.log(p) - np.log(q))).sum(1)


def mean_kl(model: torch.nn.Module, grammar: Any, strings: Sequence[Sequence[int]], device: str | torch.device | None = None) -> dict:
    """Mean over positions (all prefixes of every string, EOS position included) of KL(true || model), and the
    sanity value of physics_of_lms.md sec. 1.5 on the same strings: a "model" equal to the truth except that it
    puts probability 1 on EOS after the whole string (the paper's demo: 0.015178 on one cfg3f sample).

    Returns:
        ``{"kl": nats, "kl_sanity": nats, "n_positions": int}``.
    """
    device = resolve_model_device(model, device)
    kls, sanity = [], []
    for s in strings:
        p = grammar.next_token_dists(s)
        q = model_next_token_dists(model, grammar, s, device)
        kls.append(kl_per_position(p, q))
        fake = p.copy()
        fake[-1] = 0.0
        fake[-1, 0] = 1.0
        sanity.append(kl_per_position(p, fake))
    k, sv = np.concatenate(kls), np.concatenate(sanity)
    return {"kl": float(k.mean()), "kl_sanity": float(sv.mean()), "n_positions": int(k.size)}


@torch.no_grad()
def hidden_states(model: torch.nn.Module, grammar: Any, strings: Sequence[Sequence[int]], hook: str = "final",
                  device: str | torch.device | None = None) -> list[torch.Tensor]:
    """Hidden state at every token of each string (fed as ``BOS + tokens``; the state at token ``i`` has read
    tokens ``0..i``): one ``[n_i, d_model]`` float32 tensor per string, on the model's device, read from GPT hook
    point ``hook``."""
    device = resolve_model_device(model, device)
    was = model.training
    model.eval()
    out = []
    try:
        for s in strings:
            ids = torch.tensor([[grammar.bos] + list(map(int, s))], dtype=torch.long, device=device)
            _, cache = model.run_with_cache(ids, [hook])
            out.append(cache[hook][0, 1:].float())
    finally:
        model.train(was)
    return out


def probe_parse(h_train: Sequence[np.ndarray], lab_train: Sequence[Any], h_test: Sequence[np.ndarray],
                lab_test: Sequence[Any], levels: Sequence[int], n_classes: Sequence[int],
                l2: float = 1e-3, mixing_steps: int = 300, mixing_heads: int = 8,
                seed: int = 0) -> dict[int, dict[str, float]]:
    """Probes per NT level: the ancestor at every position, the ancestor at NT-end positions only, and the NT-end
    (boundary) bit -- each with the paper's multi-head position-mixing linear probe
    (:func:`lmsci.measure.probes.fit_mixing_probe`, Allen-Zhu & Li arXiv 2305.13673 sec. 4.1) and, as
    ``*_pointwise``, with a linear probe on the single position's hidden state (:func:`fit_linear_probe`).

    Args:
        h_train, h_test: per string ``[n_i, d]`` hidden states (:func:`hidden_states`; tensors or arrays). The
            probes fit on the device of the hidden states.
        lab_train, lab_test: per string objects with ``ancestor [depth, n_i]`` and ``boundary [depth, n_i]``.
        levels: NT levels to probe (1 .. depth-1; level 0 is the root, constant).
        n_classes: symbols per level (``sizes``).
        l2: the pointwise probes' L2 penalty. mixing_steps, mixing_heads, seed: the mixing probes' AdamW steps,
            heads and initialisation.

    Returns:
        ``{level: {"ancestor", "ancestor_chance", "ancestor_at_end", "ancestor_at_end_chance", "boundary",
        "boundary_chance", "ancestor_pointwise", "ancestor_at_end_pointwise", "boundary_pointwise"}}`` test
        accuracies and majority-class rates (at the ancestor-at-end probe, scored on level-l NT ends only).
    """
    from lmsci.measure.probes import fit_mixing_probe

    htr = [torch.as_tensor(h) for h in h_train]
    hte = [torch.as_tensor(h).to(htr[0].device) for h in h_test]
    xtr, xte = torch.cat(htr), torch.cat(hte)
    out = {}
    for l in levels:
        atr = np.concatenate([s.ancestor[l] for s in lab_train])
        ate = np.concatenate([s.ancestor[l] for s in lab_test])
        btr = np.concatenate([s.boundary[l] for s in lab_train]).astype(np.int64)
        bte = np.concatenate([s.boundary[l] for s in lab_test]).astype(np.int64)
        k = int(n_classes[l])
        a = fit_linear_probe(xtr, torch.from_numpy(atr), xte, torch.from_numpy(ate), k, l2=l2)
        etr, ete = btr.astype(bool), bte.astype(bool)
        e = fit_linear_probe(xtr[torch.from_numpy(etr).to(xtr.device)], torch.from_numpy(atr[etr]),
                             xte[torch.from_numpy(ete).to(xtr.device)], torch.from_numpy(ate[ete]), k, l2=l2)
        b = fit_linear_probe(xtr, torch.from_numpy(btr), xte, torch.from_numpy(bte), 2, l2=l2)

        def mix(ys_tr, ys_te, n):
            return fit_mixing_probe(htr, ys_tr, hte, ys_te, n, steps=mixing_steps, n_heads=mixing_heads, seed=seed)

        def at_end(s):
            return np.where(np.asarray(s.boundary[l]).astype(bool), s.ancestor[l], -1)

        ma = mix([s.ancestor[l] for s in lab_train], [s.ancestor[l] for s in lab_test], k)
        me = mix([at_end(s) for s in lab_train], [at_end(s) for s in lab_test], k)
        mb = mix([np.asarray(s.boundary[l]).astype(np.int64) for s in lab_train],
                 [np.asarray(s.boundary[l]).astype(np.int64) for s in lab_test], 2)
        out[int(l)] = {"ancestor": ma["test_acc"], "ancestor_chance": ma["chance"],
                       "ancestor_at_end": me["test_acc"], "ancestor_at_end_chance": me["chance"],
                       "boundary": mb["test_acc"], "boundary_chance": mb["chance"],
                       "ancestor_pointwise": a["test_acc"], "ancestor_at_end_pointwise": e["test_acc"],
                       "boundary_pointwise": b["test_acc"]}
    return out
