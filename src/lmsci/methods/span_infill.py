"""Text-level perturbation and quality oracles of the random-walk watermark attack at the paper's scale.

Source: Zhang, Edelman, Francati, Venturi, Ateniese, Barak, "Watermarks in the Sand", ICML 2024, arXiv 2311.04378,
Algorithm 1 and its camera-ready code (``RandomWalkAttack``, ``QualityOracle``; spec ``impossibility_and_theory.md``
§1b): the perturbation oracle masks one span of ``span_len = 6`` words and lets a T5 model (``google/t5-v1_1-xl``)
fill it, sampling with ``top_p 0.8, top_k 40, repetition_penalty 1.3, temperature 1.5``, 6-12 new tokens; the
quality oracle is a reward model (``OpenAssistant/reward-model-deberta-v3-large-v2``) and a proposal is kept when
its reward is not below the original text's.

* :func:`load_infiller` / :func:`load_reward_model` -- a user's local T5-style seq2seq model or sequence-scoring
  reward model with its tokenizer (``ConfigError`` for anything but an existing directory: lmsci never downloads).
* :func:`mask_word_span` -- split a text around a random span of words.
* :func:`infill` -- the T5 fill of ``<extra_id_0>`` for a batch of masked texts.
* :func:`reward_scores` -- the reward model's score of (prompt, response) pairs.

The token-level oracle lmsci uses at CPU scale (resampling a span from a causal LM with a Metropolis-Hastings
acceptance) lives in :mod:`lmsci.experiments.watermark_removal`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from lmsci.errors import ConfigError
from lmsci.models.hf import local_model_dir

SENTINEL, SENTINEL_END = "<extra_id_0>", "<extra_id_1>"
#: the camera-ready sampling settings of the T5 perturbation oracle
INFILL_SAMPLING = dict(do_sample=True, top_p=0.8, top_k=40, repetition_penalty=1.3, temperature=1.5,
                       max_new_tokens=12, min_length=6)


def check_infiller(path: str | Path, field: str = "infiller_model") -> tuple[Path, Any]:
    """``(directory, tokenizer)`` of a local T5-style infiller, checked without loading the model (cheap, for
    validation).

    Raises:
        ConfigError: not a local model directory, or a tokenizer without the ``<extra_id_0>`` sentinel.
    """
    from transformers import AutoTokenizer

    p = local_model_dir(field, path)
    try:
        tok = AutoTokenizer.from_pretrained(p, local_files_only=True)
    except (OSError, ValueError, TypeError) as err:
        raise ConfigError(field, str(path), f"a directory that also holds the infiller's tokenizer ({err})") from err
    if tok.convert_tokens_to_ids(SENTINEL) in (None, tok.unk_token_id):
        raise ConfigError(field, str(path), f"a T5-style infiller whose tokenizer has the sentinel {SENTINEL}")
    return p, tok


def load_infiller(path: str | Path, device: str = "cpu", field: str = "infiller_model") -> tuple[Any, Any]:
    """``(model, tokenizer)`` of a local seq2seq span infiller (e.g. T5-v1.1-XL) in eval mode on ``device``.

    Raises:
        ConfigError: as :func:`check_infiller`.
    """
    from transformers import AutoModelForSeq2SeqLM

    p, tok = check_infiller(path, field)
    with torch.random.fork_rng(devices=[]):
        model = AutoModelForSeq2SeqLM.from_pretrained(p, local_files_only=True)
    return model.to(device).eval(), tok


def load_reward_model(path: str | Path, device: str = "cpu", field: str = "reward_model") -> tuple[Any, Any]:
    """``(model, tokenizer)`` of a local reward model (``AutoModelForSequenceClassification`` scoring
    (prompt, response) pairs, e.g. DeBERTa-v3-large) in eval mode on ``device``.

    Raises:
        ConfigError: not a local model directory.
    """
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    p = local_model_dir(field, path)
    tok = AutoTokenizer.from_pretrained(p, local_files_only=True)
    with torch.random.fork_rng(devices=[]):
        model = AutoModelForSequenceClassification.from_pretrained(p, local_files_only=True)
    return model.to(device).eval(), tok


def mask_word_span(text: str, span_len: int, rng: np.random.Generator) -> tuple[str, str]:
    """``(left, right)``: the words of ``text`` (split on single spaces) before and after a uniformly placed span
    of ``span_len`` words (the whole text when it has fewer words)."""
    words = text.split(" ")
    if len(words) <= span_len:
        return "", ""
    start = int(rng.integers(0, len(words) - span_len + 1))
    return " ".join(words[:start]), " ".join(words[start + span_len:])


def extract_fill(decoded: str, special: list[str] | tuple[str, ...] = ()) -> str:
    """The text a T5 output puts in place of ``<extra_id_0>``: what follows that sentinel up to the next one,
    without special tokens (``special``: e.g. the tokenizer's pad and eos strings)."""
    s = decoded
    if SENTINEL in s:
        s = s.split(SENTINEL, 1)[1]
    s = s.split("<extra_id_", 1)[0]
    for t in special:
        if t:
            s = s.replace(t, "")
    return " ".join(s.split())


@torch.no_grad()
def infill(model: Any, tokenizer: Any, lefts: list[str], rights: list[str], seed: int = 0,
           **sampling: Any) -> list[str]:
    """Sample a fill for ``left <extra_id_0> right`` per text.

    Args:
        model, tokenizer: a seq2seq infiller (:func:`load_infiller`).
        lefts, rights: the text around each masked span (:func:`mask_word_span`).
        seed: seeds the sampling (the global RNG is restored afterwards).
        sampling: overrides of :data:`INFILL_SAMPLING`.

    Returns:
        One fill (plain text, possibly empty) per text.
    """
    inputs = [" ".join(x for x in (left, SENTINEL, right) if x) for left, right in zip(lefts, rights)]
    enc = tokenizer(inputs, return_tensors="pt", padding=True, truncation=True).to(model.device)
    kw = {**INFILL_SAMPLING, **sampling}
    with torch.random.fork_rng(devices=[] if model.device.type == "cpu" else [model.device]):
        torch.manual_seed(seed)
        out = model.generate(**enc, **kw)
    special = [tokenizer.pad_token, tokenizer.eos_token]
    return [extract_fill(t, special) for t in tokenizer.batch_decode(out, skip_special_tokens=False)]


@torch.no_grad()
def reward_scores(model: Any, tokenizer: Any, prompts: list[str], responses: list[str],
                  batch_size: int = 16) -> np.ndarray:
    """``[n]`` reward of each (prompt, response) pair: the first logit of a sequence-classification reward model
    (higher is better)."""
    out = []
    for s in range(0, len(prompts), batch_size):
        enc = tokenizer(prompts[s: s + batch_size], responses[s: s + batch_size], return_tensors="pt",
                        padding=True, truncation=True).to(model.device)
        out.append(model(**enc).logits[:, 0].float().cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0)
