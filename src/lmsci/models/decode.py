"""Batched greedy and beam-search decoding of many prompts from an lmsci :class:`~lmsci.models.gpt.GPT`.

Used to evaluate generated solutions (Physics of LMs Part 2.1, arXiv 2407.20311, Fig. 3 reports greedy = beam 1
and beam 4). Prompts of different lengths are batched by left padding: the padded keys are masked out through
the ``blocks.{i}.attn.scores`` hook points (pad queries attend among the pads only, so no row is all ``-inf``).
With relative position schemes (``rope``, ``relative``, ``alibi``, ``nope``, ``uni``, ``posonly``) this is exact:
each row computes what it computes alone. With learned absolute positions left padding would shift positions,
so prompts are batched only with prompts of the same length. A key/value cache serves every step; beam search
reorders it by beam.

Both decoders run on the model's device (or ``device``), in eval mode, without gradients, and stop a row at
``eos_id`` or when the row reaches ``model.cfg.seq_len`` tokens (prompt + generated) or ``max_new_tokens``.

:func:`sample` (``GPT.generate``; moved here from ``gpt.py`` unchanged, issue 44 item 6) samples a batch of
equal-length prompts with temperature and top-k, cropping the context to ``seq_len`` once it is full.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from lmsci.errors import ConfigError
from lmsci.models.device import resolve_model_device

_RELATIVE = ("rope", "relative", "alibi", "nope", "uni", "posonly")


def _chunks(model, prompts: Sequence[Sequence[int]], batch_size: int) -> list[list[int]]:
    """Indices of ``prompts`` in batches: sorted by length (less padding); one length per batch for learned
    absolute positions."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    exact_pad = getattr(getattr(model, "cfg", None), "pos", "learned") in _RELATIVE
    out: list[list[int]] = []
    for i in order:
        if out and len(out[-1]) < batch_size and (exact_pad or len(prompts[out[-1][0]]) == len(prompts[i])):
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _left_pad(prompts: list[Sequence[int]], pad_id: int, device) -> tuple[Tensor, Tensor]:
    L = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), L), pad_id, dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, L - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
    pad = torch.tensor([L - len(p) for p in prompts], dtype=torch.long)
    return ids.to(device), pad.to(device)


def _step_logits(model, ids: Tensor, cache: list[dict[str, Tensor]], pad: Tensor) -> Tensor:
    """Logits ``[B, vocab]`` of the last position after feeding ``ids [B, t]`` on top of ``cache``."""
    if int(pad.max()) == 0:
        return model(ids, kv_cache=cache)[:, -1, :].float()

    def mask(scores: Tensor, hook) -> Tensor:  # scores [B, H, q, k]
        Tq, Tk = scores.shape[-2], scores.shape[-1]
        k_idx = torch.arange(Tk, device=scores.device)
        q_abs = Tk - Tq + torch.arange(Tq, device=scores.device)
        hide = (k_idx[None, :] < pad[:, None])[:, None, None, :] & (q_abs[None, :] >= pad[:, None])[:, None, :, None]
        return scores.masked_fill(hide, float("-inf"))

    with model.hooks([("blocks.*.attn.scores", mask)]):
        return model(ids, kv_cache=cache)[:, -1, :].float()


def _check(model, max_new_tokens: int, batch_size: int) -> None:
    if max_new_tokens < 0:
        raise ConfigError("max_new_tokens", max_new_tokens, ">= 0")
    if batch_size < 1:
        raise ConfigError("batch_size", batch_size, ">= 1")
    if not hasattr(model, "hooks") or not hasattr(model, "blocks"):
        raise ConfigError("model", type(model).__name__, "an lmsci GPT (kv_cache and attn.scores hook points)")


@torch.no_grad()
def greedy_decode(model, prompts: Sequence[Sequence[int]], max_new_tokens: int, eos_id: int | None, *,
                  batch_size: int = 64, pad_id: int = 0, device: str | torch.device | None = None) -> list[list[int]]:
    """Greedy (argmax) continuation of each prompt.

    Args:
        model: an lmsci GPT.
        prompts: token-id lists (non-empty).
        max_new_tokens: most tokens generated per prompt.
        eos_id: stop a row after generating it (None: never stop early).
        batch_size: rows per forward pass.

    Returns:
        per prompt, the generated token ids (``eos_id`` excluded), in input order.

    Raises:
        ConfigError: bad sizes, an empty prompt, or a model without hook points / kv cache.
    """
    _check(model, max_new_tokens, batch_size)
    if any(len(p) == 0 for p in prompts):
        raise ConfigError("prompts", "an empty prompt", "non-empty token lists")
    dev = resolve_model_device(model, device)
    was = model.training
    model.eval()
    out: list[list[int]] = [[] for _ in prompts]
    try:
        for rows in _chunks(model, prompts, batch_size):
            ids, pad = _left_pad([prompts[i] for i in rows], pad_id, dev)
            budget = min(max_new_tokens, model.cfg.seq_len - ids.shape[1])
            if budget <= 0:
                continue
            cache: list[dict[str, Tensor]] = [{} for _ in model.blocks]
            logits = _step_logits(model, ids, cache, pad)
            done = torch.zeros(len(rows), dtype=torch.bool, device=dev)
            gen = []
            for t in range(budget):
                nxt = logits.argmax(-1)
                nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
                gen.append(nxt)
                if eos_id is not None:
                    done |= nxt == eos_id
                if bool(done.all()) or t == budget - 1:
                    break
                logits = _step_logits(model, nxt[:, None], cache, pad)
            g = torch.stack(gen, 1).cpu().tolist()
            for r, i in enumerate(rows):
                seq = g[r]
                if eos_id is not None and eos_id in seq:
                    seq = seq[:seq.index(eos_id)]
                out[i] = seq
    finally:
        model.train(was)
    return out


