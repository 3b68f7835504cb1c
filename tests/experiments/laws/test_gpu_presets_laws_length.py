"""S52: the gpu presets of the training-bound experiments fit 10 minutes of one H100 by lmsci.train.estimate.

The estimate (:func:`lmsci.train.estimate.gpu_seconds`: achieved bf16 throughput plus a per-step overhead) of the
training alone must leave room (<= 540 s) for evaluation and start-up within the brief's 600 s.
"""

from __future__ import annotations

from lmsci.config import resolve_config
from lmsci.train.estimate import gpu_seconds

BUDGET_S = 540.0


def test_emergence_metrics_gpu_training_fits():
    from lmsci.experiments.laws.emergence_metrics import ARMS, EmergenceMetricsConfig
    from lmsci.worlds.addition import AdditionWorld

    cfg = resolve_config(EmergenceMetricsConfig, "gpu")
    w = AdditionWorld(cfg.digits)
    st, b = cfg.train.steps, cfg.train.batch_size
    total = len(ARMS) * cfg.n_seeds * sum(
        gpu_seconds(d, cfg.model.n_layers, w.vocab_size, w.seq_len, tokens=st * b * w.seq_len, steps=st)
        for d in cfg.widths)
    assert 300 < total <= BUDGET_S, total


def test_scaling_sweep_gpu_training_fits():
    from lmsci.experiments.laws.scaling_sweep import ScalingSweepConfig

    cfg = resolve_config(ScalingSweepConfig, "gpu")
    per_step = cfg.train.batch_size * cfg.seq_len
    total = sum(gpu_seconds(d, cfg.model.n_layers, 84, cfg.seq_len, tokens=cfg.n_seeds * t, steps=t // per_step)
                for d in cfg.d_models for t in cfg.tokens)  # 84: the Shakespeare character vocabulary
    assert total <= BUDGET_S / 3, total  # leaves two thirds for the fits' bootstraps on the CPU


def test_model_shape_gpu_training_fits():
    from lmsci.experiments.laws.model_shape import ModelShape, ModelShapeConfig

    cfg = resolve_config(ModelShapeConfig, "gpu")
    st, tok = cfg.train.steps, cfg.train.batch_size * cfg.seq_len
    total = sum(gpu_seconds(p.params["d_model"], p.params["n_layers"], 84, cfg.seq_len,
                            tokens=cfg.n_seeds * st * tok, steps=st)  # the seeds train stacked: one step overhead
                for p in ModelShape().points(cfg))
    assert 300 < total <= BUDGET_S - 60, total
