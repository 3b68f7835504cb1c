"""Experiment ``icl-linear-regression``: a GPT trained on linear-regression prompts learns least squares in context.

Sources: Garg, Tsipras, Liang, Valiant, "What Can Transformers Learn In-Context? A Case Study of Simple Function
Classes", arXiv 2208.01066 (NeurIPS 2022), Sec. 3 and Fig. 2 (the trained transformer's squared error, normalised by
d, matches least squares and falls far below 3-nearest neighbours and averaging; the curriculum of App. A.2);
Akyurek, Schuurmans, Andreas, Ma, Zhou, "What learning algorithm is in-context learning? Investigations with linear
models", arXiv 2211.15661 (ICLR 2023), Sec. 4 (noisy targets; the squared prediction difference SPD between the
transformer's implied predictor and ridge / least squares / one gradient step / k-NN: closest to ridge and least
squares) and Sec. 5 (the weight vector is linearly decodable from hidden states of later layers).

Protocol: prompts of ``2d + 1`` pairs ``(x, w.x + eps)`` with ``x ~ N(0, I_d)``, ``w ~ N(0, I_d)``,
``eps ~ N(0, noise_std^2)`` encoded as Garg et al. do (``x_1, (y_1, 0..0), ...``); a GPT trunk (lmsci
:class:`~lmsci.models.gpt.GPT` blocks) with linear read-in/read-out (:class:`~lmsci.models.vector_gpt.VectorGPT`)
is trained with AdamW on the squared error of its prediction at every ``x`` position, under Garg's curriculum (the
active dimension and the number of points grow every ``curriculum_every`` steps). On fresh prompts shared by all
seeds we measure the error at every context size against the exact baselines of
:mod:`lmsci.worlds.linear_regression` (numpy), the SPD to each baseline, and ridge probes of ``w`` on the residual
stream after every block at the query position of context size ``2d``.

Arms (:func:`~lmsci.contract.cross_arms`; the two arms of a seed form one group, so the prompts and the exact
baselines are computed once): ``real`` is the trained model; ``null`` is the same architecture at the seed's
initialisation (same init weights, untrained) measured by the same code on the same evaluation and probe prompts,
which has learned no regression algorithm by construction. Every claim (``ls-error``, ``beats-baselines``,
``implied-ridge``, ``probe-w``) is judged by the claims engine on both arms with the same statistic and rule;
``reproduced`` needs the trained model to meet the rule and the untrained one not to. The ``trained`` gate reads the
real arm.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import torch
from pydantic import Field

from lmsci.claims import Claim, Gate, Stat, ci_above, ci_below, ci_inside, mean_at_most
from lmsci.claims.engine import arm_rows
from lmsci.config import ExperimentConfig
from lmsci.contract import Experiment, Figure, Point, PointContext, cross_arms, save_figure
from lmsci.errors import ConfigError, DivergedError
from lmsci.experiments.registry import register
from lmsci.models.gpt import GPTSpec
from lmsci.models.vector_gpt import VectorGPT
from lmsci.runs import RunDir, derive_seed
from lmsci.train.trainer import TrainSpec, lr_at
from lmsci.worlds.linear_regression import (
    BASELINES, Curriculum, LinearRegressionWorld, baseline_predictions, spd, squared_errors,
)


#: registered thresholds (issue 16)
LS_RATIO_MAX = 1.5          # model error at n = 2d within 1.5x of least squares
PROBE_R2_MIN = 0.5          # best layer's held-out R^2 of a linear probe for w
PLATEAU_FRAC = 0.5          # gate: error at n = 2d below half the zero predictor's (the model left the plateau)
#: baselines the model must beat at n = 2d, and the candidates of the implied-predictor comparison
WEAK_BASELINES = ("gd_1step", "knn3", "averaging")
SPD_CANDIDATES = ("least_squares", "ridge", "gd_1step", "knn3", "averaging")
LS_LIKE = ("least_squares", "ridge")


def error_below_baselines(rows: pd.DataFrame) -> pd.Series:
    """Per seed, the model's error at n = 2d minus the strongest weak baseline's (the smallest of the baselines'
    mean errors over the arm's rows: the baselines are exact functions of the shared prompts)."""
    base = min(float(rows[f"err_{b}_at_2d"].astype(float).mean()) for b in WEAK_BASELINES)
    return rows.groupby("seed_index")["err_model_at_2d"].mean().astype(float) - base


def spd_margin(rows: pd.DataFrame) -> pd.Series:
    """Per seed, min(SPD to one GD step, 3-NN, averaging) - min(SPD to least squares, ridge): > 0 when ridge or
    least squares is the model's closest baseline."""
    g = rows.groupby("seed_index")
    spd_of = {b: g[f"spd_{b}"].mean().astype(float) for b in SPD_CANDIDATES}
    ls_like = pd.concat([spd_of[b] for b in LS_LIKE], axis=1).min(axis=1)
    other = pd.concat([spd_of[b] for b in SPD_CANDIDATES if b not in LS_LIKE], axis=1).min(axis=1)
    return other - ls_like


class ICLLinearRegressionConfig(ExperimentConfig):
    """Configuration of ``icl-linear-regression`` (field defaults = the ``quick`` preset: d = 5, 3 seeds).

    Attributes (besides the described fields):
        model: the GPT trunk of the :class:`VectorGPT` (learned positions for ``2 (2d + 1)`` vectors), GPTSpec.
        train: the custom loop's AdamW (``betas``, ``weight_decay`` on every parameter, gradient norm clipped at
            ``grad_clip``) and its warmup + cosine schedule (``lr_at``), TrainSpec.
    """

    d: int = Field(5, ge=1, le=64, description="input dimension of the regression tasks")
    noise_std: float = Field(0.5, ge=0, description="target noise sigma (Akyurek et al.; Garg et al.'s main task has 0)")
    model: GPTSpec = GPTSpec(n_layers=3, n_heads=4, d_model=64)
    d_in: int | None = Field(None, ge=1, description="model input width (default d); must be >= d")
    train: TrainSpec = TrainSpec(steps=4000, batch_size=64, lr=1e-3, warmup_steps=100, weight_decay=0.0,
                                 betas=(0.9, 0.999), grad_clip=1.0, min_lr_ratio=0.1)
    curriculum_dims_start: int = Field(2, ge=1, description="active dimension at step 0 (Garg: 5 of 20)")
    curriculum_points_start: int = Field(5, ge=1, description="points per prompt at step 0 (Garg: 11 of 41)")
    curriculum_every: int = Field(250, ge=0, description="steps between curriculum increments "
                                  "(dims +1, points +2; Garg: 2000); 0 = no curriculum")
    n_eval: int = Field(2000, ge=10, description="evaluation prompts (shared by all seeds)")
    n_probe: int = Field(2000, ge=20, description="probe prompts (half to fit, half to score)")
    probe_alpha: float = Field(1e-2, gt=0, description="ridge penalty of the linear probe (scikit-learn Ridge)")
    threads: int = Field(1, ge=0)

    PRESETS = {
        "smoke": {"d": 3, "model.n_layers": 2, "model.n_heads": 2, "model.d_model": 16, "train.steps": 40,
                  "train.warmup_steps": 39, "train.batch_size": 16, "curriculum_every": 10, "n_eval": 64,
                  "n_probe": 64, "n_seeds": 1},
        "quick": {"n_seeds": 3},
        "gpu": {"d": 20, "model.n_layers": 6, "model.n_heads": 4, "model.d_model": 128, "train.steps": 60000,
                "train.batch_size": 64, "train.lr": 2e-4, "train.warmup_steps": 1000, "curriculum_dims_start": 5,
                "curriculum_points_start": 11, "curriculum_every": 2000, "n_eval": 4000, "n_probe": 4000, "n_seeds": 3,
                "threads": 0},
        "paper": {"d": 20, "model.n_layers": 12, "model.n_heads": 8, "model.d_model": 256, "train.steps": 500000,
                  "train.batch_size": 64, "train.lr": 1e-4, "train.warmup_steps": 1000, "curriculum_dims_start": 5,
                  "curriculum_points_start": 11,
                  "curriculum_every": 2000, "n_eval": 4000, "n_probe": 4000, "n_seeds": 3, "threads": 0},
    }

    @property
    def n_points(self) -> int:
        """Pairs per prompt, ``2d + 1`` (Garg et al.)."""
        return 2 * self.d + 1

    @property
    def n_query(self) -> int:
        """The context size at which the registered errors are read: ``2d`` in-context examples."""
        return 2 * self.d


def build_model(cfg: ICLLinearRegressionConfig, seed: int) -> VectorGPT:
    """The :class:`VectorGPT` of ``cfg`` (learned positions for ``2 (2d + 1)`` vectors)."""
    return VectorGPT(cfg.model.gpt_config(1, 2 * cfg.n_points), d_in=cfg.d_in or cfg.d, d_out=1, seed=seed)


@torch.no_grad()
def predict(model: VectorGPT, xs: torch.Tensor, ys: torch.Tensor, batch_size: int = 500) -> np.ndarray:
    """The model's prediction of every ``y_i`` from the pairs before it, ``[batch, n]`` (numpy float64).

    Args:
        xs: ``[batch, n, d]`` with ``d <= model.d_in`` (zero-padded to ``d_in``); ys: ``[batch, n]``.

    Raises:
        ConfigError: ``d`` above the model's input width, or ``2 n`` above its ``seq_len``.
    """
    from lmsci.worlds.linear_regression import interleave

    d = xs.shape[-1]
    if d > model.d_in:
        raise ConfigError("d", d, f"<= the model's input width d_in={model.d_in}")
    if 2 * xs.shape[1] > model.cfg.seq_len:
        raise ConfigError("n_points", xs.shape[1], f"<= seq_len/2 = {model.cfg.seq_len // 2} (the model's context)")
    if d < model.d_in:
        xs = torch.nn.functional.pad(xs, (0, model.d_in - d))
    was = model.training
    model.eval()
    dev = next(model.parameters()).device
    out = []
    try:
        for s in range(0, xs.shape[0], batch_size):
            tok = interleave(xs[s:s + batch_size].to(dev), ys[s:s + batch_size].to(dev))
            out.append(model(tok)[:, 0::2, 0].double().cpu())
    finally:
        model.train(was)
    return torch.cat(out).numpy()


@torch.no_grad()
def probe_w(model: VectorGPT, xs: torch.Tensor, ys: torch.Tensor, targets: np.ndarray, position: int,
            alpha: float = 1e-2) -> list[float]:
    """Held-out R^2 of a ridge probe of ``targets`` from the residual stream at input position ``position``, per
    layer (layer 0 = the embedding, layer l = after block l).

    Args:
        xs, ys: ``[batch, n, d]``, ``[batch, n]`` probe prompts (first half fits, second half scores).
        targets: ``[batch, k]`` what to decode (w, or a baseline's estimate of w).
        position: index into the interleaved sequence (``2 i`` is ``x_i``, the query after ``i`` pairs).
        alpha: the ridge penalty (scikit-learn ``Ridge``), on standardised features.

    Returns:
        ``[n_layers + 1]`` R^2 values (``sklearn.metrics.r2_score``, variance-weighted over the k outputs).

    Source: Akyurek et al., arXiv 2211.15661, Sec. 5 (probing for w); Alain & Bengio 2016 (linear probes).
    """
    from sklearn.linear_model import Ridge
    from sklearn.metrics import r2_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from lmsci.worlds.linear_regression import interleave

    names = ["embed"] + [f"blocks.{i}.resid_post" for i in range(len(model.gpt.blocks))]
    dev = next(model.parameters()).device
    xin = xs if xs.shape[-1] == model.d_in else torch.nn.functional.pad(xs, (0, model.d_in - xs.shape[-1]))
    was = model.training
    model.eval()
    try:
        _, cache = model.run_with_cache(interleave(xin.to(dev), ys.to(dev)), names)
    finally:
        model.train(was)
    half = xs.shape[0] // 2
    out = []
    for name in names:
        h = cache[name][:, position].double().cpu().numpy()
        probe = make_pipeline(StandardScaler(), Ridge(alpha=alpha)).fit(h[:half], targets[:half])
        out.append(float(r2_score(targets[half:], probe.predict(h[half:]), multioutput="variance_weighted")))
    return out


@register("icl-linear-regression")
class ICLLinearRegression(Experiment):
    """A GPT trained on linear-regression prompts matches least squares in context (Garg et al. Fig. 2)."""

    claim = ("A transformer trained on in-context linear-regression prompts reaches least-squares error at n = 2d "
             "examples, beats one gradient step, 3-NN and averaging, implements a predictor closest to ridge / least "
             "squares, and linearly encodes w.")
    source = ("Garg et al., arXiv 2208.01066, Fig. 2 and App. A.2; Akyurek et al., arXiv 2211.15661, Sec. 4-5")
    Config = ICLLinearRegressionConfig
    time_estimate = {"smoke": "~3 s",
                     "quick": "551 s measured (3 seeds of 4000 steps, d = 5, one thread, beside another run on a loaded "
                              "machine; the models leave the plateau but stay 2-5x above least squares at n = 2d)",
                     "gpu": "~25 min on one H100 (3 seeds of 60k steps, d = 20, 6 layers x 128; estimate)",
                     "paper": "~3 days on one GPU per seed (500k steps, d = 20, 12 layers x 256, as Garg et al.)"}

    _SRC_G = "Garg et al., arXiv 2208.01066, Sec. 3, Fig. 2"
    _SRC_A = "Akyurek et al., arXiv 2211.15661, Sec. 4 (Fig. 3: SPD), Sec. 5 (probes)"
    _NULL = ("the same statistic and rule for the same architecture at its initialisation (each seed's init weights, "
             "untrained) on the same prompts: it has learned no regression algorithm by construction")
    _TRAINED = Gate("trained", mean_at_most(PLATEAU_FRAC), arm="real",
                    stat=Stat("err_model_at_2d", over=Stat("err_zero_at_2d"),
                              words="the model's mean squared error at n = 2d over that of the zero predictor on the "
                                    "same prompts (training left the initial plateau)"))
    claims = [
        Claim(
            "ls-error",
            "At n = 2d in-context examples the trained GPT's squared error is within 1.5x of ordinary least squares.",
            _SRC_G,
            "transformer error matches least squares for n >= d (Fig. 2, noiseless d = 20; normalised error near 0)",
            statistic=Stat("err_model_at_2d", over=Stat("err_least_squares_at_2d"),
                           words="the model's mean squared error at n = 2d on fresh prompts (shared by the seeds) "
                                 "divided by that of ordinary least squares on the same prompts"),
            rule=ci_inside(-math.inf, LS_RATIO_MAX),
            gates=(_TRAINED,),
            null=_NULL,
        ),
        Claim(
            "beats-baselines",
            "At n = 2d the trained GPT's squared error is below one step of gradient descent, 3-nearest neighbours and "
            "averaging.",
            _SRC_G + "; " + _SRC_A,
            "3-NN and averaging far above the transformer for n >= d (Fig. 2)",
            statistic=Stat(fn=error_below_baselines,
                           words="the model's mean squared error at n = 2d minus the smallest of the mean errors "
                                 "(over the arm's seeds) of one GD step (step size tuned per n on the evaluation "
                                 "prompts), 3-NN and averaging (w = mean y_i x_i) on the same prompts"),
            rule=ci_below(0.0),
            gates=(_TRAINED,),
            null=_NULL,
        ),
        Claim(
            "implied-ridge",
            "The trained GPT's implied predictor is closest to ridge regression / least squares.",
            _SRC_A,
            "SPD to ridge / least squares near 0, far below SPD to one GD step and k-NN (Fig. 3)",
            statistic=Stat(fn=spd_margin,
                           words="the squared prediction difference SPD between the model and each of least squares, "
                                 "ridge (lambda = sigma^2), one GD step, 3-NN and averaging, averaged over context "
                                 "sizes n = 1..2d; the margin min(SPD to GD, 3-NN, averaging) - min(SPD to ridge, "
                                 "least squares)"),
            rule=ci_above(0.0),
            gates=(_TRAINED,),
            null=_NULL,
        ),
        Claim(
            "probe-w",
            "A linear probe on the residual stream recovers the task vector w (held-out R^2 reported per layer).",
            _SRC_A,
            "w (and the least-squares estimate) decodable from later layers (Sec. 5, Fig. 4)",
            statistic=Stat("probe_r2_best", words="the best layer's held-out R^2 (variance-weighted over the d "
                                                  "coordinates) of a ridge probe of w from the residual stream at the "
                                                  "query position after 2d examples"),
            rule=ci_inside(PROBE_R2_MIN, math.inf),
            gates=(_TRAINED,),
            null=_NULL,
        ),
    ]

    def validate(self, cfg: ICLLinearRegressionConfig) -> None:
        if cfg.d_in is not None and cfg.d > cfg.d_in:
            raise ConfigError("d", cfg.d, f"<= the model's input width d_in={cfg.d_in}")
        if cfg.curriculum_dims_start > cfg.d:
            raise ConfigError("curriculum_dims_start", cfg.curriculum_dims_start, f"<= d={cfg.d}")
        if cfg.curriculum_points_start > cfg.n_points:
            raise ConfigError("curriculum_points_start", cfg.curriculum_points_start, f"<= 2d+1={cfg.n_points}")

    def points(self, cfg: ICLLinearRegressionConfig) -> list[Point]:
        return cross_arms([Point(f"d{cfg.d}", {"d": cfg.d})], ("real", "null"))  # trained / untrained initialisation

    # -- training --------------------------------------------------------------------------------------------
    def train_model(self, cfg: ICLLinearRegressionConfig, world: LinearRegressionWorld, seed: int, device: str,
                    ctx: PointContext | None = None) -> tuple[VectorGPT, list[dict]]:
        """AdamW on the mean squared error at every ``x`` position, Garg's curriculum, warmup + cosine schedule.

        Raises:
            DivergedError: a non-finite loss.
        """
        model = build_model(cfg, derive_seed(seed, "init")).to(device)
        tc = cfg.train.train_config()
        opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, betas=tc.betas, weight_decay=tc.weight_decay)
        every = cfg.curriculum_every
        cur_d = Curriculum(cfg.curriculum_dims_start, cfg.d, 1, every)
        cur_n = Curriculum(cfg.curriculum_points_start, cfg.n_points, 2, every)
        gen = torch.Generator().manual_seed(derive_seed(seed, "data"))
        d_in = model.d_in
        hist, run_loss = [], 0.0
        bar = ctx.progress(tc.steps) if ctx is not None else None
        model.train()
        every_log = max(1, tc.steps // 50)
        for step in range(tc.steps):
            for g in opt.param_groups:
                g["lr"] = lr_at(step, tc)
            da, na = cur_d.at(step), cur_n.at(step)
            p = world.sample(tc.batch_size, na, gen, d_active=da, device=device)
            xs = p.xs if d_in == cfg.d else torch.nn.functional.pad(p.xs, (0, d_in - cfg.d))
            pred = model(_interleave(xs, p.ys))[:, 0::2, 0]
            loss = ((pred - p.ys) ** 2).mean()
            if not torch.isfinite(loss):
                raise DivergedError(step, float(loss.detach()))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
            opt.step()
            run_loss += float(loss.detach())
            if bar is not None:
                bar.update(1)
            if (step + 1) % every_log == 0 or step == tc.steps - 1:
                k = every_log if (step + 1) % every_log == 0 else (step + 1) % every_log
                rec = {"step": step + 1, "loss": run_loss / k, "loss_per_dim": run_loss / k / da, "d_active": da,
                       "n_points": na, "lr": lr_at(step, tc)}
                hist.append(rec)
                if ctx is not None:
                    ctx.log(**rec)
                run_loss = 0.0
        if bar is not None:
            bar.close()
        model.eval()
        return model, hist

    def eval_prompts(self, cfg: ICLLinearRegressionConfig, world: LinearRegressionWorld, kind: str, n: int):
        """Prompts shared by every training seed (seeded from ``cfg.seed`` and ``kind`` only)."""
        return world.sample(n, cfg.n_points, torch.Generator().manual_seed(derive_seed(cfg.seed, "icl-lr", kind)))

    def run_point(self, cfg: ICLLinearRegressionConfig, point: Point, ctx: PointContext) -> dict:
        return self.run_group(cfg, [point], [ctx])[0]

    def groups(self, cfg: ICLLinearRegressionConfig, points: list[Point]) -> list[list[Point]]:
        """The two arms of one seed form one group: the prompts and the exact baselines are computed once."""
        by_seed: dict[int, list[Point]] = {}
        for p in points:
            by_seed.setdefault(p.seed_index, []).append(p)
        return list(by_seed.values())

    def run_group(self, cfg: ICLLinearRegressionConfig, points: list[Point], ctxs: list[PointContext]) -> list[dict]:
        """The real arm trains the seed's model; the null arm is the same architecture at its initialisation (same
        init seed), untrained. Both are measured by :meth:`measure` on the same prompts."""
        world = LinearRegressionWorld(cfg.d, cfg.noise_std)
        ev = self.eval_prompts(cfg, world, "eval", cfg.n_eval)
        ys = ev.ys.double().numpy()
        base = baseline_predictions(ev.xs.numpy(), ys, ridge_lambda=world.ridge_lambda)
        shared = {"ev": ev, "ys": ys, "base": base, "pr": self.eval_prompts(cfg, world, "probe", cfg.n_probe)}
        rows = []
        for p, ctx in zip(points, ctxs):
            if p.arm == "null":
                model, hist = build_model(cfg, derive_seed(ctx.seed, "init")).to(ctx.device), []
            else:
                model, hist = self.train_model(cfg, world, ctx.seed, ctx.device, ctx)
                pd.DataFrame(hist).to_csv(ctx.artifact_dir / "train_curve.csv", index=False)
            rows.append({**p.params, "noise_std": cfg.noise_std, "n_query": cfg.n_query,
                         "final_train_loss": hist[-1]["loss"] if hist else None,
                         **self.measure(cfg, world, model, shared)})
            del model
        return rows

    def measure(self, cfg: ICLLinearRegressionConfig, world: LinearRegressionWorld, model: VectorGPT,
                shared: dict) -> dict:
        """Errors at n = 2d against the exact baselines, SPD to each baseline (mean over n = 1..2d), and ridge probes
        of w and of its ridge estimate at the query after 2d examples, per layer, for one model."""
        ev, ys, base, pr = shared["ev"], shared["ys"], shared["base"], shared["pr"]
        pred = predict(model, ev.xs, ev.ys)
        errs = {"model": squared_errors(pred, ys)} | {b: squared_errors(v, ys) for b, v in base.items()}
        spds = {b: spd(pred, base[b]) for b in SPD_CANDIDATES}
        pos = 2 * cfg.n_query  # the x token after 2d pairs
        r2_w = probe_w(model, pr.xs, pr.ys, pr.ws.double().numpy(), pos, cfg.probe_alpha)
        # also probe the ridge estimate of w from the 2d pairs the model sees (Akyurek et al. probe w_OLS)
        X, Y = pr.xs[:, :cfg.n_query].double().numpy(), pr.ys[:, :cfg.n_query].double().numpy()
        w_hat = np.linalg.solve(np.einsum("bij,bik->bjk", X, X) + world.ridge_lambda * np.eye(cfg.d),
                                np.einsum("bij,bi->bj", X, Y)[..., None])[..., 0]
        r2_wh = probe_w(model, pr.xs, pr.ys, w_hat, pos, cfg.probe_alpha)
        nq = cfg.n_query
        return {**{f"err_{k}_at_2d": float(v[nq]) for k, v in errs.items()},
                **{f"spd_{k}": float(v[1:nq + 1].mean()) for k, v in spds.items()},
                "probe_r2_best": float(max(r2_w)), "probe_best_layer": int(np.argmax(r2_w)),
                "probe_what_r2_best": float(max(r2_wh)),
                "err_curves": json.dumps({k: [round(float(x), 6) for x in v] for k, v in errs.items()}),
                "spd_curves": json.dumps({k: [round(float(x), 6) for x in v] for k, v in spds.items()}),
                "probe_r2_by_layer": json.dumps([round(x, 4) for x in r2_w]),
                "probe_what_r2_by_layer": json.dumps([round(x, 4) for x in r2_wh])}

    # -- report ----------------------------------------------------------------------------------------------
    def figures(self, cfg: ICLLinearRegressionConfig, results: pd.DataFrame, run: RunDir) -> list[Figure]:
        import matplotlib.pyplot as plt

        results = arm_rows(results, "real")
        if results.empty or "err_curves" not in results:
            return []
        curves = [json.loads(s) for s in results["err_curves"]]
        d = cfg.d
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        names = ["model"] + [b for b in BASELINES]
        for i, name in enumerate(names):
            arr = np.array([c[name] for c in curves]) / d
            n = np.arange(arr.shape[1])
            m = arr.mean(0)
            ax.plot(n, m, label="GPT (mean over seeds)" if name == "model" else name, lw=2 if name == "model" else 1,
                    color="k" if name == "model" else f"C{i}")
            if name == "model" and arr.shape[0] > 1:
                ax.fill_between(n, arr.min(0), arr.max(0), color="k", alpha=0.15)
        ax.axvline(d, color="gray", ls=":", lw=1)
        ax.axvline(2 * d, color="gray", ls="--", lw=1)
        ax.set_yscale("log")
        ax.set_xlabel("in-context examples n")
        ax.set_ylabel("squared error / d")
        ax.set_title(f"d = {d}, noise sigma = {cfg.noise_std} ({len(curves)} seed(s); shade: min-max)", fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(True, alpha=0.3)
        figs = [save_figure(fig, run, "error_vs_n.png", "Squared error (normalised by d) against the number of "
                            "in-context examples: the GPT and the exact baselines (cf. Garg et al. Fig. 2)",
                            claims=("ls-error", "beats-baselines"))]
        spdc = [json.loads(s) for s in results["spd_curves"]]
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for i, name in enumerate(SPD_CANDIDATES):
            arr = np.array([c[name] for c in spdc]) / d
            ax.plot(np.arange(1, arr.shape[1]), arr.mean(0)[1:], label=name, color=f"C{i}")
        ax.set_yscale("log")
        ax.set_xlabel("in-context examples n")
        ax.set_ylabel("SPD(GPT, baseline) / d")
        ax.legend(fontsize=7)
        ax.grid(True, alpha=0.3)
        figs.append(save_figure(fig, run, "spd_vs_n.png", "Squared prediction difference between the GPT and each "
                                "baseline (mean over seeds; cf. Akyurek et al. Fig. 3)", claims=("implied-ridge",)))
        fig, ax = plt.subplots(figsize=(5.4, 3.8))
        for col, lab, ls in (("probe_r2_by_layer", "w", "-"), ("probe_what_r2_by_layer", "ridge estimate of w", "--")):
            arr = np.array([json.loads(s) for s in results[col]])
            for k, row in enumerate(arr):
                ax.plot(np.arange(len(row)), row, ls=ls, color="C0" if col.startswith("probe_r2") else "C1",
                        alpha=0.7, label=lab if k == 0 else None)
        ax.axhline(PROBE_R2_MIN, color="gray", ls=":", lw=1)
        ax.set_xlabel("layer (0 = embedding)")
        ax.set_ylabel("held-out R^2 of a linear probe")
        ax.legend(fontsize=7)
        ax.grid(True, alpha=0.3)
        figs.append(save_figure(fig, run, "probe_r2.png", "Held-out R^2 of ridge probes of w and of the ridge estimate "
                                "of w at the query after 2d examples, per layer, every seed", claims=("probe-w",)))
        return figs

    def report_sections(self, cfg: ICLLinearRegressionConfig, results: pd.DataFrame, run: RunDir) -> str:
        from lmsci.report import markdown_table

        cols = ["point", "arm", "seed_index", "final_train_loss"] + [f"err_{b}_at_2d" for b in ("model",) + BASELINES] + \
            [f"spd_{b}" for b in SPD_CANDIDATES] + ["probe_r2_best", "probe_best_layer", "probe_what_r2_best",
                                                    "probe_r2_by_layer"]
        return (f"## Method\n\nd = {cfg.d}, prompts of 2d + 1 = {cfg.n_points} pairs, x ~ N(0, I), w ~ N(0, I), noise "
                f"sigma = {cfg.noise_std}. GPT trunk {cfg.model.n_layers} layers x {cfg.model.n_heads} heads x d_model "
                f"{cfg.model.d_model} with a linear read-in of the vectors; AdamW lr {cfg.train.lr}, batch "
                f"{cfg.train.batch_size}, {cfg.train.steps} steps; "
                f"curriculum: active dimension {cfg.curriculum_dims_start} -> {cfg.d} (+1) and points "
                f"{cfg.curriculum_points_start} -> {cfg.n_points} (+2) every {cfg.curriculum_every} steps (Garg et al. "
                f"App. A.2). {cfg.n_eval} evaluation prompts shared by all {cfg.n_seeds} seed(s); baselines exact "
                f"(numpy): least squares (minimum norm), ridge lambda = sigma^2 (the Bayes posterior mean), one GD step "
                f"from 0 with the step size tuned per n on the evaluation prompts, 3-NN, averaging, zero. Errors are "
                f"mean squared errors (the figures divide by d as Garg et al.). SPD averaged over n = 1..2d. Probes: "
                f"scikit-learn Ridge(alpha={cfg.probe_alpha}) on standardised residual streams at the query after 2d "
                f"examples, fit on {cfg.n_probe // 2} prompts and scored on {cfg.n_probe - cfg.n_probe // 2}. Null arm: "
                f"every statistic also for the seed's untrained initialisation (rows `null`). Seeds are "
                "trained one after another (the stacked trainer is for token models with a cross-entropy loss).\n\n"
                "## Per seed and arm\n\n" + markdown_table(results[[c for c in cols if c in results]]))


def _interleave(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    from lmsci.worlds.linear_regression import interleave

    return interleave(xs, ys)
