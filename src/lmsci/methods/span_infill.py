"""Text-level perturbation and quality oracles of the random-walk watermark attack at the paper's scale.

Source: Zhang, Edelman, Francati, Venturi, Ateniese, Barak, "Watermarks in the Sand", ICML 2024, arXiv 2311.04378,
Algorithm 1 and its camera-ready code (hlzhang109/impossibility-watermark 66ff44b, ``text/evaluation/tools/``:
``RandomWalkAttack.mask_text / perturb / correct_text`` and ``QualityOracle.query_rm_once_deberta``; spec
``impossibility_and_theory.md`` §1b): the perturbation oracle masks one span of ``span_len = 6`` words and lets a T5
model (``google/t5-v1_1-xl``) fill it given the prompt and the masked text, sampling with ``top_p 0.8, top_k 40,
repetition_penalty 1.3, temperature 1.5``, 6-12 new tokens; the quality oracle is a reward model
(``OpenAssistant/reward-model-deberta-v3-large-v2``) scoring ``'###Human: ' + prompt + '###Assistant: ' + response``,
and a proposal is kept when its reward is not below the original text's.

* :func:`load_infiller` / :func:`load_reward_model` -- a user's local T5-style seq2seq model or sequence-scoring
  reward model with its tokenizer (``ConfigError`` for anything but an existing directory: lmsci never downloads).
* :func:`mask_word_span` -- split a text around a random span of words (the official span starts).
* :func:`infill` -- the T5 fill of ``<extra_id_0>`` for a batch of (prompt, masked text) inputs.
* :func:`correct_text` -- the official whitespace and punctuation clean-up of a proposal.
* :func:`reward_scores` -- the reward model's score of each prompt and response in the official chat format.

Deliberate difference (pinned in ``tests/parity/test_watermark_removal_parity.py``): on texts of at most
``span_len + 1`` words the official ``mask_text`` raises ``ValueError`` (or, on one word, inserts a span after it);
lmsci masks the whole text (``<= span_len`` words) or draws a start in {0, 1} (``span_len + 1`` words) and never
raises.

The token-level oracle lmsci uses at CPU scale (resampling a span from a causal LM with a Metropolis-Hastings
acceptance) lives in :mod:`lmsci.experiments.watermark.watermark_removal`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lmsci.errors import ConfigError
from lmsci.models.hf import local_model_dir

SENTINEL, SENTINEL_END = "<extra_id_0>", "<extra_id_1>"
#: any T5 sentinel token (``<extra_id_N>``)
SENTINEL_RE = re.compile(r"<extra_id_\d+>")
#: the official DeBERTa reward model's text: ``HUMAN + prompt + ASSISTANT + response``
HUMAN, ASSISTANT = "###Human: ", "###Assistant: "
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
    """``(model, tokenizer)`` of a local reward model (``AutoModelForSequenceClassification`` scoring one text,
    e.g. DeBERTa-v3-large; see :func:`reward_scores`) in eval mode on ``device``.

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
    """``(left, right)``: the words of ``text`` before and after a span of ``span_len`` words.

    Words as in the official ``mask_text``: ``text`` with each newline preceded by a space, split on single spaces
    (so ``n`` words). For ``n >= span_len + 2`` the start is uniform on ``1 .. n - span_len - 1`` (the official
    ``np.random.randint(1, n - span_len)``: never the first word, never the last span), drawn as
    ``rng.integers(1, n - span_len)``. Deliberate differences where the official code raises ``ValueError`` (or, on
    one word, inserts a span after it): ``n <= span_len`` masks the whole text (``("", "")``, no draw);
    ``n = span_len + 1`` draws the start from {0, 1} (``rng.integers(0, 2)``).
    """
    words = text.replace("\n", " \n").split(" ")
    n = len(words)
    if n <= span_len:
        return "", ""
    start = int(rng.integers(1, n - span_len)) if n >= span_len + 2 else int(rng.integers(0, 2))
    return " ".join(words[:start]), " ".join(words[start + span_len:])


