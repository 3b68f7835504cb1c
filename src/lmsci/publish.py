"""Publishing the claims table: read a suite directory's run directories back into one table, count it, write
it (``claims.md``, ``claims.csv``, ``claims.html``), compare it with an earlier one, and merge it into the
published table (``results/<preset>/``).

The claims table has one row per registered item:

    experiment, claim, kind (claim or check), source, paper value, ours (value, interval), null arm,
    outcome, seeds, post hoc, wall time, device (claims.csv adds commit, date, machine and digest per row)

With several master seeds a row's outcome is the seeds' common outcome, or ``seed-dependent`` (counted as
inconclusive) when they differ, with every seed's value beside it. A row is ``post hoc`` when any master
seed behind it is one at which the claim's preset, gate, null or rule changed after a result was seen
(:data:`lmsci.claims.POST_HOC`; :mod:`lmsci.claims.posthoc`): ``post_hoc_seeds`` names them and
``fresh_outcome`` is the outcome over the other seeds, counted as "reproduced on fresh seeds only".

:func:`update_published` replaces the rows of the experiments a suite ran in the published table and keeps the
others, each row with its own commit, date, machine and provenance digest (:mod:`lmsci.provenance`). With an
earlier table, :func:`mark_changes` marks every claim whose outcome changed, or whose value moved outside its
interval (either run's), so a change to the code that changes the science is seen.

Every number in the table is read back from each run directory's ``verdict.json``, ``results.csv`` and
``environment.json``; running the suite is :mod:`lmsci.suite`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from lmsci.claims import finite_or_none
from lmsci.config import ALL_PRESET_NAMES
from lmsci.errors import LmsciError, RunDirError
from lmsci.provenance import MIXED
from lmsci.runs import RunDir, atomic_write_text

SUITE_FILE = "suite.json"
CLAIMS_MD, CLAIMS_CSV, CLAIMS_HTML = "claims.md", "claims.csv", "claims.html"
ERROR = "error"
#: a row whose master seeds gave different outcomes (counted as inconclusive)
SEED_DEPENDENT = "seed-dependent"

#: the claims table's columns (claims.csv has these and the machine-readable ones after them)
COLUMNS = ["experiment", "claim", "kind", "source", "paper_value", "ours", "null_arm", "outcome", "seeds",
           "post_hoc", "wall_s", "device"]
CSV_COLUMNS = COLUMNS + ["decided_here", "value", "ci_lo", "ci_hi", "null_value", "null_passed", "ablation", "master_seeds",
                         "seed_outcomes", "seed_values", "pilot", "commit", "date", "machine", "digest", "error",
                         "change", "post_hoc_seeds", "fresh_outcome"]


def seed_run_name(name: str, seed: int, first: bool) -> str:
    """The run directory of ``name`` at master seed ``seed`` inside a suite directory: the first master
    seed keeps ``<name>``, the others run as ``<name>.seed<S>``."""
    return name if first else f"{name}.seed{int(seed)}"


def load_state(path: Path) -> dict[str, Any]:
    p = path / SUITE_FILE
    if not p.exists():
        return {}
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise RunDirError(f"{p} is corrupted ({e}); delete it or choose another --out") from None


def results_root() -> Path:
    """The published tables' folder: ``results/`` of the checkout lmsci runs from (``LMSCI_RESULTS`` overrides)."""
    import os

    env = os.environ.get("LMSCI_RESULTS")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parents[2] / "results"
    return here if here.is_dir() else Path("results")


def published_outcomes(root: str | Path | None = None) -> dict[str, dict[tuple[str, str], str]]:
    """preset -> (experiment, claim) -> the published outcome (with ``post hoc`` and the row's date), read
    from ``<root>/<preset>/claims.csv``; presets without a published table are absent."""
    root = Path(root) if root is not None else results_root()
    out: dict[str, dict[tuple[str, str], str]] = {}
    for preset in ALL_PRESET_NAMES:
        f = root / preset / CLAIMS_CSV
        if not f.is_file():
            continue
        try:
            t = load_claims_table(f)
        except RunDirError:
            continue
        rows = {}
        for _, r in t.iterrows():
            o = str(r["outcome"]) + (" (post hoc)" if str(r.get("post_hoc")) == "True" else "")
            date = r.get("date")
            rows[(str(r["experiment"]), str(r["claim"]))] = o + (f", {date}" if isinstance(date, str) and date else "")
        out[preset] = rows
    return out


