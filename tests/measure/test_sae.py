"""lmsci.measure.sae: TopK and ReLU+L1 sparse autoencoders recover planted dictionary directions (activations = a
sparse non-negative combination of known unit directions + noise), the measures (L0, FVU, dead latents) mean what they
say, activations are gathered through lmsci hook names on an lmsci GPT and a Hugging Face Llama, and splicing the
reconstruction into the model costs NLL in proportion to the reconstruction error."""

from __future__ import annotations

import pytest
import torch

from lmsci.errors import ConfigError
from lmsci.measure import sae as S
from lmsci.models.gpt import GPT, GPTConfig
from lmsci.models.hf import HFModel

D, F_TRUE, M = 16, 32, 64


def planted(n=3000, p=0.06, noise=0.02, seed=0):
    """``x = (active * magnitude) @ dictionary + noise + offset``; returns (x [n, D], active [n, F] bool, dict [F, D])."""
    g = torch.Generator().manual_seed(seed)
    dic = torch.randn(F_TRUE, D, generator=g)
    dic = dic / dic.norm(dim=1, keepdim=True)
    act = torch.rand(n, F_TRUE, generator=g) < p
    c = act * (torch.rand(n, F_TRUE, generator=g) + 0.5)
    return c @ dic + noise * torch.randn(n, D, generator=g) + 0.3, act, dic


def mmcs(sae, dic):
    """Per planted direction, the largest cosine with a dictionary row of the SAE, ``[F]``."""
    return (dic @ sae.W_dec.detach().T).max(1).values


@pytest.mark.parametrize("kind,kw", [("topk", dict(k=3)), ("relu", dict(l1_coeff=1.0))])
def test_sae_recovers_planted_directions(kind, kw):
    x, act, dic = planted()
    sae, hist = S.train_sae(x[:2400], M, kind=kind, steps=500, batch_size=256, lr=3e-3, seed=0, **kw)
    cos = mmcs(sae, dic)
    assert float((cos > 0.9).float().mean()) >= 0.9, cos
    m = S.sae_metrics(sae, x[2400:])
    assert m["fvu"] < 0.25 and 0.5 < m["l0"] < 12
    if kind == "topk":
        assert m["l0"] <= 3 + 1e-6
    assert torch.allclose(sae.W_dec.norm(dim=1), torch.ones(M), atol=1e-5)  # unit-norm decoder kept
    assert hist["fvu"][-1] < hist["fvu"][0]
    # random unit directions of the same count are far worse matches
    g = torch.Generator().manual_seed(1)
    rnd = torch.randn(M, D, generator=g)
    rnd = rnd / rnd.norm(dim=1, keepdim=True)
    assert float(((dic @ rnd.T).max(1).values > 0.9).float().mean()) < 0.2


def test_sae_is_deterministic_and_seed_dependent():
    x, _, _ = planted(n=600)
    a, _ = S.train_sae(x, M, kind="topk", k=3, steps=30, seed=0)
    b, _ = S.train_sae(x, M, kind="topk", k=3, steps=30, seed=0)
    c, _ = S.train_sae(x, M, kind="topk", k=3, steps=30, seed=1)
    assert torch.equal(a.W_dec, b.W_dec) and not torch.equal(a.W_dec, c.W_dec)


def test_metrics_mean_what_they_say():
    x, _, _ = planted(n=500)
    sae = S.SparseAutoencoder(D, M, kind="topk", k=2, seed=0)
    with torch.no_grad():  # a decoder that cannot reconstruct: zero codes everywhere -> x_hat = b_dec = mean
        sae.b_dec.copy_(x.mean(0))
        sae.b_enc.fill_(-1e6)
    m = S.sae_metrics(sae, x)
    assert m["l0"] == 0 and m["dead_fraction"] == 1.0 and abs(m["fvu"] - 1.0) < 1e-5
    with torch.no_grad():  # one always-on latent -> L0 1 (topk keeps k=2, but ReLU zeroes the rest)
        sae.b_enc[5] = 1e3
    m = S.sae_metrics(sae, x)
    assert abs(m["l0"] - 1.0) < 1e-6 and abs(m["dead_fraction"] - (M - 1) / M) < 1e-9


