"""Data, model and measurements of :mod:`lmsci.experiments.steering.lm_steer_lm` (LM-Steer on a real LM).

* :func:`build_data`: VADER-labelled Shakespeare lines of the steer plays (training pool) and VADER-neutral lines of
  the other plays (prompt candidates), split by play per genre and gathered as the toy ``lm-steer`` does (both use
  :func:`lmsci.experiments.steering._lm_steer_lines.play_lines`; the toy's ``prepare_data`` also trains a genre
  classifier and draws one prompt set per run, so its selection is repeated here with per-seed prompt samples).
* :func:`get_model`: a zoo name, local Hugging Face directory or ``.gguf`` file (:func:`lmsci.models.zoo.load_cached`),
  or :data:`TINY`, a tiny random tied Llama with a word-level tokenizer over the run's lines (smoke preset, tests).
* :func:`sample_prompts`, :func:`evaluate`: a seed's prompts and one steer value's continuations scored by VADER
  (sentiment) and by the unsteered model itself (conditional perplexity).
* :func:`probe_words`: the SVD probe (:func:`lmsci.methods.lm_steer_analysis.svd_probe`) over whole-word tokens, against
  random orthonormal directions (:func:`random_direction_rate`).

Source: Han, Xu, Li, Ji, arXiv 2305.12798 (ACL 2024), Sec. 4-5, App. G.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from lmsci.errors import ConfigError
from lmsci.experiments.steering._lm_steer_lines import play_lines
from lmsci.measure import text_scores as ts
from lmsci.runs import derive_seed

TINY = "tiny-llama"
"""The smoke preset's model: a 2-layer d_model 32 random Llama (tied embeddings, GQA 4/2 heads) with a word-level
tokenizer over the run's lines; it knows no English."""

_MODELS: dict[tuple, Any] = {}


def check_model_name(value: str, field: str = "model") -> None:
    """Refuse a model value before any work: :data:`TINY`, a zoo name, a local HF directory or a ``.gguf`` file.

    Raises:
        ConfigError: naming ``field`` (:func:`lmsci.models.zoo.check_model_source`).
    """
    if value == TINY:
        return
    from lmsci.models.zoo import check_model_source

    check_model_source(value, field)


# ---------------------------------------------------------------------------------------------------- data
def build_data(cfg: Any) -> dict[str, Any]:
    """The run's lines (fixed by ``cfg.seed`` and ``play_split_seed``; every seed and arm share them).

    Returns:
        ``texts`` (``2 n_train_lines`` steer-play lines, positives first), ``labels`` (+1 for VADER compound >=
        ``vader_threshold``, -1 for <= -threshold), ``neutral`` (scorer-play lines of compound 0, the prompt
        candidates), the play names and the available counts.

    Raises:
        ConfigError: ``n_train_lines`` above the positive or negative lines available.
    """
    rng = np.random.default_rng(derive_seed(cfg.seed, "lines"))
    pl = play_lines(cfg, rng)
    st, sc = [s for s, _, _ in pl.steer], [s for s, _, _ in pl.scorer]
    comp = ts.vader_compound(st)
    pos = [s for s, c in zip(st, comp) if c >= cfg.vader_threshold]
    neg = [s for s, c in zip(st, comp) if c <= -cfg.vader_threshold]
    n = cfg.n_train_lines
    for what, items in (("positive", pos), ("negative", neg)):
        if len(items) < n:
            raise ConfigError("n_train_lines", n, f"<= {len(items)} ({what} lines of the steer plays)")
    pos = [pos[i] for i in rng.permutation(len(pos))[:n]]
    neg = [neg[i] for i in rng.permutation(len(neg))[:n]]
    neutral = [s for s, c in zip(sc, ts.vader_compound(sc)) if c == 0.0]
    return {"texts": pos + neg, "labels": np.array([1.0] * n + [-1.0] * n), "neutral": neutral,
            "steer_plays": [w.name for w in pl.steer_plays], "scorer_plays": [w.name for w in pl.scorer_plays],
            "n_pos_available": len([c for c in comp if c >= cfg.vader_threshold]),
            "n_neg_available": len([c for c in comp if c <= -cfg.vader_threshold])}


def encode(tok: Any, line: str) -> list[int]:
    """A line's token ids as it stands in the corpus (after a newline, so its first word is predicted too)."""
    return list(tok.encode("\n" + line, add_special_tokens=False))


