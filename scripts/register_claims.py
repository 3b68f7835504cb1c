"""Register claims: write tests/data/claims.json and add a dated CLAIMS.md line for every claim whose
current digest has none.

    python scripts/register_claims.py --why "registered before its first quick run (issue 10)"

Run it in a commit of its own, before the first run that the new or changed rule judges (CLAIMS.md,
"How a rule changes"). Lines already present are kept; a changed rule gets a new line beside the old one.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
from pathlib import Path

from lmsci.claims import snapshot
from lmsci.experiments.registry import shipped

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--why", required=True, help="the reason written on each new line")
    ap.add_argument("--date", default=dt.date.today().isoformat())
    ap.add_argument("--only", nargs="*", default=None, help="add CLAIMS.md lines only for these experiments")
    a = ap.parse_args()
    snap = snapshot(shipped())
    (ROOT / "tests" / "data").mkdir(parents=True, exist_ok=True)
    (ROOT / "tests" / "data" / "claims.json").write_text(json.dumps(snap, indent=2) + "\n")
    md = ROOT / "CLAIMS.md"
    text = md.read_text()
    new = []
    for name, claims in snap.items():
        if a.only is not None and name not in a.only:
            continue
        for c in claims:
            key = f"`{name}/{c['id']}` [{c['digest']}]"
            if not re.search(rf"^- \d{{4}}-\d{{2}}-\d{{2}} .*{re.escape(key)}", text, flags=re.M):
                kind = (" (check, holds by construction)" if c.get("kind") == "check"
                        else " (ablation, decides nothing)" if c["ablation"] else "")
                new.append(f"- {a.date} {key}{kind}: {a.why}. Rule: {c['rule']} "
                           f"Gates: {'; '.join(g['rule'] for g in c['gates']) or 'none'}. "
                           f"Presets: {', '.join(c['presets'])}; uncertainty: {c['uncertainty']}"
                           + (f" (>= {c['min_seeds']} seeds)" if c["uncertainty"] != "exact" else "")
                           + (f". Null arm: {c['null']}" if c.get("null") else "")
                           + ". Preset digests: " + (", ".join(f"{k} {v}" for k, v in c.get("preset_digests", {}).items())
                                                   or "none") + ".")
    if new:
        md.write_text(text.rstrip("\n") + "\n" + "\n".join(new) + "\n")
    print(f"snapshot: {sum(len(v) for v in snap.values())} claims; {len(new)} new CLAIMS.md lines")


if __name__ == "__main__":
    main()
