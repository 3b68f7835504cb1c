"""Shared pieces of the syntax family's real-model experiments (``induction-heads-lm``, ``ioi-circuit-lm``): the
``model`` field (a zoo name, a local HF directory, a ``.gguf`` file, or :data:`TINY` for the smoke preset), one
loaded model per process, tokenisation, and the per-seed prompt sample.

The model is fixed (nothing is trained): a "seed" of these experiments is an independent prompt sample, drawn
with ``derive_seed(cfg.seed, "sample", point.seed_index)`` so the real and the null arm of one seed index see the
same prompts.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from lmsci.errors import ConfigError
from lmsci.runs import derive_seed

#: the smoke preset's model: a 2-layer Llama with random weights built from a config (no file read)
TINY = "tiny-random-llama"
#: words of the tiny model's word-level tokenizer besides the IOI world's names, places and objects
_TINY_EXTRA = ("<unk>", "<s>")

_MODELS: dict[tuple[str, str], Any] = {}


def check_model(value: str, field: str = "model") -> None:
    """Refuse a bad ``model`` value before any work (:func:`lmsci.models.zoo.check_model_source`; reads no weights).

    Raises:
        ConfigError: naming ``field``, the value and the allowed values (zoo names, a local HF directory, a
            ``.gguf`` file, or ``tiny-random-llama``).
    """
    if value == TINY:
        return
    from lmsci.models.zoo import check_model_source

    try:
        check_model_source(value, field)
    except ConfigError as err:
        raise ConfigError(field, value, f"{err.allowed}; or {TINY!r} (a tiny random Llama, for tests)") from err


class WordTokenizer:
    """A word-level tokenizer for the tiny model: words and the punctuation ``, .`` are tokens (id 0 unknown)."""

    def __init__(self, words: list[str]):
        self.vocab = {w: i for i, w in enumerate(dict.fromkeys(list(_TINY_EXTRA) + list(words)))}

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [self.vocab.get(w, 0) for w in re.findall(r"[\w']+|[.,]", text)]

    def __len__(self) -> int:
        return len(self.vocab)


def _tiny(device: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    from lmsci.models.hf import HFModel
    from lmsci.worlds.ioi import BABA_TEMPLATES, NAMES, OBJECTS, PLACES

    words = [w for t in BABA_TEMPLATES for w in re.findall(r"[\w']+|[.,]", t.replace("{", "").replace("}", ""))]
    tok = WordTokenizer(words + list(NAMES) + list(PLACES) + list(OBJECTS))
    cfg = LlamaConfig(vocab_size=256, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=3,
                      num_key_value_heads=1, max_position_embeddings=512, tie_word_embeddings=True,
                      attn_implementation="eager")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        m = LlamaForCausalLM(cfg).eval()
    hf = HFModel(m.to(device), tok, TINY)
    hf.provenance = {"source": TINY, "kind": "random", "deviation": "random weights (tests only)"}
    return hf


def load_lm(value: str, device: str):
    """The model named by ``value`` on ``device`` (an :class:`lmsci.models.hf.HFModel` with ``.tokenizer`` and
    ``.provenance``), loaded once per process and device (eager attention, float32, eval mode).

    Raises:
        ConfigError: as :func:`check_model`.
    """
    key = (value, str(device))
    if key not in _MODELS:
        check_model(value)
        if value == TINY:
            _MODELS[key] = _tiny(device)
        else:
            from lmsci.models.zoo import load_cached

            _MODELS[key] = load_cached(value, device=device)
        for p in _MODELS[key].parameters():
            p.requires_grad_(False)
    return _MODELS[key]


def encode(tok: Any, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens."""
    return list(tok.encode(text, add_special_tokens=False))


def vocab_size(model: Any) -> int:
    """The model's vocabulary size (rows of the input embedding)."""
    return int(model.model.get_input_embeddings().weight.shape[0])


def sample_seed(cfg: Any, point: Any, *keys: Any) -> int:
    """The seed of a point's prompt sample: the same for every arm of one seed index (see the module doc)."""
    return derive_seed(cfg.seed, "sample", point.seed_index, *keys)


def heads_str(heads: list[tuple[int, int]]) -> str:
    """``"l.h l.h ..."`` for a results column."""
    return " ".join(f"{l}.{h}" for l, h in heads)


def parse_heads(s: str) -> list[tuple[int, int]]:
    """The inverse of :func:`heads_str`."""
    return [(int(a), int(b)) for a, b in (x.split(".") for x in str(s).split())] if isinstance(s, str) and s else []


def random_heads(n_layers: int, n_heads: int, k: int, exclude: list[tuple[int, int]], gen: torch.Generator
                 ) -> list[tuple[int, int]]:
    """``k`` heads drawn uniformly without replacement from all ``(layer, head)`` pairs not in ``exclude``.

    Raises:
        ConfigError: fewer than ``k`` heads remain.
    """
    pool = [(l, h) for l in range(n_layers) for h in range(n_heads) if (l, h) not in set(exclude)]
    if len(pool) < k:
        raise ConfigError("k", k, f"at most {len(pool)} (heads left after excluding {len(exclude)})")
    idx = torch.randperm(len(pool), generator=gen)[:k].tolist()
    return sorted(pool[i] for i in idx)


def _fmt(v: Any, ci: Any = None) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "n/a"
    s = f"{v:.4g}"
    if ci is not None and len(ci) == 2 and all(c is not None for c in ci):
        s += f" [{ci[0]:.4g}, {ci[1]:.4g}]"
    return s


def toy_comparison(verdicts: list, toy: str, pairs: dict[str, tuple[str, str]]) -> str:
    """A markdown table of this run's claims beside the toy experiment's published quick rows
    (``results/quick/claims.csv`` of the repository, read as data), with where the outcomes disagree.

    Args:
        verdicts: this run's verdicts.
        toy: the toy experiment's name (``induction-heads``, ``ioi-circuit``).
        pairs: our claim id -> (the toy's claim id or "", what differs between the two statistics).
    """
    path = Path(__file__).resolve().parents[4] / "results" / "quick" / "claims.csv"
    lines = [f"## Beside the toy experiment `{toy}`", ""]
    if not path.is_file():
        return "\n".join(lines + [f"(the published quick table {path} is not in this installation)", ""])
    rows = pd.read_csv(path)
    rows = rows[rows["experiment"] == toy].set_index("claim")
    lines += [f"The toy's rows are its published quick values (`results/quick/claims.csv`, master seeds "
              f"{', '.join(sorted(set(str(x) for x in rows.get('master_seeds', pd.Series(dtype=str)))))}); "
              "this run's values are the real model's.", "",
              "| claim (real model) | value [95% CI] | null arm | outcome | toy claim | toy value | toy null | "
              "toy outcome | agree? | what differs |", "|---|---|---|---|---|---|---|---|---|---|"]
    for v in verdicts:
        toy_id, differs = pairs.get(v.claim_id, ("", ""))
        t = rows.loc[toy_id] if toy_id and toy_id in rows.index else None
        agree = "-" if t is None else ("yes" if t["outcome"] == v.outcome else "**no**")
        lines.append(f"| {v.claim_id} | {_fmt(v.value, v.ci)} | {_fmt(v.null_value)} | {v.outcome} | "
                     f"{toy_id or '-'} | {t['ours'] if t is not None else '-'} | "
                     f"{t['null_arm'] if t is not None else '-'} | {t['outcome'] if t is not None else '-'} | "
                     f"{agree} | {differs} |")
    return "\n".join(lines) + "\n"