def _extend_beams(top_s: list[float], top_i: list[int], V: int, nb: int, eos_id: int | None, tokens: Tensor,
                  row0: int, finished: list[tuple[float, list[int]]], done: bool, length_penalty: float,
                  pad_id: int) -> tuple[list[tuple[int, int, float]], bool]:
    """One prompt's next beams from its ``2 * nb`` best extensions (``top_s`` summed log-probs, ``top_i`` flat
    ``beam * V + token`` indices), in order: an EOS among the first ``nb`` becomes a finished hypothesis
    (appended to ``finished``, score ``sum_logprob / len ** length_penalty``), the others continue, up to ``nb``.

    Returns:
        ``(nb beams as (beam, token, score), done)``; a done prompt (``nb`` finished hypotheses or nothing
        left) gets ``nb`` padding beams of score ``-inf``.
    """
    keep: list[tuple[int, int, float]] = []
    if not done:
        for rank, (s, c) in enumerate(zip(top_s, top_i)):
            b, tok = divmod(c, V)
            if s == float("-inf"):
                break
            if eos_id is not None and tok == eos_id:
                if rank < nb:
                    hyp = tokens[row0 + b].tolist()
                    finished.append((s / (len(hyp) + 1) ** length_penalty, hyp))
                continue
            keep.append((b, tok, s))
            if len(keep) == nb:
                break
        if len(finished) >= nb or not keep:
            done = True
    if done:
        keep = [(0, pad_id, float("-inf"))] * nb
    keep += [(0, pad_id, float("-inf"))] * (nb - len(keep))
    return keep, done


def _beam_chunk(model, prompts: list[Sequence[int]], max_new_tokens: int, eos_id: int | None, nb: int,
                length_penalty: float, pad_id: int, dev) -> list[list[tuple[float, list[int]]]] | None:
    """Beam search over ``P`` prompts at once (``P * nb`` rows, KV cache reordered with the beams).

    Returns:
        per prompt, its finished hypotheses ``(score, generated ids)`` (live beams at the token limit
        included), or None when the prompts leave no room below ``seq_len``.
    """
    P = len(prompts)
    ids, pad = _left_pad([p for p in prompts for _ in range(nb)], pad_id, dev)
    budget = min(max_new_tokens, model.cfg.seq_len - ids.shape[1])
    if budget <= 0:
        return None
    cache: list[dict[str, Tensor]] = [{} for _ in model.blocks]
    logits = _step_logits(model, ids, cache, pad)
    scores = torch.full((P, nb), float("-inf"), device=dev)
    scores[:, 0] = 0.0
    tokens = torch.zeros(P * nb, 0, dtype=torch.long, device=dev)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(P)]
    done = [False] * P
    V = logits.shape[-1]
    for t in range(budget):
        logp = torch.log_softmax(logits, -1)  # [P*nb, V]
        cand = (scores.reshape(-1, 1) + logp).reshape(P, nb * V)
        top_s, top_i = cand.topk(min(2 * nb, nb * V), dim=-1)
        top_s, top_i = top_s.cpu().tolist(), top_i.cpu().tolist()
        new_rows, new_tok, new_scores = [], [], []
        for p in range(P):
            keep, done[p] = _extend_beams(top_s[p], top_i[p], V, nb, eos_id, tokens, p * nb, finished[p], done[p],
                                          length_penalty, pad_id)
            for b, tok, s in keep:
                new_rows.append(p * nb + b)
                new_tok.append(tok)
                new_scores.append(s)
        if all(done):
            break
        idx = torch.tensor(new_rows, device=dev)
        nxt = torch.tensor(new_tok, device=dev)
        scores = torch.tensor(new_scores, device=dev).view(P, nb)
        tokens = torch.cat([tokens[idx], nxt[:, None]], 1)
        if t == budget - 1:
            break
        for c in cache:
            for key in ("k", "v"):
                if key in c:
                    c[key] = c[key].index_select(0, idx)
        logits = _step_logits(model, nxt[:, None], cache, pad)
    tok_list = tokens.cpu().tolist()
    sc = scores.cpu().tolist()
    for p in range(P):
        if not done[p]:
            for b in range(nb):
                if sc[p][b] != float("-inf"):
                    hyp = tok_list[p * nb + b]
                    finished[p].append((sc[p][b] / max(len(hyp), 1) ** length_penalty, hyp))
    return finished


