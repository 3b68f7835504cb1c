"""LM-Steer transfer: a steer trained on one LM carried to another through a linear map between their
output-embedding spaces, fitted in closed form on shared tokens, with the held-out mapping error.

Source: Han, Xu, Li, Ji, "Word Embeddings Are Steers for Language Models", ACL 2024, arXiv 2305.12798
(v1 "LM-Switch": App. F transfer); the authors' code ``Glaciohound/LM-Steer@265982f``
(``experiments/steer_transfer.py``). Spec: ``shared/research/seed_authors_code.md`` Sec. 1. The steer itself is
:class:`lmsci.methods.lm_steer.LMSteer` (this module was split out of :mod:`lmsci.methods.lm_steer`).

With ``E_tgt A ~ E_src`` and ``E_src B ~ E_tgt`` (rows are embeddings), a steer ``W`` on the source becomes
``W' = B^T W A^T`` on the target (:meth:`EmbeddingMap.map_steer`; for an orthogonal Procrustes map ``W' = R W R^T``,
the paper's ``H^T W H``).

Shapes and API (``n`` shared tokens, ``d_src``/``d_tgt`` widths):

* :func:`fit_embedding_map` ``(E_src [n, d_src], E_tgt [n, d_tgt], method="lstsq"|"procrustes", holdout, seed)
  -> EmbeddingMap`` (``A [d_tgt, d_src]``, ``B [d_src, d_tgt]``, fitted and held-out relative errors).
* :func:`shared_tokens` ``(vocab_src, vocab_tgt, top_k) -> (src_ids [n], tgt_ids [n])``: the strings both
  vocabularies hold.
* :func:`transfer_steer` ``(steer, source_model, target_model, ...) -> (LMSteer on the target, EmbeddingMap)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from lmsci.errors import ConfigError
from lmsci.methods.lm_steer import LMSteer
from lmsci.methods.steerable import output_embeddings


# ------------------------------------------------------------------------------------ transfer


@dataclass
class EmbeddingMap:
    """A linear map between two LMs' output-embedding spaces, fitted on shared tokens.

    Row convention (embeddings are rows of ``E``): ``E_tgt A ~ E_src`` and ``E_src B ~ E_tgt``.

    Attributes:
        A: ``[d_tgt, d_src]`` target -> source. B: ``[d_src, d_tgt]`` source -> target.
        method: ``"lstsq"`` or ``"procrustes"``.
        fit_error: relative Frobenius error ``||E_src B - E_tgt|| / ||E_tgt||`` on the fitted tokens.
        heldout_error: the same on the held-out shared tokens (NaN when ``holdout = 0``): how well the map
            generalises beyond the tokens it was fitted on (0 = exact, about 1 or more = no relation).
        heldout_error_inverse: ``||E_tgt A - E_src|| / ||E_src||`` on the held-out tokens.
        n_fit, n_heldout: token counts.
    """

    A: Tensor
    B: Tensor
    method: str
    fit_error: float
    heldout_error: float
    heldout_error_inverse: float
    n_fit: int
    n_heldout: int

    def map_steer(self, steer: LMSteer) -> LMSteer:
        """The steer carried to the target space: with ``e_src ~ A^T e_tgt`` and ``e_tgt ~ B^T e_src`` (column
        vectors), ``e_tgt <- B^T (I + eps W) A^T e_tgt ~ (I + eps B^T W A^T) e_tgt``, so ``W' = B^T W A^T``, i.e.
        ``P1' = B^T P1``, ``P2' = A P2`` (``[d_tgt, r]``). For an orthogonal Procrustes map ``A = R``, ``B = R^T``
        this is ``W' = R W R^T`` (the paper's ``H^T W H`` with ``H = R^T``, App. F; the code uses one row-normalised
        least-squares matrix for both factors). Same names, dummies, rank (capped at ``d_tgt``: above it ``P1' = W'``,
        ``P2' = I``) and epsilon; on the device of ``A``.

        Raises:
            ConfigError: a steer whose width is not ``d_src``.
        """
        d_t, d_s = self.A.shape
        if steer.d_model != d_s:
            raise ConfigError("steer.d_model", steer.d_model, f"the source width {d_s} of this map")
        out = LMSteer(d_t, steer.names, rank=min(steer.rank, d_t), epsilon=steer.epsilon, dummy=False,
                      device=self.A.device)
        out.dummies = steer.dummies
        P1, P2 = steer.P1.detach().to(self.A), steer.P2.detach().to(self.A)
        P1t = torch.einsum("st,ksr->ktr", self.B, P1)                       # B^T P1  [K, d_t, r]
        P2t = torch.einsum("ts,ksr->ktr", self.A, P2)                       # A P2    [K, d_t, r]
        if steer.rank > d_t:  # a rank above the target width: store W' itself (P1' = W', P2' = I)
            P1t = torch.einsum("ktr,kur->ktu", P1t, P2t)
            P2t = torch.eye(d_t, device=self.A.device).expand(steer.K, -1, -1)
        out.P1.data.copy_(P1t.float())
        out.P2.data.copy_(P2t.float())
        return out


def _rel(pred: Tensor, true: Tensor) -> float:
    den = float(true.norm())
    return float((pred - true).norm()) / den if den > 0 else float("nan")


def fit_embedding_map(E_src: Tensor, E_tgt: Tensor, method: str = "lstsq", holdout: float = 0.2,
                      seed: int = 0) -> EmbeddingMap:
    """Fit the map between two output-embedding spaces on shared tokens, in closed form (float64).

    Args:
        E_src: ``[n, d_src]`` source embeddings of the shared tokens. E_tgt: ``[n, d_tgt]``, the same tokens, same
            order, in the target model.
        method: ``"lstsq"`` -- ``A = argmin ||E_tgt A - E_src||_F`` and ``B = argmin ||E_src B - E_tgt||_F`` (the
            authors' ``steer_transfer.py`` solves these by least squares; the paper v1 App. F by Adam);
            ``"procrustes"`` -- a scaled (semi-)orthogonal map: ``R = U V^T`` from the SVD ``E_tgt^T E_src =
            U S V^T`` (Schoenemann 1966; ``scipy.linalg.orthogonal_procrustes`` when ``d_src = d_tgt``), scale
            ``c = tr(S) / ||E_tgt||^2``; ``A = c R``, ``B = R^T / c``.
        holdout: fraction of the shared tokens held out (random, ``seed``) to measure the mapping error.

    Raises:
        ConfigError: unknown ``method``; mismatched token counts; ``holdout`` outside [0, 1); fewer fitted
            tokens than ``max(d_src, d_tgt)`` for ``lstsq`` (an under-determined fit).
    """
    if method not in ("lstsq", "procrustes"):
        raise ConfigError("method", method, "'lstsq' or 'procrustes'")
    if E_src.dim() != 2 or E_tgt.dim() != 2 or E_src.shape[0] != E_tgt.shape[0]:
        raise ConfigError("E_tgt", tuple(E_tgt.shape), f"[n, d_tgt] with n = {E_src.shape[0]} shared tokens as E_src")
    if not 0 <= holdout < 1:
        raise ConfigError("holdout", holdout, "a fraction in [0, 1)")
    n = E_src.shape[0]
    dev = E_src.device
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(int(seed))).to(dev)
    n_ho = int(round(holdout * n))
    fit, ho = perm[n_ho:], perm[:n_ho]
    Xs, Xt = E_src.detach().double(), E_tgt.detach().to(dev).double()
    S_fit, T_fit = Xs[fit], Xt[fit]
    if method == "lstsq":
        if len(fit) < max(Xs.shape[1], Xt.shape[1]):
            raise ConfigError("shared tokens", len(fit), f">= max(d_src, d_tgt) = {max(Xs.shape[1], Xt.shape[1])} "
                              "fitted tokens for a least-squares map")
        A = torch.linalg.lstsq(T_fit, S_fit).solution
        B = torch.linalg.lstsq(S_fit, T_fit).solution
    else:
        U, S, Vh = torch.linalg.svd(T_fit.T @ S_fit, full_matrices=False)
        R = U @ Vh                                                           # [d_t, d_s]
        c = float(S.sum() / (T_fit ** 2).sum().clamp(min=1e-300))
        A, B = c * R, R.T / c
    nan = float("nan")
    return EmbeddingMap(
        A=A.float(), B=B.float(), method=method, fit_error=_rel(S_fit @ B, T_fit),
        heldout_error=_rel(Xs[ho] @ B, Xt[ho]) if n_ho else nan,
        heldout_error_inverse=_rel(Xt[ho] @ A, Xs[ho]) if n_ho else nan, n_fit=len(fit), n_heldout=n_ho)


def shared_tokens(vocab_src: Mapping[str, int], vocab_tgt: Mapping[str, int], top_k: int | None = None) -> tuple[Tensor, Tensor]:
    """Token ids of the strings both vocabularies have (``tokenizer.get_vocab()``), ordered by source id, the first
    ``top_k`` of them (the authors' code: the first 4000): ``(src_ids [n], tgt_ids [n])`` long tensors."""
    common = sorted((i, vocab_tgt[s]) for s, i in vocab_src.items() if s in vocab_tgt)[:top_k]
    src = torch.tensor([a for a, _ in common], dtype=torch.long)
    tgt = torch.tensor([b for _, b in common], dtype=torch.long)
    return src, tgt


def transfer_steer(steer: LMSteer, source_model: Any, target_model: Any, source_ids: Tensor | None = None,
                   target_ids: Tensor | None = None, method: str = "lstsq", holdout: float = 0.2,
                   seed: int = 0) -> tuple[LMSteer, EmbeddingMap]:
    """Carry ``steer`` (trained on ``source_model``) to ``target_model`` (paper v1 App. F; code
    ``experiments/steer_transfer.py``) through :func:`fit_embedding_map` on the output embeddings of the shared
    tokens ``source_ids``/``target_ids`` (``[n]`` each; default: every id when both vocabularies have the same size,
    i.e. one tokenizer -- otherwise use :func:`shared_tokens`). Returns ``(steer on the target, the map with its
    held-out error)``. The paper generates with the transferred steer at a reduced ``0.5 eps0``.

    Raises:
        ConfigError: different vocabulary sizes without ids; a steer of another width than the source; see
            :func:`fit_embedding_map`.
    """
    Es, Et = output_embeddings(source_model), output_embeddings(target_model)
    if steer.d_model != Es.shape[1]:
        raise ConfigError("steer.d_model", steer.d_model, f"the source model's width {Es.shape[1]}")
    if source_ids is None or target_ids is None:
        if Es.shape[0] != Et.shape[0]:
            raise ConfigError("source_ids/target_ids", None, "shared token ids (shared_tokens(...)) when the "
                              f"vocabularies differ ({Es.shape[0]} vs {Et.shape[0]})")
        source_ids = target_ids = torch.arange(Es.shape[0])
    emap = fit_embedding_map(Es[source_ids.to(Es.device)], Et[target_ids.to(Et.device)].to(Es.device), method,
                             holdout, seed)
    emap.A, emap.B = emap.A.to(Et.device), emap.B.to(Et.device)
    return emap.map_steer(steer), emap


__all__ = ["EmbeddingMap", "fit_embedding_map", "shared_tokens", "transfer_steer"]
