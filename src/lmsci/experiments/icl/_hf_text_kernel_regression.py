"""Han et al.'s Table 2 procedure on a Hugging Face causal LM (the text task of ``icl-kernel-regression``).

Source: Han, Wang, Zhao, Ji, "Explaining Emergent In-Context Learning as Kernel Regression", arXiv 2305.12766,
Sec. 5 and Table 2. Used by :mod:`lmsci.experiments.icl.icl_kernel_regression` when ``hf_model`` is set; reported
only, it decides no claim.
"""

from __future__ import annotations

import numpy as np
import torch

from lmsci.measure.icl import (
    build_text_prompt as build_prompt,
    embedding_kernel_predictions,
    kernel_values,
    last_token_attention,
    load_minilm,
    select_heads,
    tune_temperature,
    vote_predictions,
)


@torch.no_grad()
def hf_text_kernel_regression(model, tokenizer, *, n_demos: int = 8, n_val: int = 100, n_test: int = 100,
                              seed: int = 0, minilm: bool = True, device: str = "cpu") -> dict:
    """Han et al.'s Table 2 procedure on a Hugging Face causal LM with an offline text task.

    Prompts ``"Input: {line} Output: {label}"`` of ``n_demos`` Shakespeare lines labelled ``positive``/``negative``
    by VADER (:func:`lmsci.worlds.sentiment_lines.sentiment_lines`), then a test line; the model's ICL prediction is
    the label whose first token has the larger next-token logit; the last token's attention in every layer and head
    (eager attention) gives max-over-span kernel values; the head whose vote agrees most with the prediction on
    ``n_val`` prompts is scored on ``n_test`` held-out prompts; MiniLM kernel regression (raw cosine and tuned
    ``exp(cos / tau)``) on the same prompts.

    Args:
        model: a causal LM (or a local path, loaded with ``AutoModelForCausalLM``); tokenizer: its tokenizer (or None
            to load it from the same path).

    Returns:
        ``{"icl_acc", "best_head", "agreement_test", "gold_test", "minilm_raw", "minilm_tuned", "n_prompts"}``
        (accuracies and agreements on the held-out prompts).
    """
    from lmsci.worlds.sentiment_lines import LABELS, sentiment_lines

    if isinstance(model, str):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
        model = AutoModelForCausalLM.from_pretrained(model, attn_implementation="eager").to(device)
    model.eval()
    n_prompts = n_val + n_test
    data = sentiment_lines((n_prompts * (n_demos + 1)) // 2 + 1, seed=seed)
    rng = np.random.default_rng(seed)
    first_tok = [tokenizer(lab, add_special_tokens=False)["input_ids"][0] for lab in LABELS]
    preds, golds, votes, demo_lines, demo_labels, tests = [], [], [], [], [], []
    pos = 0
    for _ in range(n_prompts):
        chunk = data[pos: pos + n_demos + 1]
        pos += n_demos + 1
        demos, (x_test, y_test) = chunk[:n_demos], chunk[n_demos]
        ids, spans = build_prompt(tokenizer, [(x, LABELS[y]) for x, y in demos], x_test)
        x = torch.tensor([ids], device=device)
        logits = model(input_ids=x).logits[0, -1].float()
        preds.append(int(torch.argmax(logits[first_tok]).item()))
        golds.append(y_test)
        att = last_token_attention(model, x)  # [1, L, H, T]
        labels = np.array([[y for _, y in demos]])
        votes.append(vote_predictions(kernel_values(att, spans, "max"), labels, len(LABELS))[0])
        demo_lines.append([d for d, _ in demos])
        demo_labels.append([y for _, y in demos])
        tests.append(x_test)
    preds, golds, votes = np.array(preds), np.array(golds), np.stack(votes)  # votes [B, L, H]
    v, t = slice(0, n_val), slice(n_val, n_prompts)
    zeros = np.zeros(n_prompts, dtype=int)
    sel = select_heads(votes[v], preds[v], zeros[v], votes[t], preds[t], zeros[t])
    lh = sel.overall
    out = {"icl_acc": float((preds[t] == golds[t]).mean()), "best_head": list(lh),
           "agreement_test": sel.test_overall, "gold_test": float((votes[t, lh[0], lh[1]] == golds[t]).mean()),
           "n_prompts": n_prompts, "minilm_raw": None, "minilm_tuned": None}
    if minilm:
        enc = load_minilm(device if str(device).startswith("cuda") else "cpu")
        ed = enc.encode([s for row in demo_lines for s in row], convert_to_numpy=True).reshape(n_prompts, n_demos, -1)
        et = enc.encode(tests, convert_to_numpy=True)
        lab = np.array(demo_labels)
        out["minilm_raw"] = float((embedding_kernel_predictions(ed[t], et[t], lab[t], 2) == preds[t]).mean())
        tau = tune_temperature(ed[v], et[v], lab[v], 2, preds[v])
        out["minilm_tuned"] = float((embedding_kernel_predictions(ed[t], et[t], lab[t], 2, tau) == preds[t]).mean())
    return out
