"""Experiment ``word-order-lm``: a real instruct model's zero-shot answers survive word derangements when the label
is fixed by which words occur, and fall to chance when the label needs the order.

Sources: Sinha, Parthasarathi, Pineau, Williams, "UnNatural Language Inference", arXiv 2101.00010 (ACL 2021),
sec. 3 (permute the words, none left in its place); Pham, Bui, Mai, Nguyen, "Out of Order", arXiv 2012.15180
(75-90% of correct GLUE predictions unchanged by shuffling; CoLA, which needs the order, at chance). Issue 45,
item 5. The controlled toy version with trained classifiers is ``word-order`` (its published quick rows are shown
beside this report's).

The model is a pretrained chat model from the model zoo (default ``smollm2-135m``: SmolLM2-135M-Instruct; any zoo
name, local Hugging Face directory or ``.gguf`` file with a tokenizer works). Each prompt goes through the
tokenizer's chat template (system message "Answer with one word."; a plain ``Q ... Answer:`` prompt when the
tokenizer has none) and the answer is read from the next-token logits at the assistant's first position: the score
of a label is the log-sum-exp of the logits of the first tokens of its spellings (``positive``/``Positive``/
`` positive``/`` Positive``; ``yes``/``Yes``/...); first tokens shared by both labels are dropped.

Two tasks, ``n_examples`` balanced examples per prompt sample:

* ``sentiment`` (order-redundant): Shakespeare lines with a strong VADER compound score (|c| >= ``vader_threshold``,
  :func:`lmsci.worlds.sentiment_lines.sentiment_lines`); "Is the sentiment of the sentence positive or negative?".
* ``comparison`` (order-critical): "X is ADJ than Y." followed by "Is Z ADJ than W?" with (Z, W) = (X, Y) (yes) or
  (Y, X) (no), from a list of first names and comparative adjectives. A deranged statement holds the same bag of
  words whichever name is the taller, so it carries (up to the no-fixed-point constraint) no label information.

Each example gets ``q`` derangements of its sentence (the statement, for ``comparison``; the question stays
intact): every word moved, the word sequence changed (:func:`lmsci.worlds.word_order.derangement`).

The model is fixed, so the "seeds" of the claims are independent prompt samples: sample k draws its own lines,
names, labels and derangements with ``derive_seed(seed, ...)``. Arms (``cross_arms``, paired by sample):

* ``real``: as above; ``agree`` is the share of (example, derangement) pairs predicted as the example's own
  unshuffled input, ``acc_perm`` the accuracy on deranged inputs, ``acc_orig`` on the unshuffled ones.
* ``null``: on ``sentiment``, each example's derangements are compared with the unshuffled prediction of ANOTHER
  example of the sample (a derangement of the examples), inputs that by construction carry no information about
  the reference answer: agreement there is what the model's answer bias alone gives (a model that answers one label
  to almost everything meets the 0.75 rule here too). On ``comparison``, the statement is left in order (the
  identity in place of the derangement), so the order carries the label: accuracy there meets the chance band only
  if the model is at chance with the order intact, so that chance under derangement would not be the
  derangement's doing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, ci_above, ci_inside, every_at_least
from lmsci.config import ExperimentConfig
from lmsci.contract import Experiment, Figure, Point, PointContext, cross_arms, save_figure
from lmsci.errors import ConfigError
from lmsci.report.published import toy_rows_section
from lmsci.experiments.registry import register
from lmsci.report.figures import arm_points
from lmsci.models.zoo import load_cached
from lmsci.runs import RunDir, derive_seed, resolve_device
from lmsci.worlds.word_order import derangement

AGREE_MIN = 0.75
CHANCE_BAND = (0.35, 0.65)
ABOVE_CHANCE = 0.6
TASKS = ("sentiment", "comparison")
_SRC = ("Sinha et al., arXiv 2101.00010, sec. 3; Pham et al., arXiv 2012.15180 (75-90% of correct predictions "
        "unchanged; CoLA at chance)")

NAMES = ("Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Henry", "Irene", "Jack", "Laura", "Mark",
         "Nora", "Oscar", "Paula", "Ralph", "Sarah", "Tom", "Vera", "William")
ADJECTIVES = ("taller", "older", "faster", "stronger", "richer", "heavier", "younger", "shorter")
SYSTEM = "Answer with one word."
LABEL_WORDS = {"sentiment": (("negative", "Negative"), ("positive", "Positive")),
               "comparison": (("no", "No"), ("yes", "Yes"))}


class WordOrderLMConfig(ExperimentConfig):
    """Configuration of ``word-order-lm`` (field defaults = the quick preset)."""

    model: str = Field("smollm2-135m", description="a zoo name (lmsci models), a local Hugging Face directory or a "
                                                   ".gguf file; it needs a tokenizer")
    tasks: list[str] = Field(list(TASKS), min_length=1, description="sentiment (order-redundant), comparison "
                                                                     "(order-critical)")
    n_examples: int = Field(40, ge=2, description="examples per task and prompt sample (balanced; even)")
    q: int = Field(4, ge=1, description="derangements per example")
    vader_threshold: float = Field(0.5, gt=0, lt=1, description="|VADER compound| of the sentiment lines")
    batch_size: int = Field(32, ge=1)
    n_seeds: int = Field(3, ge=1, le=100, description="independent prompt samples")
    threads: int = Field(1, ge=0)

    PRESETS = {
        "smoke": {"n_examples": 4, "q": 2, "n_seeds": 2, "batch_size": 8},
        "quick": {},
        "gpu": {"n_examples": 200, "q": 10, "n_seeds": 5, "batch_size": 100, "threads": 0},
        "paper": {"n_examples": 500, "q": 20, "n_seeds": 5, "batch_size": 100, "threads": 0},
    }


def _gate(task: str) -> Gate:
    return Gate(f"{task}-above-chance", every_at_least(ABOVE_CHANCE), arm="real",
                stat=Stat("acc_orig", where={"task": task},
                          words=f"accuracy on the unshuffled {task} prompts of the sample"))


@register("word-order-lm")
class WordOrderLM(Experiment):
    """Word-order robustness of a real instruct LM's zero-shot answers (arXiv 2101.00010, 2012.15180)."""

    claim = ("A real instruct LM keeps most of its zero-shot sentiment answers when the words of the sentence are "
             "deranged, while its answers to 'X is taller than Y. Is X taller than Y?' fall to chance.")
    source = _SRC
    Config = WordOrderLMConfig
    time_estimate = {"smoke": "~15 s (a tiny model)",
                     "quick": "~30 s CPU per point measured (12 points: ~6 min CPU on one thread, float32 SDPA); on "
                              "a 2-core machine at load 13-16 a point took 380-620 s wall (2026-12-06)",
                     "gpu": "~2 min on one H100 (estimated, not measured)",
                     "paper": "~5 min on one H100 (estimated, not measured)"}
    claims = [
        Claim("redundant-kept",
              f"On the order-redundant task (sentiment of VADER-labelled lines), at least {AGREE_MIN:.0%} of the "
              "model's answers on deranged sentences equal its answer on the sentence in order.",
              _SRC, "75-90% of correct predictions unchanged on many GLUE tasks (Pham et al., BERT/RoBERTa)",
              statistic=Stat("agree", where={"task": "sentiment"},
                             words=f"per prompt sample of n_examples lines x q derangements, the share of deranged "
                                   f"prompts answered as the unshuffled prompt"),
              rule=ci_above(AGREE_MIN), gates=(_gate("sentiment"),),
              null="each line's derangements compared with the unshuffled answer of another line of the sample "
                   "(inputs that carry no information about the reference answer)",
              null_can_meet="a model that gives one label to most inputs agrees with any other input's answer as "
                            "often as with its own, so its null agreement also exceeds 0.75"),
        Claim("critical-chance",
              f"On the order-critical task ('X is ADJ than Y. Is X ADJ than Y?'), accuracy on deranged statements is "
              f"at chance: its 95% interval lies inside [{CHANCE_BAND[0]}, {CHANCE_BAND[1]}].",
              _SRC, "CoLA (needs the order) at chance after shuffling (Pham et al.)",
              statistic=Stat("acc_perm", where={"task": "comparison"},
                             words="per prompt sample of n_examples comparisons x q derangements of the statement, "
                                   "the accuracy of the yes/no answer"),
              rule=ci_inside(*CHANCE_BAND), gates=(_gate("comparison"),),
              null="the same comparisons with the statement left in order (the order carries the label)",
              null_can_meet="a model at chance even with the order intact (answering from a yes/no bias or the "
                            "names) is in the band there too, and then chance under derangement says nothing about "
                            "order"),
    ]

    def validate(self, cfg: WordOrderLMConfig) -> None:
        from lmsci.models.zoo import check_model_source

        bad = [t for t in cfg.tasks if t not in TASKS]
        if bad:
            raise ConfigError("tasks", cfg.tasks, f"a subset of {list(TASKS)}")
        if cfg.n_examples % 2:
            raise ConfigError("n_examples", cfg.n_examples, "an even number (balanced labels)")
        check_model_source(cfg.model, field="model")

    def points(self, cfg: WordOrderLMConfig) -> list[Point]:
        return cross_arms([Point(t, {"task": t}) for t in cfg.tasks], ("real", "null"))

    def run_point(self, cfg: WordOrderLMConfig, point: Point, ctx: PointContext) -> dict[str, Any]:
        device = resolve_device(ctx.device)
        hf = load_cached(cfg.model, str(device), attn_implementation="sdpa")
        ctx.run.record_model(hf.provenance)
        if getattr(hf, "tokenizer", None) is None:
            raise ConfigError("model", cfg.model, "a model with a tokenizer (text prompts)")
        task = point.params["task"]
        rng = np.random.default_rng(derive_seed(ctx.seed, "examples", task))
        examples = sentiment_examples(cfg, rng) if task == "sentiment" else comparison_examples(cfg.n_examples, rng)
        null = point.arm == "null"
        keep_order = null and task == "comparison"
        drng = np.random.default_rng(derive_seed(ctx.seed, "derange", task))
        deranged = [[text if keep_order else derange_words(text, drng) for _ in range(cfg.q)]
                    for text, _, _ in examples]
        y = np.array([lab for _, _, lab in examples])
        scorer = AnswerScorer(hf.tokenizer, task, device)
        pred = scorer.predict(hf.model, [prompt_text(task, t, qn) for t, qn, _ in examples], cfg.batch_size)
        flat = [prompt_text(task, d, ex[1]) for ex, ds in zip(examples, deranged) for d in ds]
        pp = scorer.predict(hf.model, flat, cfg.batch_size).reshape(len(examples), cfg.q)
        ref = pred
        if null and task == "sentiment":
            ref = pred[derangement(len(pred), np.random.default_rng(derive_seed(ctx.seed, "pairing")))]
        return {"task": task, "n": len(examples), "q": cfg.q, "acc_orig": float((pred == y).mean()),
                "acc_perm": float((pp == y[:, None]).mean()), "agree": float((pp == ref[:, None]).mean()),
                "label1_rate_orig": float(pred.mean()), "label1_rate_perm": float(pp.mean()),
                "example": flat[0][-160:]}

    def figures(self, cfg: WordOrderLMConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        out = []
        for task, col, cid, h in (("sentiment", "agree", "redundant-kept", {"rule 0.75": AGREE_MIN}),
                                  ("comparison", "acc_perm", "critical-chance", {"chance": 0.5})):
            sub = results[results.get("task") == task] if len(results) else results
            if sub.empty or col not in sub:
                continue
            per = {a: g.sort_values("seed_index")[col].to_numpy() for a, g in sub.groupby("arm")}
            fig = arm_points(per, ylabel=f"{col} per prompt sample", hlines=h, title=f"{cfg.model}: {task}")
            out.append(save_figure(fig, run, f"{task}_{col}.png", f"{task}: {col} per prompt sample and arm",
                                   claims=(cid,)))
        return out

    def report_sections(self, cfg: WordOrderLMConfig, results: pd.DataFrame, run: RunDir) -> str:
        return toy_rows_section("word-order")


def derange_words(text: str, rng: np.random.Generator, tries: int = 50) -> str:
    """``text`` with its whitespace-separated words deranged (none left in place, the sequence changed); a final
    ``.``/``!``/``?`` stays at the end.

    Raises:
        ConfigError: fewer than two words, or no derangement changes the sequence (all words equal).
    """
    end = text[-1] if text and text[-1] in ".!?" else ""
    words = (text[:-1] if end else text).split()
    for _ in range(tries):
        new = [words[j] for j in derangement(len(words), rng)]
        if new != words:
            return " ".join(new) + end
    raise ConfigError("text", text, "words that a derangement can reorder")


def sentiment_examples(cfg: WordOrderLMConfig, rng: np.random.Generator) -> list[tuple[str, str, int]]:
    """``n_examples`` (line, "", label) triples: balanced VADER-labelled Shakespeare lines of 6-20 words."""
    from lmsci.worlds.sentiment_lines import sentiment_lines

    pairs = sentiment_lines(cfg.n_examples // 2, seed=int(rng.integers(2**31)), threshold=cfg.vader_threshold,
                            min_words=6)
    return [(s, "", lab) for s, lab in pairs]


def comparison_examples(n: int, rng: np.random.Generator) -> list[tuple[str, str, int]]:
    """``n`` (statement, question, label) triples, labels balanced in a random order: "X is ADJ than Y." and
    "Is Z ADJ than W?" with (Z, W) = (X, Y) for label 1 (yes), (Y, X) for label 0."""
    labels = rng.permutation(np.arange(n) % 2)
    out = []
    for lab in labels:
        x, y = rng.choice(len(NAMES), 2, replace=False)
        adj = ADJECTIVES[int(rng.integers(len(ADJECTIVES)))]
        a, b = NAMES[x], NAMES[y]
        z, w = (a, b) if lab else (b, a)
        out.append((f"{a} is {adj} than {b}.", f"Is {z} {adj} than {w}?", int(lab)))
    return out


def prompt_text(task: str, sentence: str, question: str) -> str:
    """The user message of one prompt."""
    if task == "sentiment":
        return f"Sentence: {sentence}\nIs the sentiment of the sentence positive or negative?"
    return f"{sentence}\nQuestion: {question} Answer yes or no."


class AnswerScorer:
    """Reads a two-way answer from a chat model's next-token logits.

    The prompt is the tokenizer's chat template (system ``SYSTEM``, the user message, the generation prompt) or,
    without a template, ``"{SYSTEM}\\n{message}\\nAnswer:"``. Label k's score is the log-sum-exp of the logits of the
    first tokens of its spellings (bare, capitalised, with a leading space); tokens shared by the labels are dropped.

    Raises:
        ConfigError: a label has no first token of its own in this tokenizer.
    """

    def __init__(self, tokenizer: Any, task: str, device: Any):
        self.tok, self.device = tokenizer, device
        ids = []
        for words in LABEL_WORDS[task]:
            spell = {v for w in words for v in (w, " " + w)}
            ids.append({tokenizer(s, add_special_tokens=False)["input_ids"][0] for s in spell})
        shared = ids[0] & ids[1]
        self.ids = [sorted(s - shared) for s in ids]
        if not all(self.ids):
            raise ConfigError("model", getattr(tokenizer, "name_or_path", "?"),
                              f"a tokenizer whose first tokens tell {LABEL_WORDS[task]} apart")
        self.template = bool(getattr(tokenizer, "chat_template", None))

    def encode(self, message: str) -> list[int]:
        if self.template:
            msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": message}]
            text = self.tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
            return self.tok(text, add_special_tokens=False)["input_ids"]
        return self.tok(f"{SYSTEM}\n{message}\nAnswer:")["input_ids"]

    @torch.no_grad()
    def predict(self, model: Any, messages: list[str], batch_size: int) -> np.ndarray:
        """``[len(messages)]`` int: 1 where label 1 (positive / yes) scores above label 0."""
        out = []
        for s in range(0, len(messages), batch_size):
            enc = [self.encode(m) for m in messages[s: s + batch_size]]
            T = max(map(len, enc))
            x = torch.zeros(len(enc), T, dtype=torch.long)
            mask = torch.zeros(len(enc), T, dtype=torch.long)
            for i, e in enumerate(enc):  # right padding: positions of the real tokens unchanged
                x[i, :len(e)], mask[i, :len(e)] = torch.tensor(e), 1
            logits = model(input_ids=x.to(self.device), attention_mask=mask.to(self.device)).logits
            last = logits[torch.arange(len(enc)), torch.tensor([len(e) - 1 for e in enc])].float()
            sc = [torch.logsumexp(last[:, ids], dim=1) for ids in self.ids]
            out.append((sc[1] > sc[0]).long().cpu().numpy())
        return np.concatenate(out)
