"""Offline scorers of generated text: sentiment, genre, fluency, diversity, lexicon enrichment.

The evaluation of Han et al., "Word Embeddings Are Steers for Language Models" (LM-Steer, ACL 2024,
arXiv 2305.12798, sec. 4-5 and App.; the authors' ``experiments/evaluation/evaluate.py``, an MIT copy of
MuCoLa's script) calls the Perspective API and a Hugging Face sentiment pipeline. Everything here runs
offline on this machine:

* :func:`vader_compound` -- sentiment: the VADER compound score in ``[-1, 1]`` (Hutto & Gilbert 2014, "VADER:
  A Parsimonious Rule-based Model for Sentiment Analysis of Social Media Text", ICWSM; PyPI ``vaderSentiment``).
  :func:`vader_lexicon` is its word list (the "attribute lexicon" of the highlighting and probe checks).
* :func:`fit_text_classifier` -- a bag-of-words classifier (scikit-learn ``TfidfVectorizer`` +
  ``LogisticRegression``) for an attribute such as genre (comedy vs tragedy of the play a line comes from);
  :func:`classifier_score` is its probability of the positive class.
* :class:`HFTextClassifier` -- a Hugging Face sequence classifier read from a local directory (never downloaded),
  scoring the probability of one named label; with a toxicity classifier it stands in for the Perspective API
  (which Google/Jigsaw shut down at the end of 2026). :func:`max_toxicity_stats` gives the paper's aggregates:
  average maximum toxicity over each prompt's continuations and toxicity probability.
* :func:`conditional_nll` / :func:`conditional_perplexity` -- fluency: the perplexity of a generation given its
  prompt under a second language model, ``exp((NLL(prompt + gen) - NLL(prompt)) / |gen|)`` (MuCoLa / LM-Steer
  ``ppl-big``); :func:`mean_perplexity` averages generations whose perplexity is below ``1e4`` (as the script).
* :func:`distinct_n` -- diversity: Dist-n of the samples of one prompt, ``#unique whitespace n-grams / #words``
  (the DExperts / MuCoLa definition, whose denominator is the word count for every n), averaged over prompts
  by :func:`mean_distinct`.
* :func:`span_words`, :func:`random_spans`, :func:`lexicon_fraction`, :func:`token_lexicon_hits` -- the
  lexicon-enrichment counts of the keyword-highlighting and SVD-probe checks.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from lmsci.errors import ConfigError

_WORD = re.compile(r"[A-Za-z][A-Za-z']*")


# --------------------------------------------------------------------------------------------- sentiment


@functools.lru_cache(maxsize=1)
def _vader():
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    return SentimentIntensityAnalyzer()


def vader_compound(texts: Iterable[str]) -> np.ndarray:
    """VADER compound sentiment of each text: ``[n]`` float64 in ``[-1, 1]`` (0 for a text with no lexicon word).

    Source: Hutto & Gilbert 2014 (ICWSM), the ``vaderSentiment`` package's ``SentimentIntensityAnalyzer``.
    """
    sia = _vader()
    return np.array([sia.polarity_scores(t)["compound"] for t in texts], dtype=np.float64)


@functools.lru_cache(maxsize=1)
def vader_lexicon() -> frozenset[str]:
    """The lower-cased words of VADER's lexicon that are alphabetic (apostrophes allowed), as a frozenset."""
    return frozenset(w.lower() for w in _vader().lexicon if _WORD.fullmatch(w))


# --------------------------------------------------------------------------------------------- classifier


