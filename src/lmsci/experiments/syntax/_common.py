"""Pieces shared by the syntax experiments that train a GPT on a CFG (``cfg-learning``, ``cfg-probing``,
``word-order``): the model config, the grammar, the model and its training on fresh CFG strings.

Source: Allen-Zhu & Li, "Physics of Language Models: Part 1, Learning Hierarchical Language Structures",
arXiv 2305.13673, sec. 3 (the position variants GPT_rot, GPT, GPT_rel, GPT_uni, GPT_pos; packed EOS-separated
training strings); see :mod:`lmsci.experiments.syntax.cfg_learning` for the protocol.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
from pydantic import Field

from lmsci.config import ExperimentConfig
from lmsci.errors import ConfigError
from lmsci.experiments.base import PointContext
from lmsci.models.gpt import GPT, GPTSpec
from lmsci.runs import derive_seed
from lmsci.train.adaptor import numpy_rng, train_point
from lmsci.train.cache import cached_training
from lmsci.train.trainer import TrainSpec
from lmsci.worlds.cfg import CFG
from lmsci.worlds.cfg_grammars import get_grammar

VARIANT_NAMES = {"rope": "GPT_rot", "learned": "GPT (absolute)", "relative": "GPT_rel (T5 bias)", "uni": "GPT_uni",
                 "posonly": "GPT_pos"}


class CFGModelConfig(ExperimentConfig):
    """Fields shared by ``cfg-learning`` and ``cfg-probing`` (defaults = the quick preset: the small grammar
    ``cfg3b-small`` drawn by the cfg3 generator, 5 levels, strings of 16-81 tokens; a 4-layer d_model 64 GPT). The gpu
    and paper presets' ``cfg3f`` is the published cfg3f table.

    Attributes:
        variants: the position schemes trained, one model each (GPTConfig ``pos``: each replaces ``model.pos``, which
            is therefore not set on its own: setting it is refused).
        model: the GPT trained (:class:`~lmsci.models.gpt.GPTSpec`; its ``pos`` is the variant's).
        seq_len: the context window (tokens, BOS included).
        train: its optimizer and schedule (:class:`~lmsci.train.trainer.TrainSpec`; AdamW betas 0.9/0.98, weight
            decay 0.1, warmup ``warmup_steps`` then cosine decay).
    """

    grammar: str = Field("cfg3b-small", description="a published cfg3 table (cfg3b, cfg3e1, cfg3e2, cfg3f, cfg3g, "
                         "cfg3h, cfg3i, cfg3j, cfg3k), a draw '<name>-draw:SEED', lmsci's small draws cfg3b-small / "
                         "cfg3f-small (drawn with grammar_seed), or an official cfg3*.json path")
    grammar_seed: int = Field(0, ge=0)
    variants: list[Literal["rope", "learned", "relative", "uni", "posonly"]] = Field(["rope"], min_length=1)
    model: GPTSpec = GPTSpec(n_layers=4, n_heads=4, d_model=64)
    seq_len: int = Field(128, ge=8, description="context window (tokens, BOS included)")
    train: TrainSpec = TrainSpec(steps=3000, batch_size=16, lr=3e-3, warmup_steps=50, weight_decay=0.1,
                                 betas=(0.9, 0.98))
    threads: int = Field(1, ge=0)
    n_seeds: int = Field(3, ge=1, le=100)


def build_grammar(cfg: CFGModelConfig) -> CFG:
    """The grammar of ``cfg.grammar`` (:func:`lmsci.worlds.cfg_grammars.get_grammar`; ``grammar_seed`` seeds the draws).

    Raises:
        ConfigError: an unknown grammar spec or a missing table file; GrammarError: a malformed table (both
            from :func:`~lmsci.worlds.cfg_grammars.get_grammar`).
    """
    return get_grammar(cfg.grammar, cfg.grammar_seed)


def validate_model_config(cfg: CFGModelConfig) -> CFG:
    """Resolve the grammar and check the model fields (named errors before any work)."""
    g = build_grammar(cfg)
    if cfg.model.pos != type(cfg).model_fields["model"].default.pos:
        raise ConfigError("model.pos", cfg.model.pos, "left as it is: set the position schemes with variants")
    if "rope" in cfg.variants and cfg.model.head_dim % 2:
        raise ConfigError("model.n_heads", cfg.model.n_heads, "an even d_head = d_model / n_heads for pos='rope'")
    lo, _ = g.length_range()
    if cfg.seq_len < lo + 2:
        raise ConfigError("seq_len", cfg.seq_len, f">= {lo + 2} (BOS, the grammar's shortest string, EOS)")
    return g


def make_model(cfg: CFGModelConfig, g: CFG, variant: str, seed: int) -> GPT:
    """A GPT of ``cfg.model`` over the grammar's vocabulary with context ``cfg.seq_len`` and position variant
    ``variant`` (a :class:`~lmsci.models.gpt.GPTConfig` ``pos``: rope, learned, relative, uni, posonly), initialised
    from ``seed`` (Allen-Zhu & Li, arXiv 2305.13673, sec. 3: GPT_rot, GPT, GPT_rel, GPT_uni, GPT_pos)."""
    return GPT(cfg.model.gpt_config(g.vocab_size, cfg.seq_len, pos=variant), seed=seed)


def make_get_batch(g: CFG, batch_size: int, seq_len: int, shuffle_within: bool = False):
    """``get_batch(step, gen) -> (input_ids, targets)`` ``[batch, seq_len]``: each row is BOS followed by fresh
    EOS-separated strings (all randomness drawn from ``gen``); ``shuffle_within``: the tokens of each string in a
    random order (its tokens, length and EOS kept, its order removed)."""
    lo, _ = g.length_range()
    per_row = math.ceil(seq_len / (lo + 1)) + 1

    def get_batch(step: int, gen: torch.Generator):
        rng = numpy_rng(gen)
        stream = g.sample_stream(batch_size * per_row, rng)
        if shuffle_within:  # sort by (string index, random key); each EOS keeps the last place of its string
            eos = stream == g.eos
            seg = np.r_[0, np.cumsum(eos)[:-1]]
            stream = stream[np.argsort(seg + np.where(eos, 0.75, 0.5 * rng.random(stream.size)), kind="stable")]
        ends = np.flatnonzero(stream == g.eos)
        starts = np.r_[0, ends[per_row - 1::per_row][:-1] + 1]
        rows = np.stack([stream[s: s + seq_len] for s in starts])  # each row >= seq_len tokens by construction
        x = np.concatenate([np.full((batch_size, 1), g.bos), rows[:, :-1]], axis=1)
        return torch.from_numpy(x), torch.from_numpy(rows.copy())

    return get_batch


def train_model(cfg: CFGModelConfig, g: CFG, variant: str, ctx: PointContext, tag: str = "",
                shuffle_within: bool = False) -> tuple[GPT, dict]:
    """Train one model of ``variant`` from the point's seed (``shuffle_within``: on strings whose tokens are shuffled,
    see :func:`make_get_batch`); returns ``(model in eval mode, final record)``.

    Through the training cache (:func:`lmsci.train.cache.cached_training`, on when ``$LMSCI_TRAINING_CACHE`` is set:
    ``lmsci suite`` sets it): the same training asked for again on this machine -- the same grammar, model, recipe,
    variant, arm and seeds, as ``cfg-probing`` asks for ``cfg-learning``'s (its ``training_scope``) -- loads the
    stored weights instead, bit for bit what it would train."""
    init_seed, data_seed = derive_seed(ctx.seed, "init", tag), derive_seed(ctx.seed, "data", tag)
    model = make_model(cfg, g, variant, init_seed)
    steps = cfg.train.steps
    fields = {"what": "cfg-gpt", "grammar": cfg.grammar, "grammar_seed": cfg.grammar_seed, "variant": variant,
              "model": cfg.model.model_dump(mode="json"), "seq_len": cfg.seq_len,
              "train": cfg.train.model_dump(mode="json"), "shuffle_within": shuffle_within, "init_seed": init_seed,
              "data_seed": data_seed}

    def fit(c) -> dict:
        return train_point(model, make_get_batch(g, cfg.train.batch_size, cfg.seq_len, shuffle_within), cfg.train, c,
                           seed=data_seed, desc=f"train {variant}", checkpoint_dir=ctx.artifact_dir / f"ckpt{tag}",
                           log_every=max(steps // 50, 1), checkpoint_every=max(steps // 4, 1)).final

    final = cached_training(model, fit, fields, ctx, code=(__name__,))
    return model.eval(), final