def _devices(run: RunDir) -> str:
    devs = []
    for seg in run.environment_segments():
        d = seg.get("cuda_device") or seg.get("device")
        if d and d not in devs:
            devs.append(str(d))
    return ", ".join(devs)


def _wall(run: RunDir, rec: dict[str, Any]) -> float | None:
    """Wall seconds the suite spent on the experiment; for a run not made by this suite, the sum of its
    points' seconds."""
    w = rec.get("wall_s")
    if w:
        return float(w)
    res = run.results() if (run.path / RunDir.RESULTS).exists() else pd.DataFrame()
    return float(res["seconds"].sum()) if "seconds" in res else None


def _env_facts(run: RunDir) -> dict[str, str]:
    """commit, date and machine of a run directory (its first environment segment)."""
    try:
        segs = run.environment_segments()
    except (LmsciError, ValueError, json.JSONDecodeError):
        segs = []
    e = segs[0] if segs else {}
    try:
        digests = run.digests()
    except (OSError, ValueError, KeyError):
        digests = []
    return {"commit": str(e.get("git_commit") or "")[:10], "date": str(e.get("started") or "")[:10],
            "machine": str(e.get("machine") or e.get("platform") or ""), "digests": digests}


def _row_digest(reads: list) -> str:
    """The provenance digest of a row: its runs' (every master seed, every resumed segment) common digest,
    ``mixed`` when they differ, empty when any run recorded none."""
    per_run = [r[4].get("digests") or [] for r in reads]
    if not per_run or any(not d for d in per_run):
        return ""
    found = {d for ds in per_run for d in ds}
    return found.pop() if len(found) == 1 else MIXED


def _read_run(path: Path, run_name: str, rec: dict[str, Any]) -> tuple[list[Any], str, float | None, str, dict]:
    """(verdicts, device, wall seconds, error, environment facts) of one run directory of a suite."""
    run = RunDir(path / run_name)
    try:
        verdicts = run.verdicts() if run.path.is_dir() else []
        device = _devices(run)
        wall = _wall(run, rec)
    except (LmsciError, ValueError, json.JSONDecodeError) as e:
        return [], "", None, rec.get("error") or f"unreadable run directory: {e}", {}
    err = rec.get("error") or ("" if verdicts else "no verdict.json (the run did not finish)")
    return verdicts, device, wall, err, _env_facts(run)


def _seed_value(v: Any) -> str:
    from lmsci.report import _fmt_value

    return f"{_fmt_value(v)} ({v.outcome})"


