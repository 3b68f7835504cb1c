"""LM-Steer: a linear map on the output word embeddings steers a frozen causal LM.

Source: Han, Xu, Li, Ji, "Word Embeddings Are Steers for Language Models", ACL 2024, arXiv 2305.12798
(v1 "LM-Switch": Sec. 3.3, App. D training, App. F transfer, App. G SVD probe); the authors' code
``Glaciohound/LM-Steer@265982f`` (``lm_steer/models/steers.py``, ``model_base.py``, ``model_utils.py``,
``experiments/steer_transfer.py``, ``experiments/pca_analysis.py``). Spec: ``shared/research/seed_authors_code.md`` Sec. 1.

The method
----------
Let ``h in R^d`` be the input of the unembedding at a position (the final hidden state, after the final norm)
and ``e_v`` the output embedding of token ``v`` (row ``v`` of ``E = lm_head.weight [V, d]``). The LM's logit is
``l_v = h . e_v``. LM-Steer replaces every output embedding by ``e_v <- (I + eps W) e_v`` (paper Sec. 3.3), so

    l_v = h^T (I + eps W) e_v = ((I + eps W)^T h)^T e_v = (h + eps W^T h) . e_v .

So the steer can act on ``h`` instead of on the ``V`` embeddings: ``h <- h + eps W^T h`` (column vectors), i.e.
for a row vector ``h`` (as stored in a ``[B, T, d]`` tensor) ``h <- h + eps h W``. With the low-rank
factorisation ``W = P1 P2^T`` (``P1, P2 in R^{d x r}``) this is ``h <- h + eps (h P1) P2^T``, exactly the
authors' ``Projected_Adaptor.forward`` (``steers.py``), at O(d r) per position and without touching tied
input/output embeddings. ``W`` acts on the embedding side (left of ``e_v``); on the hidden side it is ``W^T``.
``r = d`` (the default) gives a full ``d x d`` map (the paper's parameterisation; the code uses r = 1000 < d for
GPT2-Large). Several steers with per-example values ``s [B, K]`` sum linearly (``steers.py``):

    h <- h + eps * sum_k s_k (h P1_k) P2_k^T ,   i.e.  W(s) = sum_k s_k P1_k P2_k^T .

Hence continuous control (``k s`` scales the edit of ``h`` by ``k``) and composition (steers add, exactly, in the
hidden space: :meth:`LMSteer.combine` concatenates steers into one module so ``W(s_a + s_b) = W(s_a) + W(s_b)``).
Attaching two separately trained steers at once instead chains them (the second sees the first's output:
``h + eps h W_a + eps h W_b + eps^2 h W_a W_b``); use :meth:`LMSteer.combine` for the exact sum.

The dummy steer. In the authors' training (``experiments/training/train.py``: ``batch_stance[:, training_steer]
= label``, ``batch_stance[:, dummy_steer] = 1``) a second steer is set to 1 for every training text, whatever
its label, so that it absorbs the shift common to all training texts (the domain: e.g. "is a tweet") and the
attribute steer learns only the difference between the labels (positive texts train ``W_dummy + W``, negative
``W_dummy - W``). At generation the README passes ``--steer_values 5 1`` (dummy kept at 1), the demo app 0.
Here: ``LMSteer(..., dummy=True)`` (default) appends a steer named ``"dummy"``; :func:`train_steer` sets it to 1
for every example; :meth:`Steer.values` sets every dummy to its ``dummy=`` argument, default 1 (the README);
pass ``dummy=0`` to drop the domain shift at decode. ``dummy=False`` trains without it.

Training (:func:`train_steer`, App. D and the README): next-token cross-entropy of the steered LM on labelled
texts, LM frozen, Adam; defaults are the README's GPT2-Large run: ``epsilon = 1e-3`` (eps0), lr 1e-2, 1000 steps,
batch 32, max length 256, init ``randn * 1e-2`` (the code's ``--init_var``; the paper says variance 1e-3), L2 0
(the sentiment run used 1e-6); rank ``r = d`` (full W; at our widths ``2 K d^2`` parameters are few).
Differences from the authors' code: the loss masks padding (theirs counts padded EOS tokens), the dummy steer is
explicit and configurable, and gradients into the LM are checked to be absent.

Shapes and API (``B`` batch, ``T`` sequence, ``K`` steers, ``V`` vocabulary, ``d`` width, ``r`` rank):

* :class:`LMSteer` ``(d_model, names=("attr",), rank=None, epsilon=1e-3, init_std=1e-2, dummy=True, seed=0,
  device=None)``: parameters ``P1, P2 [K, d, r]``; :meth:`~LMSteer.shift` ``(h [B, ..., d], s [B, K])``;
  :meth:`~LMSteer.matrix` ``(name) -> W [d, d]``; :meth:`~LMSteer.combine`; :meth:`~LMSteer.values`
  (``[K]`` steer values by name); ``attach(model)`` / :func:`steering` to act on a model.
* :func:`train_steer` ``(model, data, labels, ...) -> LMSteer``: ``labels [N]`` (value of the attribute steer per
  text; dummy at 1) or ``[N, K]`` (all steer values).
* :func:`generate`, :func:`token_logprobs` (from :mod:`lmsci.methods.steering`): decode / score with steer values.
* :func:`fit_embedding_map`, :func:`transfer_steer`: a steer moved to another LM through a closed-form map between
  output-embedding spaces on shared tokens, with the held-out mapping error.
* :func:`max_subspans`, :func:`highlight`: keyword highlighting by dynamic programming; :func:`steer_analysis`:
  the steer value that explains a text best.
* :func:`svd_probe`: per singular direction of ``W``, the tokens scoring highest and lowest
  (``contexts`` from :func:`unembed_inputs`).
* :func:`save_steer`, :func:`load_steer`: a steer on disk (``steer.json`` + ``steer.safetensors``).

Models: an lmsci GPT (the steer sits on hook point ``final``, the input of ``lm_head``) or any Hugging Face causal
LM, tied or untied (a forward pre-hook on ``get_output_embeddings()``); see :mod:`lmsci.methods.steering`.
Baselines in the same harness: :class:`~lmsci.methods.steering.LogitOffset`, :class:`~lmsci.methods.steering.ActAdd`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from lmsci.errors import ConfigError
from lmsci.methods.steer_training import train_intervention
from lmsci.methods.steerable import as_steerable, as_token_lists, hidden_size, output_embeddings, unembed_inputs
from lmsci.methods.steering import (
    ActAdd,
    LogitOffset,
    Steer,
    generate,
    load_steer,
    save_steer,
    steering,
    token_logprobs,
)
from lmsci.models.device import device_of

EPSILON0 = 1e-3
"""The paper's eps0 (``--epsilon``); "5 eps0" is steer value 5 with ``epsilon = EPSILON0``."""


