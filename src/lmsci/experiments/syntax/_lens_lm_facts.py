"""``lens-lm``'s fact prompts (family-private): the facts the model knows and the layer at which their answer first
becomes the lens's top-1 prediction.

Facts: lmsci's fact set (:mod:`lmsci.worlds.facts`, the one ``causal-tracing-lm`` traces). A prompt is the one token
``<|endoftext|>`` (when the tokenizer has it: the prompt starts a document, as in ``causal-tracing-lm``) followed by
the relation's template filled with the subject; the answer is the first token of the object as it continues the
prompt after a space. A fact is *known* when the model's greedy next token is that answer (the registered gate's
measure: how many are known). Source of the measure: Belrose et al., arXiv 2303.08112, sec. 4 (the layer at which
a lens's top-1 prediction settles).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from lmsci.experiments.syntax._lm_common import encode
from lmsci.measure import lens as LN

PREFIX = "<|endoftext|>"
_KNOWN: dict[tuple, dict[str, Any]] = {}


def _prompt(tok: Any, facts: Any, fact: Any) -> tuple[list[int], int | None]:
    """``(ids, answer id)`` of one fact (answer None when the tokenizer cannot continue the prompt)."""
    text = facts.prompt(fact)[0]
    ids = encode(tok, text)
    full = encode(tok, f"{text} {fact.object}")
    ans = full[len(ids)] if full[:len(ids)] == ids and len(full) > len(ids) else None
    pre = []
    if hasattr(tok, "convert_tokens_to_ids"):
        tid = tok.convert_tokens_to_ids(PREFIX)
        if tid is not None and tok.convert_ids_to_tokens(int(tid)) == PREFIX:
            pre = [int(tid)]
    return pre + ids, ans


@torch.no_grad()
def known_fact_states(lm: Any, name: str, layers: list[int], batch: int = 64) -> dict[str, Any]:
    """Screen every fact once per process: ``{"h": [len(layers), n_known, d_model]`` the residual stream at the
    prompt's last token for the known facts, ``"answer": [n_known]``, ``"n_screened"``, ``"cpu_s"``}``."""
    import time

    from lmsci.worlds.facts import load_facts

    key = (name, id(lm), tuple(layers))
    if key in _KNOWN:
        return _KNOWN[key]
    c0 = time.process_time()
    facts = load_facts()
    prompts = [p for p in (_prompt(lm.tokenizer, facts, f) for f in facts.facts) if p[1] is not None and p[0]]
    hs, answers = [], []
    dev = next(iter(lm.parameters())).device
    for i in range(0, len(prompts), batch):
        chunk = prompts[i:i + batch]
        T = max(len(p) for p, _ in chunk)
        x = torch.zeros(len(chunk), T, dtype=torch.long)  # right padding: harmless for a causal model's earlier tokens
        for r, (p, _) in enumerate(chunk):
            x[r, :len(p)] = torch.as_tensor(p)
        h, logits = LN.residual_stream(lm, x.to(dev))
        rows, pos = torch.arange(len(chunk)), torch.as_tensor([len(p) - 1 for p, _ in chunk])
        ans = torch.as_tensor([a for _, a in chunk])
        known = (logits[rows, pos].argmax(-1).cpu() == ans)
        hs.append(h[layers][:, rows.to(h.device), pos.to(h.device)][:, known.to(h.device)].cpu())
        answers.append(ans[known])
    d = next(iter(lm.parameters())).shape[-1] if not hs else hs[0].shape[-1]
    out = {"h": torch.cat(hs, 1) if hs else torch.zeros(len(layers), 0, d), "answer": torch.cat(answers) if answers
           else torch.zeros(0, dtype=torch.long), "n_screened": len(prompts), "cpu_s": time.process_time() - c0}
    _KNOWN.clear()
    _KNOWN[key] = out
    return out


@torch.no_grad()
def first_top1(lm: Any, h: torch.Tensor, answers: torch.Tensor, layers: list[int],
               lens: LN.TunedLens | None = None) -> np.ndarray:
    """``[n]`` the first of ``layers`` at which the answer is the lens's top-1 prediction (``h [len(layers), n, d]``;
    the last layer is the model's output, where every known fact's answer is top-1)."""
    n = h.shape[1]
    first = np.full(n, layers[-1])
    for i in reversed(range(len(layers))):
        logits = LN.decode(lm, h[i] if lens is None else lens.transform(h[i], layers[i]))
        top = (logits.argmax(-1).cpu() == answers).numpy()
        first[top] = layers[i]
    return first