def beam_decode(model, prompts: Sequence[Sequence[int]], max_new_tokens: int, eos_id: int | None, *,
                num_beams: int = 4, length_penalty: float = 1.0, batch_size: int = 16, pad_id: int = 0,
                device: str | torch.device | None = None) -> list[list[int]]:
    """Beam search (Hugging Face's ``generate(num_beams=k, early_stopping=True)`` semantics).

    Each prompt keeps ``num_beams`` live beams scored by the sum of token log-probabilities; at each step the
    ``2 * num_beams`` best extensions are examined in order: one ending in ``eos_id`` among the first
    ``num_beams`` becomes a finished hypothesis with score ``sum_logprob / len ** length_penalty`` (``len`` =
    generated tokens, EOS included), the others continue, up to ``num_beams``. A prompt stops when it has
    ``num_beams`` finished hypotheses (early stopping); at the token limit its live beams are finished as they are.
    The best finished hypothesis is returned. ``num_beams = 1`` is greedy decoding.

    Args: as :func:`greedy_decode`; ``batch_size`` counts prompts (each uses ``num_beams`` rows).

    Returns:
        per prompt, the best hypothesis's generated token ids (``eos_id`` excluded), in input order.

    Raises:
        ConfigError: as :func:`greedy_decode`, or ``num_beams < 1``.
    """
    _check(model, max_new_tokens, batch_size)
    if num_beams < 1:
        raise ConfigError("num_beams", num_beams, ">= 1")
    if any(len(p) == 0 for p in prompts):
        raise ConfigError("prompts", "an empty prompt", "non-empty token lists")
    dev = resolve_model_device(model, device)
    was = model.training
    model.eval()
    out: list[list[int]] = [[] for _ in prompts]
    try:
        for rows in _chunks(model, prompts, batch_size):
            finished = _beam_chunk(model, [prompts[i] for i in rows], max_new_tokens, eos_id, num_beams,
                                   length_penalty, pad_id, dev)
            if finished is None:
                continue
            for p, hyps in enumerate(finished):
                if hyps:
                    out[rows[p]] = max(hyps, key=lambda h: h[0])[1]
    finally:
        model.train(was)
    return out


@torch.no_grad()
def sample(model, input_ids: Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
           generator: torch.Generator | None = None, use_cache: bool = True) -> Tensor:
    """Sample ``max_new_tokens`` tokens from an lmsci GPT after ``input_ids [batch, seq]`` (long); returns
    ``[batch, seq + new]`` (``GPT.generate`` calls this).

    ``temperature == 0`` is greedy decoding; ``top_k`` keeps the k most likely tokens. The context is
    cropped to the last ``model.cfg.seq_len`` tokens. Randomness only from ``generator`` (default: a
    generator seeded with 0). With ``use_cache`` a key/value cache serves every step while the
    sequence fits in ``seq_len``; beyond, each step recomputes the cropped context (same results as
    ``use_cache=False`` up to float rounding). The model runs in eval mode and gets its mode back after.

    Raises:
        ConfigError: negative ``max_new_tokens``/``temperature`` or ``top_k < 1``.
    """
    if max_new_tokens < 0:
        raise ConfigError("max_new_tokens", max_new_tokens, ">= 0")
    if temperature < 0:
        raise ConfigError("temperature", temperature, ">= 0 (0 = greedy)")
    if top_k is not None and top_k < 1:
        raise ConfigError("top_k", top_k, ">= 1 or None")
    if generator is None:
        generator = torch.Generator(device=input_ids.device).manual_seed(0)
    was_training = model.training
    model.eval()
    ids = input_ids
    cache: list[dict[str, Tensor]] | None = [{} for _ in model.blocks] if use_cache and len(model.blocks) else None
    n_cached = 0
    try:
        for _ in range(max_new_tokens):
            if cache is not None and ids.shape[1] <= model.cfg.seq_len:
                logits = model(ids[:, n_cached:], kv_cache=cache)[:, -1, :].float()
                n_cached = ids.shape[1]
            else:
                cache = None
                logits = model(ids[:, -model.cfg.seq_len:])[:, -1, :].float()
            if temperature == 0:
                nxt = logits.argmax(-1, keepdim=True)
            else:
                logits = logits / temperature
                if top_k is not None and top_k < logits.shape[-1]:
                    kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                probs = torch.softmax(logits, dim=-1)
                nxt = torch.multinomial(probs, 1, generator=generator)
            ids = torch.cat([ids, nxt], dim=1)
    finally:
        model.train(was_training)
    return ids
