"""The HTML report in a real headless Chromium: it renders, its script runs, injected markup does not."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.reports.render import render_html, verdict_line, write_bundle
from ledgercheck.reports.results import build_results

# Payloads that would leave a mark on the page if the browser ever ran them.
PWN_IMG = "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','img')\">"
PWN_SCRIPT = "</pre><script>document.documentElement.setAttribute('data-pwned','script')</script>"


class Rows(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, str | None]] = []
        self.html: dict[str, str | None] = {}
        self.controls: dict[str, str | None] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "html":
            self.html = a
        elif tag == "tr" and a.get("data-clause"):
            self.rows.append(a)
        elif a.get("id") == "matrix-controls":
            self.controls = a


def dom_of(chromium: Any, url: str) -> tuple[str, Rows]:
    dom = chromium.dump_dom(url)
    rows = Rows()
    rows.feed(dom)
    return dom, rows


@pytest.fixture(scope="module")
def bundle(factory, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, str]]:
    tests = factory.tests()
    for t in tests:
        if t["outcome"] == "failed":
            t["message"] = PWN_SCRIPT
    doc = build_results(run=factory.run(), spec=factory.spec, adapter=factory.adapter(name=PWN_IMG),
                        environment=factory.environment(), tests=tests, crash_windows=factory.windows())
    return doc, write_bundle(doc, tmp_path_factory.mktemp("bundle"))


def test_report_renders_and_its_script_runs(chromium, bundle) -> None:
    doc, paths = bundle
    dom, parsed = dom_of(chromium, Path(paths["html"]).as_uri())
    assert parsed.html.get("data-js") == "ready"  # our script ran under the page's CSP
    assert "data-pwned" not in parsed.html and "data-pwned" not in dom.split(">", 2)[1]
    assert re.search(r'<p class="verdict" id="verdict" data-verdict="NOT CERTIFIED">([^<]*)</p>', dom).group(1) == \
        verdict_line(doc).replace("&", "&amp;")
    assert [r["data-clause"] for r in parsed.rows] == [c["id"] for c in doc["clauses"]]
    assert [r["data-outcome"] for r in parsed.rows] == [c["outcome"] for c in doc["clauses"]]
    assert parsed.controls is not None and "hidden" not in parsed.controls  # shown by the script
    assert f'id="filter-count">{len(doc["clauses"])} of {len(doc["clauses"])} clauses shown<' in dom
    assert dom.count('class="copy"') >= 3  # copy buttons added to the reproduce and replay commands
    assert dom.count("<script") == 1
    assert "&lt;img src=x onerror=" in dom  # the adapter's name is shown, as text


def test_problem_filter_from_the_address(chromium, bundle) -> None:
    doc, paths = bundle
    _, parsed = dom_of(chromium, Path(paths["html"]).as_uri() + "#only=problems")
    shown = [r["data-clause"] for r in parsed.rows if "hidden" not in r]
    assert shown == [c["id"] for c in doc["clauses"] if c["outcome"] in ("fail", "error", "xfail")]
    assert len(shown) == 5


def test_screenshot_shows_the_verdict(chromium, bundle, tmp_path: Path) -> None:
    _, paths = bundle
    shot = tmp_path / "report.png"
    assert chromium.screenshot(Path(paths["html"]).as_uri(), shot, 1280, 900) == (1280, 900)
    data = shot.read_bytes()
    assert len(data) > 40_000  # a rendered page, not a blank one
    r, g, b = chromium.pixel(data, 640, 30)
    assert r > 150 and g < 80 and b < 90, (r, g, b)  # the NOT CERTIFIED banner is red


def test_missing_chromium_fails_loudly(monkeypatch: pytest.MonkeyPatch, chromium_finder) -> None:
    require_chromium, MISSING_CHROMIUM = chromium_finder
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("LEDGERCHECK_CHROMIUM", raising=False)
    with pytest.raises(pytest.fail.Exception, match="apt-get install -y chromium"):
        require_chromium()
    monkeypatch.setenv("LEDGERCHECK_CHROMIUM", "/nonexistent/chromium")
    with pytest.raises(pytest.fail.Exception) as exc:
        require_chromium()
    assert str(exc.value).startswith(MISSING_CHROMIUM)


class Coverage(HTMLParser):
    """The coverage section's rows as the browser built them."""

    def __init__(self) -> None:
        super().__init__()
        self.profiles: dict[str, str | None] = {}
        self.moves: dict[str, str | None] = {}
        self.situations: list[str] = []
        self.campaigns: list[dict[str, str | None]] = []
        self.banner: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "header":
            self.banner = a.get("class")
        elif tag == "tr" and a.get("data-gaps") is not None:
            self.profiles[str(a["data-profile"])] = a["data-gaps"]
        elif tag == "tr" and a.get("data-move"):
            self.moves[str(a["data-move"])] = a.get("data-state")
        elif tag == "tr" and a.get("data-situation"):
            self.situations.append(str(a["data-situation"]))
        elif tag == "div" and "safety-coverage" in (a.get("class") or ""):
            self.campaigns.append(a)


