"""The reports in a real browser: report.html and the suite's claims.html opened in headless Chromium.

Chromium comes from the system's packages (Debian: ``apt-get install chromium``; scripts/setup.sh installs
it when it runs as root with apt-get) and is driven by Playwright for Python through
``executable_path``: no browser is downloaded. Every figure must load (``naturalWidth > 0``), the
verdict table must be there, and the page must log no console error. A screenshot of the
factual-recall smoke report is saved under the test's temporary directory.

Without a Chromium executable (or without Playwright) the tests are skipped with a message saying so.
Set ``LMSCI_CHROMIUM`` to a browser executable to use another one.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _chromium() -> str | None:
    env = os.environ.get("LMSCI_CHROMIUM")
    if env:
        return env if Path(env).exists() else shutil.which(env)
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="module")
def browser():
    exe = _chromium()
    if exe is None:
        pytest.skip("no Chromium executable found (tried $LMSCI_CHROMIUM, " + ", ".join(CANDIDATES) + "); "
                    "install it with `apt-get install chromium` (scripts/setup.sh does so as root) to run the "
                    "browser checks of report.html")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[test]'); the browser checks did not run")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory):
    """A smoke suite of factual-recall: its run directory (report.html) and the suite's claims.html."""
    from lmsci.suite import run_suite

    out = tmp_path_factory.mktemp("browser") / "suite"
    res = run_suite("smoke", only="factual-recall", out=out, overrides=["threads=1"], log=lambda m: None)
    assert res.errors.empty
    return out


def _open(browser, path: Path):
    """Open ``path`` and return (page, console errors and uncaught page errors)."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
    page.goto(path.resolve().as_uri(), wait_until="load")
    return page, errors


def _images(page) -> list[dict]:
    return page.evaluate("""Array.from(document.images).map(i => ({src: i.getAttribute('src'),
                            complete: i.complete, width: i.naturalWidth}))""")


def _table_after(page, heading: str) -> dict | None:
    """The header cells and row count of the first table after the <h1>/<h2> whose text is ``heading``."""
    return page.evaluate("""(heading) => {
        const h = Array.from(document.querySelectorAll('h1, h2')).find(e => e.textContent.trim().startsWith(heading));
        if (!h) return null;
        let e = h.nextElementSibling;
        while (e && e.tagName !== 'TABLE' && !/^H[12]$/.test(e.tagName)) e = e.nextElementSibling;
        if (!e || e.tagName !== 'TABLE') return null;
        return {headers: Array.from(e.querySelectorAll('thead th')).map(c => c.textContent.trim()),
                rows: e.querySelectorAll('tbody tr').length,
                text: e.querySelector('tbody').textContent};
    }""", heading)


def test_factual_recall_report_renders(browser, suite_dir, tmp_path):
    from lmsci.experiments.registry import get

    report = suite_dir / "factual-recall" / "report.html"
    page, errors = _open(browser, report)
    imgs = _images(page)
    assert len(imgs) >= 1, "the factual-recall report shows no figure"
    assert all(i["complete"] and i["width"] > 0 for i in imgs), imgs
    for i in imgs:
        assert (report.parent / i["src"]).exists()
    table = _table_after(page, "Verdict")
    assert table is not None, "no verdict table after the Verdict heading"
    assert {"claim", "paper", "ours", "rule", "gates", "outcome"} <= set(table["headers"])
    claims = get("factual-recall").claims
    assert table["rows"] == len(claims) and all(c.id in table["text"] for c in claims)
    # a wide results table scrolls inside its own box instead of widening the page
    assert page.evaluate("document.documentElement.scrollWidth") <= 1200
    shot = tmp_path / "factual-recall-smoke-report.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
    assert errors == []
    page.close()


def test_suite_claims_page_renders_and_links_the_report(browser, suite_dir):
    page, errors = _open(browser, suite_dir / "claims.html")
    table = _table_after(page, "Claims")
    assert table is not None, "no claims table on claims.html"
    assert table["headers"][:6] == ["experiment", "claim", "paper value", "ours", "null arm", "outcome"]
    assert {"seeds", "master seeds", "wall time (s)", "device", "commit", "date"} <= set(table["headers"])
    assert table["rows"] >= 1 and "inconclusive" in table["text"]
    assert all(i["width"] > 0 for i in _images(page))
    # the experiment's name links to its report, which opens
    page.click("text=factual-recall >> nth=0")
    page.wait_for_load_state("load")
    assert page.url.endswith("factual-recall/report.html")
    assert _table_after(page, "Verdict") is not None
    assert errors == []
    page.close()
