"""P-probing and Q-probing: is an attribute linearly decodable from the hidden state at the name?

Source: Allen-Zhu & Li, Part 3.1 (arXiv 2309.14316), Section 5 (P-probing: a linear probe on the
last-layer hidden states of a biography predicts each attribute; with augmented pretraining all
attributes are decodable at the position right after the name, with bioS single only right
before the attribute) and Section 6 (Q-probing: the input is the name alone). The paper probes
the first token of each attribute value with a low-rank update of the embedding plus a linear
head; here the model is frozen and the probe is multinomial logistic regression (L2, L-BFGS)
(torch L-BFGS) on the hidden state read through a GPT hook point (default ``final``, ``[batch, seq, d_model]``).

Targets: the first token of each attribute value (birth month, city stem, university stem,
major modifier, company stem, company-city stem). Probes are fit on one set of people and
scored on a disjoint set; the majority-class rate of the test set is the chance baseline, and the
same probe on a randomly initialised model of the same shape is the representation baseline
(the paper's GPT_rand comparison).

As the paper probes, P-probing reads the biographies the model was *trained on*: pass
``bios`` (person -> its training biography, e.g. the first rendering of
``lmsci.worlds.bios_datasets.bio_docs``); without it a fresh biography is rendered from ``seed``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from lmsci.measure.accuracy import pad_batch
from lmsci.models.device import resolve_model_device


@torch.no_grad()
def hidden_at(model: torch.nn.Module, seqs: Sequence[Sequence[int]], positions: Sequence[int],
              hook: str = "final", batch_size: int = 256, device: str | torch.device | None = None) -> torch.Tensor:
    """Hidden states ``[len(seqs), d_model]`` (float32, on the model's device) at ``positions`` read from hook
    point ``hook``.

    Requires a model with ``run_with_cache(input_ids, names)``: an lmsci GPT, or an
    :class:`~lmsci.models.hf.HFModel` (module paths, or lmsci hook names through the architecture map).
    ``device``: where the inputs go (default: the model's device).
    """
    device = resolve_model_device(model, device)
    was = model.training
    model.eval()
    out = []
    try:
        for s in range(0, len(seqs), batch_size):
            ids = pad_batch(seqs[s:s + batch_size]).to(device)
            _, cache = model.run_with_cache(ids, [hook])
            h = cache[hook]  # [b, T, d_model]
            pos = torch.as_tensor(list(positions[s:s + batch_size]), device=h.device)
            out.append(h[torch.arange(len(pos), device=h.device), pos].float())
    finally:
        model.train(was)
    return torch.cat(out)


def fit_linear_probe(x_train: torch.Tensor, y_train: torch.Tensor, x_test: torch.Tensor, y_test: torch.Tensor,
                     n_classes: int, l2: float = 1e-3, max_iter: int = 200) -> dict[str, float]:
    """Multinomial logistic regression (full-batch L-BFGS in torch, float64, L2 penalty ``l2`` on the
    weights, not the bias) on features standardised with the training set's mean and std.

    Only classes present in the training set get a logit (a class never seen in training cannot be
    predicted by any probe); test labels of other classes count as errors.

    Args:
        x_train: ``[n_train, d]``; y_train: ``[n_train]`` class ids in ``[0, n_classes)``.

    Returns:
        ``{"train_acc", "test_acc", "chance"}`` (chance = majority-class rate on the test set).

    The fit runs on ``x_train``'s device (labels and test features are moved there).
    """
    dev = x_train.device
    xtr, xte = x_train.double(), x_test.to(dev).double()
    ytr, yte = y_train.to(dev).long(), y_test.to(dev).long()
    mu, sd = xtr.mean(0), xtr.std(0, unbiased=False) + 1e-6
    xtr, xte = (xtr - mu) / sd, (xte - mu) / sd
    seen = torch.unique(ytr)  # sorted class ids present in training
    remap = torch.full((n_classes,), -1, dtype=torch.long, device=dev)
    remap[seen] = torch.arange(len(seen), device=dev)
    t = remap[ytr]
    k = len(seen)
    W = torch.zeros(xtr.shape[1], k, dtype=torch.float64, device=dev, requires_grad=True)
    b = torch.zeros(k, dtype=torch.float64, device=dev, requires_grad=True)
    opt = torch.optim.LBFGS([W, b], lr=1.0, max_iter=max_iter, history_size=10, line_search_fn="strong_wolfe",
                            tolerance_grad=1e-9, tolerance_change=1e-12)

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(xtr @ W + b, t) + l2 * (W * W).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    with torch.no_grad():
        tr = float((seen[(xtr @ W + b).argmax(1)] == ytr).double().mean())
        te = float((seen[(xte @ W + b).argmax(1)] == yte).double().mean()) if len(yte) else float("nan")
    chance = float(torch.bincount(yte, minlength=n_classes).max()) / max(len(yte), 1)
    return {"train_acc": tr, "test_acc": te, "chance": chance}


def _first_token_labels(world: Any, people: Sequence[int], attr: str,
                        words: Sequence[str]) -> tuple[torch.Tensor, int]:
    """Class labels of each person's first value token of ``attr`` among the candidate ``words``."""
    toks = [world.vocab.stoi[world.value_words(int(i), attr)[0]] for i in people]
    uniq = {t: k for k, t in enumerate(sorted({world.vocab.stoi[w] for w in words}))}
    return torch.tensor([uniq[t] for t in toks]), len(uniq)


def _probe_all(world, h_train, h_test, train_people, test_people, attrs,
               value_words) -> dict[str, dict[str, float]]:
    out = {}
    for a in attrs:
        ytr, k = _first_token_labels(world, train_people, a, value_words[a])
        yte, _ = _first_token_labels(world, test_people, a, value_words[a])
        out[a] = fit_linear_probe(h_train, ytr, h_test, yte, k)
    return out


def _check_value_words(attrs: Sequence[str], value_words: Mapping[str, Sequence[str]]) -> None:
    from lmsci.errors import ConfigError

    missing = [a for a in attrs if a not in value_words]
    if missing:
        raise ConfigError("value_words", sorted(value_words), f"a mapping covering every probed attribute {list(attrs)}",
                          f"missing: {missing}")


def p_probe(model: torch.nn.Module, world: Any, train_people: Sequence[int], test_people: Sequence[int], *,
            seed: int, attrs: Sequence[str], value_words: Mapping[str, Sequence[str]], hook: str = "final",
            fullname: bool = False, position: str = "after_name", device: str | torch.device | None = None,
            bios: Callable[[int], Any] | Mapping[int, Any] | None = None) -> dict[str, dict[str, float]]:
    """P-probing inside a biography (canonical order, seeded templates).

    Args:
        attrs: the attributes probed (for bioS, ``lmsci.worlds.bios.ATTRS``).
        value_words: attribute -> the candidate first words of its values (the probe's classes; each
            person's first value word must be among them).
        position: ``"after_name"``: the first token after the name in the first sentence (sees the
            name and one template word; in a causal model the last name token itself would equal
            the Q-probe input); ``"before_value"``: the token right before each attribute's value.
        bios: person -> the biography probed (a ``Doc`` with ``ids`` and ``spans``; the training
            biography, as the paper probes); None renders one per person from ``seed``.

    Returns:
        attribute -> ``{"train_acc", "test_acc", "chance"}`` of the first value token.

    Raises:
        ConfigError: unknown ``position``, or ``value_words`` lacks a probed attribute.
    """
    device = resolve_model_device(model, device)
    from lmsci.errors import ConfigError

    if position not in ("after_name", "before_value"):
        raise ConfigError("position", position, "'after_name' or 'before_value'")
    attrs = list(attrs)
    _check_value_words(attrs, value_words)
    docs = {}
    get = (bios.__getitem__ if isinstance(bios, Mapping) else bios) if bios is not None else None
    for tag, people in (("train", train_people), ("test", test_people)):
        docs[tag] = [get(int(i)) if get is not None else
                     world.bio(int(i), np.random.default_rng([seed, 41, int(i)]), fullname=fullname) for i in people]
    if position == "after_name":
        h = {t: hidden_at(model, [d.ids for d in ds], [d.spans["name"][0][1] for d in ds], hook, device=device)
             for t, ds in docs.items()}
        return _probe_all(world, h["train"], h["test"], train_people, test_people, attrs, value_words)
    out = {}
    for a in attrs:
        h = {t: hidden_at(model, [d.ids for d in ds], [d.spans[a][0][0] - 1 for d in ds], hook, device=device)
             for t, ds in docs.items()}
        out.update(_probe_all(world, h["train"], h["test"], train_people, test_people, [a], value_words))
    return out


def q_probe(model: torch.nn.Module, world: Any, train_people: Sequence[int], test_people: Sequence[int], *,
            attrs: Sequence[str], value_words: Mapping[str, Sequence[str]], hook: str = "final",
            device: str | torch.device | None = None) -> dict[str, dict[str, float]]:
    """Q-probing: the input is ``<bos> NAME`` only; probe at the last name token.

    Args:
        attrs, value_words: as for :func:`p_probe`.

    Returns:
        attribute -> ``{"train_acc", "test_acc", "chance"}``.
    """
    device = resolve_model_device(model, device)
    attrs = list(attrs)
    _check_value_words(attrs, value_words)

    def feats(people):
        seqs = [[world.vocab.bos_id] + world.vocab.encode(world.name_words(int(i))) for i in people]
        return hidden_at(model, seqs, [len(s) - 1 for s in seqs], hook, device=device)

    return _probe_all(world, feats(train_people), feats(test_people), train_people, test_people, attrs, value_words)


class PositionMixingProbe(torch.nn.Module):
    """The "multi-head linear probe" of Physics of LMs Part 1 (Allen-Zhu & Li, arXiv 2305.13673, sec. 4.1).

    At position ``i`` the class logits are ``sum_r sum_{k <= i} w_r(i, k) (h_k U_r) + b``: ``n_heads`` linear maps
    ``U_r`` of the hidden states ``h_k`` of positions ``k <= i``, mixed by causal attention weights
    ``w_r(i, k) = softmax_k <P_{i,r}, P_{k,r}>`` that depend on the positions only (learned ``P``). The output is
    linear in the hidden states; the probe can read the parse information wherever the model stored it before
    ``i`` (for example at the NT's boundary), which a single-position linear probe cannot.

    Shapes: ``forward(h [batch, L, d]) -> [batch, L, n_classes]`` with ``L <= max_len``.
    """

    def __init__(self, d: int, n_classes: int, max_len: int, n_heads: int = 8, d_pos: int = 16, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.n_heads, self.n_classes = n_heads, n_classes
        self.pos = torch.nn.Parameter(torch.randn(max_len, n_heads, d_pos, generator=g) * 0.1)
        self.value = torch.nn.Linear(d, n_heads * n_classes)
        with torch.no_grad():
            self.value.weight.copy_(torch.randn(self.value.weight.shape, generator=g) / d ** 0.5)
            self.value.bias.zero_()

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        B, L, _ = h.shape
        P = self.pos[:L]
        scores = torch.einsum("ihd,jhd->hij", P, P)
        causal = torch.ones(L, L, dtype=torch.bool, device=h.device).tril()
        w = scores.masked_fill(~causal, float("-inf")).softmax(-1)  # [H, L, L]
        v = self.value(h).view(B, L, self.n_heads, self.n_classes)
        return torch.einsum("hij,bjhk->bik", w, v)


def fit_mixing_probe(h_train: Sequence[torch.Tensor], y_train: Sequence[np.ndarray], h_test: Sequence[torch.Tensor],
                     y_test: Sequence[np.ndarray], n_classes: int, *, n_heads: int = 8, d_pos: int = 16,
                     steps: int = 300, lr: float = 1e-2, weight_decay: float = 1e-4, seed: int = 0) -> dict[str, float]:
    """Train a :class:`PositionMixingProbe` on frozen per-sequence hidden states and score it.

    Args:
        h_train, h_test: one ``[n_i, d]`` tensor per sequence (position 0 first; all on one device).
        y_train, y_test: one ``[n_i]`` int array per sequence: the class at each position, or ``-1`` where the
            position is not scored (for example only NT-end positions); every position is still read as input.
        n_classes: number of classes.
        n_heads, d_pos: the probe's heads and position-embedding width.
        steps, lr, weight_decay: full-batch AdamW on the cross-entropy of the scored training positions;
            features standardised with the training positions' mean and std.
        seed: the probe's initialisation.

    Returns:
        ``{"train_acc", "test_acc", "chance"}``: accuracies on the scored positions; ``chance`` = the test rate of
        the most frequent training class.

    Source: Allen-Zhu & Li, arXiv 2305.13673, sec. 4.1 (multi-head linear probe with position-only mixing weights).
    """
    device = h_train[0].device

    def pad(hs, ys):
        L = max(len(h) for h in hs)
        x = torch.zeros(len(hs), L, hs[0].shape[1], device=device)
        y = torch.full((len(hs), L), -1, dtype=torch.long, device=device)
        for i, (h, t) in enumerate(zip(hs, ys)):
            x[i, : len(h)] = torch.as_tensor(h, device=device).float()
            y[i, : len(t)] = torch.as_tensor(np.asarray(t), dtype=torch.long, device=device)
        return x, y

    xtr, ytr = pad(h_train, y_train)
    xte, yte = pad(h_test, y_test)
    flat = torch.cat([torch.as_tensor(h, device=device).float() for h in h_train])
    mu, sd = flat.mean(0), flat.std(0, unbiased=False) + 1e-6
    xtr, xte = (xtr - mu) / sd, (xte - mu) / sd
    L = max(xtr.shape[1], xte.shape[1])
    probe = PositionMixingProbe(xtr.shape[2], n_classes, L, n_heads, d_pos, seed).to(device)
    opt = torch.optim.AdamW(probe.parameters(), lr=lr, weight_decay=weight_decay)
    with torch.enable_grad():
        for _ in range(steps):
            loss = torch.nn.functional.cross_entropy(probe(xtr).flatten(0, 1), ytr.flatten(), ignore_index=-1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    with torch.no_grad():
        mtr, mte = ytr >= 0, yte >= 0
        tr = float((probe(xtr).argmax(-1)[mtr] == ytr[mtr]).float().mean())
        te = float((probe(xte).argmax(-1)[mte] == yte[mte]).float().mean()) if mte.any() else float("nan")
        counts = torch.bincount(ytr[mtr], minlength=n_classes)
        chance = float((yte[mte] == counts.argmax()).float().mean()) if mte.any() else float("nan")
    return {"train_acc": tr, "test_acc": te, "chance": chance}
