"""Passkey prompts and answers for ``passkey-lm`` (family-private): the model (a zoo model / HF directory / .gguf, or
the smoke preset's tiny random Llama), the prompts as token ids, and greedy answers under vanilla attention,
LM-Infinite and LM-Infinite with top-k middle tokens.

Source: Han et al., "LM-Infinite", NAACL 2024, arXiv 2308.16137, Sec. 5.3 / Table 2 and Appendix A (top-k middle
tokens); task format of Mohtashami & Jaggi, "Landmark Attention", arXiv 2305.16300 (Sec. 4.2 / Appendix: the intro
"There is an important info hidden inside a lot of irrelevant text. ...", the filler, the key sentence stated once,
the question).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from lmsci.errors import ConfigError

TINY = "tiny-llama"
INTRO = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
         "I will quiz you about the important information there.")
FILLER = " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
KEY_SENTENCE = " The pass key is {key}. Remember it. {key} is the pass key."
QUESTION = " What is the pass key? The pass key is"
_MODELS: dict[tuple, Any] = {}


def _tiny_model(device: Any, dtype: torch.dtype) -> Any:
    """A 4-layer random Llama (GQA: 4 query, 2 key-value heads, L = 4096) with a word-level tokenizer over the task's
    words and single digits (the smoke preset: it knows nothing, retrieves nothing)."""
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from lmsci.models.hf import HFModel

    pre = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)])
    words = {w for t in (INTRO, FILLER, KEY_SENTENCE.format(key="0123456789"), QUESTION)
             for w, _ in pre.pre_tokenize_str(t)}
    vocab = {w: i for i, w in enumerate(["<unk>", "<|endoftext|>", *sorted(words)])}
    tk = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token="<|endoftext|>")
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    cfg._attn_implementation = "sdpa"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg)
    return HFModel(model.to(device, dtype).eval(), tok, TINY)


def check_model(value: str, field: str = "model") -> None:
    """Refuse a model value before any work (:data:`TINY`, a zoo name, a local HF directory or a ``.gguf`` file).

    Raises:
        ConfigError: naming ``field`` and the allowed values."""
    if value == TINY:
        return
    from lmsci.models.zoo import check_model_source

    check_model_source(value, field=field)


def load(name: str, device: Any, dtype: str, threads: int) -> Any:
    """The :class:`~lmsci.models.hf.HFModel` (cached per process; SDPA attention for the vanilla arm).

    Raises:
        ConfigError: a model without a tokenizer."""
    from lmsci.runs import resolve_device

    dev = resolve_device(device)
    key = (name, dtype, str(dev))
    if key not in _MODELS:
        if threads:
            torch.set_num_threads(threads)
        dt = torch.bfloat16 if dtype == "bfloat16" else torch.float32
        if name == TINY:
            hf = _tiny_model(dev, dt)
        else:
            from lmsci.models.zoo import load_model

            hf = load_model(name, device=dev, dtype=dt, attn_implementation="sdpa")
        if getattr(hf, "tokenizer", None) is None:
            raise ConfigError("model", name, "a causal LM with a tokenizer (none found beside the weights)")
        _MODELS.clear()
        _MODELS[key] = hf
    return _MODELS[key]


def n_layers_of(model: Any) -> int:
    c = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return int(c.num_hidden_layers)


def train_length_of(model: Any) -> int:
    c = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return int(c.max_position_embeddings)


@dataclass
class Parts:
    """The prompt's pieces as token ids: ``head`` (chat head + intro), one ``filler`` unit, ``tail`` (the question
    and the chat tail); the key sentence is encoded per key by :meth:`key_ids`."""

    tok: Any
    head: list[int]
    filler: list[int]
    tail: list[int]

    def key_ids(self, key: str) -> list[int]:
        return _enc(self.tok, KEY_SENTENCE.format(key=key))


def _enc(tok: Any, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"])


def prompt_parts(tok: Any, prompt_format: str) -> Parts:
    """Token pieces of the prompt in ``prompt_format``: ``plain`` (the text as it is) or ``chat`` (the intro, filler,
    key and question as one user turn of the tokenizer's chat template; the assistant turn opens with "The pass key
    is").

    Raises:
        ConfigError: ``chat`` with a tokenizer that has no chat template."""
    head, tail = _enc(tok, INTRO), _enc(tok, QUESTION)
    if prompt_format == "chat":
        if not getattr(tok, "chat_template", None):
            raise ConfigError("prompt_format", "chat", "plain (this model's tokenizer has no chat template)")
        mark = "@@PASSKEY@@"
        text = tok.apply_chat_template([{"role": "user", "content": mark}], tokenize=False, add_generation_prompt=True)
        pre, post = text.split(mark)
        head = _enc(tok, pre) + head
        tail = _enc(tok, QUESTION.replace(" The pass key is", "")) + _enc(tok, post) + _enc(tok, "The pass key is")
    return Parts(tok, head, _enc(tok, FILLER), tail)


@dataclass
class Prompt:
    """One prompt: ``ids`` (exactly ``context`` tokens), the ``key`` (a digit string), ``distance`` = tokens from the
    key sentence's first token to the end of the prompt, ``key_len`` = the key sentence's tokens."""

    ids: list[int]
    key: str
    distance: int
    key_len: int


def make_prompt(parts: Parts, context: int, n_digits: int, inside: bool, n_local: int, rng: np.random.Generator,
                margin: int = 16) -> Prompt:
    """A prompt of exactly ``context`` tokens with a random ``n_digits`` key (first digit non-zero).

    The filler after the key sentence is ``u`` whole filler units; before it, the head and the end of a filler
    repetition (filling to ``context``). ``inside=False``: the whole key sentence lies more than ``n_local +
    margin`` tokens before the prompt's end (beyond LM-Infinite's window; ``u`` uniform over what fits);
    ``inside=True``: its first token lies within the last ``n_local - margin`` tokens.

    Raises:
        ConfigError: the context leaves no room for the placement."""
    key = str(rng.integers(1, 10)) + "".join(str(d) for d in rng.integers(0, 10, n_digits - 1))
    kid = parts.key_ids(key)
    U, after0 = len(parts.filler), len(kid) + len(parts.tail)
    room = context - len(parts.head) - after0  # filler tokens in all
    if inside:
        lo, hi = 0, (n_local - margin - after0) // U
    else:
        lo, hi = -(-(n_local + margin + len(kid) - after0) // U) + 1, (room - U) // U
    if hi < lo or room < U:
        raise ConfigError("context", context, f"room for a key {'inside' if inside else 'beyond'} the window "
                                              f"n_local={n_local} (a longer context or a smaller n_local)")
    u = int(rng.integers(lo, hi + 1))
    before_n = room - u * U
    reps = -(-before_n // U) + 1
    before = (parts.filler * reps)[len(parts.filler) * reps - before_n:]
    ids = parts.head + before + kid + parts.filler * u + parts.tail
    assert len(ids) == context
    return Prompt(ids, key, after0 + u * U, len(kid))


def read_key(text: str) -> str:
    """The first run of digits in the decoded answer ('' when none)."""
    m = re.search(r"\d+", text)
    return m.group(0) if m else ""


@torch.no_grad()
def vanilla_answers(model: Any, ids: torch.Tensor, n_new: int) -> torch.Tensor:
    """Greedy ``[batch, n_new]`` continuation of ``ids [batch, n]`` under the model's own attention (its KV cache)."""
    out = model(input_ids=ids, use_cache=True)
    past, nxt, got = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True), []
    for i in range(n_new):
        got.append(nxt)
        if i + 1 < n_new:
            out = model(input_ids=nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
    return torch.cat(got, dim=1)


@torch.no_grad()
def streamed_answers(model: Any, ids: torch.Tensor, n_new: int, policies: dict[str, Any],
                     prefix_policy: Any) -> dict[str, torch.Tensor]:
    """Greedy ``[batch, n_new]`` continuations of ``ids [batch, n]`` under each LM-Infinite policy, decoded through
    one streaming session of the blockwise harness (:class:`~lmsci.models.attention_harness.AttentionPatch`).

    The first ``n - 1`` tokens are fed once under ``prefix_policy`` (LM-Infinite whose top-k starts past the last
    layer: every row sees exactly what LM-Infinite without top-k shows it, and the cache keeps every key); then, per
    policy, the cached keys are restored, the last prompt token is fed and the answer decoded token by token. Top-k
    acts only on the last row of each call (the harness), so this equals feeding the whole prompt under each policy
    (tests/experiments/length/test_passkey_lm.py checks it); without top-k the Lambda mask ignores the extra cached
    keys."""
    from lmsci.models.attention_harness import AttentionPatch

    patch = AttentionPatch(model, prefix_policy)
    res: dict[str, torch.Tensor] = {}
    with patch, patch.stream() as s:
        s.feed(ids[:, :-1])
        saved, off = dict(s.caches), s.offset
        for name, pol in policies.items():
            s.caches, s.offset = dict(saved), off
            patch.policy = pol
            logits, got = s.feed(ids[:, -1:]), []
            for i in range(n_new):
                nxt = logits[:, -1].argmax(-1, keepdim=True)
                got.append(nxt)
                if i + 1 < n_new:
                    logits = s.feed(nxt)
            res[name] = torch.cat(got, dim=1)
        patch.policy = prefix_policy
    return res
