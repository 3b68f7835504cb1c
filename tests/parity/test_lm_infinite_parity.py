"""Parity of lmsci's LM-Infinite attention (the blockwise harness, grouped-query attention kept) with the official
implementation (Glaciohound/LM-Infinite at a0ce64c, lambda_matmul) on the real SmolLM2-135M, at two layers.

The official code does not support grouped-query attention, so its outputs (fixtures/lm_infinite/official.npz) were
computed on the model rewritten with 9 key-value heads (:func:`lmsci.methods.lm_infinite.repeat_kv_heads`); lmsci runs
on the original model's 3 key-value heads. How the fixture was made: scripts/parity/lm_infinite.md."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

FIX = Path(__file__).parent / "fixtures" / "lm_infinite"


def _layer_qkv(model, ids, layer):
    caught = {}
    h = model.model.layers[layer].self_attn.register_forward_pre_hook(
        lambda mod, args, kw: caught.__setitem__("x", kw["hidden_states"].detach().clone()), with_kwargs=True)
    try:
        with torch.no_grad():
            model(ids)
    finally:
        h.remove()
    a, x, n = model.model.layers[layer].self_attn, caught["x"], ids.shape[1]
    return [p(x).view(1, n, -1, 64).transpose(1, 2) for p in (a.q_proj, a.k_proj, a.v_proj)]


def test_lm_infinite_matches_the_official_lambda_attention_on_smollm2(smollm2):
    from lmsci.models.attention_harness import hf_scorer, lm_infinite_policy, policy_attention

    src = json.loads((FIX / "SOURCE.json").read_text())
    s = src["settings"]
    off = np.load(FIX / "official.npz")
    ids = torch.as_tensor(off["ids"])[None]
    m = smollm2.model
    assert m.config.num_key_value_heads == 3  # lmsci runs on the original GQA model
    pol = lm_infinite_policy(s["local_branch"], s["global_branch"], d_max=s["limit_distance"], block_size=16)
    pos = torch.arange(ids.shape[1])
    for layer in s["layers"]:
        q, k, v = _layer_qkv(m, ids, layer)
        assert k.shape[1] == 3 and q.shape[1] == 9
        attn = m.model.layers[layer].self_attn
        with torch.no_grad():
            ours = policy_attention(q, k, v, pos, pos, hf_scorer(m.model, attn), pol)
        official = torch.as_tensor(off[f"out_layer{layer}"])
        torch.testing.assert_close(ours, official, rtol=1e-4, atol=1e-4)
        # beyond the local branch the Lambda mask matters: plain causal attention differs there
        with torch.no_grad():
            full = torch.nn.functional.scaled_dot_product_attention(
                q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), is_causal=True)
        assert not torch.allclose(full[:, :, s["local_branch"] + 8:], official[:, :, s["local_branch"] + 8:], atol=1e-3)