class LMSteer(Steer):
    """``K`` LM-Steer steers ``W_k = P1_k P2_k^T`` acting on the input of the unembedding.

    ``h <- h + epsilon * sum_k s_k (h P1_k) P2_k^T`` (``h [B, ..., d]``, ``s [B, K]``); equivalently every output
    embedding ``e_v <- (I + epsilon W(s)) e_v`` (module docstring; arXiv 2305.12798 Sec. 3.3).

    Args:
        d_model: ``d``, the width of the input of the unembedding (:func:`hidden_size` of the model).
        names: the attribute steers; with ``dummy=True`` a steer ``"dummy"`` is appended (``K = len(names)+1``).
        rank: ``r`` (default ``d``: a full ``d x d`` W). Raises ConfigError above ``d`` or below 1.
        epsilon: the scalar step ``eps`` (default eps0 = 1e-3).
        init_std: ``P1, P2 ~ N(0, init_std^2)`` (the code's ``randn * init_var``, 1e-2).
        seed: initialisation seed (a private generator; the global RNG is untouched).
        device: where the parameters live (:func:`train_steer` moves them to the model's device).
    """

    site = "unembed_input"

    def __init__(self, d_model: int, names: Sequence[str] = ("attr",), rank: int | None = None,
                 epsilon: float = EPSILON0, init_std: float = 1e-2, dummy: bool = True, seed: int = 0,
                 device: str | torch.device | None = None):
        super().__init__(names, dummy, epsilon)
        d = int(d_model)
        if d < 1:
            raise ConfigError("d_model", d_model, ">= 1")
        r = d if rank is None else int(rank)
        if not 1 <= r <= d:
            raise ConfigError("rank", rank, f"an integer in 1..d_model={d} (d_model = full W)")
        self.d_model, self.rank = d, r
        g = torch.Generator().manual_seed(int(seed))
        self.P1 = nn.Parameter((torch.randn(self.K, d, r, generator=g) * init_std).to(device))
        self.P2 = nn.Parameter((torch.randn(self.K, d, r, generator=g) * init_std).to(device))

    def config(self) -> dict[str, Any]:
        return {**super().config(), "d_model": self.d_model, "rank": self.rank}

    def check_model(self, model: Any) -> None:
        d = hidden_size(model)
        if d != self.d_model:
            raise ConfigError("d_model", self.d_model, f"the model's unembedding input width {d}")

    def shift(self, h: Tensor, coef: Tensor) -> Tensor:
        """``h [B, ..., d]``, ``coef [B, K]`` -> ``h + eps sum_k coef_k (h P1_k) P2_k^T`` (same shape and dtype;
        computed in float32)."""
        x = h.float()
        B = x.shape[0]
        flat = x.reshape(B, -1, self.d_model)                                  # [B, T, d]
        u = torch.einsum("btd,kdr->btkr", flat, self.P1.float())              # [B, T, K, r]
        u = u * coef.float()[:, None, :, None]
        delta = torch.einsum("btkr,kdr->btd", u, self.P2.float())             # [B, T, d]
        return (flat + self.epsilon * delta).reshape(h.shape).to(h.dtype)

    def matrix(self, name: str | None = None, values: Tensor | Mapping[str, float] | None = None) -> Tensor:
        """``W [d, d]``: of steer ``name`` (default the first attribute), or ``W(s) = sum_k s_k P1_k P2_k^T``
        for steer ``values`` (``[K]`` or a mapping; dummies at 0 unless named). Detached, float32.

        Raises:
            UnknownNameError: a name that is not one of this steer's.
        """
        P1, P2 = self.P1.detach().float(), self.P2.detach().float()
        if values is not None:
            s = self.values(values, dummy=0.0) if isinstance(values, Mapping) else torch.as_tensor(values).float()
            return torch.einsum("k,kdr,ker->de", s.to(P1.device), P1, P2)
        k = self.index(name if name is not None else self.attributes[0])
        return P1[k] @ P2[k].T

    @classmethod
    def combine(cls, steers: Sequence[LMSteer], prefixes: Sequence[str] | None = None) -> LMSteer:
        """One LMSteer holding every steer of ``steers`` (composition by sum: the combined steer with values
        ``s = [s_a, s_b]`` gives ``h + eps (W_a(s_a) + W_b(s_b))^T h``, exactly the sum of the two edits).

        Names: ``prefixes[i] + name`` when ``prefixes`` is given; otherwise names are kept, and a name occurring
        in several steers (e.g. each one's ``"dummy"``) becomes ``f"{name}.{i}"``. Ranks are zero-padded to the
        largest; each steer's ``epsilon`` is folded into its ``P1`` (the result has the first one's epsilon).

        Raises:
            ConfigError: no steers, different widths, or ``prefixes`` of the wrong length.
        """
        steers = list(steers)
        if not steers:
            raise ConfigError("steers", 0, "at least one LMSteer")
        d = steers[0].d_model
        if any(s.d_model != d for s in steers):
            raise ConfigError("steers", [s.d_model for s in steers], "steers of one width d_model")
        if prefixes is not None and len(prefixes) != len(steers):
            raise ConfigError("prefixes", list(prefixes), f"{len(steers)} prefixes, one per steer")
        counts: dict[str, int] = {}
        for s in steers:
            for n in s.names:
                counts[n] = counts.get(n, 0) + 1
        names, dummies = [], []
        for i, s in enumerate(steers):
            for n in s.names:
                new = prefixes[i] + n if prefixes is not None else (f"{n}.{i}" if counts[n] > 1 else n)
                names.append(new)
                if n in s.dummies:
                    dummies.append(new)
        r = max(s.rank for s in steers)
        eps = steers[0].epsilon
        out = cls(d, names, rank=r, epsilon=eps, dummy=False, device=steers[0].P1.device)
        out.dummies = tuple(dummies)
        P1 = torch.zeros_like(out.P1.data)
        P2 = torch.zeros_like(out.P2.data)
        k = 0
        for s in steers:
            P1[k:k + s.K, :, :s.rank] = s.P1.detach().to(P1) * (s.epsilon / eps if eps else 1.0)
            P2[k:k + s.K, :, :s.rank] = s.P2.detach().to(P2)
            k += s.K
        out.P1.data.copy_(P1)
        out.P2.data.copy_(P2)
        return out

    def num_trainable(self) -> int:
        """Number of trained parameters (``2 K d r``)."""
        return self.P1.numel() + self.P2.numel()