def claims_table(path: str | Path, names: Sequence[str], state: dict[str, Any] | None = None,
                 seeds: Sequence[int] | None = None) -> pd.DataFrame:
    """The claims table of a suite directory, read back from each ``<path>/<name>/`` run directory (and
    ``<name>.seed<S>/`` for further master ``seeds``).

    One row per verdict in ``verdict.json``; an experiment recorded with an error (in ``suite.json``)
    or without a verdict gets one error row. With several master seeds, a row's outcome is their common
    outcome or ``seed-dependent``, its value and interval those of the first seed, ``seed_values`` every
    seed's, and ``post_hoc`` true when any seed's verdict is post hoc (``post_hoc_seeds``, ``fresh_outcome``).
    """
    from lmsci.report import _fmt_null, _fmt_value

    from lmsci.experiments.registry import catalog

    path = Path(path)
    state = state if state is not None else load_state(path)
    if seeds is None and state.get("seeds"):
        seeds = state["seeds"]
    exps = state.get("experiments") or {}
    cat = catalog()

    def decided_here(name: str, claim_id: str) -> bool:
        cls = cat.get(name)
        c = next((c for c in getattr(cls, "claims", []) if c.id == claim_id), None)
        return c is not None and state.get("preset") in c.presets
    rows = []
    for name in names:
        run_names = [name] if not seeds else [seed_run_name(name, s, k == 0) for k, s in enumerate(seeds)]
        reads = [_read_run(path, rn, exps.get(rn, {})) for rn in run_names]
        errors = [(rn, r[3]) for rn, r in zip(run_names, reads) if r[3]]
        wall = sum(r[2] for r in reads if r[2] is not None) if any(r[2] is not None for r in reads) else None
        device = ", ".join(dict.fromkeys(d for r in reads for d in r[1].split(", ") if d))
        env = reads[0][4]
        digest = _row_digest(reads)
        if errors:
            rows.append({"experiment": name, "claim": "(error)", "kind": "", "source": "", "paper_value": "",
                         "ours": "", "null_arm": "", "outcome": ERROR, "seeds": None, "post_hoc": False,
                         "wall_s": wall, "device": device, "value": None, "ci_lo": None, "ci_hi": None,
                         "null_value": None, "null_passed": None, "ablation": False,
                         "master_seeds": ",".join(map(str, seeds or [])), "seed_outcomes": "", "seed_values": "",
                         "pilot": False, **{k: env.get(k, "") for k in ("commit", "date", "machine")}, "digest": digest,
                         "error": "; ".join(f"{rn}: {e}" for rn, e in errors) if len(run_names) > 1 else errors[0][1],
                         "change": ""})
            continue
        by_seed = [{v.claim_id: v for v in r[0]} for r in reads]
        for v in reads[0][0]:
            vs = [b.get(v.claim_id) for b in by_seed]
            outcomes = [x.outcome if x is not None else "missing" for x in vs]
            outcome = outcomes[0] if len(set(outcomes)) == 1 else SEED_DEPENDENT
            msd = [x.master_seed for x in vs if x is not None]
            rows.append({
                "experiment": name, "claim": v.claim_id, "kind": v.kind, "source": v.source,
                "paper_value": v.paper_value, "ours": _fmt_value(v), "null_arm": _fmt_null(v), "outcome": outcome,
                "seeds": v.n_seeds, "post_hoc": any(x is not None and x.post_hoc for x in vs),
                "decided_here": decided_here(name, v.claim_id),
                "wall_s": None if wall is None else round(wall, 1), "device": device,
                "value": v.value, "ci_lo": v.ci[0] if v.ci else None, "ci_hi": v.ci[1] if v.ci else None,
                "null_value": v.null_value, "null_passed": v.null_passed, "ablation": bool(v.ablation),
                "master_seeds": ",".join(str(m) for m in msd if m is not None),
                "seed_outcomes": "; ".join(outcomes) if len(vs) > 1 else "",
                "seed_values": "; ".join(f"seed {m}: {_seed_value(x)}" for m, x in zip(seeds, vs) if x is not None)
                if seeds and len(vs) > 1 else "",
                "pilot": any(x is not None and x.pilot for x in vs),
                **{k: env.get(k, "") for k in ("commit", "date", "machine")}, "digest": digest, "error": "",
                "change": ""})
    from lmsci.claims.posthoc import refresh_post_hoc

    out = pd.DataFrame(rows, columns=CSV_COLUMNS)
    return refresh_post_hoc(out, str(state.get("preset", ""))) if len(out) else out


def table_counts(table: pd.DataFrame) -> dict[str, int]:
    """The headline counts of a claims table: claims reproduced / not reproduced / inconclusive (seed-dependent
    ones included) / post hoc (among the decided claims), ablations, checks passed / failed / inconclusive,
    errors."""
    t = table
    if t.empty:
        return {}
    kind = t["kind"].fillna("claim").astype(str)
    abl = t["ablation"].astype(str).str.lower() == "true"
    ph = t["post_hoc"].astype(str).str.lower() == "true"
    err = t["outcome"] == ERROR
    here = t["decided_here"].astype(str).str.lower() != "false"
    claims = t[(kind != "check") & ~abl & ~err & here]
    checks = t[(kind == "check") & ~err & here]
    return {
        "reproduced": int((claims["outcome"] == "reproduced").sum()),
        "not reproduced": int((claims["outcome"] == "not reproduced").sum()),
        "inconclusive": int(claims["outcome"].isin(["inconclusive", SEED_DEPENDENT]).sum()),
        "seed-dependent": int((claims["outcome"] == SEED_DEPENDENT).sum()),
        "post hoc": int(ph[claims.index].sum()),
        "reproduced on fresh seeds only": int((claims["fresh_outcome"] == "reproduced").sum())
        if "fresh_outcome" in claims else int((claims["outcome"] == "reproduced").sum()),
        "ablations": int((abl & ~err).sum()),
        "checks passed": int((checks["outcome"] == "passed").sum()),
        "checks failed": int((checks["outcome"] == "failed").sum()),
        "checks inconclusive": int(checks["outcome"].isin(["inconclusive", SEED_DEPENDENT]).sum()),
        "not decided at this preset": int((~here & ~err).sum()),
        "errors": int(err.sum()),
    }


