"""What ``lm-steer-lm`` and ``lm-steer-transfer-lm`` share: the source LM's data and steer-training settings, their
checks, the cached training lines of the gates and one point's steer on true or shuffled labels.

* :class:`LMSteerSourceConfig`: the fields of the source LM, the VADER-labelled lines, the cached steer training and
  the source's sampling (defaults = ``lm-steer-lm``'s quick preset; ``lm-steer-transfer-lm`` overrides a few).
* :func:`check_source`: the checks of those fields (a :class:`~lmsci.errors.ConfigError` before any work).
* :func:`cache_source`: the training lines' cached final hidden states and the unsteered NLL of the gates' lines.
* :func:`train_point_steer`: one point's steer (labels shuffled on the null arm) and its fit columns.

Source: Han, Xu, Li, Ji, "Word Embeddings Are Steers for Language Models", ACL 2024, arXiv 2305.12798 (Sec. 3.3,
App. D).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from pydantic import Field

from lmsci.config import ExperimentConfig
from lmsci.errors import ConfigError
from lmsci.experiments.steering import _lm_steer_lm_data as data_mod


class LMSteerSourceConfig(ExperimentConfig):
    """The source LM's data, cached steer training and sampling (field defaults = ``lm-steer-lm``'s quick preset)."""

    model: str = Field("smollm2-135m", description="the source LM: a zoo name (lmsci models), a local Hugging Face "
                                                   "directory or .gguf file with a tokenizer, or tiny-llama (tests)")
    n_seeds: int = Field(3, ge=1, le=100, description="training seeds of W, each with its own prompt sample")
    threads: int = Field(1, ge=0)
    # data (the toy's recipe)
    scorer_fraction: float = Field(0.5, gt=0, lt=1, description="fraction of each genre's plays held out for prompts")
    play_split_seed: int = Field(0, ge=0)
    min_words: int = Field(4, ge=1)
    max_words: int = Field(12, ge=1, description="short lines keep a training step cheap")
    lines_per_play: int | None = Field(400, ge=10, description="dialogue lines sampled per play (None: all)")
    vader_threshold: float = Field(0.5, gt=0, lt=1)
    n_train_lines: int = Field(200, ge=2, description="training lines per class (positive, negative)")
    max_length: int = Field(24, ge=4, description="tokens kept of a training line")
    # steer training on the source's cached hidden states (the README's GPT2-Large run: lr 1e-2, batch 32, 1000
    # steps; fewer steps on a CPU)
    epsilon: float = Field(1e-3, gt=0, description="eps0")
    rank: int | None = Field(None, ge=1, description="rank r of W (None: r = d, a full d x d map)")
    init_std: float = Field(1e-2, gt=0)
    steer_lr: float = Field(1e-2, gt=0)
    steer_steps: int = Field(80, ge=1)
    steer_batch: int = Field(8, ge=1)
    l2: float = Field(0.0, ge=0)
    n_loss_lines: int = Field(64, ge=2, description="training lines of the loss and pretrained gates")
    # generation on the source and scoring
    n_prompts: int = Field(12, ge=2, description="held-out neutral prompts per seed")
    n_samples: int = Field(1, ge=1, description="continuations per prompt (paper 25)")
    prompt_tokens: int = Field(5, ge=1, description="source tokens of a source prompt (the newline included)")
    gen_tokens: int = Field(16, ge=2, description="new tokens per continuation (paper 20)")
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(0.9, gt=0, le=1, description="nucleus sampling on the source (paper 0.9)")
    gen_batch: int = Field(32, ge=1, description="source continuations per generate call")
    steer_value: float = Field(5.0, gt=0, description="the paper's 5 eps0")


def check_source(cfg: LMSteerSourceConfig) -> None:
    """Refuse a bad source model, word range or gate line count before any work.

    Raises:
        ConfigError: ``model`` (not a zoo name, directory, ``.gguf`` file or tiny-llama), ``max_words`` below
            ``min_words``, ``n_loss_lines`` above ``2 n_train_lines``.
    """
    data_mod.check_model_name(cfg.model)
    if cfg.max_words < cfg.min_words:
        raise ConfigError("max_words", cfg.max_words, f">= min_words={cfg.min_words}")
    if cfg.n_loss_lines > 2 * cfg.n_train_lines:
        raise ConfigError("n_loss_lines", cfg.n_loss_lines, f"<= 2 n_train_lines = {2 * cfg.n_train_lines}")


def cache_source(cfg: LMSteerSourceConfig, hf: Any, data: dict[str, Any]) -> dict[str, Any]:
    """Cache the training lines' final hidden states (checked against the model) and the gates' lines.

    Args:
        hf: the source LM (:func:`~lmsci.experiments.steering._lm_steer_lm_data.get_model`).
        data: :func:`~lmsci.experiments.steering._lm_steer_lm_data.build_data`'s lines (positives first).

    Returns:
        ``enc`` (token ids per line), ``pad``, ``cache`` (:func:`~lmsci.methods.lm_steer_cached.final_hidden_states`,
        ``h [lines, max_length, d_model]``), ``idx`` (the ``n_loss_lines`` gate lines: an even spread of both
        classes), ``sub`` (their cache), ``V`` (output vocabulary size) and the columns ``vocab_size``, ``n_pool``,
        ``base_nll`` (unsteered NLL of the gate lines, nats/token) and ``nll_below_uniform`` (``ln V`` minus it).
    """
    from lmsci.methods.lm_steer_cached import cached_loss, check_cache, final_hidden_states

    tok = hf.tokenizer
    enc = [data_mod.encode(tok, s) for s in data["texts"]]
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    cache = final_hidden_states(hf, enc, max_length=cfg.max_length, pad_id=pad)
    check_cache(hf, cache)
    k = cfg.n_loss_lines  # lines of the gates: an even spread of both classes (positives first in the pool)
    idx = np.r_[0:k // 2, cfg.n_train_lines:cfg.n_train_lines + k - k // 2]
    sub = type(cache)(cache.h[idx], cache.ids[idx], cache.mask[idx])
    base_nll = cached_loss(hf, sub, None, data["labels"][idx])
    V = int(hf.model.get_output_embeddings().weight.shape[0])
    return {"enc": enc, "pad": pad, "cache": cache, "idx": idx, "sub": sub, "V": V,
            "columns": {"model": cfg.model, "vocab_size": V, "n_pool": len(enc), "base_nll": base_nll,
                        "nll_below_uniform": math.log(V) - base_nll}}


def train_point_steer(cfg: LMSteerSourceConfig, arm: str, seed: int, hf: Any, data: dict[str, Any],
                      src: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Train one point's steer on the cached lines: the true labels (real arm) or a seed-specific permutation of
    them (null arm), seed ``derive_seed(seed, "steer")``.

    Args:
        arm: ``"real"`` or ``"null"``. seed: the point's seed. src: :func:`cache_source`'s result.

    Returns:
        (the steer, columns ``train_seconds``, ``loss_drop`` (gate lines' NLL unsteered
        minus steered at their labels, nats/token), ``label_agreement``, ``w_norm``).
    """
    from lmsci.methods.lm_steer_cached import cached_loss, train_steer_cached
    from lmsci.runs import derive_seed

    labels = np.asarray(data["labels"], dtype=float)
    if arm == "null":
        labels = labels[np.random.default_rng(derive_seed(seed, "shuffle")).permutation(len(labels))]
    steer = train_steer_cached(hf, src["cache"], labels, rank=cfg.rank, epsilon=cfg.epsilon, init_std=cfg.init_std,
                               lr=cfg.steer_lr, steps=cfg.steer_steps, batch_size=cfg.steer_batch, l2=cfg.l2,
                               seed=derive_seed(seed, "steer"))
    sub, idx = src["sub"], src["idx"]
    row = {"train_seconds": steer.train_seconds,
           "loss_drop": cached_loss(hf, sub, None, labels[idx]) - cached_loss(hf, sub, steer, labels[idx]),
           "label_agreement": float(np.mean(labels == np.asarray(data["labels"]))),
           "w_norm": float(steer.matrix("attr").norm())}
    return steer, row
