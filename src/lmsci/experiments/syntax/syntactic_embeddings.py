"""Experiment ``syntactic-embeddings``: the input embeddings of a GPT trained on a synthetic language whose words
have known parts of speech are grouped by syntactic role (a linear probe reads the role of held-out words).

Source: seed lecture 000, "Word Embeddings Encode Syntactic Roles" ("in a synthetic language, word embeddings are
grouped by syntactic roles"), issue 34 part 4; the classical distributional result (words of one part of speech
share contexts: Schuetze 1993, "Part-of-speech induction from scratch", ACL; Mikolov et al. 2013, arXiv 1301.3781
for learned embeddings). World: :class:`lmsci.worlds.pos_pcfg.PosPCFG` (an English-like PCFG over 314 words in 8
classes).

Protocol. Per seed, a training stream of ``n_stream`` tokens (sentences concatenated); a GPT (untied input and
output embeddings, learned positions) is trained on random windows of ``seq_len`` tokens. Then the input embedding
rows of the words (``wte.weight[2:]``, ``[n_words, d_model]``) are split 50/50 per class into probe-train and
probe-test words; a multinomial logistic-regression probe (:func:`lmsci.measure.probes.fit_linear_probe`) is fit
on the train words and scored on the held-out words (accuracy). k-means (k = number of classes, sklearn, 10
restarts) on all word embeddings gives the purity (share of words in their cluster's majority class).

Null arms, measured in the same run: the same model's input embeddings at random initialisation; and a model
trained the same way on the same stream with the words of each sentence shuffled (``BOS`` and ``EOS`` kept in place,
every word kept in its sentence: each sentence's bag of words and the word frequencies are left to learn, the word
order is not). Since 2026-12-06 (issue 44 item 4) the shuffle is within sentences: a sentence's bag of words still
carries its words' classes through co-occurrence counts (determiners and nouns co-occur in every noun phrase), so
this null could meet the rule, and meets it if the probe reads a grouping that needs no word order. Before, the
stream was shuffled as a whole, which leaves only word frequencies, whose best read-out of the part of speech on
held-out words is ~0.84 (a 5-NN on exact counts, null audit 2026-12-06): below the rule's 0.9 by the world's design.

Arms (issue 44): ``real`` (point ``ordered``), ``sentence_shuffled`` (point ``sentence-shuffled``, its own seeds) and
``init`` (point ``init-ordered``: the ordered model's input embeddings at its random initialisation, the same init
and probe seeds, nothing trained). The claims engine judges ``kmeans-purity`` (arm real against arm
sentence_shuffled) and, since issue 44 item 1, ``role-probe`` with two null arms (``arms=("real", "init",
"sentence_shuffled")``): the null meets the rule if either arm does, and its reported value is the larger mean.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, every_at_least, mean_at_least
from lmsci.claims.engine import finished
from lmsci.config import ExperimentConfig
from lmsci.contract import Experiment, Figure, Point, PointContext, save_figure
from lmsci.experiments.registry import register
from lmsci.measure.probes import fit_linear_probe
from lmsci.models.gpt import GPT, GPTSpec
from lmsci.runs import RunDir, derive_seed
from lmsci.train.adaptor import train_lm
from lmsci.train.trainer import TrainSpec, evaluate_nll
from lmsci.worlds.pos_pcfg import BOS, EOS, ROLES, PosPCFG

PROBE_MIN, PURITY_MIN, GAIN_MIN = 0.9, 0.8, 0.5
SHUF = "sentence_shuffled"  # the null arm: each sentence's words shuffled in place


def shuffle_within_sentences(stream: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``stream [n_tokens]`` (sentences ``[BOS, w_1 .. w_m, EOS]`` concatenated) with the words of each sentence
    permuted among their own positions; ``BOS``/``EOS`` stay where they are (a copy, ``[n_tokens]`` int64)."""
    out = np.array(stream, dtype=np.int64, copy=True)
    words = np.flatnonzero((out != BOS) & (out != EOS))
    sentence = np.cumsum(out == BOS)[words]  # nondecreasing along the stream
    order = np.lexsort((rng.random(len(words)), sentence))  # by sentence, randomly within it
    out[words] = out[words][order]
    return out