def update_published(published: str | Path, table: pd.DataFrame, preset: str,
                     log: Callable[[str], None] = print) -> pd.DataFrame:
    """Merge a suite's rows into a published claims table (``results/<preset>/claims.csv``): the rows of
    the experiments in ``table`` replace theirs, every other row is kept as it was (each row carries its own
    commit, date and machine), in catalog order; ``claims.md`` is rewritten.

    Raises:
        RunDirError: the published directory holds a table of another preset, or ``table`` has pilot rows.
    """
    from lmsci.experiments.registry import catalog

    pub = Path(published)
    pub.mkdir(parents=True, exist_ok=True)
    if "pilot" in table and table["pilot"].astype(str).str.lower().eq("true").any():
        raise RunDirError("pilot master seeds (>= 1,000,000) are never published; rerun on a published seed")
    meta_p = pub / "published.json"
    meta = json.loads(meta_p.read_text()) if meta_p.exists() else {}
    if meta.get("preset", preset) != preset:
        raise RunDirError(f"{pub} publishes preset {meta.get('preset')!r}, not {preset!r}")
    old = load_claims_table(pub) if (pub / CLAIMS_CSV).exists() else pd.DataFrame(columns=CSV_COLUMNS)
    names = set(table["experiment"])
    keep = old[~old["experiment"].isin(names)]
    merged = pd.concat([keep, table], ignore_index=True) if not keep.empty else table.copy()
    order = {n: i for i, n in enumerate(catalog())}
    merged = merged.assign(_o=merged["experiment"].map(lambda n: order.get(n, len(order)))) \
        .sort_values("_o", kind="stable").drop(columns="_o").reset_index(drop=True)
    merged = _write_published(pub, merged, preset)
    log(f"published table {pub / CLAIMS_CSV}: replaced {len(names)} experiment(s), kept {keep['experiment'].nunique()}")
    return merged


def _write_published(pub: Path, merged: pd.DataFrame, preset: str) -> pd.DataFrame:
    """Write a published table (``claims.csv``, ``claims.md``, ``published.json`` with its counts), post hoc
    marks refreshed on every row (post hoc when any seed is)."""
    from lmsci.claims.posthoc import refresh_post_hoc

    merged = refresh_post_hoc(merged.reindex(columns=CSV_COLUMNS), preset)
    atomic_write_text(pub / CLAIMS_CSV, merged.to_csv(index=False))
    atomic_write_text(pub / CLAIMS_MD, claims_markdown(merged, preset, link=None, published=True))
    atomic_write_text(pub / "published.json",
                      json.dumps({"preset": preset, "counts": table_counts(merged)}, indent=2) + "\n")
    return merged


def load_claims_table(where: str | Path) -> pd.DataFrame:
    """An earlier suite's claims table: a suite directory or its ``claims.csv``.

    Raises:
        RunDirError: no such file or directory, or not a claims table.
    """
    p = Path(where)
    if p.is_dir():
        p = p / CLAIMS_CSV
    if not p.is_file():
        raise RunDirError(f"--compare {where}: no {CLAIMS_CSV} there (give an earlier suite directory)")
    try:
        df = pd.read_csv(p, keep_default_na=False, na_values=[""])
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise RunDirError(f"--compare {p} cannot be read ({type(e).__name__})") from None
    missing = {"experiment", "claim", "outcome", "value"} - set(df.columns)
    if missing:
        raise RunDirError(f"--compare {p} is not a claims table (missing columns {sorted(missing)})")
    return df


def _outside(x: float, lo: float | None, hi: float | None) -> bool:
    return lo is not None and hi is not None and not (min(lo, hi) <= x <= max(lo, hi))


def value_moved(old: float | None, new: float | None, old_ci=(None, None), new_ci=(None, None),
                rel_tol: float = 1e-6) -> bool:
    """Whether a claim's value moved beyond its interval between two suites.

    With an interval on either side: the new value lies outside the old interval, or the old value
    outside the new one. Without any interval (an exact statistic, or one seed): the values differ by
    more than ``rel_tol`` (relative). A value that appeared or disappeared counts as moved.
    """
    if old is None and new is None:
        return False
    if old is None or new is None:
        return True
    have_ci = (old_ci[0] is not None and old_ci[1] is not None) or (new_ci[0] is not None and new_ci[1] is not None)
    if have_ci:
        return _outside(new, *old_ci) or _outside(old, *new_ci)
    return abs(new - old) > rel_tol * max(1.0, abs(old), abs(new))


