"""The toy side of :mod:`lmsci.experiments.steering.lm_steer_transfer_lm`: the Shakespeare BPE GPT, the map from the
real LM's output-embedding space to the toy's, generation on the toy with a transferred steer, and the toy's
perplexity of the real LM's (re-tokenised) continuations.

Source: Han, Xu, Li, Ji, "Word Embeddings Are Steers for Language Models", ACL 2024, arXiv 2305.12798 (v1 App. F:
a steer carried between LMs by a linear map fitted on the output embeddings of shared tokens).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from lmsci.errors import ConfigError
from lmsci.measure import text_scores as ts
from lmsci.runs import derive_seed


def train_toy(cfg: Any, device: str, log: Any) -> dict[str, Any]:
    """The toy Shakespeare GPT (``cfg.toy_model`` trained by ``cfg.toy_train`` on the BPE corpus of
    ``toy_vocab_size``, as the toy ``lm-steer`` trains its GPTs; seed ``derive_seed(cfg.seed, "lm", "toy")``).

    Returns:
        ``gpt`` (eval mode on ``device``), ``tok`` (the corpus's :class:`~lmsci.worlds.tokenizers.BPETokenizer`),
        ``val_nll``, ``unigram_nll``, ``bigram_nll`` (nats/token on the held-out works), ``toy_seconds``.
    """
    import time

    from lmsci.train.corpus_lm import train_corpus_gpt
    from lmsci.worlds import shakespeare as sh

    t0 = time.perf_counter()
    corpus = sh.prepare("bpe", cfg.toy_vocab_size)
    val = sh.eval_batches(corpus.val_ids, cfg.toy_seq_len, cfg.toy_eval_tokens)
    get_batch = sh.make_get_batch(corpus.train_ids, cfg.toy_train.batch_size, cfg.toy_seq_len)
    gpt, stats = train_corpus_gpt(get_batch, val, corpus.vocab_size, model=cfg.toy_model, train_spec=cfg.toy_train,
                                  seq_len=cfg.toy_seq_len, device=device, seed=derive_seed(cfg.seed, "lm", "toy"),
                                  log=lambda r: log(model="toy", **r))
    for p in gpt.parameters():
        p.requires_grad_(False)
    base = sh.ngram_baselines(corpus.train_ids, corpus.val_ids, corpus.vocab_size)
    return {"gpt": gpt, "tok": corpus.tokenizer, "val_nll": float(stats["val_nll"]),
            "unigram_nll": float(base["unigram_nll"]), "bigram_nll": float(base["bigram_nll"]),
            "toy_seconds": time.perf_counter() - t0}


def fit_map(cfg: Any, hf: Any, toy: dict[str, Any]) -> Any:
    """The closed-form map between the real LM's and the toy GPT's output-embedding spaces
    (:func:`lmsci.methods.lm_steer_transfer.fit_embedding_map`, ``cfg.map_method``, ``map_holdout`` of the shared
    tokens held out) on the tokens whose strings both vocabularies hold
    (:func:`lmsci.methods.lm_steer_transfer.shared_tokens`; both are byte-level BPEs with GPT-2's space mark for
    SmolLM2), on the toy's device.

    Raises:
        ConfigError: a tokenizer without ``get_vocab``; too few shared tokens for the map.
    """
    from lmsci.methods.lm_steer import output_embeddings
    from lmsci.methods.lm_steer_transfer import fit_embedding_map, shared_tokens

    src_vocab = getattr(hf.tokenizer, "get_vocab", None)
    tgt = getattr(toy["tok"], "hf", toy["tok"])
    if src_vocab is None or not hasattr(tgt, "get_vocab"):
        raise ConfigError("model", cfg.model, "a tokenizer with get_vocab() (the shared tokens of the transfer)")
    src_ids, tgt_ids = shared_tokens(src_vocab(), tgt.get_vocab())
    Es, Et = output_embeddings(hf), output_embeddings(toy["gpt"])
    emap = fit_embedding_map(Es[src_ids.to(Es.device)], Et[tgt_ids.to(Et.device)].to(Es.device), cfg.map_method,
                             cfg.map_holdout, derive_seed(cfg.seed, "map"))
    emap.A, emap.B = emap.A.to(Et.device), emap.B.to(Et.device)
    emap.n_shared = int(len(src_ids))
    return emap


def toy_prompts(cfg: Any, tok: Any, neutral: list[str], seed: int) -> torch.Tensor:
    """A seed's toy prompts ``[n_prompts, toy_prompt_tokens]``: the first ``toy_prompt_tokens`` BPE tokens of
    ``"\\n" + line`` for neutral held-out lines drawn with ``seed``.

    Raises:
        ConfigError: fewer than ``n_prompts`` neutral lines longer than ``toy_prompt_tokens`` tokens.
    """
    rng = np.random.default_rng(int(seed))
    out = []
    for i in rng.permutation(len(neutral)):
        ids = tok.encode("\n" + neutral[i])
        if len(ids) > cfg.toy_prompt_tokens:
            out.append(ids[: cfg.toy_prompt_tokens])
            if len(out) == cfg.n_prompts:
                return torch.tensor(out, dtype=torch.long)
    raise ConfigError("n_prompts", cfg.n_prompts, f"<= {len(out)} (neutral held-out lines longer than "
                      f"toy_prompt_tokens={cfg.toy_prompt_tokens} toy tokens)")


@torch.no_grad()
def toy_evaluate(cfg: Any, toy: dict[str, Any], steer: Any, value: float, prompts: torch.Tensor,
                 gen_seed: int) -> dict[str, Any]:
    """Continuations on the toy GPT (``n_samples`` per prompt of ``prompts [n, P]``, ``gen_tokens`` new tokens,
    top-``toy_top_k`` sampling at ``temperature``, one generator seeded ``gen_seed``: the same draws at every steer
    value and arm) with the transferred ``steer`` at ``value`` (dummies at 1): mean VADER compound ``sentiment`` and
    mean perplexity ``ppl`` under the unsteered toy GPT."""
    from lmsci.methods.steering import generate

    gpt = toy["gpt"]
    dev = next(gpt.parameters()).device
    x = prompts.to(dev).repeat_interleave(cfg.n_samples, 0)
    g = torch.Generator(device=dev).manual_seed(int(gen_seed))
    out = generate(gpt, x, steer, {"attr": float(value)}, cfg.gen_tokens, temperature=cfg.temperature,
                   top_k=cfg.toy_top_k, generator=g)
    gen = out[:, x.shape[1]:]
    texts = [toy["tok"].decode(r) for r in gen.cpu().tolist()]
    ppl = ts.conditional_perplexity(gpt, x, gen)
    return {"sentiment": float(ts.vader_compound(texts).mean()), "ppl": ts.mean_perplexity(ppl), "_texts": texts}


@torch.no_grad()
def toy_perplexity(cfg: Any, toy: dict[str, Any], prompt_texts: list[str], texts: list[str]) -> float:
    """Mean perplexity under the toy GPT of ``texts`` (another LM's continuations, decoded) given ``prompt_texts``
    (their prompts, decoded), both re-tokenised by the toy's BPE (``exp`` of the mean NLL, nats/token, of the
    continuation's toy tokens; the prompt cut from the left so prompt + continuation fit ``toy_seq_len``);
    the :func:`lmsci.measure.text_scores.mean_perplexity` filter (perplexities below 1e4)."""
    gpt, tok = toy["gpt"], toy["tok"]
    dev = next(gpt.parameters()).device
    ppl = []
    for p, t in zip(prompt_texts, texts):
        c = tok.encode(t)[: cfg.toy_seq_len - 1]
        if not c:
            continue
        q = tok.encode(p)[-(cfg.toy_seq_len - len(c)):] or tok.encode("\n")
        nll = ts.conditional_nll(gpt, torch.tensor([q], device=dev), torch.tensor([c], device=dev))
        ppl.append(float(np.exp(nll[0])))
    return ts.mean_perplexity(np.asarray(ppl))