class SyntacticEmbeddingsConfig(ExperimentConfig):
    """Configuration of ``syntactic-embeddings`` (defaults = the quick preset).

    Attributes:
        model: the GPT trained on the stream (:class:`~lmsci.models.gpt.GPTSpec`; learned positions, untied
            embeddings).
        train: its optimizer and schedule (:class:`~lmsci.train.trainer.TrainSpec`; ``batch_size`` windows of
            ``seq_len`` tokens per step).
    """

    n_stream: int = Field(300_000, ge=1000, description="training-stream tokens per seed")
    seq_len: int = Field(64, ge=8)
    model: GPTSpec = GPTSpec(n_layers=2, n_heads=4, d_model=64, pos="learned", tie_embeddings=False)
    train: TrainSpec = TrainSpec(steps=2000, batch_size=32, lr=2e-3, warmup_steps=100)
    threads: int = Field(1, ge=0)
    n_seeds: int = Field(3, ge=1, le=100)

    PRESETS = {
        "smoke": {"train.steps": 4, "train.warmup_steps": 4, "train.batch_size": 4, "model.d_model": 16,
                  "model.n_heads": 2, "n_stream": 4000, "seq_len": 16, "n_seeds": 1},
        "quick": {},
        "gpu": {"train.steps": 5000, "train.batch_size": 64, "model.d_model": 128, "model.n_layers": 4,
                "n_stream": 2_000_000, "seq_len": 128, "threads": 0},
        "paper": {"train.steps": 20000, "train.batch_size": 64, "model.d_model": 256, "model.n_layers": 6,
                  "model.n_heads": 8, "n_stream": 10_000_000, "seq_len": 128, "threads": 0},
    }