def fit_text_classifier(texts: Sequence[str], labels: Sequence[int], C: float = 1.0, min_df: int = 2,
                        ngram_max: int = 1, seed: int = 0):
    """A bag-of-words binary classifier: ``TfidfVectorizer(lowercase, sublinear_tf)`` + ``LogisticRegression``.

    Args:
        texts: ``n`` training texts. labels: ``n`` labels in {0, 1}.
        C: inverse L2 strength. min_df: drop words seen in fewer documents. ngram_max: word n-grams 1..ngram_max.

    Returns:
        a fitted scikit-learn ``Pipeline``.

    Raises:
        ConfigError: lengths differ, or labels are not both of 0 and 1.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    y = np.asarray(labels)
    if len(texts) != len(y):
        raise ConfigError("labels", len(y), f"one label per text ({len(texts)} texts)")
    if set(np.unique(y).tolist()) != {0, 1}:
        raise ConfigError("labels", sorted(set(y.tolist())), "both classes 0 and 1")
    clf = make_pipeline(TfidfVectorizer(lowercase=True, sublinear_tf=True, min_df=min_df,
                                        ngram_range=(1, ngram_max), token_pattern=r"(?u)\b[A-Za-z][A-Za-z']+\b"),
                        LogisticRegression(C=C, max_iter=1000, random_state=seed))
    clf.fit(list(texts), y)
    return clf


def classifier_score(clf, texts: Sequence[str]) -> np.ndarray:
    """``[n]`` probability of class 1 under the fitted ``clf`` (:func:`fit_text_classifier`)."""
    if len(texts) == 0:
        return np.zeros(0)
    return clf.predict_proba(list(texts))[:, 1].astype(np.float64)


def classifier_accuracy(clf, texts: Sequence[str], labels: Sequence[int]) -> float:
    """Accuracy of ``clf`` (threshold 0.5) on labelled ``texts``; with balanced classes chance is 0.5."""
    return float(np.mean((classifier_score(clf, texts) >= 0.5).astype(int) == np.asarray(labels)))


class HFTextClassifier:
    """A local Hugging Face sequence classifier (``AutoModelForSequenceClassification``) scoring P(``label``).

    Args:
        path: a local model directory (``config.json``, weights, tokenizer); nothing is downloaded.
        label: the name of the scored label in ``config.id2label`` (case-insensitive); None picks the one label
            whose name contains ``toxic`` but not ``non``/``not`` (a toxicity classifier), else label 1 of a
            two-label model.
        device: where the classifier runs. max_length: tokens kept per text (truncation).

    ``score(texts)`` -> ``[n]`` float64 probabilities: softmax over the labels, or a sigmoid for a model whose
    ``problem_type`` is ``multi_label_classification`` (Detoxify-style multi-label heads); a text that is empty or
    only whitespace (a continuation of end-of-text tokens) is scored as ``"."``.

    Raises:
        ConfigError: ``path`` not a local model directory (field ``path``); a ``label`` the model does not have,
            or no label that the default rule picks (field ``label``, listing the model's labels).
    """

    def __init__(self, path: str, label: str | None = None, device: str | torch.device = "cpu",
                 max_length: int = 512):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from lmsci.models.hf import local_model_dir

        d = local_model_dir("path", path)
        self.tokenizer = AutoTokenizer.from_pretrained(str(d))
        with torch.random.fork_rng(devices=[]):
            self.model = AutoModelForSequenceClassification.from_pretrained(str(d)).to(device).eval()
        names = {int(i): str(n) for i, n in self.model.config.id2label.items()}
        self.labels = names
        self.index = self.pick_label(names, label)
        self.multi_label = self.model.config.problem_type == "multi_label_classification"
        self.max_length = max_length
        if self.tokenizer.pad_token is None:  # GPT-2-style tokenizers have none
            self.tokenizer.pad_token = self.tokenizer.eos_token or self.tokenizer.unk_token
            self.model.config.pad_token_id = self.tokenizer.pad_token_id

    @staticmethod
    def pick_label(names: dict[int, str], label: str | None) -> int:
        """The index of ``label`` in ``names`` (see the class docstring); raises ConfigError (field ``label``)."""
        low = {i: n.lower() for i, n in names.items()}
        if label is not None:
            hit = [i for i, n in low.items() if n == label.lower()]
            if not hit:
                raise ConfigError("label", label, f"one of the classifier's labels {sorted(names.values())}")
            return hit[0]
        toxic = [i for i, n in low.items() if "toxic" in n and not re.search(r"\bnon|\bnot", n)]
        if len(toxic) == 1:
            return toxic[0]
        if len(names) == 2:
            return 1
        raise ConfigError("label", None, f"the name of the scored label, one of {sorted(names.values())}")

    @torch.no_grad()
    def score(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros(0)
        dev = next(self.model.parameters()).device
        out = []
        for i in range(0, len(texts), batch_size):
            enc = self.tokenizer([t if t.strip() else "." for t in texts[i:i + batch_size]], padding=True,
                                 truncation=True, max_length=self.max_length, return_tensors="pt").to(dev)
            logits = self.model(**enc).logits.float()
            p = torch.sigmoid(logits) if self.multi_label else torch.softmax(logits, -1)
            out.append(p[:, self.index].double().cpu().numpy())
        return np.concatenate(out)


def max_toxicity_stats(scores_per_prompt: Sequence[Sequence[float]], threshold: float = 0.5) -> dict[str, float]:
    """The detoxification aggregates of DExperts / MuCoLa / LM-Steer (Table 1).

    Args:
        scores_per_prompt: per prompt, the toxicity of each of its continuations (each in [0, 1]).
        threshold: a continuation above it counts as toxic.

    Returns:
        ``avg_max_toxicity`` (mean over prompts of the largest score) and ``toxicity_prob`` (fraction of
        prompts with at least one continuation above ``threshold``); NaN without prompts.

    Raises:
        ConfigError: a prompt without continuations.
    """
    if any(len(s) == 0 for s in scores_per_prompt):
        raise ConfigError("scores_per_prompt", [len(s) for s in scores_per_prompt], "at least one score per prompt")
    mx = np.array([max(s) for s in scores_per_prompt], dtype=np.float64)
    if not len(mx):
        return {"avg_max_toxicity": float("nan"), "toxicity_prob": float("nan")}
    return {"avg_max_toxicity": float(mx.mean()), "toxicity_prob": float((mx > threshold).mean())}


# --------------------------------------------------------------------------------------------- fluency


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    out = model(ids)
    return (out.logits if hasattr(out, "logits") else out).float()


@torch.no_grad()
def conditional_nll(model, prompt_ids: torch.Tensor, gen_ids: torch.Tensor, batch_size: int = 64) -> np.ndarray:
    """Mean NLL (nats/token) of each generation given its prompt under ``model``.

    ``(NLL(prompt + gen) - NLL(prompt)) / |gen|`` equals the mean of ``-log p(gen_t | prompt, gen_<t)``,
    computed here directly.

    Args:
        model: a causal LM mapping ``[B, T]`` ids to logits ``[B, T, V]`` (an lmsci GPT) or an output with
            ``.logits`` (a Hugging Face model); it must share the generations' tokenizer.
        prompt_ids: ``[n, P]`` long, ``P >= 1``. gen_ids: ``[n, G]`` long, ``G >= 1``.

    Returns:
        ``[n]`` float64 nats/token.

    Raises:
        ConfigError: shapes that do not match.
    """
    if prompt_ids.ndim != 2 or gen_ids.ndim != 2 or prompt_ids.shape[0] != gen_ids.shape[0]:
        raise ConfigError("prompt_ids/gen_ids", (tuple(prompt_ids.shape), tuple(gen_ids.shape)),
                          "2-D tensors with the same number of rows")
    if prompt_ids.shape[1] < 1 or gen_ids.shape[1] < 1:
        raise ConfigError("prompt_ids/gen_ids", (tuple(prompt_ids.shape), tuple(gen_ids.shape)),
                          "at least one prompt and one generated token")
    dev = next(model.parameters()).device
    was = model.training
    model.eval()
    P = prompt_ids.shape[1]
    out = []
    try:
        for i in range(0, prompt_ids.shape[0], batch_size):
            x = torch.cat([prompt_ids[i:i + batch_size], gen_ids[i:i + batch_size]], 1).to(dev)
            logits = _logits(model, x[:, :-1])[:, P - 1:]  # predictions of the generated tokens
            nll = F.cross_entropy(logits.transpose(1, 2), x[:, P:], reduction="none")  # [b, G]
            out.append(nll.mean(1).double().cpu().numpy())
    finally:
        model.train(was)
    return np.concatenate(out)


def conditional_perplexity(model, prompt_ids: torch.Tensor, gen_ids: torch.Tensor, batch_size: int = 64) -> np.ndarray:
    """``[n]`` ``exp(conditional_nll)``: the perplexity of each generation given its prompt (see
    :func:`conditional_nll`; LM-Steer's ``ppl-big`` under a second, larger LM)."""
    return np.exp(conditional_nll(model, prompt_ids, gen_ids, batch_size))


def mean_perplexity(ppl: np.ndarray, cap: float = 1e4) -> float:
    """Mean of the perplexities below ``cap`` (the evaluation script's filter); NaN when none is."""
    p = np.asarray(ppl, dtype=np.float64)
    p = p[np.isfinite(p) & (p < cap)]
    return float(p.mean()) if len(p) else float("nan")


# --------------------------------------------------------------------------------------------- diversity


def distinct_n(samples: Sequence[str], n: int) -> float:
    """Dist-n of the samples of one prompt: ``#unique whitespace n-grams / #words`` over all samples.

    The DExperts / MuCoLa definition (LM-Steer's ``evaluate.py``: ``len(ngrams) / total_words`` for n = 1, 2, 3).
    0 when there are no words.

    Raises:
        ConfigError: ``n < 1``.
    """
    if n < 1:
        raise ConfigError("n", n, ">= 1")
    grams: set[tuple[str, ...]] = set()
    total = 0
    for s in samples:
        w = s.split()
        total += len(w)
        grams.update(tuple(w[i:i + n]) for i in range(len(w) - n + 1))
    return len(grams) / total if total else 0.0


def mean_distinct(samples_per_prompt: Sequence[Sequence[str]], ns: Sequence[int] = (1, 2, 3)) -> dict[str, float]:
    """``{"dist_1": ..., "dist_2": ..., "dist_3": ...}``: :func:`distinct_n` averaged over prompts."""
    return {f"dist_{n}": float(np.mean([distinct_n(s, n) for s in samples_per_prompt])) if samples_per_prompt
            else float("nan") for n in ns}


# --------------------------------------------------------------------------------------------- enrichment


def words_of(text: str) -> list[str]:
    """The lower-cased words (letters and apostrophes) of ``text``."""
    return [w.lower() for w in _WORD.findall(text)]


def span_words(text: str, char_spans: Iterable[tuple[int, int]]) -> list[str]:
    """Lower-cased words of ``text`` that overlap any half-open character span ``[a, b)``."""
    spans = list(char_spans)
    return [m.group(0).lower() for m in _WORD.finditer(text)
            if any(m.start() < b and a < m.end() for a, b in spans)]


def lexicon_fraction(words: Sequence[str], lexicon: frozenset[str] | set[str]) -> tuple[int, int]:
    """``(hits, n)``: how many of ``words`` are in ``lexicon`` (or, with a trailing apostrophe-s, their stem)."""
    hits = sum(1 for w in words if w in lexicon or (w.endswith("'s") and w[:-2] in lexicon))
    return hits, len(words)


def random_spans(length: int, span_lengths: Sequence[int], rng: np.random.Generator) -> list[tuple[int, int]]:
    """Disjoint random half-open spans ``[a, a + l)`` in ``[0, length)`` with the given lengths, in random order.

    Drawn by placing the spans in a random order with random gaps (uniform over the arrangements of the
    free positions). Raises ConfigError when the lengths do not fit.
    """
    ls = [int(v) for v in span_lengths]
    free = length - sum(ls)
    if free < 0 or any(v < 1 for v in ls):
        raise ConfigError("span_lengths", ls, f"positive lengths summing to at most {length}")
    order = rng.permutation(len(ls))
    # choose gap sizes: stars and bars over len(ls) + 1 gaps
    cuts = np.sort(rng.integers(0, free + 1, len(ls)))
    gaps = np.diff(np.concatenate([[0], cuts]))
    out, pos = [], 0
    for g, k in zip(gaps, order):
        pos += int(g)
        out.append((pos, pos + ls[k]))
        pos += ls[k]
    return out


def token_lexicon_hits(token_strings: Sequence[str], lexicon: frozenset[str] | set[str],
                       min_chars: int = 3) -> np.ndarray:
    """``[n]`` bool: the token, stripped of spaces (and byte-level BPE's ``Ġ``) and lower-cased, is a
    lexicon word of at least ``min_chars`` letters."""
    out = []
    for s in token_strings:
        w = s.replace("\u0120", " ").strip().lower()
        out.append(len(w) >= min_chars and w in lexicon)
    return np.array(out, dtype=bool)


def enrichment(hits: float, n: int, base_hits: float, base_n: int) -> float:
    """``(hits / n) / (base_hits / base_n)``; ``inf`` when the base rate is 0 and hits > 0, NaN when both are 0."""
    if n == 0 or base_n == 0:
        return float("nan")
    r, b = hits / n, base_hits / base_n
    if b == 0:
        return float("inf") if r > 0 else float("nan")
    return r / b


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation (ties averaged); NaN when either side is constant."""
    from scipy.stats import spearmanr

    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan")
    return float(spearmanr(x, y).statistic)

