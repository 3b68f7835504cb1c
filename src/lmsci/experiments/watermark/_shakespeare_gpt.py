"""The language model both watermark experiments train: an lmsci GPT on the Shakespeare corpus (BPE), exported to
``transformers`` (``GPT2LMHeadModel``, :func:`lmsci.models.hf_convert.to_hf`) for generation and detection.

Used by ``watermark`` (one model) and ``watermark-removal`` (generator, attacker and judge, one seed each).
"""

from __future__ import annotations

from typing import Any, Callable

import torch.nn as nn

from lmsci.models.gpt import GPT, GPTSpec
from lmsci.models.hf_convert import to_hf
from lmsci.train.trainer import TrainSpec, train


def train_shakespeare_hf(model: GPTSpec, train_spec: TrainSpec, corpus: Any, seq_len: int, device: str,
                         init_seed: int, train_seed: int, log: Callable[[dict], None]) -> tuple[nn.Module, float]:
    """Train a GPT of architecture ``model`` with ``train_spec`` on ``corpus.train_ids`` (random windows of
    ``seq_len`` tokens, :func:`lmsci.worlds.shakespeare.make_get_batch`) on ``device`` and export it.

    Args:
        model: the architecture (the corpus fixes ``vocab_size``; ``seq_len`` is the context).
        train_spec: optimizer and schedule; the trainer logs every 50 steps through ``log``.
        corpus: a :class:`lmsci.worlds.shakespeare.Corpus` (``vocab_size``, ``train_ids``).
        init_seed, train_seed: seeds of the weights and of the batches.

    Returns:
        The ``transformers`` model on ``device`` in eval mode, and the final training loss (NLL, nats/token; NaN if
        none was logged).

    Raises:
        ConfigError: the corpus is shorter than ``seq_len + 1`` tokens, or an architecture without a Hugging Face
            equivalent.
    """
    from lmsci.worlds import shakespeare as sh

    gpt = GPT(model.gpt_config(corpus.vocab_size, seq_len), seed=init_seed)
    tcfg = train_spec.train_config(device=device, log_every=50)
    res = train(gpt, sh.make_get_batch(corpus.train_ids, tcfg.batch_size, seq_len), tcfg, seed=train_seed, log=log)
    return to_hf(gpt.cpu()).to(device).eval(), float(res.final.get("loss", float("nan")))
