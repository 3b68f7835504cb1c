"""Train an lmsci GPT from scratch on a tokenized corpus and measure its held-out NLL.

The recipe of :func:`lmsci.train.trainer.train` (AdamW, warmup + cosine) on windows drawn by a ``get_batch``
(for a corpus, :func:`lmsci.worlds.shakespeare.make_get_batch`); the held-out NLL is the token-weighted mean
over fixed held-out windows (:func:`lmsci.worlds.shakespeare.eval_batches`). Used by experiments that need a
real-text language model as a substrate (``mlp-memories`` trains its Shakespeare GPT with it; ``lm-steer`` its
steered GPTs and its larger fluency GPT).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from lmsci.models.gpt import GPT, GPTSpec
from lmsci.train.trainer import Batch, GetBatch, TrainSpec, evaluate_nll, train


def train_corpus_gpt(get_batch: GetBatch, val_batches: Sequence[Batch] | None, vocab_size: int, *, model: GPTSpec,
                     train_spec: TrainSpec, seq_len: int, device: str, seed: int,
                     log: Callable[[dict[str, Any]], None] | None = None) -> tuple[GPT, dict[str, float]]:
    """A GPT of architecture ``model`` trained by ``train_spec`` on the windows ``get_batch`` draws.

    Args:
        get_batch: ``get_batch(step, generator) -> (x [batch_size, seq_len], y [batch_size, seq_len])``.
        val_batches: fixed held-out ``(x, y)`` windows (None: no held-out NLL).
        vocab_size: the tokenizer's vocabulary size.
        model: the GPT's architecture (:class:`~lmsci.models.gpt.GPTSpec`); seq_len: its context.
        train_spec: the optimisation (:class:`~lmsci.train.trainer.TrainSpec`: steps, batch_size, lr, warmup...).
        device: where the model is built and trained.
        seed: initialisation and batch order.
        log: receives the trainer's records.

    Returns:
        ``(model in eval mode on device, gradients cleared, {"train_loss", "val_nll"})`` (nats/token; ``val_nll`` NaN without
        ``val_batches``).

    Raises:
        ConfigError: bad shapes (from GPTConfig / TrainConfig). DivergedError: a non-finite loss.
    """
    gpt = GPT(model.gpt_config(vocab_size, seq_len), seed=seed).to(device)
    tcfg = train_spec.train_config(device=device, log_every=max(1, train_spec.steps // 20))
    res = train(gpt, get_batch, tcfg, seed=seed + 1, log=log)
    val = float("nan")
    if val_batches is not None:
        val = evaluate_nll(gpt, val_batches)
    gpt.zero_grad(set_to_none=True)  # no stale gradients on the returned (frozen-to-be) model
    gpt.eval()
    return gpt, {"train_loss": float(res.final.get("loss", float("nan"))), "val_nll": val}