def train_steer(
    model: Any,
    data: Any,
    labels: Any,
    *,
    steer: Steer | None = None,
    names: Sequence[str] = ("attr",),
    target: str | None = None,
    rank: int | None = None,
    epsilon: float = EPSILON0,
    init_std: float = 1e-2,
    dummy: bool = True,
    lr: float = 1e-2,
    steps: int = 1000,
    batch_size: int = 32,
    max_length: int = 256,
    l2: float = 0.0,
    seed: int = 0,
    pad_id: int = 0,
    tokenizer: Any = None,
    on_step: Any = None,
) -> Steer:
    """Train an LM-Steer (or the given ``steer``: a baseline) on labelled texts, the LM frozen.

    Args:
        model: lmsci GPT, HFModel or ``transformers`` causal LM (any device; the steer follows it).
        data: ``N`` texts (with ``tokenizer``) or token sequences (lists, 1-D tensors, or ``[N, T]``).
        labels: ``[N]`` -- the value of steer ``target`` (default the first attribute) per text, every dummy
            steer at 1 and the other steers at 0 (the paper: +1 for the target attribute's texts, -1 for the
            opposite; graded values allowed, e.g. SST-5 ``y/2 - 1``); or ``[N, K]`` -- all steer values.
        steer: an untrained :class:`Steer` to train instead of a new :class:`LMSteer` (then ``names``, ``rank``,
            ``epsilon``, ``init_std``, ``dummy`` are ignored).
        names, rank, epsilon, init_std, dummy, seed: of the new :class:`LMSteer` (seed also orders batches).
        lr, steps, batch_size, max_length, l2, pad_id, on_step: see
            :func:`lmsci.methods.steering.train_intervention` (defaults: the README's GPT2-Large run).

    Returns:
        The trained steer (``.history``: loss per step, nats/token).

    Raises:
        ConfigError: labels of the wrong shape, unknown ``target``, rank above ``d``, a model without an
            ``lm_head``. DivergedError: a non-finite loss.
    """
    m = as_steerable(model)
    if steer is None:
        steer = LMSteer(hidden_size(m), names, rank=rank, epsilon=epsilon, init_std=init_std, dummy=dummy,
                        seed=seed, device=device_of(m))
    n = len(as_token_lists(data, tokenizer, max_length))
    y = torch.as_tensor(labels, dtype=torch.float32)
    if y.dim() == 1:
        if y.shape[0] != n:
            raise ConfigError("labels", tuple(y.shape), f"[N] or [N, K] with N={n} texts")
        vals = steer.values(batch=n).cpu()
        vals[:, steer.index(target if target is not None else steer.attributes[0])] = y
    elif y.dim() == 2 and y.shape == (n, steer.K):
        vals = y
    else:
        raise ConfigError("labels", tuple(y.shape), f"[N] or [N, K] with N={n}, K={steer.K} ({steer.names})")
    return train_intervention(m, steer, data, vals, lr=lr, steps=steps, batch_size=batch_size,
                              max_length=max_length, l2=l2, seed=seed, pad_id=pad_id, tokenizer=tokenizer,
                              on_step=on_step)


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


