"""V-probing: a frozen language model, a trainable rank-r update of its input embedding and a linear head on the
last-layer hidden state at chosen positions.

Source: Ye, Xu, Li, Allen-Zhu, "Physics of Language Models: Part 2.1, Grade-School Math and the Hidden Reasoning
Process", arXiv 2407.20311, sec. 4 ("V-probing"): the input is truncated at the probe position and
``[START] A [END]`` (or ``[START] A [MID] B [END]``) is appended; the language model is frozen; a rank-8 update
of the input embedding and a linear classifier on the last-layer hidden state at ``[END]`` are trained. The
same probe on a randomly initialised model of the same shape and the majority-class rate are the baselines
(spec: physics_of_lms.md sec. 2.6). The task-specific inputs are built by the caller (the world knows the
positions and the labels); this module only fits and scores.

The embedding update is ``E' = E + A B`` with ``A [vocab_size, rank]`` (normal init, std ``1/rank``) and
``B [rank, d_model]`` (zeros: the probe starts at the frozen model), as in LoRA (Hu et al. 2021,
arXiv 2106.09685). It is applied through a forward hook on the token-embedding module, so it works for
lmsci's :class:`~lmsci.models.gpt.GPT` (``wte``; the learned position embedding, if any, is added after it as
before), a Hugging Face causal LM (``get_input_embeddings()``) and lmsci's ``HFModel`` wrapper (its ``.model``).
The model's own weights are never changed (``requires_grad`` is restored after the fit).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lmsci.errors import ConfigError
from lmsci.measure.accuracy import pad_batch
from lmsci.models.device import resolve_model_device


def _core(model: Any) -> nn.Module:
    """The ``nn.Module`` behind ``model`` (an lmsci ``HFModel`` wraps one as ``.model``)."""
    if not isinstance(model, nn.Module) and isinstance(getattr(model, "model", None), nn.Module):
        return model.model
    return model


def embedding_module(model: Any) -> nn.Embedding:
    """The token-embedding module: ``wte`` of an lmsci GPT, ``get_input_embeddings()`` of a Hugging Face model.

    Raises:
        ConfigError: the model has neither.
    """
    m = _core(model)
    if isinstance(getattr(m, "wte", None), nn.Embedding):
        return m.wte
    get = getattr(m, "get_input_embeddings", None)
    if callable(get) and isinstance(get(), nn.Embedding):
        return get()
    raise ConfigError("model", type(m).__name__, "an lmsci GPT (wte) or a Hugging Face model (get_input_embeddings)")


def last_hidden(model: Any, input_ids: Tensor) -> Tensor:
    """Last-layer hidden state ``[batch, seq, d_model]`` (after the final norm): ``GPT.final_hidden`` or the last
    entry of a Hugging Face model's ``hidden_states``."""
    m = _core(model)
    fh = getattr(m, "final_hidden", None)
    if callable(fh):
        return fh(input_ids)
    return m(input_ids, output_hidden_states=True).hidden_states[-1]