@pytest.fixture(scope="module")
def inconclusive(factory, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, str]]:
    """A run that reached everything but one transition and whose safety campaign never displaced a
    live holder: INCONCLUSIVE."""
    from ledgercheck.reports import verdicts

    doc = factory.covered(skip=[("retry_scheduled", "cancel", "cancelled")])
    doc["safety"] = [{"adapter": "acme", "seed": 7, "verdict": "inconclusive", "anomalies": [], "anomaly_count": 0,
                      "history": None, "summary": {}, "missing": ["no live holder was displaced (by time, operator or reopen)"],
                      "coverage": {"claim_ok": 14, "close_out_ok": 14, "holder_displaced": 0, "kill": 3}}]
    doc = verdicts.apply(doc)
    # (rendered straight from the document: until the safety campaign's schema allows "inconclusive",
    # write_bundle would refuse the campaign record that conformance/safety_item.py will write)
    path = tmp_path_factory.mktemp("inconclusive") / "report.html"
    path.write_text(render_html(doc), encoding="utf-8")
    return doc, {"html": str(path)}


def test_the_coverage_table_renders(chromium, inconclusive) -> None:
    doc, paths = inconclusive
    dom = chromium.dump_dom(Path(paths["html"]).as_uri())
    cov = Coverage()
    cov.feed(dom)
    assert cov.banner == "banner v-inconclusive"
    assert re.search(r'<p class="verdict" id="verdict" data-verdict="INCONCLUSIVE">([^<]*)</p>', dom).group(1) == \
        verdict_line(doc).replace("&", "&amp;").replace(">", "&gt;")
    assert cov.profiles == {p: ("1" if p == "cancel" else "0") for p in doc["coverage"]["profiles"]}
    assert list(cov.profiles) == [p for p in doc["profiles"]["defined"] if p in doc["coverage"]["profiles"]]
    assert cov.moves["retry_scheduled -cancel-> cancelled"] == "missing"  # (the parser unescapes attributes)
    assert sum(1 for s in cov.moves.values() if s == "reached") == 24
    assert [c.get("data-verdict") for c in cov.campaigns] == ["inconclusive"]
    assert cov.situations == ["claim_ok", "close_out_ok", "holder_displaced", "kill"]
    assert "no live holder was displaced (by time, operator or reopen)" in dom
    assert '<a href="#coverage">Coverage</a>' in dom


def test_screenshot_of_an_inconclusive_run(chromium, inconclusive, tmp_path: Path) -> None:
    _, paths = inconclusive
    shot = tmp_path / "inconclusive.png"
    assert chromium.screenshot(Path(paths["html"]).as_uri(), shot, 1280, 900) == (1280, 900)
    r, g, b = chromium.pixel(shot.read_bytes(), 640, 30)
    assert r > 90 and 60 < g < 120 and b < 60, (r, g, b)  # the INCONCLUSIVE banner is amber, neither green nor red
