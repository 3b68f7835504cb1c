"""The random walk's oracles of :mod:`lmsci.experiments.watermark.watermark_removal` on Hugging Face causal LMs.

The perturbation oracle (:func:`propose_span`: resample a span, score the suffix with one key/value cache), the
CPU-scale token walk (:func:`token_walk`, and its null arm: every proposal accepted, no quality oracle), token
log-probabilities, per-text watermark z-scores, the scoring of a walk's final texts (:func:`score_walk`) and the
n-gram overlap that measures traceability. Source: Zhang,
Edelman, Francati, Venturi, Ateniese, Barak, "Watermarks in the Sand", ICML 2024, arXiv 2311.04378, Algorithm 1;
traceability as Harel-Canada et al., "Sandcastles in the Storm", arXiv 2505.06827.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from lmsci.methods import watermark as wm

Z_START, Z_END = 4.0, 2.0  # the gate's original median z and the claim's final median z


def ngram_overlap(a: np.ndarray, b: np.ndarray, n: int) -> float:
    """Share of the distinct n-grams of token sequence ``a`` that occur in ``b``."""
    ga = {tuple(a[i: i + n]) for i in range(len(a) - n + 1)}
    gb = {tuple(b[i: i + n]) for i in range(len(b) - n + 1)}
    return len(ga & gb) / max(1, len(ga))


@torch.no_grad()
def token_logprobs(model: Any, x: torch.Tensor) -> torch.Tensor:
    """``[B, L-1]`` log-probabilities of ``x[:, 1:]`` under a Hugging Face causal LM."""
    lp = torch.log_softmax(model(x).logits[:, :-1].float(), -1)
    return lp.gather(2, x[:, 1:, None]).squeeze(2)


def detect_each(det: Any, seqs: list[torch.Tensor]) -> np.ndarray:
    """``[n]`` z-scores of token sequences of any lengths (one batch when they are equally long)."""
    if len({len(x) for x in seqs}) == 1:
        return wm.detect(det, torch.stack(seqs))["z"]
    return np.array([float(wm.detect(det, x[None])["z"][0]) for x in seqs])


@torch.no_grad()
def propose_span(model: Any, x: torch.Tensor, s: int, k: int, generator: torch.Generator
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The perturbation oracle: resample positions ``s .. s+k-1`` of every row of ``x`` from ``model``.

    Args:
        model: a Hugging Face causal LM (``model(ids, past_key_values=..., use_cache=True)``).
        x: ``[n, L]`` long token ids; ``1 <= s`` and ``s + k <= L``.
        s, k: the span's first position and its length (the same for every row).
        generator: a CPU ``torch.Generator`` for the multinomial draws (temperature 1, no truncation).

    Returns:
        ``(new [n, L], lp [n, L-s])``: the proposal (``x`` outside the span) and the log-probabilities under
        ``model`` of ``new[:, s:]`` given everything before them, equal to ``token_logprobs(model, new)[:, s-1:]``
        to float rounding. The prefix ``x[:, :s]`` is run once and its key/value cache reused for the ``k`` draws
        and for scoring the suffix, so a step costs one pass over ``L`` tokens.

    Raises:
        ValueError: a span outside ``[1, L)``.
    """
    n, L = x.shape
    if not (1 <= s and k >= 1 and s + k <= L):
        raise ValueError(f"span [{s}, {s + k}) must lie within [1, {L}]")
    new = x.clone()
    out = model(x[:, :s], use_cache=True)
    cache, logits = out.past_key_values, out.logits[:, -1].float()
    lps = []
    for j in range(k):
        logp = torch.log_softmax(logits, -1)
        tok = torch.multinomial(logp.exp().cpu(), 1, generator=generator).squeeze(1).to(x.device)
        new[:, s + j] = tok
        lps.append(logp.gather(1, tok[:, None]))
        if j < k - 1:
            out = model(tok[:, None], past_key_values=cache, use_cache=True)
            cache, logits = out.past_key_values, out.logits[:, -1].float()
    if s + k < L:  # score the suffix given the new span: feed the span's last token and the suffix
        logp = torch.log_softmax(model(new[:, s + k - 1: -1], past_key_values=cache).logits.float(), -1)
        lps.append(logp.gather(2, new[:, s + k:, None]).squeeze(2))
    return new, torch.cat(lps, 1)


def walk_summary(z0: np.ndarray, zf: np.ndarray, dq: np.ndarray, own: np.ndarray, other: np.ndarray) -> dict:
    """A walk's results row from ``[n]`` per-text arrays: original and final z, the judge's quality change
    (nats/token), and the final text's n-gram overlap with its own origin and the largest with another origin."""
    return {"z0_median": float(np.median(z0)), "zf_median": float(np.median(zf)),
            "zf_frac_below_2": float((zf < Z_END).mean()), "zf_frac_above_4": float((zf > Z_START).mean()),
            "judge_dq_median": float(np.median(dq)), "judge_dq_mean": float(dq.mean()),
            "trace_own_overlap": float(own.mean()), "trace_other_max_overlap": float(other.mean()),
            "traceable_share": float((own > other).mean())}