def extract_fill(decoded: str, special: list[str] | tuple[str, ...] = ()) -> str:
    """The text a T5 output puts in place of ``<extra_id_0>``, as the official ``perturb``: every non-special token
    of the output (the official decodes it with ``skip_special_tokens=True``), so the fills of further sentinels
    (the text after ``<extra_id_1>``) are kept too; the sentinels ``<extra_id_N>`` and the strings in ``special``
    (e.g. the tokenizer's pad and eos) are dropped and whitespace is collapsed to single spaces."""
    s = SENTINEL_RE.sub(" ", decoded)
    for t in special:
        if t:
            s = s.replace(t, " ")
    return " ".join(s.split())


def correct_text(text: str) -> str:
    """The official ``RandomWalkAttack.correct_text``: whitespace runs (newlines included) become one space, spaces
    before ``, . ; ! ?`` are removed and runs of ``.``, ``,``, ``!``, ``?``, ``:``, ``;`` become one mark. (The
    official Gramformer correction before it is not run: lmsci has no grammar corrector.)"""
    s = re.sub(r"\s+", " ", text)
    s = re.sub(r"\s+([,.;!?])", r"\1", s)
    for mark in (r"\.", ",", "!", r"\?", ":", ";"):
        s = re.sub(f"({mark}){{2,}}", mark.replace("\\", ""), s)
    return s


@torch.no_grad()
def infill(model: Any, tokenizer: Any, lefts: list[str], rights: list[str], seed: int = 0,
           prompts: list[str] | None = None, **sampling: Any) -> list[str]:
    """Sample a fill for ``prompt left <extra_id_0> right`` per text.

    The infiller's input is the official ``perturb``'s: ``prompt + " " + masked text`` with the masked text
    ``left + " <extra_id_0> " + right`` (empty pieces, e.g. of a text masked whole, are left out with their space).

    Args:
        model, tokenizer: a seq2seq infiller (:func:`load_infiller`).
        lefts, rights: the text around each masked span (:func:`mask_word_span`).
        seed: seeds the sampling (the global RNG is restored afterwards).
        prompts: the prompt each text answers (one per text; ``None``: no prompt).
        sampling: overrides of :data:`INFILL_SAMPLING`.

    Returns:
        One fill (plain text, possibly empty) per text (:func:`extract_fill`).

    Raises:
        ValueError: ``prompts``, ``lefts`` and ``rights`` of different lengths (checked before the model runs).
    """
    if prompts is None:
        prompts = [""] * len(lefts)
    if not len(prompts) == len(lefts) == len(rights):
        raise ValueError(f"prompts, lefts, rights must be equally long: {len(prompts)}, {len(lefts)}, {len(rights)}")
    inputs = [" ".join(x for x in (p, left, SENTINEL, right) if x) for p, left, right in zip(prompts, lefts, rights)]
    enc = tokenizer(inputs, return_tensors="pt", padding=True, truncation=True).to(model.device)
    kw = {**INFILL_SAMPLING, **sampling}
    with torch.random.fork_rng(devices=[] if model.device.type == "cpu" else [model.device]):
        torch.manual_seed(seed)
        out = model.generate(**enc, **kw)
    # decoded without special tokens as the official; sentinels a tokenizer does not mark special are dropped too
    return [extract_fill(t) for t in tokenizer.batch_decode(out, skip_special_tokens=True)]


def reward_text(prompt: str, response: str) -> str:
    """The text the official DeBERTa quality oracle scores: ``'###Human: ' + prompt + '###Assistant: ' +
    response``."""
    return HUMAN + prompt + ASSISTANT + response


@torch.no_grad()
def reward_scores(model: Any, tokenizer: Any, prompts: list[str], responses: list[str],
                  batch_size: int = 16) -> np.ndarray:
    """``[n]`` reward of each response to its prompt: the first logit of a sequence-classification reward model
    (higher is better) on the single text :func:`reward_text` (the official ``query_rm_once_deberta``; batched
    with padding, and cut at the tokenizer's maximum length where the official would pass it whole).

    Raises:
        ValueError: ``prompts`` and ``responses`` of different lengths (before the model runs).
    """
    if len(prompts) != len(responses):
        raise ValueError(f"prompts and responses must be equally long: {len(prompts)}, {len(responses)}")
    texts = [reward_text(p, r) for p, r in zip(prompts, responses)]
    out = []
    for s in range(0, len(texts), batch_size):
        enc = tokenizer(texts[s: s + batch_size], return_tensors="pt", padding=True, truncation=True).to(model.device)
        out.append(model(**enc).logits[:, 0].float().cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0)
