"""The SAE-vs-baselines comparison shared by sae-ground-truth and sae-bios, and its report pieces."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from lmsci.measure.sae_dictionaries import DICTS, compare_sae_baselines, dictionary_columns
from lmsci.report.sae_recovery import TABLE_TAIL, ok_rows, recovery_heatmap, results_table


def _planted(n: int, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    """Activations ``[n, 8]``: 4 sparse binary features along 4 orthogonal directions plus small noise."""
    g = torch.Generator().manual_seed(seed)
    f = (torch.rand(n, 4, generator=g) < 0.2).float()
    dirs = torch.eye(8)[:4] * 3.0
    return f @ dirs + 0.05 * torch.randn(n, 8, generator=g), f.numpy().astype(bool)


def test_comparison_columns_and_determinism():
    torch.set_num_threads(1)
    a_tr, _ = _planted(512, 0)
    a_ev, f_ev = _planted(256, 1)
    names = [f"f{i}" for i in range(4)]
    kw = dict(d_sae=8, k=2, steps=60, batch_size=64, lr=3e-3, aux_k=None, dead_tokens=10_000, seed=3,
              device="cpu", threshold=0.7)
    sae, res = compare_sae_baselines(a_tr, a_ev, f_ev, names, **kw)
    _, res2 = compare_sae_baselines(a_tr, a_ev, f_ev, names, **kw)
    assert not sae.training and set(res) == set(DICTS)
    cols = dictionary_columns(res, lambda d, f1: {f"f1_{d}__{n}": float(v) for n, v in zip(names, f1)})
    assert cols == dictionary_columns(res2, lambda d, f1: {f"f1_{d}__{n}": float(v) for n, v in zip(names, f1)})
    for d in DICTS:
        assert 0.0 <= cols[f"share_{d}"] <= 1.0 and len([c for c in cols if c.startswith(f"f1_{d}__")]) == 4
    assert cols["sae_minus_pca"] == cols["mean_f1_sae"] - cols["mean_f1_pca"]
    assert cols["sae_minus_random"] == cols["mean_f1_sae"] - cols["mean_f1_random"]
    assert "f1_sae__f0" not in dictionary_columns(res)  # no per-feature columns without the callback


def test_heatmap_and_table():
    rows = [{"point": f"{arm}-p", "arm": arm, "seed_index": 0, "hook": "final", "status": "ok", "acc": 1.0,
             **{f"f1_{d}__{n}": 0.5 for d in DICTS for n in ("a", "b")}, "n_features": 2, "l0": 3.0}
            for arm in ("real", "null")]
    res = pd.DataFrame(rows + [{**rows[0], "point": "bad", "status": "error"}])
    ok = ok_rows(res)
    assert len(ok) == 2
    fig = recovery_heatmap(ok, ["a", "b"], label="F1", title="Recovery", xlabel="feature", rotation=30, width=6.0)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"{w}: {d}" for w in ("trained", "random init")
                                                            for d in DICTS]
    assert ax.get_title().endswith("at final")
    table = results_table(res, ("acc",))
    assert "acc" in table and "l0" in table and "f1_sae__a" not in table and "n_features" in TABLE_TAIL