def mark_changes(table: pd.DataFrame, earlier: pd.DataFrame) -> pd.DataFrame:
    """``table`` with its ``change`` column filled against ``earlier`` (matched on experiment and claim;
    ablation rows too): ``outcome: A -> B``, ``value: a -> b (outside ...)``, ``new claim`` or empty."""
    from lmsci.report import _fmt

    prev = {}
    for _, r in earlier.iterrows():
        prev.setdefault((str(r["experiment"]), str(r["claim"])), r)
    table = table.copy()
    marks = []
    for _, r in table.iterrows():
        key = (str(r["experiment"]), str(r["claim"]))
        if key not in prev:
            marks.append("new claim (not in the earlier suite)")
            continue
        o = prev[key]
        parts = []
        if str(o["outcome"]) != str(r["outcome"]):
            parts.append(f"outcome: {o['outcome']} -> {r['outcome']}")
        ov, nv = finite_or_none(o.get("value")), finite_or_none(r.get("value"))
        oci = (finite_or_none(o.get("ci_lo")), finite_or_none(o.get("ci_hi")))
        nci = (finite_or_none(r.get("ci_lo")), finite_or_none(r.get("ci_hi")))
        if r["outcome"] != ERROR and value_moved(ov, nv, oci, nci):
            ci = oci if oci[0] is not None else nci
            where = f" (outside [{_fmt(ci[0])}, {_fmt(ci[1])}])" if ci[0] is not None else ""
            parts.append(f"value: {_fmt(ov) if ov is not None else 'n/a'} -> "
                         f"{_fmt(nv) if nv is not None else 'n/a'}{where}")
        marks.append("; ".join(parts))
    table["change"] = marks
    return table


def _md_cell(x: Any) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x).replace("|", "/").replace("\n", " ")