def embedding_metrics(emb: np.ndarray, roles: np.ndarray, seed: int, device: str = "cpu") -> dict[str, float]:
    """Held-out-word probe accuracy and k-means purity of word embeddings ``emb [n_words, d]`` with class ids
    ``roles [n_words]`` (split 50/50 within each class with ``seed``); the probe is fitted on ``device``."""
    from sklearn.cluster import KMeans

    rng = np.random.default_rng(seed)
    tr = np.zeros(len(roles), dtype=bool)
    for c in np.unique(roles):
        idx = np.flatnonzero(roles == c)
        tr[rng.permutation(idx)[: len(idx) // 2]] = True
    x, y = torch.from_numpy(emb).double().to(device), torch.from_numpy(roles).to(device)
    k = int(roles.max()) + 1
    p = fit_linear_probe(x[tr], y[tr], x[~tr], y[~tr], n_classes=k)
    km = KMeans(n_clusters=k, n_init=10, random_state=seed % 2**31).fit(emb)
    purity = sum(np.bincount(roles[km.labels_ == c], minlength=k).max() for c in np.unique(km.labels_)) / len(roles)
    return {"probe_acc": p["test_acc"], "probe_chance": p["chance"], "purity": float(purity)}


@register("syntactic-embeddings")
class SyntacticEmbeddings(Experiment):
    """Input embeddings grouped by part of speech in a GPT trained on a PCFG language."""

    claim = ("The input embeddings of a GPT trained on a synthetic PCFG language encode each word's part of speech: "
             "a linear probe reads it from held-out words with accuracy >= 0.9.")
    source = "seed lecture 000 ('Word Embeddings Encode Syntactic Roles'); issue 34 part 4"
    Config = SyntacticEmbeddingsConfig
    time_estimate = {"smoke": "~15 s", "quick": "18.0 min wall measured (6.0 min CPU: 3 seeds x (ordered + shuffled) x "
                     "2000 steps, threads=1, on a 2-core machine at load ~8); ~7 min on an idle one",
                     "gpu": "~4 min estimated on one H100 from the quick rate (not measured)",
                     "paper": "~20 min on one GPU (estimated)"}

    _LEARN = Gate("learned", every_at_least(GAIN_MIN), arm="real",
                  stat=Stat("nll_gain", words="the ordered model's NLL on a held-out ordered stream below the unigram "
                                              "entropy of the training stream, nats/token (it learned more than word "
                                              "frequencies)"))
    claims = [
        Claim("role-probe",
              "A linear probe reads a word's part of speech from its trained input embedding with accuracy >= 0.9 "
              "on held-out words.",
              "seed lecture 000; issue 34 part 4", "embeddings grouped by syntactic role (qualitative)",
              Stat("probe_acc", words="accuracy of a multinomial logistic-regression probe (fit on half the words "
                   "of each class, scored on the other half) from the input embedding to the part of speech"),
              mean_at_least(PROBE_MIN), gates=(_LEARN,), arms=("real", "init", SHUF),
              null="the larger of the same probe accuracy (mean over seeds) on (a) the input embeddings at random "
                   "initialisation and (b) those of a model trained the same way on the same stream with the words "
                   "of each sentence shuffled (sentence boundaries kept: bags of words, no word order)",
              null_can_meet="yes, if a sentence's bag of words carries its words' classes (determiners and nouns "
                            "co-occur in every noun phrase), so embeddings trained without word order still "
                            "separate the parts of speech: then the rule cannot credit the syntax"),
        Claim("kmeans-purity",
              "k-means (k = number of classes) on the trained input embeddings recovers the parts of speech "
              "(purity >= 0.8).",
              "seed lecture 000; issue 34 part 4 ('k-means purity reported')", "(no paper number)",
              statistic=Stat("purity", words="the purity of a k-means clustering of all word embeddings (reported, "
                                             "decides nothing)"),
              rule=mean_at_least(PURITY_MIN), gates=(_LEARN,), ablation=True, arms=("real", SHUF),
              null="the same purity for the sentence-shuffled model's embeddings (mean over seeds)"),
    ]

    def validate(self, cfg: SyntacticEmbeddingsConfig) -> None:
        from lmsci.errors import ConfigError

        if cfg.n_stream < 4 * cfg.seq_len:
            raise ConfigError("n_stream", cfg.n_stream, f">= 4 * seq_len = {4 * cfg.seq_len}")

    def points(self, cfg: SyntacticEmbeddingsConfig) -> list[Point]:
        return [Point("ordered", {"order": "ordered"}, arm="real"),
                Point("sentence-shuffled", {"order": "sentence-shuffled"}, arm=SHUF),
                Point("init-ordered", {"order": "init"}, arm="init")]  # init: the ordered model's seed, untrained

    def run_point(self, cfg: SyntacticEmbeddingsConfig, point: Point, ctx: PointContext) -> dict[str, Any]:
        g = PosPCFG()
        roles = g.role_of[2:]
        if point.arm == "init":  # the ordered model at its random initialisation: nothing trained
            model = GPT(cfg.model.gpt_config(g.vocab_size, cfg.seq_len), seed=derive_seed(ctx.seed, "init"))
            return {"order": "init", **embedding_metrics(model.wte.weight.detach()[2:].cpu().numpy().astype(np.float64),
                                                         roles, derive_seed(ctx.seed, "probe"), ctx.device)}
        # the stream and the test stream depend on the seed index only, so ordered and sentence-shuffled share them
        sk = ctx.point.seed_index
        stream = g.stream(cfg.n_stream, np.random.default_rng(derive_seed(cfg.seed, self.name, "stream", sk)))
        test = g.stream(max(cfg.n_stream // 10, 8 * cfg.seq_len),
                        np.random.default_rng(derive_seed(cfg.seed, self.name, "test", sk)))
        counts = np.bincount(stream, minlength=g.vocab_size).astype(float)
        pu = counts[counts > 0] / counts.sum()
        unigram = float(-(pu * np.log(pu)).sum())
        if point.params["order"] == "sentence-shuffled":  # each sentence's words in random order, in place
            stream = shuffle_within_sentences(stream, np.random.default_rng(derive_seed(ctx.seed, "shuffle")))
        model = GPT(cfg.model.gpt_config(g.vocab_size, cfg.seq_len), seed=derive_seed(ctx.seed, "init"))
        st = torch.from_numpy(stream)
        T = cfg.seq_len

        def windows(n: int, gen: torch.Generator) -> torch.Tensor:  # n random [T + 1] windows of the stream
            starts = torch.randint(0, len(st) - T - 1, (n,), generator=gen)
            return torch.stack([st[j:j + T + 1] for j in starts.tolist()])

        res = train_lm(model, windows, cfg.train, ctx, seed=derive_seed(ctx.seed, "data"),
                       desc=f"train {point.params['order']}")
        model.eval()
        tt = torch.from_numpy(test[: (len(test) - 1) // T * T + 1])
        n = (len(tt) - 1) // T
        batches = [(tt[:n * T].view(n, T)[i:i + 64], tt[1:n * T + 1].view(n, T)[i:i + 64]) for i in range(0, n, 64)]
        nll = evaluate_nll(model, batches, ctx.device)
        emb = model.wte.weight.detach()[2:].cpu().numpy().astype(np.float64)
        met = embedding_metrics(emb, roles, derive_seed(ctx.seed, "probe"), ctx.device)
        np.savez(ctx.artifact_dir / "emb.npz", emb=emb.astype(np.float32), roles=roles)
        return {"order": point.params["order"], **met, "test_nll": nll, "unigram_entropy": unigram, "nll_gain": unigram - nll,
                "train_seconds": res.seconds}

    # -- verdicts: the engine judges kmeans-purity; role-probe by hand (module docstring) ---------------------
    def figures(self, cfg: SyntacticEmbeddingsConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib.pyplot as plt

        ok = finished(results)
        rows = [r for _, r in ok.iterrows() if int(r.get("seed_index", 0)) == 0 and r.get("arm") != "init"]
        if not rows:
            return []
        fig, axes = plt.subplots(1, len(rows), figsize=(5.2 * len(rows), 4.4), squeeze=False)
        for ax, r in zip(axes[0], rows):
            f = run.point_dir(str(r["point"])) / "emb.npz"
            if not f.exists():
                continue
            d = np.load(f)
            e = d["emb"] - d["emb"].mean(0)
            u, sv, vt = np.linalg.svd(e, full_matrices=False)
            pc = e @ vt[:2].T
            for c, name in enumerate(ROLES):
                sel = d["roles"] == c
                ax.scatter(pc[sel, 0], pc[sel, 1], s=7, color=f"C{c}", label=name)
            ax.set_title(f"{r['order']} (seed 0): probe {r['probe_acc']:.2f}, purity {r['purity']:.2f}", fontsize=9)
            ax.set_xlabel("PC 1")
            ax.set_ylabel("PC 2")
        axes[0][0].legend(fontsize=7, markerscale=2)
        return [save_figure(fig, run, "embedding_pca.png", "Input embeddings of the words, first two principal "
                            "components, coloured by part of speech: the model trained on ordered sentences and the "
                            "one trained with each sentence's words shuffled", claims=("role-probe", "kmeans-purity"))]

    def report_sections(self, cfg: SyntacticEmbeddingsConfig, results: pd.DataFrame, run: RunDir) -> str:
        from lmsci.report import markdown_table

        cols = [c for c in ("point", "arm", "order", "probe_acc", "purity", "test_nll", "unigram_entropy", "nll_gain",
                            "train_seconds") if c in results]
        return ("## Setup\n\n"
                f"PosPCFG (314 words, 8 parts of speech); GPT {cfg.model.n_layers}x{cfg.model.n_heads}, "
                f"d_model {cfg.model.d_model}, {cfg.train.steps} steps of {cfg.train.batch_size} x {cfg.seq_len} tokens from a {cfg.n_stream:,}-token stream "
                "per seed.\n\n## Per model and seed\n\n" + markdown_table(results[cols]))
