"""lmsci's instruments on your own Hugging Face model: causal tracing of a fact, induction-head scores, LM-Infinite.

    python docs/tutorials/your_own_model.py /path/to/a/causal-lm    # any local transformers checkpoint directory
    python docs/tutorials/your_own_model.py                         # a tiny Llama built and trained here (~30 s)

The first half (`instruments`) is all you need for your model. Without a path the script builds a stand-in: a
2-layer Llama (d_model 64) with a word-level tokenizer, trained for a few hundred steps on 64-token windows of
Shakespeare and on a handful of facts, so each instrument has something real to find at tiny size.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch

from lmsci.measure import causal_trace, embedding_std, nll_by_position, prefix_matching_scores
from lmsci.methods import lm_infinite_policy
from lmsci.models import load_hf

FACT = ("The Eiffel Tower is located in the city of", "The Eiffel Tower", " Paris")  # prompt, subject, answer


def instruments(path: str, long_text: str, train_len: int) -> None:
    hf = load_hf(path)                                      # the real transformers module, hookable by lmsci names
    tok = hf.tokenizer
    # 1. causal tracing (Meng et al. 2022): which hidden states carry the fact from the subject to the answer?
    prompt, subject, answer = FACT
    enc = tok(prompt, return_offsets_mapping=True)
    ids = enc.input_ids
    subj = [i for i, (a, b) in enumerate(enc.offset_mapping) if b > a and b <= len(subject)]
    span = (subj[0], subj[-1] + 1)                          # the subject's tokens, corrupted with noise
    target = tok(answer, add_special_tokens=False).input_ids[0]
    noise = 3 * embedding_std(hf, [ids], [span])            # nu = 3 x std of the subject embeddings
    tr = causal_trace(hf, ids, span, target, noise=noise, kinds=("resid", "mlp"), samples=4)
    print(f"P({answer.strip()!r}) clean {tr.high:.3f}, subject corrupted {tr.low:.3f}")
    for kind in ("resid", "mlp"):
        ie = tr.indirect_effect(kind)                       # [n_tokens, n_layers]
        t, layer = divmod(int(ie.argmax()), ie.shape[1])
        print(f"  restoring {kind:5s}: largest indirect effect {ie.max():+.3f} at token {tok.decode(ids[t])!r}, "
              f"layer {layer}")
    # 2. induction heads (Olsson et al. 2022): attention from a repeated token to the one after its first copy
    g = torch.Generator().manual_seed(0)
    half = torch.randint(10, tok.vocab_size, (8, 24), generator=g)
    x = torch.cat([half, half], dim=1)                      # [batch, 48]: a random sequence, then again
    pattern = torch.stack(hf.attention_patterns(x))         # [n_layers, batch, n_heads, 48, 48]
    tgt = torch.where(torch.arange(48) >= 24, torch.arange(48) - 23, -1)
    scores = prefix_matching_scores(pattern, tgt)           # [n_layers, n_heads], in [0, 1]
    layer, head = divmod(int(scores.argmax()), scores.shape[1])
    uniform = (1 / (torch.arange(24, 48) + 1.0)).mean()    # what attention spread evenly would score
    print(f"best prefix-matching head: layer {layer} head {head}, score {scores.max():.2f} (uniform {uniform:.2f})")
    # 3. LM-Infinite (Han et al. 2023) on a text longer than the model was trained on
    long_ids = torch.tensor([tok(long_text).input_ids[: 8 * train_len]])
    full = nll_by_position(hf, long_ids)[0]                 # [n - 1] nats/token, the model's own attention
    inf = nll_by_position(hf, long_ids, lm_infinite_policy(n_local=train_len, n_global=4))[0]
    for a, b in [(0, train_len), (train_len, 4 * train_len), (4 * train_len, len(full))]:
        print(f"  NLL at positions {a:4d}-{b:4d}: full attention {full[a:b].mean():6.2f}, "
              f"LM-Infinite {inf[a:b].mean():6.2f} nats/token")


# ------------------------------------------------------------------------ a tiny stand-in for your model


def shakespeare_text(n_words: int, vocab: int = 400) -> str:
    """``n_words`` words of Shakespeare's comedies, lower-cased, the words outside the ``vocab`` most frequent
    replaced by ``<unk>`` (a vocabulary a tiny model can learn in a few hundred steps)."""
    import re
    from collections import Counter

    from lmsci.worlds import load_works

    words = re.findall(r"[a-z']+|[.,;:!?]", " ".join(w.text for w in load_works()[:3]).lower())[:n_words]
    keep = {w for w, _ in Counter(words).most_common(vocab)}
    return " ".join(w if w in keep else "<unk>" for w in words)


def tiny_llama(directory: Path, text: str, held_out: str, seq_len: int = 64, steps: int = 300) -> None:
    """Train a 2-layer Llama with a word-level tokenizer (over ``text`` and ``held_out``) on windows of ``seq_len``
    words of ``text``, on FACT and on repeated random sequences (where induction heads pay); save it."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = sorted(set((text + " " + held_out).split()) | set(" ".join(FACT[:1] + FACT[2:]).split()))
    core = Tokenizer(models.WordLevel({w: i + 2 for i, w in enumerate(words)} | {"<s>": 0, "<unk>": 1}, "<unk>"))
    core.normalizer, core.pre_tokenizer = normalizers.NFC(), pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", unk_token="<unk>")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(words) + 2, hidden_size=64, intermediate_size=256,
                                         num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=4096,
                                         bos_token_id=0, eos_token_id=0, pad_token_id=0))
    corpus = torch.tensor(tok(text).input_ids)
    fact = torch.tensor(tok(FACT[0] + FACT[2]).input_ids)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        starts = torch.randint(0, len(corpus) - seq_len - 1, (16,), generator=g)
        batch = torch.stack([corpus[s:s + seq_len] for s in starts.tolist()])
        rand = torch.randint(2, len(words) + 2, (8, seq_len // 2), generator=g).repeat(1, 2)
        loss = sum(model(input_ids=b, labels=b).loss for b in (batch, fact[None], rand))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.save_pretrained(directory)
    tok.save_pretrained(directory)


if __name__ == "__main__":
    torch.set_num_threads(1)
    words = shakespeare_text(60000).split()
    train_text, long_text = " ".join(words[:-4000]), " ".join(words[-4000:])   # the long text is held out
    if len(sys.argv) > 1:
        instruments(sys.argv[1], long_text, train_len=512)
    else:
        with tempfile.TemporaryDirectory() as d:
            steps = int(os.environ.get("TUTORIAL_STEPS", 300))      # the tests train the stand-in less
            tiny_llama(Path(d), train_text, long_text, seq_len=64, steps=steps)
            instruments(d, long_text, train_len=64)
