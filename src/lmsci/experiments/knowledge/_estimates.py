"""GPU-time estimators of the knowledge experiments' gpu presets, one H100 (front: :mod:`.common`).

:mod:`lmsci.train.estimate` (achieved bf16 throughput, per-step overhead) plus the host's data work; used by
the experiments' ``time_estimate`` of the gpu preset. Seconds are wall seconds; tokens are training tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lmsci.errors import ConfigError
from lmsci.experiments.knowledge._specs import SINGLE, DataSpec
from lmsci.models.gpt import GPTSpec
from lmsci.train.estimate import GPU_ASSUMPTIONS, GPU_BUDGET_S, STEP_OVERHEAD_S, gpu_seconds  # noqa: F401
from lmsci.train.estimate import flops_per_token as _flops_per_token
from lmsci.worlds.bios import ATTRS, BiosWorld



# -- time estimates of the gpu presets (one H100): lmsci.train.estimate, plus the host's data work -------------
#: Host work (data) is added serially: ``HOST_DOCS_PER_S`` documents/s for the vectorised renderer and packer of
#: :mod:`lmsci.worlds.bios_stream` (measured 473k biographies per CPU-second in benchmarks/bench_bios_pipeline.py),
#: ``PY_DOCS_PER_S`` for the Python renderer + packer (75 + 250 us).
H100_ASSUMPTIONS = GPU_ASSUMPTIONS + " + host data at 400k documents/s (knowledge_common.HOST_DOCS_PER_S)"
HOST_DOCS_PER_S = 400_000
PY_DOCS_PER_S = 3_000


def flops_per_token(spec: GPTSpec, vocab_size: int, seq_len: int, train: bool = True) -> float:
    """:func:`lmsci.train.estimate.flops_per_token` of ``spec``."""
    return _flops_per_token(spec.d_model, spec.n_layers, vocab_size, seq_len, train)


def h100_seconds(spec: GPTSpec, vocab_size: int, seq_len: int, *, tokens: float, steps: float,
                 eval_tokens: float = 0.0, host_docs: float = 0.0, python_docs: float = 0.0) -> float:
    """Estimated wall seconds on one H100 for ``tokens`` training tokens in ``steps`` optimizer steps, plus
    ``eval_tokens`` of forward-only evaluation (:func:`lmsci.train.estimate.gpu_seconds`) and the host's data work
    (:data:`HOST_DOCS_PER_S`, :data:`PY_DOCS_PER_S`)."""
    return gpu_seconds(spec.d_model, spec.n_layers, vocab_size, seq_len, tokens=tokens, steps=steps,
                       eval_tokens=eval_tokens) + host_docs / HOST_DOCS_PER_S + python_docs / PY_DOCS_PER_S


def mean_tokens(kind: str, spec: DataSpec | None = None, groups: int = 1, n: int = 400) -> float:
    """Mean tokens of one document of ``kind`` (``"bio"`` written as ``spec``, ``"bio_reverse"`` in ``groups``
    sentences, ``"qa"`` (the six questions), ``"inverse_qa"``), from ``n`` renderings of a small world (the
    vocabulary, templates and value lengths do not depend on N); for the estimates."""
    from lmsci.worlds.bios_render import INVERSE, BiosRenderer

    r = BiosRenderer(BiosWorld(n, seed=0))
    ppl = np.arange(n)
    if kind == "bio":
        sp = spec or SINGLE
        d = r.bios(ppl, 0, 0, permute=sp.permute, fullname=sp.fullname, lengths_only=True)
    elif kind == "bio_reverse":
        d = r.bios_reversed(ppl, 0, 0, groups=groups, lengths_only=True)
    elif kind in ("qa", "inverse_qa"):
        d = r.qa(ppl, ppl % len(ATTRS) if kind == "qa" else INVERSE, lengths_only=True)
    else:
        raise ConfigError("kind", kind, "bio, bio_reverse, qa or inverse_qa")
    return float(d.length.mean())


def model_seconds(cfg: Any,  # a common.BiosQAConfig (not imported: common imports this module)
                  *, bio_tokens: float, bio_docs: float, qa_tokens: float = 0.0,
                  ft_people: int = 0, ft_questions: int = 6, eval_docs: float = 0.0) -> float:
    """Estimated H100 seconds of one model of a bioS QA experiment (:func:`h100_seconds`): pretraining on
    ``bio_tokens`` tokens of ``bio_docs`` biographies plus ``qa_tokens`` of mixed-in QA, the memorisation
    checks (``memorise_check_people`` biographies every ``memorise_check_every`` steps), QA fine-tuning of
    ``ft_people`` x ``ft_questions`` questions for ``ft_epochs``, and ``eval_docs`` evaluated documents (~60
    tokens each). Windows hold ``seq_len * (1 - mean document / (2 seq_len))`` tokens on average. Host work at
    :data:`HOST_DOCS_PER_S` for the ``"stream"`` pipeline, :data:`PY_DOCS_PER_S` otherwise."""
    V, T, qa = vocab_size(), cfg.seq_len, mean_tokens("qa")
    stream = getattr(cfg, "pipeline", "packed") == "stream"
    docs = bio_docs + qa_tokens / qa
    mean_doc = (bio_tokens + qa_tokens) / max(docs, 1.0)
    tokens = bio_tokens + qa_tokens
    steps = tokens / (cfg.pretrain.batch_size * T * (1 - mean_doc / (2 * T)))
    checks = (steps / cfg.memorise_check_every if cfg.memorise_check_every else 1) * cfg.memorise_check_people
    ev = (eval_docs + checks) * 60.0
    host = {"host_docs": docs} if stream else {"python_docs": docs}
    secs = h100_seconds(cfg.model, V, T, tokens=tokens, steps=steps, eval_tokens=ev, **host)
    if ft_people:
        ft_docs = ft_people * ft_questions * cfg.ft_epochs
        ft_tok = ft_docs * qa
        ft_steps = ft_tok / (cfg.finetune.batch_size * cfg.qa_seq_len * (1 - qa / (2 * cfg.qa_seq_len)))
        host = {"host_docs": ft_docs} if stream else {"python_docs": ft_docs}
        secs += h100_seconds(cfg.model, V, cfg.qa_seq_len, tokens=ft_tok, steps=ft_steps, **host)
    return secs


def vocab_size() -> int:
    """The bioS vocabulary size (built from the pools, the same for every N)."""
    return len(BiosWorld(4, seed=0).vocab)

