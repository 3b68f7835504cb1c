"""The model and the fact prompts of :mod:`lmsci.experiments.knowledge.causal_tracing_lm`.

* :func:`get_model` loads a pretrained causal LM by zoo name, local Hugging Face directory or ``.gguf`` file
  (:func:`lmsci.models.zoo.load_model`, once per process and device), or builds :data:`TINY`, a tiny random
  Llama (``transformers.LlamaForCausalLM`` from a config) with a word-level tokenizer over the fact set's words,
  so that the tests run the whole pipeline in seconds.
* :func:`encode_fact` turns a fact's prompt into token ids with the subject's token range (the tokens whose
  character offsets overlap the subject, as ROME's ``find_token_range``) and the object's token ids.
* :func:`known_facts` keeps the facts whose greedy next token after the prompt is the object's first token
  (the knowledge gate: Meng et al. 2022, arXiv 2202.05262, Section 2.1 traced only facts GPT-2 XL predicts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from lmsci.errors import ConfigError
from lmsci.measure.causal_tracing import last_logits
from lmsci.worlds.facts import Fact, FactSet

TINY = "tiny-llama"
"""The special model name of the smoke preset: a 4-layer d_model 32 random Llama (GQA: 4 query, 2 key-value
heads) with a word-level tokenizer; it knows no fact."""

_MODELS: dict[tuple[str, str], Any] = {}
_KNOWN: dict[tuple, list[bool]] = {}


def check_model_name(value: str, field: str = "model") -> None:
    """Refuse a model value before any work: :data:`TINY`, a zoo name, a local HF directory or a ``.gguf`` file.

    Raises:
        ConfigError: naming ``field``, the value and the allowed values (:func:`lmsci.models.zoo.check_model_source`).
    """
    if value == TINY:
        return
    from lmsci.models.zoo import check_model_source

    check_model_source(value, field)


def _tiny_tokenizer(facts: FactSet) -> Any:
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    pre = pre_tokenizers.Whitespace()
    words: set[str] = set()
    texts = [t for r in facts.relations.values() for t in (r.template, *r.paraphrases)]
    texts += [w for f in facts.facts for w in (f.subject, f.object)] + ["is a ."]
    for t in texts:
        words.update(w for w, _ in pre.pre_tokenize_str(t.replace("{}", " ")))
    vocab = {w: i for i, w in enumerate(["<unk>", "<|endoftext|>", *sorted(words)])}
    tk = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre
    return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token="<|endoftext|>")


def _tiny_model(facts: FactSet, device: str) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    from lmsci.models.hf import HFModel

    tok = _tiny_tokenizer(facts)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    cfg._attn_implementation = "eager"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg)
    return HFModel(model.to(device).eval(), tok, TINY)


def get_model(name: str, facts: FactSet, device: str) -> Any:
    """The :class:`~lmsci.models.hf.HFModel` for ``name`` on ``device`` (cached per process: every point of a run
    shares one copy; the model is never changed for long: ROME edits are reverted on exit).

    Raises:
        ConfigError: as :func:`check_model_name`; a model without a tokenizer.
    """
    key = (name, str(device))
    if key not in _MODELS:
        check_model_name(name)
        if name == TINY:
            _MODELS[key] = _tiny_model(facts, device)
        else:
            from lmsci.models.zoo import load_cached

            m = load_cached(name, device, field="model")
            if m.tokenizer is None:
                raise ConfigError("model", name, "a causal LM with a tokenizer (none found beside the weights)")
            _MODELS[key] = m
    return _MODELS[key]


def prefix_ids(tok: Any, prefix: str) -> list[int]:
    """``[id]`` of the one-token string ``prefix`` prepended to every prompt (``[]`` for ``""``).

    Raises:
        ConfigError: ``prefix`` is not one token of the tokenizer's vocabulary.
    """
    if not prefix:
        return []
    tid = tok.convert_tokens_to_ids(prefix)
    if tid is None or tok.convert_ids_to_tokens(int(tid)) != prefix:
        raise ConfigError("prefix", prefix, "one token of the model's vocabulary (e.g. '<|endoftext|>'), or '' for none")
    return [int(tid)]


@dataclass
class FactPrompt:
    """A fact's prompt as tokens: ``ids`` (prefix included), ``subject`` ``(s, e)`` token range, ``object`` ids."""

    fact: Fact
    ids: list[int]
    subject: tuple[int, int]
    object: list[int]
    text: str


def encode_fact(tok: Any, facts: FactSet, fact: Fact, prefix: list[int], paraphrase: int | None = None,
                obj: str | None = None, context: str = "", template: str | None = None) -> FactPrompt:
    """Tokenise ``fact``'s prompt (its template, a paraphrase, or ``template`` with ``{}`` for the subject) after
    ``prefix`` and ``context`` (text before the prompt, joined by a space: ROME's prefixed rewriting prompts);
    the object (``obj`` or the fact's) is tokenised as it continues the prompt (after a space).

    Raises:
        ConfigError: the subject covers no token.
    """
    if template is not None:
        a = template.index("{}")
        text, (a, b) = template.replace("{}", fact.subject), (a, a + len(fact.subject))
    else:
        text, (a, b) = facts.prompt(fact, paraphrase)
    if context:
        text, a, b = f"{context} {text}", a + len(context) + 1, b + len(context) + 1
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offs = list(enc["input_ids"]), enc["offset_mapping"]
    sub = [i for i, (x, y) in enumerate(offs) if y > a and x < b]
    if not sub:
        raise ConfigError("subject", fact.subject, f"a subject covering tokens of {text!r}")
    full = list(tok(text + " " + (obj or fact.object), add_special_tokens=False)["input_ids"])
    o = full[len(ids):] if full[:len(ids)] == ids and len(full) > len(ids) else \
        list(tok(" " + (obj or fact.object), add_special_tokens=False)["input_ids"])
    n = len(prefix)
    return FactPrompt(fact, list(prefix) + ids, (sub[0] + n, sub[-1] + 1 + n), o, text)


def greedy_next(model: Any, prompts: list[list[int]], batch: int = 64) -> list[int]:
    """The greedy next token after each prompt (left-padded batches with an attention mask; ``[len(prompts)]``)."""
    dev = next(iter(model.parameters())).device
    out: list[int] = []
    with torch.no_grad():
        for i in range(0, len(prompts), batch):
            chunk = prompts[i:i + batch]
            T = max(len(p) for p in chunk)
            x = torch.zeros(len(chunk), T, dtype=torch.long)
            mask = torch.zeros(len(chunk), T, dtype=torch.long)
            for r, p in enumerate(chunk):
                x[r, T - len(p):] = torch.as_tensor(p)
                mask[r, T - len(p):] = 1
            if type(model).__name__ == "HFModel":
                pos = (mask.cumsum(1) - 1).clamp(min=0)
                logits = model(x.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev), logits_to_keep=1)[:, -1]
            else:
                logits = last_logits(model, x.to(dev))
            out.extend(int(t) for t in logits.argmax(-1))
    return out


def known_facts(model: Any, name: str, prompts: list[FactPrompt]) -> list[bool]:
    """Per prompt: the model's greedy next token is the object's first token (cached per model and prompts)."""
    key = (name, tuple(tuple(p.ids) for p in prompts), tuple(p.object[0] for p in prompts))
    if key not in _KNOWN:
        pred = greedy_next(model, [p.ids for p in prompts])
        _KNOWN[key] = [int(t) == int(p.object[0]) for t, p in zip(pred, prompts)]
    return _KNOWN[key]
