"""The KGW soft watermark through ``transformers``' own implementation (thin wrappers, no re-implementation).

Source: Kirchenbauer, Geiping, Wen, Katz, Miers, Goldstein, "A Watermark for Large Language Models", ICML 2023,
arXiv 2301.10226 (Alg. 2, the z-test of sec. 3, Theorem 4.2); the self-hash scheme of the reliability
follow-up, arXiv 2306.04634. ``transformers.generation``: :class:`~transformers.WatermarkingConfig`,
:class:`~transformers.generation.logits_process.WatermarkLogitsProcessor` (applied by ``generate``) and
:class:`~transformers.WatermarkDetector`.

* :func:`watermarking_config` -- validated ``WatermarkingConfig`` (gamma = ``greenlist_ratio``, delta =
  ``bias``; ``lefthash`` uses ``h = context_width = 1``, ``selfhash`` the recommended ``h = 4``).
* :func:`generate` -- ``T`` new tokens per prompt from a Hugging Face causal LM, with or without the watermark.
* :func:`detect` -- z-scores and green counts from ``WatermarkDetector`` on the generated tokens only.
* :func:`spike_entropy` and :func:`thm42_green_bound` -- Theorem 4.2's per-step spike entropy
  ``S(p, z) = sum_k p_k / (1 + z p_k)`` with ``z = (1 - gamma)(e^delta - 1) / (1 + (e^delta - 1) gamma)`` and
  the lower bound ``E|s|_G >= gamma e^delta sum_t S_t / (1 + (e^delta - 1) gamma)``.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch

from lmsci.errors import ConfigError

SCHEMES = {"lefthash": 1, "selfhash": 4}  # scheme -> context width h


def watermarking_config(gamma: float, delta: float, scheme: str = "lefthash", key: int = 15485863,
                        context_width: int | None = None):
    """A ``transformers.WatermarkingConfig`` for the KGW soft watermark.

    Args:
        gamma: green-list fraction, in (0, 1).
        delta: logit bias of green tokens, >= 0.
        scheme: ``"lefthash"`` (Alg. 2, h = 1) or ``"selfhash"`` (Alg. 3, h = 4 by default).
        key: the hashing key (the paper's 15485863).
        context_width: override h.

    Raises:
        ConfigError: gamma outside (0, 1), a negative delta, or a scheme transformers does not know.
    """
    from transformers import WatermarkingConfig

    if not 0 < gamma < 1:
        raise ConfigError("gamma", gamma, "in (0, 1)")
    if not delta >= 0:
        raise ConfigError("delta", delta, ">= 0")
    if scheme not in SCHEMES:
        raise ConfigError("scheme", scheme, f"one of {sorted(SCHEMES)} (the seeding schemes transformers implements)")
    return WatermarkingConfig(greenlist_ratio=gamma, bias=delta, hashing_key=key, seeding_scheme=scheme,
                              context_width=context_width or SCHEMES[scheme])


@torch.no_grad()
def generate(hf_model: Any, prompts: torch.Tensor, T: int, wm_config: Any = None, temperature: float = 0.7,
             seed: int = 0, batch_size: int = 50) -> torch.Tensor:
    """``[n, T]`` new tokens sampled (multinomial at ``temperature``) after each prompt row (``[n, P]`` long).

    With ``wm_config`` (a ``WatermarkingConfig``) ``generate`` applies transformers' ``WatermarkLogitsProcessor``.
    Exactly ``T`` tokens are generated (no end-of-sequence).
    """
    out = []
    torch_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        for s in range(0, len(prompts), batch_size):
            x = prompts[s: s + batch_size]
            kw: dict[str, Any] = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                                      max_new_tokens=T, min_new_tokens=T, pad_token_id=0,
                                      attention_mask=torch.ones_like(x))
            if wm_config is not None:
                kw["watermarking_config"] = wm_config
            y = hf_model.generate(x, **kw)
            out.append(y[:, x.shape[1]:])
    finally:
        torch.random.set_rng_state(torch_state)
    return torch.cat(out)


def detector(hf_model: Any, wm_config: Any, device: str, ignore_repeated_ngrams: bool = True):
    """A ``transformers.WatermarkDetector`` for ``hf_model``'s vocabulary (the model config gets a BOS id outside
    the vocabulary, so no generated token is taken for a BOS)."""
    from transformers import WatermarkDetector

    cfg = copy.deepcopy(hf_model.config)
    cfg.bos_token_id = -1
    return WatermarkDetector(model_config=cfg, device=device, watermarking_config=wm_config,
                             ignore_repeated_ngrams=ignore_repeated_ngrams)


def detect(det: Any, tokens: torch.Tensor, z_threshold: float = 4.0) -> dict[str, np.ndarray]:
    """KGW watermark detection (Kirchenbauer et al. 2023, arXiv 2301.10226, Sec. 3, the one-proportion z-test)
    by ``transformers.WatermarkDetector`` (:func:`detector`) on generated tokens ``[n, T]``.

    Returns:
        arrays ``[n]``: ``"z"`` the z-score, ``"green"`` green tokens counted, ``"scored"`` tokens scored,
        ``"p"`` the one-sided p-value, ``"flag"`` whether ``z > z_threshold``.

    Raises:
        ValueError (from ``transformers``): tokens of the wrong shape or outside the detector's vocabulary."""
    o = det(tokens, z_threshold=z_threshold, return_dict=True)
    return {"z": np.asarray(o.z_score, float), "green": np.asarray(o.num_green_tokens, float),
            "scored": np.asarray(o.num_tokens_scored, float), "p": np.asarray(o.p_value, float),
            "flag": np.asarray(o.prediction, bool)}