def test_auxk_loss_changes_training_only_with_dead_latents():
    x, _, _ = planted(n=800)
    base, _ = S.train_sae(x, M, kind="topk", k=2, steps=60, seed=0)
    never, _ = S.train_sae(x, M, kind="topk", k=2, steps=60, seed=0, aux_k=8, dead_tokens=10**9)
    aux, _ = S.train_sae(x, M, kind="topk", k=2, steps=60, seed=0, aux_k=8, dead_tokens=256)
    assert torch.equal(base.W_dec, never.W_dec)  # no dead latent yet: AuxK adds nothing
    assert not torch.equal(base.W_dec, aux.W_dec)


def test_bad_input_refused():
    x, _, _ = planted(n=100)
    with pytest.raises(ConfigError):
        S.train_sae(x, M, kind="gated", k=3)
    with pytest.raises(ConfigError):
        S.SparseAutoencoder(D, M, kind="topk", k=0)
    with pytest.raises(ConfigError):
        S.train_sae(x[:, :, None], M, kind="topk", k=3)
    with pytest.raises(ConfigError):
        S.train_sae(torch.full((10, D), float("nan")), M, kind="topk", k=3)
    with pytest.raises(ConfigError):
        S.train_sae(x, M, kind="topk", k=3, aux_k=M + 1)
    with pytest.raises(ConfigError):
        S.sae_metrics(S.SparseAutoencoder(D, M, kind="relu"), x[:, :3])


def _gpt():
    return GPT(GPTConfig(vocab_size=24, seq_len=12, n_layers=2, n_heads=2, d_model=D), seed=0).eval()


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=24, hidden_size=D, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=32, tie_word_embeddings=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return HFModel(LlamaForCausalLM(cfg).eval())


@pytest.mark.parametrize("make", [_gpt, _llama])
def test_gather_activations_matches_the_cache_and_masks(make):
    model = make()
    ids = torch.randint(0, 24, (3, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 7:] = 0
    acts = S.gather_activations(model, [(ids, mask)], "blocks.1.resid_post")
    _, cache = model.run_with_cache(ids, ["blocks.1.resid_post"])
    full = cache["blocks.1.resid_post"]
    assert acts.shape == (36 - 5, D)
    assert torch.allclose(acts[:12], full[0]) and torch.allclose(acts[12:19], full[1, :7])
    two = S.gather_activations(model, [ids[:2], ids[2:]], "blocks.1.resid_post")
    assert torch.allclose(two, full.reshape(-1, D), atol=1e-6)


@pytest.mark.parametrize("make", [_gpt, _llama])
def test_spliced_nll_orders_by_reconstruction_quality(make):
    model = make()
    ids = torch.randint(0, 24, (8, 12), generator=torch.Generator().manual_seed(1))
    acts = S.gather_activations(model, [ids], "blocks.0.resid_post")
    fn = S.model_nll_fn(model, [ids], "blocks.0.resid_post")
    exact = S.SparseAutoencoder(D, D, kind="relu", seed=0)
    with torch.no_grad():  # an exact autoencoder: W_dec = W_enc = I; codes x - b_dec = x + 100 > 0 stay linear
        exact.W_dec.copy_(torch.eye(D))
        exact.W_enc.copy_(torch.eye(D))
        exact.b_dec.fill_(-100.0)
    r = S.spliced_nll(fn, exact)
    assert abs(r["nll_increase"]) < 1e-4 and abs(r["loss_recovered"] - 1) < 1e-3
    assert r["nll_zero_ablation"] != pytest.approx(r["nll_clean"])
    bad, _ = S.train_sae(acts, 32, kind="topk", k=1, steps=20, seed=0)
    good, _ = S.train_sae(acts, 32, kind="topk", k=8, steps=300, lr=3e-3, seed=0)
    rb, rg = S.spliced_nll(fn, bad), S.spliced_nll(fn, good)
    assert S.sae_metrics(good, acts)["fvu"] < S.sae_metrics(bad, acts)["fvu"]
    # an untrained model's NLL can fall when its input is perturbed: compare the size of the change
    assert abs(rg["nll_increase"]) < abs(rb["nll_increase"])
