"""Copy selected figures of quick-preset run directories into the documentation site, with the claims they decide.

    python scripts/docs_figures.py runs/benign-overfitting/<time> runs/double-descent/<time> ...

For each run directory (an experiment run with ``lmsci run NAME --preset quick``) this writes
``docs/figures/<experiment>/``: the PNGs chosen in :data:`SELECTION` (all of the run's figures when the experiment
is not listed there) and ``manifest.json`` with the run's preset, master seed, commit, date, device and threads
(from ``config.yaml``, ``environment.json``), each figure's caption (from the run's ``report.md``), the claim ids it
decides, and every claim's outcome in this run (``verdict.json``) beside its published outcome
(``results/quick/claims.csv``). The page ``docs/results/figures.md`` shows whatever is there (the docs build hook
renders it). Existing files of the experiment are replaced. Refuses a run that is not at preset quick, has no
verdict, or misses a selected figure; warns when the PNGs of all experiments exceed 2 MB.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shutil
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "figures"
PUBLISHED = ROOT / "results" / "quick" / "claims.csv"
MAX_BYTES = 2_000_000

#: experiment -> [(figure file in the run's figures/, claim ids the figure shows the evidence for)]
SELECTION: dict[str, list[tuple[str, list[str]]]] = {
    "benign-overfitting": [("benign_overfitting.png", ["benign-risk", "risk-falls-with-junk", "isotropic-harmful",
                                                       "effective-ranks"])],
    "double-descent": [("double_descent.png", ["u-curve", "peak-at-threshold", "second-descent",
                                               "ridge-removes-peak-digits", "ridge-removes-peak-linear",
                                               "isotropic-exact"]),
                       ("digits_zero_one.png", [])],
    "alpine-planning": [("alpine_tables.png", ["wm-adjacency"]),
                        ("alpine_accuracy.png", ["observed-accuracy", "transitive-gap"])],
    "chinchilla-refit": [("fit.png", ["grid-refit", "final-in-ci", "hoffmann-rejected"]),
                         ("residuals.png", ["hoffmann-rejected"]),
                         ("isoloss.png", [])],
}


def captions(report: str) -> dict[str, str]:
    """``{figure file: caption}`` from the run's report.md image lines ``![caption](figures/FILE)``."""
    return {m.group(2): m.group(1) for m in re.finditer(r"!\[(.*?)\]\(figures/([^)]+)\)", report)}


def published(experiment: str) -> dict[str, str]:
    if not PUBLISHED.is_file():
        return {}
    with PUBLISHED.open() as f:
        return {r["claim"]: r["outcome"] for r in csv.DictReader(f) if r["experiment"] == experiment}


def fmt(v) -> str:
    return "-" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)


def collect(run: Path) -> tuple[dict, list[tuple[Path, str]]]:
    """The manifest of one run and the (source PNG, target name) pairs to copy."""
    for f in ("config.yaml", "environment.json", "verdict.json", "report.md"):
        if not (run / f).is_file():
            raise SystemExit(f"{run}: no {f} (is it a finished lmsci run directory?)")
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    env = json.loads((run / "environment.json").read_text())
    env = env[-1] if isinstance(env, list) else env
    meta = json.loads((run / "run.json").read_text()) if (run / "run.json").is_file() else {}
    experiment = meta.get("experiment") or cfg.get("experiment") or run.parent.name
    if cfg.get("preset") != "quick":
        raise SystemExit(f"{run}: preset {cfg.get('preset')!r}; the site shows quick-preset runs")
    verdicts = json.loads((run / "verdict.json").read_text())
    caps = captions((run / "report.md").read_text())
    chosen = SELECTION.get(experiment) or [(name, []) for name in caps]
    figs, copies = [], []
    for name, claim_ids in chosen:
        src = run / "figures" / name
        if not src.is_file():
            raise SystemExit(f"{run}: selected figure {name} is missing (has: {sorted(caps)})")
        unknown = set(claim_ids) - {v["claim_id"] for v in verdicts}
        if unknown:
            raise SystemExit(f"{experiment}: SELECTION names claims it does not have: {sorted(unknown)}")
        figs.append({"file": name, "caption": caps.get(name, name), "claims": claim_ids})
        copies.append((src, name))
    pub = published(experiment)
    claims = [{"id": v["claim_id"], "kind": v.get("kind", "claim") + (" (ablation)" if v.get("ablation") else ""),
               "outcome": v["outcome"] + (" (post hoc)" if v.get("post_hoc") else ""),
               "published": pub.get(v["claim_id"], "-"),
               "value": fmt(v.get("value")) + ("" if not v.get("ci") else f" [{fmt(v['ci'][0])}, {fmt(v['ci'][1])}]"),
               "null": fmt(v.get("null_value"))} for v in verdicts]
    manifest = {"experiment": experiment, "preset": cfg["preset"], "seed": env.get("seed", cfg.get("seed")),
                "commit": (env.get("git_commit") or "unknown")[:10], "date": str(env.get("started", ""))[:10],
                "device": env.get("machine") or env.get("device", ""), "threads": env.get("torch_threads"),
                "statement": _statement(run), "claims": claims, "figures": figs}
    return manifest, copies


def _statement(run: Path) -> str:
    """The report's **Claim.** paragraph (the experiment's claim in one sentence)."""
    m = re.search(r"\*\*Claim\.\*\* (.*)", (run / "report.md").read_text())
    return m.group(1).strip() if m else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="quick-preset run directories")
    args = ap.parse_args(argv)
    for run in args.runs:
        manifest, copies = collect(run.resolve())
        dest = OUT / manifest["experiment"]
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        for src, name in copies:
            shutil.copy2(src, dest / name)
        (dest / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        print(f"{manifest['experiment']}: {len(copies)} figure(s) -> {dest.relative_to(ROOT)}")
    total = sum(p.stat().st_size for p in OUT.rglob("*.png"))
    print(f"docs/figures: {total / 1e6:.2f} MB of PNGs")
    if total > MAX_BYTES:
        print(f"warning: over {MAX_BYTES / 1e6:.0f} MB; select fewer figures", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