def spike_modulus(gamma: float, delta: float) -> float:
    """``z* = (1 - gamma)(alpha - 1) / (1 + (alpha - 1) gamma)`` with ``alpha = e^delta`` (Theorem 4.2)."""
    a = math.exp(delta)
    return (1 - gamma) * (a - 1) / (1 + (a - 1) * gamma)


def spike_entropy(probs: torch.Tensor, z: float) -> torch.Tensor:
    """``S(p, z) = sum_k p_k / (1 + z p_k)`` over the last axis of ``probs`` (``[..., V]`` -> ``[...]``)."""
    return (probs / (1 + z * probs)).sum(-1)


def thm42_green_bound(spike: torch.Tensor | np.ndarray, gamma: float, delta: float) -> np.ndarray:
    """Theorem 4.2's lower bound on the expected green count of a text from its per-step spike entropies
    (``[n, T']`` -> ``[n]``): ``gamma alpha sum_t S_t / (1 + (alpha - 1) gamma)``."""
    a = math.exp(delta)
    s = np.asarray(spike, float).sum(-1)
    return gamma * a * s / (1 + (a - 1) * gamma)


@torch.no_grad()
def step_distributions_spike(hf_model: Any, prompts: torch.Tensor, gen: torch.Tensor, gamma: float, delta: float,
                             temperature: float = 0.7, batch_size: int = 50) -> torch.Tensor:
    """Spike entropy (Theorem 4.2) of the model's own next-token distribution (at ``temperature``, before the
    watermark bias) at each generated position: ``[n, T]``."""
    z = spike_modulus(gamma, delta)
    out = []
    P = prompts.shape[1]
    for s in range(0, len(prompts), batch_size):
        x = torch.cat([prompts[s: s + batch_size], gen[s: s + batch_size]], 1)
        logits = hf_model(x).logits[:, P - 1: -1].float() / temperature
        out.append(spike_entropy(torch.softmax(logits, -1), z))
    return torch.cat(out)


@torch.no_grad()
def top_k_mass(hf_model: Any, prompts: torch.Tensor, gen: torch.Tensor, k: int = 40, temperature: float = 0.7,
               batch_size: int = 50) -> torch.Tensor:
    """``[n, T]`` probability mass of the ``k`` most likely next tokens (at ``temperature``) at each generated
    position. transformers' self-hash processor only tests the top 40 candidates for self-greenness
    (``_score_rejection_sampling``), so this mass caps how much the bias can move."""
    out = []
    P = prompts.shape[1]
    for s in range(0, len(prompts), batch_size):
        x = torch.cat([prompts[s: s + batch_size], gen[s: s + batch_size]], 1)
        p = torch.softmax(hf_model(x).logits[:, P - 1: -1].float() / temperature, -1)
        out.append(p.topk(min(k, p.shape[-1]), -1).values.sum(-1))
    return torch.cat(out)
