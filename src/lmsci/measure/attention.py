"""Attention instruments for length generalization: max logit, entropy, NLL by position, start-token PCA.

Source: Han et al., "LM-Infinite", NAACL 2024, arXiv 2308.16137, Section 3: Theorem 1 / Figure 1(a)
(attention logits explode at unseen distances), Proposition 1 / Figure 1(b) (attention entropy grows
with the number of attended tokens), Theorem 3 / Figure 1(c) (starting tokens occupy a distinct region
of the hidden-state space; PCA of layer states), Table 1 / Figure 3 (NLL by position).

All instruments run the model through the blockwise attention harness of
:mod:`lmsci.models.attention_harness` (any :class:`~lmsci.models.attention_harness.AttentionPolicy`; the default
``full`` policy reproduces the model's own attention) and keep only per-query-row reductions, so memory
is O(n * (block + keys per block)) rather than O(n^2): they run at long lengths. Supported models: lmsci
GPT with ``pos`` in ``rope``/``alibi``, Hugging Face Llama-family causal LMs (Llama, Mistral, Qwen2, ...,
grouped-query attention included) and GPT-NeoX/Pythia (fused QKV, partial rotary).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from lmsci.errors import ConfigError
from lmsci.models.attention_harness import AttentionPatch, AttentionPolicy, full_policy
from lmsci.models.device import device_of


def _logits_of(out: Any) -> Tensor:
    return out if isinstance(out, Tensor) else out.logits


def _n_layers(patch: AttentionPatch) -> int:
    return len(patch._modules)


@dataclass
class AttentionProfile:
    """Per-layer, per-query-position attention statistics (batch- and head-averaged where stated).

    Attributes:
        q_pos: ``[n]`` query positions.
        max_logit: ``[n_layers, n]`` maximum pre-softmax logit over heads and visible keys (mean over batch).
        entropy: ``[n_layers, n]`` attention entropy ``-sum_j a_ij ln a_ij`` in nats (mean over heads, batch).
        n_keys: ``[n]`` number of keys each query attended to (the first layer's, batch element 0, head 0).
        last_row: ``[n_layers, n_heads, n_keys]`` logits of the last query row (``-inf`` where masked),
            batch element 0, indexed by key position; None unless requested.
    """

    q_pos: np.ndarray
    max_logit: np.ndarray
    entropy: np.ndarray
    n_keys: np.ndarray
    last_row: np.ndarray | None = None


@torch.no_grad()
def attention_profile(model: Any, input_ids: Tensor, policy: AttentionPolicy | None = None,
                      keep_last_row: bool = False) -> AttentionProfile:
    """Max attention logit and entropy for every layer and query position (Theorem 1, Proposition 1).

    Args:
        model: lmsci GPT (``rope``/``alibi``) or a Hugging Face Llama-family causal LM.
        input_ids: ``[batch, n]`` long.
        policy: attention policy (default: full causal attention = the model's own).
        keep_last_row: also return the last query's full logit row (the paper's "explosion" plot).

    Returns:
        :class:`AttentionProfile`.

    Raises:
        ConfigError: unsupported model or ``input_ids`` not 2-D.
    """
    if input_ids.dim() != 2:
        raise ConfigError("input_ids", tuple(input_ids.shape), "a [batch, seq] tensor")
    input_ids = input_ids.to(device_of(model))
    n = input_ids.shape[1]
    patch = AttentionPatch(model, policy or full_policy())
    L = _n_layers(patch)
    max_logit = np.full((L, n), np.nan)
    entropy = np.full((L, n), np.nan)
    n_keys = np.zeros(n)
    last_rows: dict[int, np.ndarray] = {}

    def rec(layer: int, qp: Tensor, kp: Tensor, logits: Tensor, probs: Tensor) -> None:
        rows = qp.cpu().numpy()
        max_logit[layer, rows] = logits.amax(dim=-1).amax(dim=1).mean(0).cpu().numpy()
        entropy[layer, rows] = (-torch.special.xlogy(probs, probs).sum(-1).mean(dim=(0, 1))).cpu().numpy()
        if layer == 0:
            n_keys[rows] = torch.isfinite(logits[0, 0]).sum(-1).cpu().numpy()
        if keep_last_row and int(qp[-1]) == n - 1:
            last_rows[layer] = (kp.cpu().numpy(), logits[0, :, -1].cpu().numpy())

    patch.recorder = rec
    with patch:
        model(input_ids)
    last = None
    if keep_last_row:
        H = next(iter(last_rows.values()))[1].shape[0]
        last = np.full((L, H, n), -np.inf)
        for layer, (kp, row) in last_rows.items():
            last[layer][:, kp] = row
    return AttentionProfile(np.arange(n), max_logit, entropy, n_keys, last)


def running_max_by_distance(last_row: np.ndarray) -> np.ndarray:
    """The paper's Figure 1(a) statistic: for the last query's logits ``[..., n]`` indexed by key
    position, flip to distance order (distance 0 first) and take the running maximum; ``-inf`` entries
    (masked keys) are skipped. Returns ``[..., n]``."""
    flipped = last_row[..., ::-1]
    return np.maximum.accumulate(np.where(np.isfinite(flipped), flipped, -np.inf), axis=-1)


def band_max_logit(last_row: np.ndarray, band: int) -> np.ndarray:
    """Theorem 1 with equal key counts: the last query's maximum logit over the keys at distances
    ``[k * band, (k + 1) * band)``, for every complete band ``k = 0 .. n // band - 1``.

    Args:
        last_row: ``[..., n]`` logits of the last query (position ``n - 1``) indexed by key position;
            ``-inf`` entries are masked keys and are skipped.
        band: keys per band (the training length L).

    Returns:
        ``[..., n // band]``; ``-inf`` where every key of a band is masked. Band k holds exactly
        ``band`` keys, so band maxima compare maxima over equally many keys.

    Raises:
        ConfigError: ``band`` not in ``[1, n]``.
    """
    n = last_row.shape[-1]
    if not 1 <= band <= n:
        raise ConfigError("band", band, f"an integer in [1, {n}]")
    nb = n // band
    by_dist = last_row[..., ::-1][..., : nb * band]  # distance 0 first
    by_dist = np.where(np.isfinite(by_dist), by_dist, -np.inf)
    return by_dist.reshape(*by_dist.shape[:-1], nb, band).max(axis=-1)


@torch.no_grad()
def nll_by_position(model: Any, input_ids: Tensor, policy: AttentionPolicy | None = None,
                    chunk: int | None = None) -> np.ndarray:
    """Per-token NLL in nats, ``[batch, n - 1]`` (entry t scores token t + 1 given tokens 0..t).

    Args:
        model: lmsci GPT or HF Llama-family model.
        input_ids: ``[batch, n]`` long.
        policy: attention policy to install while scoring; None = the model as it is (unpatched).
        chunk: with a policy, feed the input through a streaming session in chunks of this many
            tokens (bounded KV cache; ``1`` is StreamingLLM's token-by-token protocol); None = one pass
            through the blockwise long path.

    ``input_ids`` is moved to the model's device; the result comes back as a NumPy array.
    """
    input_ids = input_ids.to(device_of(model))
    if policy is None:
        out = _logits_of(model(input_ids))
    else:
        patch = AttentionPatch(model, policy)
        with patch:
            if chunk is None:
                out = patch._call_model(input_ids)
            else:
                parts = []
                with patch.stream() as s:
                    for a in range(0, input_ids.shape[1], chunk):
                        parts.append(s.feed(input_ids[:, a:a + chunk]))
                out = torch.cat(parts, dim=1)
    lp = torch.log_softmax(out[:, :-1].float(), dim=-1)
    nll = -lp.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    return nll.cpu().numpy()


def bucket_mean(values: np.ndarray, edges: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean of ``values [batch, n]`` over position buckets ``[edges[i], edges[i+1])``.

    Returns:
        ``(centers, mean, sem)`` each ``[len(edges) - 1]``; ``sem`` is the standard error over the
        batch of per-sequence bucket means (NaN with one sequence).
    """
    edges = list(edges)
    centers, means, sems = [], [], []
    for a, z in zip(edges[:-1], edges[1:]):
        z = min(z, values.shape[1])
        if a >= z:
            break
        per_seq = values[:, a:z].mean(axis=1)
        centers.append((a + z - 1) / 2)
        means.append(float(per_seq.mean()))
        sems.append(float(per_seq.std(ddof=1) / np.sqrt(len(per_seq))) if len(per_seq) > 1 else float("nan"))
    return np.array(centers), np.array(means), np.array(sems)


def log_buckets(n: int, first: int = 8, per_octave: int = 2) -> list[int]:
    """Bucket edges ``0, first, ..., n`` spaced geometrically (``per_octave`` buckets per doubling)."""
    edges = [0]
    x = float(first)
    while x < n:
        e = int(round(x))
        if e > edges[-1]:
            edges.append(e)
        x *= 2 ** (1.0 / per_octave)
    edges.append(n)
    return edges


@dataclass
class StartTokenPCA:
    """Per-layer 2-D PCA of hidden states (Theorem 3 / Figure 1(c) of arXiv 2308.16137).

    Attributes:
        layers: layer indices (hidden state after block ``i``).
        coords: ``[n_layers, n, 2]`` projections of the token states (batch element 0, or the batch
            mean of positions).
        separation: ``[n_layers]`` distance between the centroid of the first ``n_start`` tokens and the
            centroid of the rest, divided by the rest's RMS spread in the 2-D plane (>1 = separated).
        explained: ``[n_layers, 2]`` fraction of variance of each component.
        n_start: how many starting tokens are marked.
    """

    layers: list[int]
    coords: np.ndarray
    separation: np.ndarray
    explained: np.ndarray
    n_start: int


def _hidden_states(model: Any, input_ids: Tensor) -> list[Tensor]:
    if hasattr(model, "run_with_cache") and hasattr(model, "blocks"):
        names = [f"blocks.{i}.resid_post" for i in range(len(model.blocks))]
        _, cache = model.run_with_cache(input_ids, names)
        return [cache[nm] for nm in names]
    out = model(input_ids=input_ids, output_hidden_states=True, use_cache=False)
    return list(out.hidden_states[1:])


@torch.no_grad()
def start_token_pca(model: Any, input_ids: Tensor, n_start: int = 4,
                    policy: AttentionPolicy | None = None) -> StartTokenPCA:
    """PCA of each layer's hidden states ``[batch, n, d_model]`` showing where the first tokens sit.

    Hidden states are averaged over the batch at each position (so content averages out and position
    remains), centred, and projected on their top-2 principal components (``torch.linalg.svd``).

    Raises:
        ConfigError: ``n_start`` not in ``[1, n - 2]``.
    """
    n = input_ids.shape[1]
    if not 1 <= n_start <= n - 2:
        raise ConfigError("n_start", n_start, f"an integer in [1, {n - 2}]")
    input_ids = input_ids.to(device_of(model))
    if policy is not None:
        with AttentionPatch(model, policy):
            hs = _hidden_states(model, input_ids)
    else:
        hs = _hidden_states(model, input_ids)
    coords, sep, expl = [], [], []
    for h in hs:
        x = h.float().mean(0)  # [n, d]
        x = x - x.mean(0, keepdim=True)
        _, s, vt = torch.linalg.svd(x, full_matrices=False)
        c = (x @ vt[:2].T).cpu().numpy()
        var = (s ** 2) / (s ** 2).sum()
        rest = c[n_start:]
        spread = np.sqrt(((rest - rest.mean(0)) ** 2).sum(1).mean()) + 1e-12
        sep.append(float(np.linalg.norm(c[:n_start].mean(0) - rest.mean(0)) / spread))
        coords.append(c)
        expl.append(var[:2].cpu().numpy())
    return StartTokenPCA(list(range(len(hs))), np.stack(coords), np.array(sep), np.stack(expl), n_start)


__all__ = ["AttentionProfile", "attention_profile", "running_max_by_distance", "nll_by_position",
           "bucket_mean", "log_buckets", "StartTokenPCA", "start_token_pca"]
