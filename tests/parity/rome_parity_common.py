"""What the two ROME / causal-tracing parity tests share (``test_rome_parity.py`` on a tiny GPT-2,
``test_rome_llama_parity.py`` on a tiny Llama and SmolLM2): lmsci's side of a fixture's causal trace and ROME edit.

Each function takes the fixture's ``SOURCE.json`` record (``src``) and tensors (``T``) and the model to run, so the
two tests differ only in their fixtures and models. Not a test module (pytest imports it from this folder)."""

from __future__ import annotations

import torch

import lmsci.measure.causal_tracing as ct_mod
from lmsci.measure.causal_tracing import causal_trace
from lmsci.methods.rome import RomeHParams, compute_rome


class TorchWithNoise:
    """``torch`` for lmsci's causal_trace module, except that ``randn`` returns the official noise draws."""

    def __init__(self, z: torch.Tensor):
        self.z = z

    def __getattr__(self, name):
        return getattr(torch, name)

    def randn(self, *shape, generator=None, **kw):
        assert tuple(shape) == tuple(self.z.shape), (shape, self.z.shape)
        return self.z.float().clone()


def trace(model, src: dict, T: dict, i: int, kinds_windows: dict[str, tuple[str, int]], monkeypatch):
    """lmsci's causal trace of the fixture's trace ``i`` with the official noise draws (``trace/{i}/noise_z``)."""
    tr = src["causal_trace"]["traces"][i]
    kinds = sorted({k for k, _ in kinds_windows.values()})
    windows = {k: w for k, w in kinds_windows.values()}
    monkeypatch.setattr(ct_mod, "torch", TorchWithNoise(T[f"trace/{i}/noise_z"]))
    return causal_trace(model, tr["input_ids"], tuple(tr["subject_range"]), tr["answer_id"],
                        noise=src["causal_trace"]["noise"], kinds=kinds, samples=10, window=windows)


def hparams(h: dict, **over) -> RomeHParams:
    """lmsci's ROME hyper-parameters from the official ones ``h`` (ridge 0: the official code inverts C as it is)."""
    kw = dict(v_lr=h["v_lr"], v_steps=h["v_num_grad_steps"], kl_factor=h["kl_factor"], weight_decay=h["v_weight_decay"],
              clamp_norm_factor=h["clamp_norm_factor"], ridge=0.0)
    kw.update(over)
    return RomeHParams(**kw)


def rome(model, src: dict, T: dict, case: int, variant: str, d_mlp: int, cov: torch.Tensor | None = None, **over):
    """lmsci's ROME edit of the fixture's request ``case`` under the official ``variant`` (its second moment
    ``mom2/{layer}`` when the variant adjusts by it, else the identity of size ``d_mlp``)."""
    meta = src["rome"]["requests"][case]
    h = meta["variants"][variant]["hparams"]
    layer = meta["layer"]
    if cov is None:
        cov = T[f"mom2/{layer}"] if h["mom2_adjustment"] else torch.eye(d_mlp, dtype=torch.float64)
    return compute_rome(model, layer, prompts=meta["prompts"], subject_last=meta["subject_last"],
                        target=meta["target_ids"], cov=cov, kl_prompts=meta["kl_prompts"],
                        kl_positions=meta["kl_positions"], hparams=hparams(h, **over))


def unit(u: torch.Tensor) -> torch.Tensor:
    u = u.double()
    return u / u.norm()