# ------------------------------------------------------------------------------------ highlighting


def max_subspans(scores: Sequence[float] | Tensor, n_spans: int = 4, max_len: int = 10) -> tuple[list[tuple[int, int]], float]:
    """At most ``n_spans`` disjoint contiguous spans, each of at most ``max_len`` items, maximising the summed
    ``scores`` (the authors' ``find_max_subspans``, ``lm_steer/models/model_utils.py``).

    Dynamic programme over ``best[k][i]`` = the best total within the first ``i`` items using at most ``k`` spans:
    ``best[k][i] = max(best[k][i-1], max_{1<=l<=max_len} best[k-1][i-l-1] + sum(scores[i-l:i]))``; O(T n_spans
    max_len). Spans are separated by at least one item (the authors' DP lets spans touch and then reads the
    segments off the in/out tags, so two touching spans come back as one segment longer than ``max_length``; here
    every returned span is at most ``max_len``). Spans with a non-positive sum are never chosen (fewer spans are
    returned then). Returns ``([(start, end), ...] half-open, sorted by start; total)``.

    Raises:
        ConfigError: ``n_spans`` or ``max_len`` below 1.
    """
    if int(n_spans) < 1:
        raise ConfigError("n_spans", n_spans, ">= 1")
    if int(max_len) < 1:
        raise ConfigError("max_len", max_len, ">= 1")
    x = [float(v) for v in (scores.tolist() if isinstance(scores, Tensor) else scores)]
    T = len(x)
    csum = [0.0]
    for v in x:
        csum.append(csum[-1] + v)
    best = [[0.0] * (T + 1) for _ in range(n_spans + 1)]
    choice: list[list[int]] = [[0] * (T + 1) for _ in range(n_spans + 1)]  # 0 = skip item i-1, l = span length
    for k in range(1, n_spans + 1):
        prev, cur, ch = best[k - 1], best[k], choice[k]
        for i in range(1, T + 1):
            cur[i], ch[i] = cur[i - 1], 0
            for ln in range(1, min(max_len, i) + 1):
                val = (prev[i - ln - 1] if i - ln >= 1 else 0.0) + csum[i] - csum[i - ln]  # a gap before the span
                if val > cur[i] + 1e-12:
                    cur[i], ch[i] = val, ln
    spans, k, i = [], n_spans, T
    while i > 0 and k > 0:
        ln = choice[k][i]
        if ln == 0:
            i -= 1
        else:
            spans.append((i - ln, i))
            i, k = i - ln - 1, k - 1
    return sorted(spans), best[n_spans][T]


