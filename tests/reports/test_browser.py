"""The HTML report in a real headless Chromium: it renders, its script runs, injected markup does not."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.reports.render import verdict_line, write_bundle
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
