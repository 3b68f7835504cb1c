"""LM-Infinite, StreamingLLM attention sinks and sliding windows: interventions on a model's attention.

Source: Han, Wang, Peng, Xiong, Chen, Ji, Wang, "LM-Infinite: Zero-Shot Extreme Length Generalization
for Large Language Models", NAACL 2024, arXiv 2308.16137, Section 4 (Lambda-shaped mask, distance
ceiling), Section 5.3 / Appendix A (top-k middle tokens); Xiao et al., "Efficient Streaming Language
Models with Attention Sinks", ICLR 2024, arXiv 2309.17453, Section 3.2.

The policies and the blockwise harness that computes them live in :mod:`lmsci.models.attention_harness`
(instruments in :mod:`lmsci.measure.attention` use it too); this module re-exports them and adds the
LM-Infinite conveniences :func:`apply_lm_infinite` and :func:`lm_infinite`.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from lmsci.models.attention_harness import *  # noqa: F401,F403 (re-exported: the harness and its policies)
from lmsci.models.attention_harness import (  # noqa: F401
    POLICY_KINDS,
    AttentionPatch,
    AttentionPolicy,
    _is_lmsci_gpt,
    apply_policy,
    lm_infinite_policy,
)
from lmsci.models.attention_harness import __all__ as _harness_all


def apply_lm_infinite(model: Any, n_local: int, n_global: int = 10, d_max: int | None = None,
                      top_k: int = 0, top_k_from_layer: int = 4, top_k_distance: int | None = None,
                      block_size: int | None = None) -> AttentionPatch:
    """Install LM-Infinite (Han et al. 2023, arXiv 2308.16137, Sec. 4; see :func:`lm_infinite_policy` for the
    arguments) on ``model`` (an lmsci GPT with ``pos`` rope/alibi, or a Hugging Face model of the architecture map,
    or an :class:`~lmsci.models.hf.HFModel`) and return the :class:`AttentionPatch`; ``patch.remove()`` restores
    the original attention bit for bit. The patched model maps ``[batch, seq]`` ids to ``[batch, seq, vocab]``
    logits as before.

    Raises:
        ConfigError: an unsupported model or family (naming it and the supported ones), a GPT without RoPE/ALiBi,
            a policy argument out of range."""
    return apply_policy(model, lm_infinite_policy(n_local, n_global, d_max, top_k, top_k_from_layer,
                                                  top_k_distance, block_size))


@contextlib.contextmanager
def lm_infinite(model: Any, n_local: int, n_global: int = 10, **kw: Any) -> Iterator[AttentionPatch]:
    """Context manager: LM-Infinite on ``model`` inside the ``with`` block, the original attention after (also on
    an exception). ``with lm_infinite(model, n_local=L, n_global=10): logits = model(ids)``, ``ids [batch, seq]``
    of any length, logits ``[batch, seq, vocab_size]``. Arguments as :func:`apply_lm_infinite` (``n_local``: the
    pretraining length L; ``n_global``: starting tokens kept; ``top_k``...). Source: Han et al. 2023, "LM-Infinite",
    arXiv 2308.16137, Sec. 4.

    Raises:
        ConfigError: as :func:`apply_lm_infinite`, before the block runs."""
    p = apply_lm_infinite(model, n_local, n_global, **kw)
    try:
        yield p
    finally:
        p.remove()


__all__ = [*_harness_all, "apply_lm_infinite", "lm_infinite"]