@dataclass
class Highlight:
    """Keyword highlighting of one text (:func:`highlight`).

    Attributes:
        spans: ``[(start, end), ...]`` half-open token positions in the input ids (sorted).
        delta: ``[T-1]`` float, ``delta[t-1] = log P_a(x_t | x_<t) - log P_b(x_t | x_<t)`` (nats), t = 1..T-1.
        score: the summed delta over the spans.
    """

    spans: list[tuple[int, int]]
    delta: Tensor
    score: float


def highlight(model: Any, steer: Steer, input_ids: Tensor, values_a: Tensor | Mapping[str, float],
              values_b: Tensor | Mapping[str, float], n_spans: int = 4, max_len: int = 10) -> Highlight:
    """The words of a text that carry a style: per-token log-likelihood difference between two steer settings
    (e.g. ``{"attr": 1}`` vs ``{"attr": -1}``), then :func:`max_subspans` (authors' ``evidence_words``, defaults
    ``n_spans = 4``, ``max_len = 10``). ``input_ids``: ``[T]`` or ``[1, T]``. The delta of target ``t`` belongs to
    token ``t`` (the +1 shift of the authors' code), so spans index ``input_ids`` directly."""
    ids = input_ids if input_ids.dim() == 2 else input_ids[None]
    if ids.shape[0] != 1:
        raise ConfigError("input_ids", tuple(input_ids.shape), "one text: [T] or [1, T]")
    delta = (token_logprobs(model, ids, steer, values_a) - token_logprobs(model, ids, steer, values_b))[0]
    spans, score = max_subspans(delta, n_spans, max_len)
    return Highlight([(a + 1, b + 1) for a, b in spans], delta.detach(), score)


@torch.no_grad()
def steer_analysis(model: Any, steer: Steer, input_ids: Tensor, name: str | None = None,
                   grid: Sequence[float] = (-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0), dummy: float = 1.0,
                   temperature: float = 10.0) -> dict[str, Any]:
    """Which steer value explains a text best (the authors' ``steer_analysis``, ``model_base.py``; the demo's text
    analyser): the mean NLL (nats/token) of ``input_ids`` (``[T]`` or ``[B, T]``, averaged over all targets) under
    steer ``name`` (default the first attribute) at each value of ``grid`` (dummies at ``dummy``).

    Returns:
        ``{"grid": [G], "loss": [G], "best": the grid value of least loss, "distribution": softmax(temperature *
        (mean(loss) - loss))}`` (the code's pseudo-distribution, temperature 10), as Python floats.
    """
    name = name if name is not None else steer.attributes[0]
    ids = input_ids if input_ids.dim() == 2 else input_ids[None]
    losses = []
    for g in grid:
        lp = token_logprobs(model, ids, steer, steer.values({name: float(g)}, dummy=dummy))
        losses.append(float(-lp.mean()))
    loss = torch.tensor(losses, dtype=torch.float64)
    dist = torch.softmax(temperature * (loss.mean() - loss), 0)
    return {"grid": [float(g) for g in grid], "loss": losses, "best": float(grid[int(loss.argmin())]),
            "distribution": dist.tolist()}


