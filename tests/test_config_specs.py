"""Nested model/train specs in experiment configs (lmsci.config, GPTSpec, TrainSpec): presets and --set change one
sub-field and keep the experiment's others; a bare key that names one nested field means it; errors name the field."""

from __future__ import annotations

import pytest

from lmsci.config import ExperimentConfig, preset_digest, resolve_config
from lmsci.errors import ConfigError, UnknownNameError
from lmsci.models.gpt import GPTConfig, GPTSpec
from lmsci.train.trainer import TrainConfig, TrainSpec


class _Cfg(ExperimentConfig):
    model: GPTSpec = GPTSpec(n_layers=3, d_model=48, n_heads=4, pos="rope")
    train: TrainSpec = TrainSpec(steps=500, lr=3e-3, warmup_frac=0.1)
    n_test: int = 10

    PRESETS = {"smoke": {"train.steps": 20, "model.d_model": 16}, "quick": {},
               "paper": {"model": {"n_layers": 6}}}


def test_preset_changes_one_subfield_and_keeps_the_experiments_others():
    cfg = resolve_config(_Cfg, "smoke")
    assert (cfg.model.d_model, cfg.model.n_layers, cfg.model.pos) == (16, 3, "rope")
    assert (cfg.train.steps, cfg.train.lr, cfg.train.warmup_steps) == (20, 3e-3, 2)  # warmup follows warmup_frac
    paper = resolve_config(_Cfg, "paper")
    assert (paper.model.n_layers, paper.model.d_model) == (6, 48)  # a nested dict preset merges too


def test_bare_key_means_the_one_nested_field_and_unknown_keys_are_refused():
    cfg = resolve_config(_Cfg, "quick", ["steps=40", "d_model=32", "model.n_heads=2"])
    assert (cfg.train.steps, cfg.model.d_model, cfg.model.n_heads) == (40, 32, 2)
    with pytest.raises(UnknownNameError):
        resolve_config(_Cfg, "quick", ["d_modle=32"])


def test_bad_spec_value_is_a_config_error_naming_the_spec():
    with pytest.raises(ConfigError, match="model"):
        resolve_config(_Cfg, "quick", ["model.n_heads=5"])  # 48 not divisible by 5
    with pytest.raises(ConfigError, match="train.lr"):
        resolve_config(_Cfg, "quick", ["train.lr=-1"])


def test_specs_build_the_library_configs():
    spec = GPTSpec(n_layers=2, n_heads=2, d_model=16, pos="rope")
    g = spec.gpt_config(vocab_size=11, seq_len=9)
    assert isinstance(g, GPTConfig) and (g.vocab_size, g.seq_len, g.pos, g.n_layers) == (11, 9, "rope", 2)
    assert g.spec() == spec and spec.gpt_config(11, 9, d_model=32).d_model == 32
    t = TrainSpec(steps=100, warmup_frac=0.25).train_config(device="cpu", log_every=5)
    assert isinstance(t, TrainConfig) and (t.warmup_steps, t.log_every, t.device) == (25, 5, "cpu")
    assert TrainSpec(steps=100, warmup_frac=0.25).train_config(steps=40).warmup_steps == 10
    with pytest.raises(ConfigError, match="devcie"):
        TrainSpec().train_config(devcie="cpu")


def test_preset_digest_sees_a_nested_change():
    class _Other(_Cfg):
        model: GPTSpec = GPTSpec(n_layers=3, d_model=48, n_heads=4, pos="learned")

    assert preset_digest(_Cfg, "quick") != preset_digest(_Other, "quick")
    assert preset_digest(_Cfg, "quick") == preset_digest(_Cfg, "quick")
