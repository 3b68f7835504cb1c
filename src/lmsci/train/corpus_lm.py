"""Train an lmsci GPT from scratch on a tokenized corpus and measure its held-out NLL.

The recipe of :func:`lmsci.train.trainer.train` (AdamW, warmup + cosine) on windows drawn by a ``get_batch``
(for a corpus, :func:`lmsci.worlds.shakespeare.make_get_batch`); the held-out NLL is the token-weighted mean
over fixed held-out windows (:func:`lmsci.worlds.shakespeare.eval_batches`). Used by experiments that need a
real-text language model as a substrate (``lm-steer`` trains its steered GPTs and its larger fluency GPT with it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from lmsci.models.gpt import GPT, GPTConfig
from lmsci.train.trainer import Batch, GetBatch, TrainConfig, evaluate_nll, train


def train_corpus_gpt(get_batch: GetBatch, val_batches: Sequence[Batch] | None, vocab_size: int, *, d_model: int,
                     n_layers: int, n_heads: int, seq_len: int, steps: int, batch_size: int, lr: float,
                     device: str, seed: int, warmup_steps: int | None = None,
                     log: Callable[[dict[str, Any]], None] | None = None) -> tuple[GPT, dict[str, float]]:
    """A GPT (learned positions, GELU, LayerNorm, untied) trained on the windows ``get_batch`` draws.

    Args:
        get_batch: ``get_batch(step, generator) -> (x [batch_size, seq_len], y [batch_size, seq_len])``.
        val_batches: fixed held-out ``(x, y)`` windows (None: no held-out NLL).
        vocab_size: the tokenizer's vocabulary size.
        d_model, n_layers, n_heads, seq_len: the GPT's shape (:class:`~lmsci.models.gpt.GPTConfig`).
        steps, batch_size, lr: the optimisation (warmup ``min(100, steps // 10)`` unless ``warmup_steps``).
        device: where the model is built and trained.
        seed: initialisation and batch order.
        log: receives the trainer's records.

    Returns:
        ``(model in eval mode on device, gradients cleared, {"train_loss", "val_nll"})`` (nats/token; ``val_nll`` NaN without
        ``val_batches``).

    Raises:
        ConfigError: bad shapes (from GPTConfig / TrainConfig). DivergedError: a non-finite loss.
    """
    model = GPT(GPTConfig(vocab_size=vocab_size, seq_len=seq_len, n_layers=n_layers, n_heads=n_heads,
                          d_model=d_model), seed=seed).to(device)
    wu = min(100, steps // 10) if warmup_steps is None else warmup_steps
    tcfg = TrainConfig(steps=steps, batch_size=batch_size, lr=lr, warmup_steps=wu, device=device,
                       log_every=max(1, steps // 20))
    res = train(model, get_batch, tcfg, seed=seed + 1, log=log)
    val = float("nan")
    if val_batches is not None:
        val = evaluate_nll(model, val_batches)
    model.zero_grad(set_to_none=True)  # no stale gradients on the returned (frozen-to-be) model
    model.eval()
    return model, {"train_loss": float(res.final.get("loss", float("nan"))), "val_nll": val}