def claims_markdown(table: pd.DataFrame, preset: str, *, link: str | None = "report.md", compare: Any = None,
                    state: dict[str, Any] | None = None, published: bool = False) -> str:
    """The claims table as a markdown page: the counts, the claims (and ablations), then the design checks
    apart (experiment names link to ``<name>/<link>`` when ``link`` is given)."""
    state = state or {}
    c = table_counts(table)
    title = f"# lmsci claims table: preset `{preset}`" + (" (published)" if published else "")
    parts = [title + "\n"]
    if c:
        parts.append(f"{table['experiment'].nunique()} experiments. **Claims: {c['reproduced']} reproduced, "
                     f"{c['not reproduced']} not reproduced, {c['inconclusive']} inconclusive** "
                     f"({c['seed-dependent']} of them seed-dependent), {c['post hoc']} post hoc at some seed "
                     f"({c['reproduced on fresh seeds only']} reproduced on fresh seeds only); "
                     f"{c['ablations']} ablations (decide nothing). **Design checks: {c['checks passed']} passed, "
                     f"{c['checks failed']} failed, {c['checks inconclusive']} inconclusive.** "
                     f"{c['not decided at this preset']} more registered items are decided at other presets only "
                     f"(reported, not counted). Errors: {c['errors']}.\n")
        parts.append("A claim is reproduced only when its rule held and its null arm (the same statistic where the "
                     "effect is absent by construction) did not; design checks hold by construction and are never "
                     "counted as reproduced. Post hoc: the claim's preset, gate or rule changed after a result at "
                     "this seed was seen (CLAIMS.md). Seed-dependent: the master seeds gave different outcomes.\n")
    if state.get("last_wall_s") is not None:
        parts.append(f"Wall time of the last `lmsci suite` call: {state['last_wall_s']:.0f} s "
                     "(experiments finished earlier were skipped).\n")
    if compare is not None:
        n = int((table["change"] != "").sum())
        parts.append(f"Compared with `{compare}`: **{n} claim{'s' * (n != 1)} changed** (outcome, or value "
                     "outside its interval).\n")
    kind = table["kind"].fillna("claim").astype(str)

    def section(rows: pd.DataFrame, checks: bool) -> str:
        cols = ["experiment", "check" if checks else "claim", "paper value", "ours"] + \
            ([] if checks else ["null arm"]) + ["outcome", "seeds", "master seeds", "wall time (s)", "device", "commit",
                                                "date"]
        if compare is not None:
            cols.append("change")
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for _, r in rows.iterrows():
            claim = r["claim"] + (" (ablation)" if str(r["ablation"]) == "True" else "")
            seen = r.get("post_hoc_seeds")
            ph_mark = f"post hoc at seed {seen}" if isinstance(seen, str) and seen else "post hoc"
            marks = [m for m, on in ((ph_mark, str(r.get("post_hoc")) == "True"),
                                     ("not decided at this preset", str(r.get("decided_here")) == "False")) if on]
            outcome = f"**{r['outcome']}**" + (f" ({', '.join(marks)})" if marks else "")
            ours = r["ours"] if r["outcome"] != ERROR else r["error"]
            if isinstance(r.get("seed_values"), str) and r["seed_values"]:
                ours = f"{ours}; {r['seed_values']}"
            exp = f"[{r['experiment']}]({r['experiment']}/{link})" if link else r["experiment"]
            cells = [exp, claim, r["paper_value"], ours] + ([] if checks else [r.get("null_arm", "")]) + [
                outcome, "" if r["seeds"] is None or pd.isna(r["seeds"]) else str(int(r["seeds"])),
                r.get("master_seeds", ""), r["wall_s"], r.get("device", ""), r.get("commit", ""), r.get("date", "")]
            if compare is not None:
                cells.append(f"**{r['change']}**" if r["change"] else "")
            lines.append("| " + " | ".join(_md_cell(x) for x in cells) + " |")
        return "\n".join(lines) + "\n"

    parts.append("## Claims\n")
    parts.append(section(table[kind != "check"], checks=False))
    if (kind == "check").any():
        parts.append("## Design checks\n")
        parts.append("True by construction (a world's design, a closed-form bound, an interpolation): they guard "
                     "the setup and are never counted as reproduced.\n")
        parts.append(section(table[kind == "check"], checks=True))
    if published:
        from lmsci.experiments.registry import shipped

        missing = [(n, cls) for n, cls in shipped().items() if n not in set(table["experiment"])]
        left = [(n, cls) for n, cls in missing if not any(preset in c.presets for c in cls.claims)]
        if left:
            parts.append("## Left out at this preset\n")
            parts.append(f"Every registered item of these experiments is decided at other presets only, so the "
                         f"`{preset}` suite does not run them (`lmsci suite --only NAME` still does, "
                         "reporting values that decide nothing):\n")
            for n, cls in left:
                at = sorted({p for c in cls.claims for p in c.presets}, key=ALL_PRESET_NAMES.index)
                parts.append(f"- `{n}`: {len(cls.claims)} registered item(s), decided at {', '.join(at)}")
            parts.append("")
        missing = [(n, cls) for n, cls in missing if (n, cls) not in left]
        if missing:
            parts.append("## Not yet in this table\n")
            parts.append("Registered experiments with no row here yet (run them with `lmsci suite --preset "
                         f"{preset} --seeds 0,1 --only NAME --update` into this folder):\n")
            for n, cls in missing:
                k = sum(preset in c.presets for c in cls.claims)
                parts.append(f"- `{n}`: {len(cls.claims)} registered item(s), {k} decided at {preset}")
            parts.append("")
    machines = sorted({str(m) for m in table.get("machine", pd.Series(dtype=str)).dropna() if str(m)})
    if machines:
        parts.append("Machines: " + "; ".join(machines) + ".\n")
    return "\n".join(parts)


def write_claims(path: str | Path, table: pd.DataFrame, preset: str, *, compare: Any = None,
                 state: dict[str, Any] | None = None) -> None:
    """Write ``claims.csv``, ``claims.md`` (links to each report.md) and ``claims.html`` (links to each
    report.html) into the suite directory."""
    from lmsci.report import markdown_to_html

    path = Path(path)
    atomic_write_text(path / CLAIMS_CSV, table.to_csv(index=False))
    atomic_write_text(path / CLAIMS_MD, claims_markdown(table, preset, compare=compare, state=state))
    html_md = claims_markdown(table, preset, link="report.html", compare=compare, state=state)
    atomic_write_text(path / CLAIMS_HTML, markdown_to_html(html_md, title=f"lmsci claims suite ({preset})"))