def sample_prompts(cfg: Any, tok: Any, neutral: list[str], seed: int) -> torch.Tensor:
    """A seed's prompts: ``[n_prompts, prompt_tokens]`` long, the first ``prompt_tokens`` tokens of neutral lines
    drawn with ``seed`` (the point's seed: both arms of a seed index share it, so they see the same prompts).

    Raises:
        ConfigError: fewer than ``n_prompts`` neutral lines longer than ``prompt_tokens`` tokens.
    """
    rng = np.random.default_rng(int(seed))
    out = []
    for i in rng.permutation(len(neutral)):
        ids = encode(tok, neutral[i])
        if len(ids) > cfg.prompt_tokens:
            out.append(ids[: cfg.prompt_tokens])
            if len(out) == cfg.n_prompts:
                return torch.tensor(out, dtype=torch.long)
    raise ConfigError("n_prompts", cfg.n_prompts, f"<= {len(out)} (neutral held-out lines longer than "
                      f"prompt_tokens={cfg.prompt_tokens} tokens)")


# ---------------------------------------------------------------------------------------------------- model
def _tiny_model(lines: list[str], device: str) -> Any:
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from lmsci.models.hf import HFModel

    pre = pre_tokenizers.Whitespace()
    words = sorted({w for ln in lines for w, _ in pre.pre_tokenize_str(ln)})
    vocab = {w: i for i, w in enumerate(["<unk>", "<eos>", *words])}
    tk = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token="<eos>", pad_token="<eos>")
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=True, bos_token_id=None, eos_token_id=1, pad_token_id=1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg)
    hf = HFModel(model.to(device).eval(), tok, TINY)
    hf.provenance = {"source": TINY, "kind": "random", "deviation": "random weights (tests only)"}
    return hf


def get_model(name: str, device: str, lines: list[str]) -> Any:
    """The :class:`~lmsci.models.hf.HFModel` named ``name`` on ``device`` (cached per process; every parameter
    frozen). :data:`TINY` builds its vocabulary from ``lines``.

    Raises:
        ConfigError: as :func:`check_model_name`; a model without a tokenizer.
    """
    key = (name, str(device), hash(tuple(lines)) if name == TINY else None)
    if key not in _MODELS:
        check_model_name(name)
        if name == TINY:
            m = _tiny_model(lines, device)
        else:
            from lmsci.models.zoo import load_cached

            m = load_cached(name, device, field="model")
            if m.tokenizer is None:
                raise ConfigError("model", name, "a causal LM with a tokenizer (none found beside the weights)")
        for p in m.parameters():
            p.requires_grad_(False)
        _MODELS.clear()  # one model in memory at a time
        _MODELS[key] = m
    return _MODELS[key]


# ---------------------------------------------------------------------------------------------------- measuring
def evaluate(cfg: Any, hf: Any, steer: Any, value: float | Mapping[str, float], prompts: torch.Tensor, gen_seed: int,
             clf: Any = None) -> dict[str, Any]:
    """Continuations of ``prompts [n, P]`` (``n_samples`` each, ``gen_tokens`` new tokens, nucleus ``top_p``, end of
    text suppressed until ``gen_tokens``, ``gen_batch`` per ``generate`` call) with ``steer`` at ``value`` (the steer
    ``attr`` at that value, or a name -> value mapping; dummies at 1; ``steer=None``: the unsteered model), sampled
    with ``gen_seed`` (the same at every steer value and arm: common random numbers); scored by mean VADER compound
    (``sentiment``), mean conditional perplexity of the continuation under the unsteered model itself (``ppl``) and,
    with a genre classifier ``clf``, its mean P(comedy) (``genre``)."""
    from lmsci.methods.steering import generate

    values = dict(value) if isinstance(value, Mapping) else {"attr": float(value)}

    dev = hf.device
    x = prompts.to(dev).repeat_interleave(cfg.n_samples, 0)
    tok = hf.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    gens = []
    with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
        torch.manual_seed(int(gen_seed))
        for i in range(0, x.shape[0], cfg.gen_batch):  # the same chunks at every steer value: the same draws
            xb = x[i:i + cfg.gen_batch]
            out = generate(hf, xb, steer, values, cfg.gen_tokens, do_sample=True, top_p=cfg.top_p,
                           top_k=0, temperature=cfg.temperature, min_new_tokens=cfg.gen_tokens,
                           attention_mask=torch.ones_like(xb), pad_token_id=pad)
            gens.append(out[:, xb.shape[1]:])
    gen = torch.cat(gens)
    texts = tok.batch_decode(gen.cpu().tolist(), skip_special_tokens=True)
    ppl = ts.conditional_perplexity(hf, x, gen)
    res = {"sentiment": float(ts.vader_compound(texts).mean()), "ppl": ts.mean_perplexity(ppl), "_texts": texts}
    if clf is not None:
        res["genre"] = float(ts.classifier_score(clf, texts).mean())
    return res