# ------------------------------------------------------------------------------------ SVD probe


@dataclass
class SVDDirection:
    """One singular direction of a steer's ``W`` (:func:`svd_probe`).

    Attributes:
        index: rank of the direction (0 = largest singular value). singular_value: ``S_j``.
        top_ids, top_scores: the ``n_tokens`` tokens with the largest ``E v_j`` (descending).
        bottom_ids, bottom_scores: the ``n_tokens`` with the smallest (ascending).
        top_tokens, bottom_tokens: their strings when ``decode`` was given, else None.
    """

    index: int
    singular_value: float
    top_ids: list[int]
    top_scores: list[float]
    bottom_ids: list[int]
    bottom_scores: list[float]
    top_tokens: list[str] | None = None
    bottom_tokens: list[str] | None = None


@torch.no_grad()
def svd_probe(steer: LMSteer, embeddings: Any, name: str | None = None, k: int = 10, n_tokens: int = 20,
              contexts: Tensor | None = None, decode: Any = None) -> list[SVDDirection]:
    """The words a steer's dimensions act on (paper v1 App. G; code ``experiments/pca_analysis.py``).

    ``W = P1 P2^T`` of steer ``name`` (default the first attribute) = ``U diag(S) V^T``. A position with hidden state
    ``h`` moves by ``eps sum_j S_j (h . u_j) v_j``, so token ``v``'s logit moves by ``eps sum_j S_j (h . u_j)
    (v_j . e_v)``: direction ``j`` raises the tokens with large ``E v_j`` and lowers those with small ``E v_j``
    when ``h . u_j > 0``. For each of the first ``k`` directions the tokens are scored by ``E v_j``
    (``E = embeddings [V, d]``, or the output embeddings of a model) and the ``n_tokens`` highest and lowest are
    returned. SVD signs are arbitrary; each ``(u_j, v_j)`` pair is flipped so that ``mean(contexts @ u_j) >= 0``
    when ``contexts [N, d]`` (hidden states of typical positions) are given -- then "top" tokens are those the steer
    promotes at positive steer values -- else so that the largest ``|E v_j|`` is positive.

    Raises:
        ConfigError: ``k`` or ``n_tokens`` below 1; embeddings of another width.
    """
    if int(k) < 1:
        raise ConfigError("k", k, ">= 1")
    if int(n_tokens) < 1:
        raise ConfigError("n_tokens", n_tokens, ">= 1")
    E = embeddings if isinstance(embeddings, Tensor) else output_embeddings(embeddings)
    E = E.detach().float()
    if E.dim() != 2 or E.shape[1] != steer.d_model:
        raise ConfigError("embeddings", tuple(E.shape), f"[V, d] with d = {steer.d_model}")
    W = steer.matrix(name).to(E.device)
    U, S, Vh = torch.linalg.svd(W)
    n_tok = min(int(n_tokens), E.shape[0])
    out = []
    for j in range(min(int(k), S.shape[0])):
        u, v = U[:, j], Vh[j]
        scores = E @ v
        if contexts is not None:
            flip = float((contexts.to(E.device).float() @ u).mean()) < 0
        else:
            flip = float(scores[scores.abs().argmax()]) < 0
        if flip:
            scores = -scores
        top = torch.topk(scores, n_tok)
        bot = torch.topk(-scores, n_tok)
        d = SVDDirection(j, float(S[j]), top.indices.tolist(), top.values.tolist(), bot.indices.tolist(),
                         (-bot.values).tolist())
        if decode is not None:
            d.top_tokens = [decode(i) for i in d.top_ids]
            d.bottom_tokens = [decode(i) for i in d.bottom_ids]
        out.append(d)
    return out


__all__ = ["EPSILON0", "LMSteer", "train_steer", "generate", "token_logprobs", "steering", "Steer", "LogitOffset",
           "ActAdd", "hidden_size", "output_embeddings", "as_steerable", "EmbeddingMap", "fit_embedding_map",
           "shared_tokens", "transfer_steer", "max_subspans", "Highlight", "highlight", "SVDDirection", "svd_probe",
           "steer_analysis", "save_steer", "load_steer", "unembed_inputs"]
