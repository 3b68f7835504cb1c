"""The H100 time of ``mlp-memories``' gpu preset (session 52: every gpu preset within 10 minutes of one H100).

Per seed, two GPTs (:mod:`lmsci.experiments.knowledge._estimates` assumptions: achieved bf16 rate, per-step
overhead, host data work) and their null arms (the same GPTs at initialisation, forward passes only):

* Shakespeare: ``train.steps x batch_size x seq_len`` training tokens; keys searched over ``key_windows`` windows and
  the held-out NLL over ``eval_tokens`` tokens, on the trained and the random-init model (forward only);
* bioS: ``n_people x exposures`` biographies (the whole budget: an upper bound, pretraining stops at ``stop_at``),
  packed by the Python packer (``PY_DOCS_PER_S``), recall checks of every biography every ``check_every`` steps, and
  the keys searched over the training biographies on both models (forward only).
"""

from __future__ import annotations

from typing import Any

from lmsci.experiments.knowledge._estimates import h100_seconds, mean_tokens, vocab_size
from lmsci.experiments.knowledge._specs import DataSpec

#: forwards of one biography in a recall check (one per attribute prefix, 6 attributes)
RECALL_FORWARDS = 6


def estimate_h100_seconds(cfg: Any) -> dict[str, float]:
    """Estimated seconds of a run of ``cfg`` (an ``MLPMemoriesConfig``) on one H100: ``shakespeare``, ``bios`` and
    ``total``, summed over ``cfg.n_seeds`` seeds."""
    sh, bi = cfg.shakespeare, cfg.bios
    out = {"shakespeare": 0.0, "bios": 0.0}
    if "shakespeare" in cfg.kinds:
        tokens = sh.train.steps * sh.train.batch_size * sh.seq_len
        ev = 2 * (sh.key_windows * sh.seq_len + sh.eval_tokens)
        out["shakespeare"] = h100_seconds(sh.model, sh.vocab_size, sh.seq_len, tokens=tokens, steps=sh.train.steps,
                                          eval_tokens=ev)
    if "bios" in cfg.kinds:
        b = mean_tokens("bio", DataSpec(multiplicity=bi.multiplicity, permute=bi.permute, fullname=bi.fullname))
        docs = bi.n_people * bi.exposures
        tokens = docs * b
        steps = tokens / (bi.pretrain.batch_size * bi.seq_len * (1 - b / (2 * bi.seq_len)))
        checks = steps / bi.check_every if bi.check_every else 1.0
        ev = (checks * RECALL_FORWARDS + 2) * bi.n_people * bi.multiplicity * b
        out["bios"] = h100_seconds(bi.model, vocab_size(), bi.seq_len, tokens=tokens, steps=steps, eval_tokens=ev,
                                   python_docs=docs)
    out = {k: v * cfg.n_seeds for k, v in out.items()}
    return {**out, "total": sum(out.values())}
