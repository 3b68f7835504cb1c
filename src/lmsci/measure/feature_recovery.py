"""Ground-truth evaluation of a dictionary (SAE latents, PCA / ICA components, random directions): does some latent
track each known binary feature of a world?

For true binary features ``y [n, F]`` (a CFG's non-terminal ancestor at each position, a bioS person's attribute
class) and a dictionary's codes ``c [n, m]`` on the same rows:

* ``auc [F, m]``: the ROC AUC of every latent as a score for every feature (Mann-Whitney, ties averaged);
* per feature, the best-matching latent (highest AUC), its AUC and its best F1 over thresholds (the F1 of
  ``c_j > t`` at the best ``t``; Bricken et al. 2023 "Towards Monosemanticity" score features this way against
  known contexts, and Karvonen et al. 2024, arXiv 2408.00113, score SAE latents against board-state features of
  known games by best-threshold F1);
* the share of true features recovered: best F1 (or AUC) at or above a threshold;
* k-sparse probing (:func:`sparse_probe`): a held-out logistic read-out from the ``k`` most selective latents, for
  features too dense to be one sparse latent.

F1 is the discriminating score for sparse codes: a latent that is zero on most rows has tied ranks there, so
its AUC is capped near ``0.5 + 0.5 * firing recall`` even when it is a perfect detector when it fires, while a
dense projection correlated with a feature reaches AUC ~0.9 by chance (measured on planted features in
``tests/measure/test_feature_recovery.py``: random directions mean AUC 0.90, mean F1 0.54; a TopK SAE mean AUC 0.89,
mean F1 0.84).

``signed=True`` also scores ``-c_j`` (PCA, ICA and random projections have no preferred sign; SAE codes are
non-negative, so scoring their negation only adds "latent is off" detectors).

Baselines on the same activations, with the same count ``m`` (:func:`baseline_codes`): PCA (top ``min(m, d)``
principal components), FastICA (``min(m, d)`` components; scikit-learn) and ``m`` random unit directions.

World helpers (the model and the world are arguments; nothing from ``lmsci.worlds`` is imported):
:func:`cfg_features` (activations at every token of CFG strings, features = the level-``l`` NT ancestor is symbol
``a``, and optionally "token ends a level-``l`` subtree"; labels as :class:`lmsci.worlds.cfg.CFGSample`) and
:func:`bios_features` (activations at one position of each person's biography, features = the first value word of
each attribute is ``w``; :class:`lmsci.worlds.bios.BiosWorld`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from scipy.stats import rankdata
from torch import Tensor

from lmsci.errors import ConfigError

BASELINES = ("pca", "ica", "random")


def _as_np(x: Any, field: str, ndim: int = 2) -> np.ndarray:
    a = x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)
    if a.ndim != ndim:
        raise ConfigError(field, getattr(a, "shape", None), f"a {ndim}-d array")
    return a


def _check(codes: Any, features: Any) -> tuple[np.ndarray, np.ndarray]:
    c = _as_np(codes, "codes").astype(np.float64)
    y = _as_np(features, "features")
    if len(c) != len(y) or len(c) < 2:
        raise ConfigError("codes/features rows", (len(c), len(y)), "the same number n >= 2 of rows")
    if not np.isin(y, (0, 1)).all():
        raise ConfigError("features", "non-binary values", "0/1 (or bool) features [n, F]")
    y = y.astype(bool)
    pos = y.sum(0)
    if ((pos == 0) | (pos == len(y))).any():
        bad = np.flatnonzero((pos == 0) | (pos == len(y))).tolist()
        raise ConfigError("features", f"columns {bad[:10]} constant", "every feature both present and absent")
    if not np.isfinite(c).all():
        raise ConfigError("codes", "non-finite values", "finite codes")
    return c, y


def auc_matrix(codes: Any, features: Any) -> np.ndarray:
    """ROC AUC of each latent for each feature, ``[F, m]``, in [0, 1] (0.5 = chance; Mann-Whitney U / (P N)).

    Args:
        codes: ``[n, m]`` latent activations. features: ``[n, F]`` binary.

    Raises:
        ConfigError: mismatched rows, non-binary or constant features, non-finite codes.
    """
    c, y = _check(codes, features)
    ranks = rankdata(c, axis=0)  # [n, m], ties averaged
    P = y.sum(0).astype(np.float64)  # [F]
    N = len(y) - P
    s = y.T.astype(np.float64) @ ranks  # [F, m] rank sums of positives
    return (s - P[:, None] * (P[:, None] + 1) / 2) / (P[:, None] * N[:, None])


def best_f1(score: np.ndarray, label: np.ndarray) -> tuple[float, float]:
    """Best F1 of ``score > t`` over thresholds ``t`` (every distinct score), and that threshold.

    Args:
        score: ``[n]``; label: ``[n]`` bool with at least one positive.
    """
    order = np.argsort(-score, kind="stable")
    s, l = score[order], label[order].astype(np.float64)
    tp = np.cumsum(l)
    k = np.arange(1, len(s) + 1, dtype=np.float64)
    last = np.r_[s[1:] != s[:-1], True]  # cut only between distinct scores
    f1 = np.where(last, 2 * tp / (k + l.sum()), -1.0)
    i = int(np.argmax(f1))
    t = float(s[i + 1]) if i + 1 < len(s) else float(s[i]) - 1.0
    return float(f1[i]), t


def recovery_scores(codes: Any, features: Any, *, signed: bool = False, f1_candidates: int = 5,
                    feature_names: Sequence[str] | None = None) -> dict[str, Any]:
    """Per true feature: the best-matching latent by AUC, its AUC, and the best best-threshold F1 among the
    ``f1_candidates`` latents of highest AUC.

    Args:
        codes: ``[n, m]``; features: ``[n, F]`` binary (see :func:`auc_matrix`).
        signed: also score each latent's negation (latent index ``j`` then means ``-c_j``, reported in
            ``best_sign``).
        f1_candidates: how many top-AUC latents to search for the best F1 (>= 1).
        feature_names: ``F`` labels for the report.

    Returns:
        ``{"auc": [F] best AUC, "latent": [F] its index, "best_sign": [F] +1/-1, "f1": [F] best F1,
        "f1_latent": [F], "f1_trivial": [F], "base_rate": [F], "auc_matrix": [F, m], "feature_names": list}`` (numpy
        arrays). ``f1_trivial = 2p / (1 + p)`` (``p`` the base rate) is the F1 of calling every row positive, which
        the best-threshold F1 of any score reaches (its lowest threshold): a dense feature (``p`` = 1/3 gives 0.5)
        has a high floor, so compare F1 with it, or with a null dictionary, never with 0.

    Raises:
        ConfigError: as :func:`auc_matrix`; ``f1_candidates < 1``; names of the wrong length.
    """
    if int(f1_candidates) < 1:
        raise ConfigError("f1_candidates", f1_candidates, ">= 1")
    c, y = _check(codes, features)
    if feature_names is not None and len(feature_names) != y.shape[1]:
        raise ConfigError("feature_names", len(feature_names), f"{y.shape[1]} names (one per feature)")
    A = auc_matrix(c, y)
    Af = np.maximum(A, 1 - A) if signed else A
    sign_of = np.where(A >= 1 - A, 1, -1) if signed else np.ones_like(A, dtype=int)
    best = Af.argmax(1)
    F_ = y.shape[1]
    f1 = np.zeros(F_)
    f1_lat = np.zeros(F_, dtype=int)
    for f in range(F_):
        cand = np.argsort(-Af[f])[: int(f1_candidates)]
        scores = [best_f1(c[:, j] * sign_of[f, j], y[:, f])[0] for j in cand]
        k = int(np.argmax(scores))
        f1[f], f1_lat[f] = scores[k], int(cand[k])
    rows = np.arange(F_)
    p = y.mean(0)
    return {"auc": Af[rows, best], "latent": best, "best_sign": sign_of[rows, best], "f1": f1, "f1_latent": f1_lat,
            "f1_trivial": 2 * p / (1 + p), "base_rate": p, "auc_matrix": A, "feature_names": list(feature_names) if feature_names is not None else
            [f"f{i}" for i in range(F_)]}


def share_recovered(scores: Mapping[str, Any], threshold: float, by: str = "auc") -> float:
    """Share of true features whose best ``by`` (``"auc"`` or ``"f1"``) is at least ``threshold``.

    Raises:
        ConfigError: unknown ``by``; threshold outside [0, 1].
    """
    if by not in ("auc", "f1"):
        raise ConfigError("by", by, "'auc' or 'f1'")
    if not 0 <= threshold <= 1:
        raise ConfigError("threshold", threshold, "a number in [0, 1]")
    return float(np.mean(np.asarray(scores[by]) >= threshold))


def baseline_codes(kind: str, train_acts: Any, eval_acts: Any, m: int, seed: int = 0) -> np.ndarray:
    """Codes ``[n_eval, m']`` of a baseline dictionary fitted on ``train_acts [n_train, d]``.

    Args:
        kind: ``"pca"`` (projections on the top ``m' = min(m, d)`` principal components), ``"ica"`` (FastICA sources,
            ``m' = min(m, d)`` components, scikit-learn, unit-variance whitening, ``random_state=seed``) or
            ``"random"`` (projections of the centred activations on ``m' = m`` random unit directions drawn with
            ``seed``).
        m: the dictionary size to match (the SAE's ``d_sae``).

    Raises:
        ConfigError: unknown kind, ``m < 1``, activations of different widths.
    """
    from sklearn.decomposition import PCA, FastICA

    if kind not in BASELINES:
        raise ConfigError("kind", kind, ", ".join(BASELINES))
    if int(m) < 1:
        raise ConfigError("m", m, ">= 1")
    tr = _as_np(train_acts, "train_acts").astype(np.float64)
    ev = _as_np(eval_acts, "eval_acts").astype(np.float64)
    if tr.shape[1] != ev.shape[1]:
        raise ConfigError("eval_acts", ev.shape, f"width {tr.shape[1]} (as train_acts)")
    d = tr.shape[1]
    if kind == "random":
        g = np.random.default_rng(seed)
        D = g.standard_normal((int(m), d))
        D /= np.linalg.norm(D, axis=1, keepdims=True)
        return (ev - tr.mean(0)) @ D.T
    k = min(int(m), d, len(tr))
    if kind == "pca":
        return PCA(n_components=k, random_state=seed).fit(tr).transform(ev)
    ica = FastICA(n_components=k, whiten="unit-variance", random_state=seed, max_iter=400, tol=1e-3)
    import warnings

    with warnings.catch_warnings():  # FastICA warns when it stops at max_iter; the codes are still a dictionary
        warnings.simplefilter("ignore")
        ica.fit(tr)
    return ica.transform(ev)


def sparse_probe(train_codes: Any, train_features: Any, eval_codes: Any, eval_features: Any, k: int = 1, *,
                 l2: float = 1.0) -> dict[str, np.ndarray]:
    """k-sparse probing: per feature, a logistic regression on the ``k`` latents whose standardised class-mean
    difference on the training rows is largest (Gurnee et al. 2023, "Finding Neurons in a Haystack", arXiv 2305.01610,
    sec. 3; the SAE form of Gao et al. arXiv 2406.04093 sec. 4.4 and Kantamneni et al. 2025). With ``k = 1`` it asks
    whether one latent carries the feature; larger ``k`` credits a feature split across a few latents (a dense
    feature, on at a third of the tokens, cannot be one sparse latent).

    Args:
        train_codes, eval_codes: ``[n_train, m]``, ``[n_eval, m]``. train_features, eval_features: binary ``[n, F]``.
        k: latents per probe (1 <= k <= m). l2: inverse regularisation ``C`` of scikit-learn's LogisticRegression.

    Returns:
        ``{"acc": [F] eval accuracy, "f1": [F] eval F1, "majority": [F] eval majority-class rate, "latents": [F, k]}``.

    Raises:
        ConfigError: as :func:`auc_matrix` (on the training rows); mismatched widths or feature counts; ``k`` out of
            range.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score

    ctr, ytr = _check(train_codes, train_features)
    cev = _as_np(eval_codes, "eval_codes").astype(np.float64)
    yev = _as_np(eval_features, "eval_features").astype(bool)
    if cev.shape[1] != ctr.shape[1] or yev.shape[1] != ytr.shape[1] or len(cev) != len(yev):
        raise ConfigError("eval_codes/eval_features", (cev.shape, yev.shape),
                          f"[n_eval, {ctr.shape[1]}] codes and [n_eval, {ytr.shape[1]}] features")
    if not 1 <= int(k) <= ctr.shape[1]:
        raise ConfigError("k", k, f"1..{ctr.shape[1]} (the number of latents)")
    mu, sd = ctr.mean(0), ctr.std(0) + 1e-8
    ztr, zev = (ctr - mu) / sd, (cev - mu) / sd
    F_ = ytr.shape[1]
    acc, f1, lat = np.zeros(F_), np.zeros(F_), np.zeros((F_, int(k)), dtype=int)
    for f in range(F_):
        gap = np.abs(ztr[ytr[:, f]].mean(0) - ztr[~ytr[:, f]].mean(0))
        sel = np.argsort(-gap)[: int(k)]
        clf = LogisticRegression(C=l2, max_iter=1000).fit(ztr[:, sel], ytr[:, f])
        pred = clf.predict(zev[:, sel])
        acc[f], f1[f], lat[f] = float((pred == yev[:, f]).mean()), f1_score(yev[:, f], pred, zero_division=0.0), sel
    p = yev.mean(0)
    return {"acc": acc, "f1": f1, "majority": np.maximum(p, 1 - p), "latents": lat}


def compare_dictionaries(codes_by_name: Mapping[str, Any], features: Any, *, threshold: float = 0.7,
                         by: str = "f1", signed: Mapping[str, bool] | None = None,
                         feature_names: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """:func:`recovery_scores` and :func:`share_recovered` for several dictionaries on the same rows.

    Args:
        codes_by_name: name -> codes ``[n, m_name]`` (e.g. ``{"sae": ..., "pca": ..., "random": ...}``).
        signed: name -> score negations too (default: False for names starting with ``"sae"``, True otherwise).

    Returns:
        name -> ``{"share", "mean_auc", "mean_f1", "mean_f1_trivial", "n_latents", "scores"}``.
    """
    out = {}
    for name, codes in codes_by_name.items():
        sg = (signed or {}).get(name, not name.startswith("sae"))
        sc = recovery_scores(codes, features, signed=sg, feature_names=feature_names)
        out[name] = {"share": share_recovered(sc, threshold, by), "mean_auc": float(np.mean(sc["auc"])),
                     "mean_f1": float(np.mean(sc["f1"])), "mean_f1_trivial": float(np.mean(sc["f1_trivial"])),
                     "n_latents": int(np.shape(codes)[1]), "scores": sc}
    return out


# ------------------------------------------------------------------------------------ worlds


def cfg_features(model: Any, grammar: Any, samples: Sequence[Any], *, hook: str = "final",
                 levels: Sequence[int] | None = None, boundary: bool = False,
                 min_count: int = 5, keep: Sequence[str] | None = None) -> tuple[Tensor, np.ndarray, list[str]]:
    """Activations and true NT features of a CFG world at every token.

    Args:
        model: an lmsci GPT trained on the grammar (anything :func:`lmsci.measure.cfg_lm.hidden_states` takes).
        grammar: the CFG (``bos``, ``sizes``, ``depth``; :class:`lmsci.worlds.cfg.CFG`).
        samples: generated strings with labels (``tokens [n_i]``, ``ancestor [depth, n_i]``, ``boundary [depth,
            n_i]``: :class:`lmsci.worlds.cfg.CFGSample`).
        hook: hook point read (``[1, seq, d_model]``).
        levels: NT levels (default ``1 .. depth-1``; level 0 is the root, constant).
        boundary: also the features "token ends a level-``l`` subtree".
        min_count: features with fewer positives (or negatives) than this are dropped.
        keep: return exactly these feature names in this order instead (e.g. the names of the training call, so
            that evaluation columns align; ``min_count`` is then not applied).

    Returns:
        ``(acts [n, d_model] float32 on CPU, features [n, F] bool, names)``; names like ``"L2=1"`` (level-2
        ancestor is symbol 1) and ``"L2:end"``; ``n`` = total tokens.

    Raises:
        ConfigError: a level outside ``1 .. depth-1``; no samples; a ``keep`` name not defined here.
    """
    from lmsci.measure.cfg_lm import hidden_states

    if not samples:
        raise ConfigError("samples", 0, "at least one CFG sample")
    depth = len(grammar.sizes) - 1
    levels = list(range(1, depth)) if levels is None else [int(l) for l in levels]
    bad = [l for l in levels if not 1 <= l < depth]
    if bad:
        raise ConfigError("levels", bad, f"NT levels in 1..{depth - 1}")
    acts = torch.cat([h.cpu() for h in hidden_states(model, grammar, [s.tokens for s in samples], hook)])
    anc = np.concatenate([np.asarray(s.ancestor) for s in samples], axis=1)
    bnd = np.concatenate([np.asarray(s.boundary) for s in samples], axis=1)
    cols, names = [], []
    for l in levels:
        for a in range(int(grammar.sizes[l])):
            cols.append(anc[l] == a)
            names.append(f"L{l}={a}")
        if boundary:
            cols.append(bnd[l].astype(bool))
            names.append(f"L{l}:end")
    return _keep(acts, np.stack(cols, 1), names, min_count, keep)


def _keep(acts: Tensor, feats: np.ndarray, names: list[str], min_count: int,
          keep: Sequence[str] | None = None) -> tuple[Tensor, np.ndarray, list[str]]:
    if keep is not None:  # the columns of another call (train/eval alignment), in its order
        missing = [k for k in keep if k not in names]
        if missing:
            raise ConfigError("keep", missing[:10], "feature names this world and these samples define")
        idx = [names.index(k) for k in keep]
        return acts, feats[:, idx], list(keep)
    pos = feats.sum(0)
    ok = (pos >= min_count) & (len(feats) - pos >= min_count)
    if not ok.any():
        raise ConfigError("min_count", min_count, f"at most the rarest feature count ({int(pos.max())})")
    return acts, feats[:, ok], [n for n, k in zip(names, ok) if k]


def bios_features(model: Any, world: Any, people: Sequence[int], *, attrs: Sequence[str], hook: str = "final",
                  position: str = "after_name", seed: int = 0, bios: Mapping[int, Any] | None = None,
                  min_count: int = 5, keep: Sequence[str] | None = None) -> tuple[Tensor, np.ndarray, list[str]]:
    """Activations at one position of each person's biography and the person's attribute classes as features.

    Args:
        model: an lmsci GPT trained on the world's biographies.
        world: a :class:`lmsci.worlds.bios.BiosWorld` (``bio``, ``value_words``).
        people: person indices (one row each).
        attrs: attributes (``lmsci.worlds.bios.ATTRS`` names); feature ``"major=Applied"`` is "the first word of the
            person's major is Applied" (the first-value-token class the P-probe of
            :mod:`lmsci.measure.probes` predicts).
        position: ``"after_name"`` (the token after the name in the first sentence; Allen-Zhu & Li arXiv 2309.14316
            sec. 5) or ``"name_end"`` (the last name token).
        seed: renders each biography with ``np.random.default_rng([seed, 41, i])`` (as ``p_probe``) unless ``bios``
            (person -> its training ``Doc``) is given.
        min_count: features with fewer positives (or negatives) are dropped.
        keep: exactly these feature names in this order (as :func:`cfg_features`).

    Returns:
        ``(acts [len(people), d_model] float32 on CPU, features [len(people), F] bool, names)``.

    Raises:
        ConfigError: unknown ``position``; no people or attributes.
    """
    from lmsci.measure.probes import hidden_at

    if position not in ("after_name", "name_end"):
        raise ConfigError("position", position, "'after_name' or 'name_end'")
    if not len(people) or not len(attrs):
        raise ConfigError("people/attrs", (len(people), len(attrs)), "at least one person and one attribute")
    docs = [bios[int(i)] if bios is not None else world.bio(int(i), np.random.default_rng([seed, 41, int(i)]))
            for i in people]
    off = 0 if position == "after_name" else 1
    acts = hidden_at(model, [d.ids for d in docs], [d.spans["name"][0][1] - off for d in docs], hook).cpu()
    cols, names = [], []
    for a in attrs:
        first = np.array([world.value_words(int(i), a)[0] for i in people])
        for w in sorted(set(first.tolist())):
            cols.append(first == w)
            names.append(f"{a}={w.replace('@@', '')}")
    return _keep(acts, np.stack(cols, 1), names, min_count, keep)


__all__ = ["BASELINES", "auc_matrix", "best_f1", "recovery_scores", "share_recovered", "sparse_probe", "baseline_codes",
           "compare_dictionaries", "cfg_features", "bios_features"]
