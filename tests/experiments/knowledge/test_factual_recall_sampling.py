"""``sample_stack`` (in-place arithmetic since session 53) draws exactly the batches of the reference out-of-place
form it replaced: same generator calls in the same order, same values (bitwise), so factual-recall's runs are
unchanged."""

import torch

from lmsci.worlds.factual_recall import FactualRecallWorld, sample_stack


def _reference(worlds, batch_size, generator):
    """The out-of-place form of ``sample_stack`` before session 53 (input_ids, targets, subjects, relations)."""
    T, M, B = worlds[0].T, len(worlds), batch_size

    def col(attr):
        return torch.tensor([getattr(w, attr) for w in worlds], dtype=torch.float64)[:, None]

    S, R, N = col("S"), col("R"), col("n_noise")
    s = (torch.rand(M, B, generator=generator, dtype=torch.float64) * S).long()
    r = (torch.rand(M, B, generator=generator, dtype=torch.float64) * R).long()
    i = torch.randint(0, T - 1, (M, B), generator=generator)
    j = torch.randint(0, T - 2, (M, B), generator=generator)
    j = j + (j >= i).long()
    x = (torch.rand(M, B, T, generator=generator) * N[:, :, None].float()).long()
    x = x.clamp_max(N[:, :, None].long() - 1) + col("noise_offset").long()[:, :, None]
    x.scatter_(2, i[:, :, None], s[:, :, None])
    x.scatter_(2, j[:, :, None], (r + col("relation_offset").long())[:, :, None])
    x[:, :, T - 1] = col("eos").long()
    return x, torch.stack([w.fact_table[s[k], r[k]] for k, w in enumerate(worlds)]), s, r


def test_sample_stack_equals_reference_form():
    ws = [FactualRecallWorld(S, R, D, n_noise=n, seq_len=16, seed=S * 31 + R)
          for S, R, D, n in ((2, 1, 1, 3), (5, 4, 8, None), (17, 16, 3, None), (9, 9, 8, 1))]
    for seed in range(4):
        got = sample_stack(ws, 200, torch.Generator().manual_seed(seed))
        ref = _reference(ws, 200, torch.Generator().manual_seed(seed))
        for a, b in zip((got.input_ids, got.targets, got.subjects, got.relations), ref):
            assert a.dtype == b.dtype and torch.equal(a, b)
