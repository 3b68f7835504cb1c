"""Null-arm models of the iGSM experiments that are trained on altered documents (issue 44 item 4).

* :func:`prompt_only_batch_fn` -- training batches of the problem statements and questions WITHOUT their solutions
  (``<bos> <prob> problem question <sol> <eos>``, packed as :func:`lmsci.worlds.igsm.tokenizer.packed_windows` packs
  full documents): a model that reads the text but never reasons to an answer (``igsm-probing``'s null arm).
* :func:`shuffled_values_text` / :func:`shuffled_values_batch_fn` -- full training documents whose solution keeps
  its format, symbols and dependency order but whose values are shuffled among the steps (each necessary parameter
  shows another necessary parameter's value, every reference repeats the value its symbol was given, intermediate
  results are drawn uniformly mod 23, the answer is the question parameter's shuffled value): arithmetic removed,
  shuffled labels (``igsm-ood``'s null arm of ``ood-accuracy``, a test of the full-solution checker).
* :func:`brute_force_batch_fn` -- full training documents whose solution is the brute-force one
  (:func:`lmsci.worlds.igsm.brute.brute_force_text`: every parameter the problem defines, not only the necessary
  ones; correct, no planning): ``igsm-ood``'s null arm of ``planning``.
* :func:`train_null_model` -- train one model of ``shape`` on such a ``get_batch`` with the same training
  configuration, checkpointing and logging as :func:`lmsci.experiments.reasoning.igsm_common.train_members`
  (one model, not stacked), its initialisation from ``derive_seed(ctx.seed, "init", tag)`` and its data from
  ``derive_seed(ctx.seed, "data", tag)``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import numpy as np
import torch

from lmsci.errors import ConfigError
from lmsci.experiments.base import PointContext
from lmsci.experiments.reasoning.igsm_common import IGSMCommonConfig, Trained, build_gpt
from lmsci.runs import derive_seed
from lmsci.train.adaptor import train_point
from lmsci.worlds.igsm import IGSMWorld
from lmsci.worlds.igsm.brute import brute_force_text
from lmsci.worlds.igsm.tokenizer import IGSMTokenizer
from lmsci.worlds.igsm.config import ANS, SYMBOLS
from lmsci.worlds.igsm.problem import Problem, solution_steps

Doc = Callable[[Problem, random.Random], "str | None"]


def shuffled_values_text(problem: Problem, rnd: random.Random) -> str:
    """The training document of ``problem`` (``<prob> problem question <sol> solution <ans> answer``, as
    ``Problem.text`` renders it) with the solution's values shuffled among its steps.

    The necessary parameters' true values are permuted among them (``rnd``); each step's sentence keeps the renderer's
    format (``Define <param> as <sym>; [<tmp> = x op y = vx op vy = r; ...] so <sym> = ...``) and its symbols and
    references, but a referenced symbol shows its shuffled value, an intermediate result is drawn uniformly from 0..22
    and the step's result is its shuffled value: no calculation holds except by chance.
    """
    nec = list(problem.necessary)
    perm = [problem.values[q] for q in nec]
    rnd.shuffle(perm)
    vals = dict(zip(nec, perm))
    syms = rnd.sample(SYMBOLS, min(len(SYMBOLS), problem.op))
    _, out = solution_steps(problem, syms, vals, intermediate=lambda op, a, b: rnd.randrange(23))
    solution = "".join(" " + x + "." for x in out)
    return problem.prompt() + solution + ANS + f" {vals[nec[-1]]}"


def doc_windows(world: IGSMWorld, tok: IGSMTokenizer, seq_len: int, batch_size: int, seed: int,
                doc: Doc) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Packed training windows of fresh train-split problems rendered by ``doc(problem, rnd)``, for ever,
    deterministic per ``seed``.

    Each document is ``<bos>`` + the tokens of ``doc(problem, rnd)`` + ``<eos>`` (a problem whose ``doc`` is None is
    skipped); documents are concatenated and cut into consecutive ``seq_len + 1`` token windows (as
    :func:`lmsci.worlds.igsm.tokenizer.packed_windows`).

    Yields:
        ``(input_ids, targets)``, LongTensors ``[batch_size, seq_len]`` (``targets``: the input shifted by one).

    Raises:
        ConfigError: seq_len or batch_size < 1.
    """
    if seq_len < 1:
        raise ConfigError("seq_len", seq_len, "an integer >= 1")
    if batch_size < 1:
        raise ConfigError("batch_size", batch_size, "an integer >= 1")
    rnd = random.Random(seed)
    probs = world.stream(rnd.getrandbits(63), split="train")
    W = seq_len + 1
    buf = np.empty(0, dtype=np.int64)
    while True:
        out = np.empty((batch_size, W), dtype=np.int64)
        for b in range(batch_size):
            while len(buf) < W:
                text = doc(next(probs), rnd)
                if text is None:
                    continue
                ids = tok.encode(text)
                buf = np.concatenate([buf, [tok.bos_id], ids, [tok.eos_id]])
            out[b], buf = buf[:W], buf[W:]
        yield torch.from_numpy(out[:, :-1].copy()), torch.from_numpy(out[:, 1:].copy())