def whole_word_tokens(tok: Any, vocab_size: int) -> tuple[list[int], list[str]]:
    """Candidate tokens of the SVD probe: ids whose text is a word of >= 3 letters (with a leading space when the
    tokenizer marks word starts so, as byte-level BPEs do), and their stripped texts."""
    texts = tok.batch_decode([[i] for i in range(vocab_size)])
    spaced = any(t.startswith(" ") for t in texts)
    ids = [i for i, t in enumerate(texts)
           if (t.startswith(" ") or not spaced) and t.strip().isalpha() and len(t.strip()) >= 3]
    return ids, [texts[i].strip() for i in ids]


@torch.no_grad()
def probe_words(cfg: Any, hf: Any, steer: Any, cand: tuple[list[int], list[str]], contexts: torch.Tensor,
                seed: int = 0) -> dict[str, Any]:
    """The SVD probe of the steer's W over the candidate tokens: the first ``probe_dims`` singular directions'
    ``probe_top`` top and bottom words (signs fixed so that top = promoted at positive steer values, from the
    training lines' hidden states ``contexts [N, d]``); the fraction of VADER-lexicon words among them
    (``probe_vader_frac``), over the candidates' base rate (``probe_enrichment``), and minus the same fraction for
    ``probe_random`` sets of ``probe_dims`` random orthonormal directions drawn with ``seed``
    (``probe_random_frac``, ``probe_excess``)."""
    from lmsci.methods.lm_steer import output_embeddings
    from lmsci.methods.lm_steer_analysis import svd_probe

    ids, words = cand
    E = output_embeddings(hf)[torch.tensor(ids, device=hf.device)]
    dirs = svd_probe(steer, E, "attr", k=cfg.probe_dims, n_tokens=cfg.probe_top, contexts=contexts)
    lex = ts.vader_lexicon()
    listing, hits = [], []
    for d in dirs:
        top, bot = [words[i] for i in d.top_ids], [words[i] for i in d.bottom_ids]
        listing.append({"dim": d.index, "sigma": d.singular_value, "top": top, "bottom": bot})
        hits += [w.lower() in lex for w in top + bot]
    lex_hits = np.array([w.lower() in lex for w in words], dtype=bool)
    base = float(lex_hits.mean()) if words else float("nan")
    frac = float(np.mean(hits)) if hits else float("nan")
    rand = random_direction_rate(E, lex_hits, len(dirs), cfg.probe_top, cfg.probe_random, seed)
    return {"probe": listing, "probe_vader_frac": frac, "probe_base_rate": base, "probe_random_frac": rand,
            "probe_excess": frac - rand,
            "probe_enrichment": frac / base if base and np.isfinite(base) else float("nan")}


@torch.no_grad()
def random_direction_rate(E: torch.Tensor, lex_hits: np.ndarray, k: int, n_top: int, draws: int,
                          seed: int) -> float:
    """The VADER-lexicon fraction of the ``n_top`` top and bottom tokens of ``k`` random orthonormal directions
    (``draws`` independent sets, QR of a Gaussian ``[d, k]``): the reference of the probe statistic.

    Args:
        E: ``[n_candidates, d]`` output embeddings of the candidate tokens. lex_hits: ``[n_candidates]`` bool.
    """
    g = torch.Generator().manual_seed(int(seed))
    n = min(int(n_top), E.shape[0])
    hits = []
    for _ in range(int(draws)):
        Q, _ = torch.linalg.qr(torch.randn(E.shape[1], int(k), generator=g))
        scores = E.float() @ Q.to(E.device)
        for j in range(scores.shape[1]):
            idx = torch.cat([torch.topk(scores[:, j], n).indices, torch.topk(-scores[:, j], n).indices]).cpu()
            hits.append(lex_hits[idx.numpy()])
    return float(np.mean(np.concatenate(hits))) if hits else float("nan")