@torch.no_grad()
def token_walk(cfg: Any, A: Any, prompts: torch.Tensor, y0: torch.Tensor, det: Any, seed: int, log: Any,
               device: str, random_edits: bool = False) -> tuple[list[torch.Tensor], dict, list[dict]]:
    """The CPU-scale walk of ``watermark-removal``: ``cfg.walk_steps`` steps of span resampling from the causal LM
    ``A`` (:func:`propose_span`, ``cfg.span`` tokens) with Metropolis-Hastings acceptance and the quality oracle
    (``A``'s mean NLL of the generated tokens at most the original's plus ``cfg.tau`` nats/token).

    Args:
        cfg: the experiment's config (``prompt_len``, ``T``, ``span``, ``n_texts``, ``walk_steps``, ``tau``,
            ``detect_every``).
        A: the attacker's Hugging Face causal LM; prompts ``[n, prompt_len]``, y0 ``[n, T]``: the watermarked texts.
        det: the watermark detector; seed: the walk's seed (span starts, draws, MH uniforms); log: ``log(**row)``.
        random_edits: the null arm: every proposal is accepted (no MH step, no quality oracle), the same steps,
            spans and draws otherwise.

    Returns:
        (final generated tokens per text, result fields ``attacker_dq_median`` / ``accept_rate`` /
        ``tokens_changed``, the curve: median z every ``detect_every`` steps and at the last).
    """
    P, T, k, n = cfg.prompt_len, cfg.T, cfg.span, cfg.n_texts
    x = torch.cat([prompts, y0], 1)
    lpA = token_logprobs(A, x)[:, P - 1:]  # [n, T]: the attacker's log-probs of the generated tokens
    q0 = -lpA.mean(1)  # original quality (NLL per token under A)
    g = torch.Generator(device="cpu").manual_seed(seed)
    curve = []
    accepted = torch.zeros(n)
    for step in range(cfg.walk_steps + 1):
        if step % cfg.detect_every == 0 or step == cfg.walk_steps:
            z = wm.detect(det, x[:, P:])["z"]
            curve.append({"step": step, "z_median": float(np.median(z)), "z_mean": float(np.mean(z)),
                          "accept_rate": float(accepted.mean() / max(step, 1)),
                          "quality_A_change": float((-lpA.mean(1) - q0).median())})
            log(**curve[-1])
        if step == cfg.walk_steps:
            break
        i = int(torch.randint(0, T - k + 1, (1,), generator=g))  # span start within the generated tokens
        new, lp_tail = propose_span(A, x, P + i, k, g)  # no watermark: the attacker's own model
        lp_new = torch.cat([lpA[:, :i], lp_tail], 1)
        # MH: the suffix after the span, scored under A with the new vs the old span
        log_ratio = (lp_new[:, i + k:] - lpA[:, i + k:]).sum(1)
        u = torch.rand(n, generator=g).to(device)
        mh = torch.log(u) < log_ratio
        quality_ok = (-lp_new.mean(1)) <= q0 + cfg.tau
        take = torch.ones_like(mh) if random_edits else mh & quality_ok
        x = torch.where(take[:, None], new, x)
        lpA = torch.where(take[:, None], lp_new, lpA)
        accepted += take.float().cpu()
    final = x[:, P:]
    same = float((final == y0).float().mean())
    extra = {"attacker_dq_median": float((-lpA.mean(1) - q0).median()),
             "accept_rate": float(accepted.mean() / cfg.walk_steps), "tokens_changed": 1 - same}
    return list(final), extra, curve


def score_walk(J: Any, det: Any, prompts: torch.Tensor, y0: torch.Tensor, z0: np.ndarray, final: list[torch.Tensor],
               ngram: int) -> tuple[dict, dict[str, np.ndarray]]:
    """A walk's results row (:func:`walk_summary`) and its ``[n]`` per-text arrays (``z0``, ``zf``, ``dq``, ``own``,
    ``other``): the final texts' z-scores, the judge ``J``'s NLL change per token (final minus original, nats/token,
    generated tokens only) and the ``ngram`` overlap of each final text with its own and with the other origins."""
    P, n = prompts.shape[1], len(final)
    zf = detect_each(det, final)
    nll_j0 = -token_logprobs(J, torch.cat([prompts, y0], 1))[:, P - 1:].mean(1).cpu().numpy()
    nll_j1 = np.array([-float(token_logprobs(J, torch.cat([prompts[t], f])[None])[0, P - 1:].mean())
                       for t, f in enumerate(final)])
    dq = nll_j1 - nll_j0
    y0n, fn = y0.cpu().numpy(), [f.cpu().numpy() for f in final]
    own = np.array([ngram_overlap(fn[t], y0n[t], ngram) for t in range(n)])
    other = np.array([max(ngram_overlap(fn[t], y0n[u], ngram) for u in range(n) if u != t) for t in range(n)])
    return walk_summary(z0, zf, dq, own, other), {"z0": z0, "zf": zf, "dq": dq, "own": own, "other": other}
