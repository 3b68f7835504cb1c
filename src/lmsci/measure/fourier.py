"""Fourier instruments for modular arithmetic: the embedding's spectrum over Z_p, key frequencies, and the split of
logits into key-frequency directions and the rest (restricted / excluded logits).

Source: Nanda, Chan, Lieberum, Smith, Steinhardt, "Progress measures for grokking via mechanistic
interpretability", arXiv 2301.05217 (ICLR 2023), sec. 4 (the Fourier basis; W_E is sparse in it) and sec. 5.1
(restricted and excluded loss). Instruments take what they measure as arguments (no world imported).
"""

from __future__ import annotations

import math

import numpy as np
import torch


def fourier_basis(p: int, device: str | torch.device | None = None) -> torch.Tensor:
    """Orthonormal Fourier basis over Z_p, ``[p, p]`` float64 on ``device`` (default CPU) (rows): row 0 the constant
    ``1/sqrt(p)``, rows ``2k-1`` and ``2k`` the cosine and sine of frequency ``k = 1 .. (p-1)/2`` scaled to unit norm
    (p odd). Nanda et al. sec. 4."""
    x = torch.arange(p, dtype=torch.float64, device=device)
    rows = [torch.full((p,), 1.0, dtype=torch.float64, device=device)]
    for k in range(1, (p - 1) // 2 + 1):
        rows += [torch.cos(2 * math.pi * k * x / p), torch.sin(2 * math.pi * k * x / p)]
    B = torch.stack(rows)
    return B / B.norm(dim=1, keepdim=True)


def embedding_spectrum(W_E: torch.Tensor) -> tuple[np.ndarray, float]:
    """Share of the squared norm of ``W_E [p, d_model]`` (rows = residue tokens) per Fourier frequency.

    Returns:
        ``(shares [(p-1)/2], constant_share)``: ``shares[k-1]`` is the squared norm of the cosine and sine rows of
        frequency ``k`` of ``B W_E`` over ``||W_E||_F**2`` (``B`` = :func:`fourier_basis`); with the constant
        share they sum to 1.
    """
    p = W_E.shape[0]
    C = fourier_basis(p, device=W_E.device) @ W_E.detach().double()  # on W_E's device
    e = (C ** 2).sum(1).cpu()
    total = float(e.sum()) or 1.0
    shares = (e[1::2] + e[2::2]).numpy() / total
    return shares, float(e[0]) / total


def top_share(shares: np.ndarray, k: int) -> float:
    """Sum of the ``k`` largest per-frequency shares."""
    return float(np.sort(np.asarray(shares))[::-1][:k].sum())


def key_frequencies(shares: np.ndarray, n_key: int) -> list[int]:
    """The ``n_key`` frequencies (1-based) with the largest shares, in decreasing share."""
    order = np.argsort(-np.asarray(shares), kind="stable")[:n_key]
    return [int(i) + 1 for i in order]


def fourier_logit_split(logits_grid: torch.Tensor, keys: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Split logits over all pairs into the key-frequency part and the rest (Nanda et al. sec. 5.1).

    Args:
        logits_grid: ``[p, p, n_out]``, logits for input ``(x, y)`` (``x``-major), ``n_out`` output classes.
        keys: key frequencies ``k`` (1-based).

    Returns:
        ``(restricted, excluded)``, both ``[p, p, n_out]``: ``restricted`` keeps, for every output, the mean over
        pairs plus the projection onto ``cos(w_k (x + y))``, ``sin(w_k (x + y))`` (``w_k = 2 pi k / p``) of the key
        frequencies; ``excluded`` is the logits minus that projection (the mean kept).
    """
    p = logits_grid.shape[0]
    L = logits_grid.double()
    r = torch.arange(p, device=L.device)
    s = (r[:, None] + r[None, :]).double()  # on the logits' device
    dirs = []
    for k in keys:
        w = 2 * math.pi * k / p
        for u in (torch.cos(w * s), torch.sin(w * s)):
            dirs.append(u / u.norm())
    mean = L.mean(dim=(0, 1), keepdim=True)
    proj = torch.zeros_like(L)
    for u in dirs:  # orthonormal over the p x p grid
        coef = torch.einsum("xy,xyc->c", u, L)
        proj = proj + u[:, :, None] * coef[None, None, :]
    return (mean + proj).float(), (L - proj).float()
