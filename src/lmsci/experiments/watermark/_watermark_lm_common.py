"""What ``watermark-lm`` and ``watermark-removal-lm`` share: the KGW watermark and generation settings of a real
pretrained LM (:class:`KGWLMConfig`) and their Shakespeare prompts (:func:`sample_prompts`), so that the two
experiments watermark the same kind of text the same way.

Source: Kirchenbauer et al., "A Watermark for Large Language Models", ICML 2023, arXiv 2301.10226 (sec. 3-4: green
list fraction gamma, green logit bias delta, the hashing key; multinomial sampling at temperature 0.7).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from pydantic import Field

from lmsci.config import ExperimentConfig


class KGWLMConfig(ExperimentConfig):
    """The generator, its KGW watermark and the sampled texts (field defaults = ``watermark-lm``'s quick preset)."""

    model: str = Field("smollm2-135m", description="the generator: a zoo name (lmsci models), a local Hugging Face "
                                                   "directory or a .gguf file (watermark-removal-lm: or tiny-llama, "
                                                   "tests)")
    gamma: float = Field(0.25, gt=0, lt=1, description="green-list fraction")
    delta: float = Field(2.0, gt=0, description="green logit bias (of the watermarked texts)")
    scheme: str = Field("lefthash", description="seeding scheme: lefthash (h = 1) or selfhash (h = 4)")
    key: int = Field(15485863, description="hashing key (the paper's)")
    T: int = Field(200, ge=8, description="generated tokens per text")
    n_texts: int = Field(24, ge=2, description="texts per prompt sample (per seed and arm)")
    prompt_len: int = Field(32, ge=1, description="prompt tokens")
    temperature: float = Field(0.7, gt=0, description="sampling temperature (the paper's multinomial 0.7)")
    gen_batch: int = Field(24, ge=1, description="texts generated at once")
    n_seeds: int = Field(3, ge=1, le=100, description="independent prompt samples")
    threads: int = Field(1, ge=0)


def sample_prompts(hf: Any, n: int, prompt_len: int, seed: int) -> torch.Tensor:
    """``[n, prompt_len]`` long prompts: windows of the Shakespeare corpus (the ``shakespeare`` package) in the
    model's tokenizer, the first (probably cut) token dropped; random token ids in ``[0, vocab_size)`` when the model
    has no tokenizer. Deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    tok = getattr(hf, "tokenizer", None)
    if tok is None:
        return torch.as_tensor(rng.integers(0, hf.model.config.vocab_size, (n, prompt_len)), dtype=torch.long)
    from lmsci.worlds.shakespeare import load_works

    works = load_works()
    out: list[list[int]] = []
    while len(out) < n:
        w = works[int(rng.integers(len(works)))]
        start = int(rng.integers(0, max(1, len(w.text) - 8 * prompt_len)))
        ids = tok(w.text[start: start + 8 * prompt_len], add_special_tokens=False)["input_ids"]
        if len(ids) > prompt_len + 1:
            out.append(ids[1: prompt_len + 1])  # drop the first, probably cut, token
    return torch.as_tensor(out, dtype=torch.long)
