"""Every registered experiment: all three presets resolve, validate and give a non-empty sweep;
its catalog entry names a claim, a source with an arXiv id or reference, and a time per preset."""

from __future__ import annotations

import pytest

from lmsci.config import ALL_PRESET_NAMES, PRESET_NAMES, resolve_config
from lmsci.errors import ConfigError
from lmsci.experiments.registry import catalog

NAMES = sorted(catalog())


def test_catalog_has_the_issues_experiments():
    assert {"factual-recall", "hallucination-stage", "shakespeare-lm", "length-generalization", "passkey-retrieval",
            "knowledge-extraction", "celebrity-helps-minority", "reversal-curse", "knowledge-capacity",
            "scaling-sweep", "chinchilla-refit", "double-descent",
            "benign-overfitting", "implicit-bias", "cfg-learning", "cfg-probing"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_presets_resolve_validate_and_have_points(name):
    cls = catalog()[name]
    assert set(PRESET_NAMES) <= set(cls.Config.PRESETS) <= set(ALL_PRESET_NAMES)
    for preset in cls.Config.PRESETS:
        cfg = resolve_config(cls.Config, preset)
        assert cfg.preset == preset
        exp = cls()
        if preset in cls.local_inputs:  # needs files the user supplies: refused, naming one, before any work
            with pytest.raises(ConfigError) as err:
                exp.validate(cfg)
            assert err.value.field in cls.local_inputs[preset]
            continue
        exp.validate(cfg)
        points = exp.seeded_points(cfg)
        assert points and len({p.id for p in points}) == len(points)
        assert len(points) == len(exp.points(cfg)) * (cfg.n_seeds if exp.seeded else 1)


@pytest.mark.parametrize("name", NAMES)
def test_catalog_entry(name):
    cls = catalog()[name]
    assert cls.claim and cls.source
    assert set(PRESET_NAMES) <= set(cls.time_estimate) <= set(cls.Config.PRESETS)  # "gpu" where it has that preset


def test_catalog_has_issue_16s_experiments():
    assert {"icl-linear-regression", "icl-kernel-regression"} <= set(NAMES)


def test_catalog_has_issue_18s_experiments():
    assert {"calibration-hallucination", "alignment-attack", "watermark", "watermark-removal"} <= set(NAMES)


def test_catalog_has_issue_19s_key_value_and_knowledge_neuron_experiments():
    assert {"mlp-memories", "knowledge-neurons"} <= set(NAMES)


def test_catalog_has_issue_19s_causal_tracing_and_messy_knowledge_experiments():
    assert {"causal-tracing", "messy-knowledge"} <= set(NAMES)


def test_catalog_has_issue_15s_experiments():
    assert {"lm-steer"} <= set(NAMES)


def test_catalog_has_issue_13s_igsm_experiments():
    assert {"igsm-ood", "igsm-depth", "igsm-retry", "igsm-probing", "igsm-noop"} <= set(NAMES)


def test_list_shows_every_experiment_with_its_gpu_time():
    from typer.testing import CliRunner

    from lmsci.cli import app

    out = CliRunner().invoke(app, ["list"], terminal_width=400)
    assert out.exit_code == 0, out.output
    assert "gpu" in out.output.splitlines()[1]  # the header names the four presets' times
    for name in NAMES:
        assert name in out.output
    rows = {line.split()[0]: line.split() for line in out.output.splitlines()[2:] if line.strip()}
    # igsm-retry's and igsm-depth's gpu estimates (minutes; session 52: ~7 min each, were ~179 and ~137)
    assert "~7m" in rows["igsm-retry"] and "~7m" in rows["igsm-depth"]