@dataclass
class VProbeResult:
    """Accuracies of one V-probe.

    Attributes:
        train_acc, test_acc: probe accuracy on the training and test queries (fractions).
        majority: the majority-class rate of the test labels (the best constant predictor's accuracy).
        train_majority_acc: test accuracy of predicting the training set's most frequent class.
        n_train, n_test, n_classes, rank, steps: the fit's sizes.
    """

    train_acc: float
    test_acc: float
    majority: float
    train_majority_acc: float
    n_train: int
    n_test: int
    n_classes: int
    rank: int
    steps: int

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (accuracies as fractions in [0, 1], counts as ints)."""
        return asdict(self)


def _as_positions(seqs: Sequence[Sequence[int]], positions: Sequence[int] | None) -> list[int]:
    if positions is None:
        return [len(s) - 1 for s in seqs]
    if len(positions) != len(seqs):
        raise ConfigError("positions", len(positions), f"one position per sequence ({len(seqs)})")
    out = [int(p) if p >= 0 else len(s) + int(p) for p, s in zip(positions, seqs)]
    for p, s in zip(out, seqs):
        if not 0 <= p < len(s):
            raise ConfigError("positions", p, f"a position inside its sequence (length {len(s)})")
    return out


def _check_vprobe_args(train_seqs: Sequence[Sequence[int]], train_labels: Sequence[int],
                       test_seqs: Sequence[Sequence[int]], test_labels: Sequence[int], n_classes: int, rank: int,
                       steps: int) -> tuple[Tensor, Tensor]:
    """The train and test labels as long tensors ``[n_train]``, ``[n_test]``, after checking :func:`vprobe`'s
    arguments.

    Raises:
        ConfigError: empty data, mismatched lengths, a label outside ``[0, n_classes)``, ``rank < 0``,
            ``steps < 1`` or ``n_classes < 2``.
    """
    if len(train_seqs) == 0 or len(test_seqs) == 0:
        raise ConfigError("train_seqs/test_seqs", (len(train_seqs), len(test_seqs)), "non-empty")
    if len(train_labels) != len(train_seqs) or len(test_labels) != len(test_seqs):
        raise ConfigError("labels", (len(train_labels), len(test_labels)), "one label per sequence")
    if rank < 0:
        raise ConfigError("rank", rank, ">= 0")
    if steps < 1:
        raise ConfigError("steps", steps, ">= 1")
    if n_classes < 2:
        raise ConfigError("n_classes", n_classes, ">= 2")
    ytr = torch.as_tensor(list(train_labels), dtype=torch.long)
    yte = torch.as_tensor(list(test_labels), dtype=torch.long)
    for y in (ytr, yte):
        if int(y.min()) < 0 or int(y.max()) >= n_classes:
            raise ConfigError("labels", (int(y.min()), int(y.max())), f"class ids in [0, {n_classes})")
    return ytr, yte


def _init_probe(vocab: int, d_model: int, rank: int, n_classes: int, g: torch.Generator,
                dev: torch.device) -> tuple[nn.Parameter, nn.Parameter, nn.Linear]:
    """The probe's parameters: the embedding update ``A [vocab, r] @ B [r, d_model]`` (``A ~ N(0, 1) / r`` from
    ``g``, ``B = 0``; ``r = max(rank, 1)``) and the head ``[n_classes, d_model]`` (weight ``N(0, 1/d_model)``
    from ``g``, bias 0)."""
    A = nn.Parameter((torch.randn(vocab, max(rank, 1), generator=g) / max(rank, 1)).to(dev))
    B = nn.Parameter(torch.zeros(max(rank, 1), d_model, device=dev))
    head = nn.Linear(d_model, n_classes).to(dev)
    with torch.no_grad():
        w = torch.randn(n_classes, d_model, generator=g) * (1.0 / d_model ** 0.5)
        head.weight.copy_(w.to(dev))
        head.bias.zero_()
    return A, B, head


def _probe_features(model: Any, seqs: Sequence[Sequence[int]], pos: list[int], pad_id: int,
                    dev: torch.device) -> Tensor:
    """Final hidden states ``[len(seqs), d_model]`` float at positions ``pos`` (sequences right-padded)."""
    ids = pad_batch(seqs, pad_id).to(dev)
    h = last_hidden(model, ids)
    return h[torch.arange(len(pos), device=dev), torch.as_tensor(pos, device=dev)].float()


@torch.no_grad()
def _probe_accuracy(model: Any, head: nn.Linear, seqs: Sequence[Sequence[int]], pos: list[int], y: Tensor,
                    batch_size: int, pad_id: int, dev: torch.device) -> float:
    """Fraction of ``seqs`` whose head argmax equals ``y [len(seqs)]`` (in batches of ``max(batch_size, 64)``)."""
    correct = 0
    for s in range(0, len(seqs), max(batch_size, 64)):
        logits = head(_probe_features(model, seqs[s:s + max(batch_size, 64)], pos[s:s + max(batch_size, 64)],
                                      pad_id, dev))
        correct += int((logits.argmax(-1).cpu() == y[s:s + max(batch_size, 64)]).sum())
    return correct / len(seqs)


def vprobe(model: Any, train_seqs: Sequence[Sequence[int]], train_labels: Sequence[int],
           test_seqs: Sequence[Sequence[int]], test_labels: Sequence[int], n_classes: int, *,
           train_positions: Sequence[int] | None = None, test_positions: Sequence[int] | None = None,
           rank: int = 8, steps: int = 300, batch_size: int = 64, lr: float = 3e-3, weight_decay: float = 0.0,
           seed: int = 0, pad_id: int = 0, device: str | torch.device | None = None) -> VProbeResult:
    """Fit a V-probe (rank-``rank`` input-embedding update + linear head) on a frozen model and score it.

    Args:
        model: an lmsci GPT, a Hugging Face causal LM, or an lmsci ``HFModel``; frozen (its weights are not
            trained; gradients flow through it to the embedding update).
        train_seqs, test_seqs: token-id lists (any lengths; right-padded with ``pad_id`` per batch; causal
            attention makes the padding invisible at the read positions).
        train_labels, test_labels: class ids in ``[0, n_classes)``, one per sequence.
        n_classes: number of classes of the head.
        train_positions, test_positions: where to read the hidden state in each sequence (default: the last
            token, the paper's ``[END]``); negative values count from the end.
        rank: rank of the embedding update (0: a plain linear probe on the frozen model).
        steps: Adam steps over minibatches of ``batch_size`` queries (drawn with a generator seeded by ``seed``).
        lr, weight_decay: Adam(W) settings of the probe parameters.
        device: where to compute (default: the model's device).

    Returns:
        :class:`VProbeResult`.

    Raises:
        ConfigError: empty data, mismatched lengths, a label outside ``[0, n_classes)``, ``rank < 0`` or
            ``steps < 1`` (before any work).
    """
    ytr, yte = _check_vprobe_args(train_seqs, train_labels, test_seqs, test_labels, n_classes, rank, steps)
    ptr, pte = _as_positions(train_seqs, train_positions), _as_positions(test_seqs, test_positions)
    dev = resolve_model_device(model, device)
    emb = embedding_module(model)
    vocab, d_model = emb.weight.shape
    g = torch.Generator().manual_seed(int(seed))
    A, B, head = _init_probe(vocab, d_model, rank, n_classes, g, dev)
    params = list(head.parameters()) + ([A, B] if rank > 0 else [])
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)

    def hook(_mod: nn.Module, args: tuple, out: Tensor) -> Tensor:
        if rank == 0:
            return out
        ids = args[0]
        return out + (A[ids] @ B).to(out.dtype)

    core = _core(model)
    flags = [(p, p.requires_grad) for p in core.parameters()]
    was_training = core.training
    handle = emb.register_forward_hook(hook)
    try:
        for p, _ in flags:
            p.requires_grad_(False)
        core.eval()
        n = len(train_seqs)
        for _ in range(steps):
            idx = torch.randint(0, n, (min(batch_size, n),), generator=g).tolist()
            logits = head(_probe_features(model, [train_seqs[i] for i in idx], [ptr[i] for i in idx], pad_id, dev))
            loss = F.cross_entropy(logits, ytr[idx].to(dev))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        train_acc = _probe_accuracy(model, head, train_seqs, ptr, ytr, batch_size, pad_id, dev)
        test_acc = _probe_accuracy(model, head, test_seqs, pte, yte, batch_size, pad_id, dev)
    finally:
        handle.remove()
        for p, flag in flags:
            p.requires_grad_(flag)
        core.train(was_training)
    counts = torch.bincount(yte, minlength=n_classes)
    train_major = int(torch.bincount(ytr, minlength=n_classes).argmax())
    return VProbeResult(train_acc=train_acc, test_acc=test_acc, majority=float(counts.max()) / len(yte),
                        train_majority_acc=float(counts[train_major]) / len(yte), n_train=len(train_seqs),
                        n_test=len(test_seqs), n_classes=n_classes, rank=rank, steps=steps)


def vprobe_with_baselines(model: Any, random_model: Any, train_seqs: Sequence[Sequence[int]],
                          train_labels: Sequence[int], test_seqs: Sequence[Sequence[int]],
                          test_labels: Sequence[int], n_classes: int, **kw: Any) -> dict[str, float]:
    """The V-probe on ``model`` and the same probe on ``random_model`` (a random-init model of the same shape:
    the paper's baseline), with the majority rate.

    Returns:
        ``{"acc", "train_acc", "random_init_acc", "majority", "n_train", "n_test"}`` (accuracies as fractions).
        Other keyword arguments go to :func:`vprobe` (same ``seed`` for both probes).
    """
    r = vprobe(model, train_seqs, train_labels, test_seqs, test_labels, n_classes, **kw)
    b = vprobe(random_model, train_seqs, train_labels, test_seqs, test_labels, n_classes, **kw)
    return {"acc": r.test_acc, "train_acc": r.train_acc, "random_init_acc": b.test_acc, "majority": r.majority,
            "n_train": r.n_train, "n_test": r.n_test}
