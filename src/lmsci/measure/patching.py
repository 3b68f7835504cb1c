"""Circuit instruments on lmsci GPTs: logit difference, per-head activation patching, path patching to the queries of
receiver heads read as attention (:func:`query_path_patching`), path patching into the queries, keys or values of
receiver heads read as logit difference (:func:`path_patching`, :func:`path_patching_scan`), attention between
positions and the OV copy score.

Source: Wang et al., "Interpretability in the Wild", arXiv 2211.00593: sec. 2 (logit difference IO minus S at END),
sec. 3 (path patching from the ABC distribution; name movers found by path patching to the logits, S-inhibition
heads by path patching to the name movers' queries, duplicate-token and induction heads by path patching to the
S-inhibition heads' values, sec. 3.3), sec. 3.1 (copy score: a name's residual stream after the
first MLP layer, through the head's OV circuit and the unembedding, has the name among its top 5 logits).
Activation patching per head: Meng et al. 2022 (arXiv 2202.05262) and Vig et al. 2020 in the head-level form used
by the IOI paper's App. and TransformerLens's ``patching`` utilities.

All functions take the model and the inputs as arguments (no world constants). Heads are addressed as
``(layer, head)``; per-head outputs are patched at the hook point ``blocks.{l}.attn.z`` (``[B, T, n_heads,
d_head]``, before ``W_O``), attention is read at ``blocks.{l}.attn.pattern`` (``[B, n_heads, q, k]``). Prompts of a
batch may be right-padded: with causal attention nothing after END changes END's logits. Clean and corrupted
prompts must be aligned (same length, same positions), as IOI and ABC prompts of one pair are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from lmsci.errors import ConfigError

Head = tuple[int, int]


def _check_pair(clean: Tensor, corrupt: Tensor) -> None:
    if clean.shape != corrupt.shape:
        raise ValueError(f"clean {tuple(clean.shape)} and corrupt {tuple(corrupt.shape)} prompts must be aligned")


@torch.no_grad()
def logit_diff(model, ids: Tensor, end: Tensor, io: Tensor, s: Tensor, fwd_hooks=()) -> Tensor:
    """Logit of IO minus logit of S at the END position, ``[n]`` (nats: a difference of log-odds).

    Args:
        model: a :class:`lmsci.models.gpt.GPT` (anything with ``hooks`` and ``__call__`` giving ``[B, T, vocab]``).
        ids: ``[n, T]`` long prompts; end: ``[n]`` END index; io, s: ``[n]`` token ids.
        fwd_hooks: hooks attached for this forward (see ``GPT.hooks``).
    """
    with model.hooks(fwd_hooks):
        logits = model(ids)
    rows = torch.arange(ids.shape[0], device=ids.device)
    last = logits[rows, end]
    return (last[rows, io] - last[rows, s]).float()


@torch.no_grad()
def cache_z(model, ids: Tensor) -> dict[int, Tensor]:
    """Per-head outputs before ``W_O`` of every layer: ``{layer: [n, T, n_heads, d_head]}``."""
    _, cache = model.run_with_cache(ids, "blocks.*.attn.z")
    return {int(k.split(".")[1]): v for k, v in cache.items()}


def _patch_hooks(heads: Sequence[Head], source: dict[int, Tensor]):
    by_layer: dict[int, list[int]] = {}
    for l, h in heads:
        by_layer.setdefault(int(l), []).append(int(h))
    hooks = []
    for l, hs in by_layer.items():
        def fn(z, hook, hs=hs, src=source[l]):
            z = z.clone()
            z[:, :, hs] = src[:, :, hs]
            return z
        hooks.append((f"blocks.{l}.attn.z", fn))
    return hooks


@torch.no_grad()
def patch_heads(model, clean: Tensor, corrupt: Tensor, end: Tensor, io: Tensor, s: Tensor,
                heads: Sequence[Head], corrupt_z: dict[int, Tensor] | None = None) -> Tensor:
    """Logit difference ``[n]`` of the clean run with the outputs of ``heads`` (at every position) replaced by their
    values on the corrupted prompts (activation patching, all heads at once; the rest of the network recomputed).

    Raises:
        ValueError: clean and corrupt prompts of different shapes; a head outside the model.
    """
    _check_pair(clean, corrupt)
    L, H = len(model.blocks), model.cfg.n_heads
    bad = [hd for hd in heads if not (0 <= hd[0] < L and 0 <= hd[1] < H)]
    if bad:
        raise ValueError(f"heads {bad} outside the model's {L} layers x {H} heads")
    src = corrupt_z if corrupt_z is not None else cache_z(model, corrupt)
    return logit_diff(model, clean, end, io, s, _patch_hooks(heads, src))


@torch.no_grad()
def head_patching(model, clean: Tensor, corrupt: Tensor, end: Tensor, io: Tensor, s: Tensor) -> Tensor:
    """Per-head activation patching: ``[n_layers, n_heads]`` mean logit difference with that one head's output
    taken from the corrupted run, minus the clean mean (negative: the head carries logit difference)."""
    _check_pair(clean, corrupt)
    src = cache_z(model, corrupt)
    base = float(logit_diff(model, clean, end, io, s).mean())
    L, H = len(model.blocks), model.cfg.n_heads
    out = torch.zeros(L, H)
    for l in range(L):
        for h in range(H):
            out[l, h] = float(patch_heads(model, clean, corrupt, end, io, s, [(l, h)], src).mean()) - base
    return out


@torch.no_grad()
def attention_between(model, ids: Tensor, query_pos: Tensor, key_pos: Sequence[Tensor]) -> Tensor:
    """Mean attention probability from ``query_pos`` (``[n]``) to the keys ``key_pos`` (each ``[n]``; summed over the
    list), ``[n_layers, n_heads]``, averaged over prompts."""
    _, cache = model.run_with_cache(ids, "blocks.*.attn.pattern")
    rows = torch.arange(ids.shape[0], device=ids.device)
    out = torch.zeros(len(model.blocks), model.cfg.n_heads)
    for l in range(len(model.blocks)):
        p = cache[f"blocks.{l}.attn.pattern"]  # [n, H, q, k]
        acc = sum(p[rows, :, query_pos, kp] for kp in key_pos)  # [n, H]
        out[l] = acc.float().mean(0).cpu()
    return out


def _head_weights(model, l: int, h: int) -> dict[str, Tensor]:
    att = model.blocks[l].attn
    D, H = att.d_head, att.n_heads
    W, b = att.qkv.weight, att.qkv.bias
    sl = lambda j: slice(j * H * D + h * D, j * H * D + (h + 1) * D)  # noqa: E731
    zero = torch.zeros(D, device=W.device, dtype=W.dtype)
    return {"W_Q": W[sl(0)], "W_K": W[sl(1)], "W_V": W[sl(2)],
            "b_Q": b[sl(0)] if b is not None else zero, "b_K": b[sl(1)] if b is not None else zero,
            "b_V": b[sl(2)] if b is not None else zero, "W_O": att.proj.weight[:, h * D:(h + 1) * D]}


@torch.no_grad()
def copy_scores(model, ids: Tensor, name_pos: Tensor, name_tok: Tensor, k: int = 5, negative: bool = False) -> Tensor:
    """The IOI paper's copy score of every head, ``[n_layers, n_heads]`` in [0, 1].

    For each prompt, the residual stream at ``name_pos`` after block 0 (``blocks.0.resid_post``: the paper's "after
    the first MLP layer") goes through the head's layer norm and OV circuit (``W_O (W_V ln1(x) + b_V)``), then the
    final norm and the unembedding; the score is the share of prompts whose name ``name_tok`` is among the ``k``
    largest logits (``negative``: of the negated logits, the paper's negative copy score).

    Raises:
        ConfigError: a model that is not a GPT with the standard (q, k, v) attention (``pos`` 'uni'/'posonly').
    """
    if model.cfg.pos in ("uni", "posonly"):
        raise ConfigError("pos", model.cfg.pos, "a GPT with query/key/value heads (learned, rope, nope, ...)")
    _, cache = model.run_with_cache(ids, "blocks.0.resid_post")
    rows = torch.arange(ids.shape[0], device=ids.device)
    x = cache["blocks.0.resid_post"][rows, name_pos]  # [n, d_model]
    out = torch.zeros(len(model.blocks), model.cfg.n_heads)
    for l, block in enumerate(model.blocks):
        xn = block.ln1(x)
        for h in range(model.cfg.n_heads):
            w = _head_weights(model, l, h)
            o = (xn @ w["W_V"].T + w["b_V"]) @ w["W_O"].T  # [n, d_model]
            logits = model.lm_head(model.ln_f(o))
            if negative:
                logits = -logits
            top = logits.topk(k, dim=-1).indices
            out[l, h] = float((top == name_tok[:, None]).any(-1).float().mean())
    return out


@torch.no_grad()
def query_path_patching(model, clean: Tensor, corrupt: Tensor, end: Tensor, receivers: Sequence[Head],
                        key_pos: Sequence[Tensor]) -> tuple[Tensor, float]:
    """Path patching from every earlier head to the receivers' queries at END, read as attention.

    For each sender head ``(l, h)`` in a layer below every receiver, its output at END on the corrupted prompt
    replaces its clean output on the direct path into the receivers' query input only (the receivers' keys and
    values, every other head and the MLPs stay clean; the IOI paper's path patching restricted to the direct path,
    sec. 3). Returns ``([n_layers, n_heads]`` change of the receivers' mean attention from END to ``key_pos``
    (summed over the list, averaged over receivers and prompts; NaN for heads not below every receiver),
    the clean value).

    Raises:
        ConfigError: a model whose positions are not ``learned`` or ``nope`` (queries are recomputed without rotary
            or bias terms).
        ValueError: no receivers, or unaligned prompts.
    """
    if model.cfg.pos not in ("learned", "nope"):
        raise ConfigError("pos", model.cfg.pos, "'learned' or 'nope' for query path patching")
    if not receivers:
        raise ValueError("query_path_patching needs at least one receiver head")
    _check_pair(clean, corrupt)
    zc, zx = cache_z(model, clean), cache_z(model, corrupt)
    _, cache = model.run_with_cache(clean, "blocks.*.resid_pre")
    rows = torch.arange(clean.shape[0], device=clean.device)
    L, H = len(model.blocks), model.cfg.n_heads
    T = clean.shape[1]
    visible = torch.arange(T, device=clean.device)[None, :] <= end[:, None]  # [n, T]

    def attn_to_keys(r: Head, delta: Tensor) -> Tensor:
        lr, hr = r
        w = _head_weights(model, lr, hr)
        ln = model.blocks[lr].ln1
        resid = cache[f"blocks.{lr}.resid_pre"]
        k = ln(resid) @ w["W_K"].T + w["b_K"]  # [n, T, D]
        q = ln(resid[rows, end] + delta) @ w["W_Q"].T + w["b_Q"]  # [n, D]
        sc = (k @ q[:, :, None]).squeeze(-1) / math.sqrt(q.shape[-1])
        p = torch.softmax(sc.masked_fill(~visible, float("-inf")), dim=-1)
        return sum(p[rows, kp] for kp in key_pos).float().mean()

    zero = torch.zeros(clean.shape[0], model.cfg.d_model, device=clean.device)
    base = float(torch.stack([attn_to_keys(r, zero) for r in receivers]).mean())
    out = torch.full((L, H), float("nan"))
    for l in range(min(r[0] for r in receivers)):
        for h in range(H):
            W_O = _head_weights(model, l, h)["W_O"]
            delta = (zx[l][rows, end, h] - zc[l][rows, end, h]) @ W_O.T
            out[l, h] = float(torch.stack([attn_to_keys(r, delta) for r in receivers]).mean()) - base
    return out, base


_INPUTS = ("q", "k", "v")


def _check_inputs(receiver_input: str | Sequence[str]) -> tuple[str, ...]:
    inputs = (receiver_input,) if isinstance(receiver_input, str) else tuple(receiver_input)
    bad = [x for x in inputs if x not in _INPUTS]
    if not inputs or bad:
        raise ConfigError("receiver_input", receiver_input, "one or more of 'q', 'k', 'v'")
    return inputs


class _PathPatcher:
    """Clean and corrupted caches of one prompt pair batch, shared by every sender of a scan (see
    :func:`path_patching`)."""

    def __init__(self, model, clean: Tensor, corrupt: Tensor, end: Tensor, io: Tensor, s: Tensor,
                 receivers: Sequence[Head], inputs: tuple[str, ...]):
        if model.cfg.pos not in ("learned", "nope"):
            raise ConfigError("pos", model.cfg.pos, "'learned' or 'nope' for path patching")
        if not receivers:
            raise ValueError("path patching needs at least one receiver head")
        _check_pair(clean, corrupt)
        L, H = len(model.blocks), model.cfg.n_heads
        bad = [hd for hd in receivers if not (0 <= hd[0] < L and 0 <= hd[1] < H)]
        if bad:
            raise ValueError(f"receivers {bad} outside the model's {L} layers x {H} heads")
        self.model, self.clean, self.end, self.io, self.s = model, clean, end, io, s
        self.receivers, self.inputs = [(int(l), int(h)) for l, h in receivers], inputs
        self.low = min(l for l, _ in self.receivers)
        self.zc, self.zx = cache_z(model, clean), cache_z(model, corrupt)
        _, cache = model.run_with_cache(clean, [f"blocks.{l}.resid_pre" for l in {l for l, _ in self.receivers}])
        self.resid = cache
        self.base = logit_diff(model, clean, end, io, s)
        T = clean.shape[1]
        self.visible = torch.tril(torch.ones(T, T, dtype=torch.bool, device=clean.device))  # [q, k]

    def _receiver_z(self, r: Head, delta: Tensor) -> Tensor:
        """The receiver head's output ``[n, T, d_head]`` with ``delta`` added to its residual input on ``inputs``."""
        lr, hr = r
        w = _head_weights(self.model, lr, hr)
        ln = self.model.blocks[lr].ln1
        resid = self.resid[f"blocks.{lr}.resid_pre"]
        clean_in, patched_in = ln(resid), ln(resid + delta)
        proj = {x: (patched_in if x in self.inputs else clean_in) @ w[f"W_{x.upper()}"].T + w[f"b_{x.upper()}"]
                for x in _INPUTS}
        q, k, v = proj["q"].float(), proj["k"].float(), proj["v"].float()
        sc = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # [n, T, T]
        p = torch.softmax(sc.masked_fill(~self.visible, float("-inf")), dim=-1)
        return (p @ v).to(resid.dtype)

    def __call__(self, senders: Sequence[Head]) -> Tensor:
        """Per-prompt change of the logit difference ``[n]`` (nats) when ``senders`` are path-patched."""
        rows = self.zc[0].shape[:2]
        d = self.model.cfg.d_model
        delta = torch.zeros(*rows, d, device=self.clean.device, dtype=self.zc[0].dtype)
        for l, h in senders:
            W_O = _head_weights(self.model, l, h)["W_O"]
            delta = delta + (self.zx[l][:, :, h] - self.zc[l][:, :, h]) @ W_O.T
        new = {r: self._receiver_z(r, delta) for r in self.receivers}
        by_layer: dict[int, list[int]] = {}
        for l, h in self.receivers:
            by_layer.setdefault(l, []).append(h)
        hooks = []
        for l, hs in by_layer.items():
            def fn(z, hook, l=l, hs=hs):
                z = z.clone()
                for h in hs:
                    z[:, :, h] = new[(l, h)]
                return z
            hooks.append((f"blocks.{l}.attn.z", fn))
        return logit_diff(self.model, self.clean, self.end, self.io, self.s, hooks) - self.base


@torch.no_grad()
def path_patching(model, clean: Tensor, corrupt: Tensor, end: Tensor, io: Tensor, s: Tensor,
                  senders: Sequence[Head], receivers: Sequence[Head],
                  receiver_input: str | Sequence[str] = "v") -> Tensor:
    """Path patching from sender heads into chosen inputs (query, key and/or value) of receiver heads, read as the
    change of the logit difference (Wang et al. 2022, arXiv 2211.00593, sec. 3 and App. B: S-inhibition heads found by
    patching into the name movers' queries, sec. 3.2; duplicate-token and induction heads by patching into the
    S-inhibition heads' values, sec. 3.3; previous-token heads into the induction heads' keys).

    The senders' outputs (every position) on the corrupted prompts replace their clean outputs on the direct path
    into the receivers only: each receiver's residual input is the clean one plus
    ``delta = sum_senders (z_corrupt - z_clean) W_O`` (``[n, T, d_model]``), and only the inputs named in
    ``receiver_input`` are recomputed from it (``'v'``: ``ln1(resid + delta) W_V``; the receivers' other inputs, every
    other head and the MLPs keep their clean values up to the receivers). The receivers' new outputs replace theirs
    (hook ``blocks.{l}.attn.z``, every position) and the rest of the network after them is recomputed (the paper's
    step 5); a receiver's attention pattern is recomputed only from the patched inputs (other receivers' changes do
    not reach it).

    Args:
        model: a :class:`lmsci.models.gpt.GPT` in eval mode with ``pos`` 'learned' or 'nope'.
        clean, corrupt: ``[n, T]`` long aligned prompts (e.g. IOI and its ABC twin); end: ``[n]`` END index;
            io, s: ``[n]`` token ids of the logit difference.
        senders: ``(layer, head)`` list patched together, each in a layer below every receiver (may be empty: the
            change is then 0).
        receivers: ``(layer, head)`` list (at least one).
        receiver_input: ``'q'``, ``'k'``, ``'v'`` or a list of them.

    Returns:
        ``[n]`` float: logit difference (IO - S at END, nats) of the path-patched run minus the clean one; negative
        when the path carries logit difference. In an attention-only model, patching every head of layer 0 into
        all heads of layer 1 on ``('q', 'k', 'v')`` equals the paper's algorithm run literally (layer 0's output
        from the corrupted run, layer 1's outputs recorded, then patched into the clean run; tested).

    Raises:
        ConfigError: ``pos`` other than 'learned'/'nope' (inputs recomputed without rotary or bias terms); a
            ``receiver_input`` not among 'q', 'k', 'v'.
        ValueError: no receivers; a head outside the model; a sender not below every receiver; unaligned prompts.
    """
    inputs = _check_inputs(receiver_input)
    pp = _PathPatcher(model, clean, corrupt, end, io, s, receivers, inputs)
    bad = [hd for hd in senders if not (0 <= hd[0] < pp.low and 0 <= hd[1] < model.cfg.n_heads)]
    if bad:
        raise ValueError(f"senders {bad} must be heads in layers below every receiver (below layer {pp.low})")
    return pp([(int(l), int(h)) for l, h in senders])


@torch.no_grad()
def path_patching_scan(model, clean: Tensor, corrupt: Tensor, end: Tensor, io: Tensor, s: Tensor,
                       receivers: Sequence[Head], receiver_input: str | Sequence[str] = "v") -> Tensor:
    """:func:`path_patching` of every single head below the receivers: ``[n_layers, n_heads]`` mean change of the
    logit difference (nats) over prompts, NaN for heads not below every receiver (Wang et al. 2022, sec. 3, the
    per-sender heat maps of Fig. 3-5). One forward pass of ``n`` prompts per sender.

    Raises:
        as :func:`path_patching`.
    """
    pp = _PathPatcher(model, clean, corrupt, end, io, s, receivers, _check_inputs(receiver_input))
    out = torch.full((len(model.blocks), model.cfg.n_heads), float("nan"))
    for l in range(pp.low):
        for h in range(model.cfg.n_heads):
            out[l, h] = float(pp([(l, h)]).mean())
    return out
