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
* In :mod:`lmsci.methods.lm_steer_transfer` (App. F): :func:`~lmsci.methods.lm_steer_transfer.fit_embedding_map`,
  :func:`~lmsci.methods.lm_steer_transfer.transfer_steer`: a steer moved to another LM through a closed-form map
  between output-embedding spaces on shared tokens, with the held-out mapping error.
* In :mod:`lmsci.methods.lm_steer_analysis`: :func:`~lmsci.methods.lm_steer_analysis.max_subspans`,
  :func:`~lmsci.methods.lm_steer_analysis.highlight`: keyword highlighting by dynamic programming;
  :func:`~lmsci.methods.lm_steer_analysis.steer_analysis`: the steer value that explains a text best;
  :func:`~lmsci.methods.lm_steer_analysis.svd_probe` (App. G): per singular direction of ``W``, the tokens scoring
  highest and lowest (``contexts`` from :func:`unembed_inputs`).
* :func:`save_steer`, :func:`load_steer`: a steer on disk (``steer.json`` + ``steer.safetensors``).

Models: an lmsci GPT (the steer sits on hook point ``final``, the input of ``lm_head``) or any Hugging Face causal
LM, tied or untied (a forward pre-hook on ``get_output_embeddings()``); see :mod:`lmsci.methods.steering`.
Baselines in the same harness: :class:`~lmsci.methods.steering.LogitOffset`, :class:`~lmsci.methods.steering.ActAdd`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
            :func:`lmsci.methods.steer_training.train_intervention` (defaults: the README's GPT2-Large run).

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


__all__ = ["EPSILON0", "LMSteer", "train_steer", "generate", "token_logprobs", "steering", "Steer", "LogitOffset",
           "ActAdd", "hidden_size", "output_embeddings", "as_steerable", "save_steer", "load_steer", "unembed_inputs"]