def prompt_only_windows(world: IGSMWorld, tok: IGSMTokenizer, seq_len: int, batch_size: int,
                        seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """:func:`doc_windows` of the problem statements and questions WITHOUT solutions (``Problem.prompt()``:
    ``<prob> problem question <sol>``)."""
    return doc_windows(world, tok, seq_len, batch_size, seed, lambda p, rnd: p.prompt())


def _batch_fn(world: IGSMWorld, tok: IGSMTokenizer, seq_len: int, batch_size: int, doc: Doc) -> Callable:
    def get_batch(step, generator):
        s = int(torch.randint(0, 2 ** 62, (1,), generator=generator))
        return next(doc_windows(world, tok, seq_len, batch_size, seed=s, doc=doc))

    return get_batch


def prompt_only_batch_fn(world: IGSMWorld, tok: IGSMTokenizer, seq_len: int,
                         batch_size: int) -> Callable[[int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]:
    """A ``get_batch(step, generator)`` for :func:`lmsci.train.trainer.train` drawing :func:`prompt_only_windows`
    seeded from ``generator`` (as :func:`lmsci.worlds.igsm.tokenizer.get_batch_fn`)."""
    return _batch_fn(world, tok, seq_len, batch_size, lambda p, rnd: p.prompt())


def shuffled_values_batch_fn(world: IGSMWorld, tok: IGSMTokenizer, seq_len: int,
                             batch_size: int) -> Callable[[int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]:
    """A ``get_batch(step, generator)`` of :func:`shuffled_values_text` documents (see :func:`prompt_only_batch_fn`)."""
    return _batch_fn(world, tok, seq_len, batch_size, shuffled_values_text)


def brute_force_batch_fn(world: IGSMWorld, tok: IGSMTokenizer, seq_len: int,
                         batch_size: int) -> Callable[[int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]:
    """A ``get_batch(step, generator)`` of :func:`lmsci.worlds.igsm.brute.brute_force_text` documents (see
    :func:`prompt_only_batch_fn`; the rare problem whose brute-force solution needs more than 52 symbols is
    skipped)."""
    return _batch_fn(world, tok, seq_len, batch_size, brute_force_text)


def train_null_model(cfg: IGSMCommonConfig, ctx: PointContext, tok: IGSMTokenizer, shape: tuple[int, int, int],
                     get_batch: Callable, tag: str) -> Trained:
    """Train one GPT of ``shape`` (``(n_layers, n_heads, d_model)``) for ``cfg.train.steps`` steps on ``get_batch``
    with ``cfg``'s trainer settings (as :func:`~lmsci.experiments.reasoning.igsm_common.train_members`, one model);
    initialisation ``derive_seed(ctx.seed, "init", tag)``, data seed ``derive_seed(ctx.seed, "data", tag)``,
    checkpoints under ``ctx.artifact_dir / f"ckpt{tag}"``.

    Returns:
        :class:`~lmsci.experiments.reasoning.igsm_common.Trained`, the model in eval mode on ``ctx.device``.
    """
    steps = cfg.train.steps
    model = build_gpt(cfg, tok, shape, derive_seed(ctx.seed, "init", tag))
    res = train_point(model, get_batch, cfg.train, ctx, seed=derive_seed(ctx.seed, "data", tag), desc=f"train{tag}",
                      log_points=50, checkpoint_dir=ctx.artifact_dir / f"ckpt{tag}", precision=cfg.precision,
                      warmup_steps=min(cfg.train.warmup_steps, max(steps - 1, 0)), checkpoint_every=max(steps // 4, 1))
    return Trained(model.eval(), res.final)
