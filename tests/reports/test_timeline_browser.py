"""Timelines in a real headless Chromium: the page renders with no console message (no CSP
violation, no error), the bars and overlays are in the DOM the browser built, and a screenshot shows
them where the SVG puts them, in their colours."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.chaos.safety.anomalies import check
from ledgercheck.reports import timeline as tl
from ledgercheck.reports.html_report import render_html
from timeline_support import stale_write_history


class Figures(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.figures: list[dict[str, str | None]] = []
        self.bars: list[dict[str, str | None]] = []
        self.faults: list[str | None] = []
        self.orders: list[str | None] = []
        self.at: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        if tag == "figure" and "timeline" in cls:
            self.figures.append(a)
        elif tag == "g" and "tl-bar" in cls:
            self.bars.append(a)
        elif tag == "g" and "tl-fault" in cls:
            self.faults.append(a.get("data-fault"))
        elif tag == "g" and "tl-num" in cls:
            self.orders.append(a.get("data-order"))
        elif tag == "text" and "tl-at-note" in cls:
            self.at.append(a.get("data-at"))


@pytest.fixture(scope="module")
def story() -> dict[str, Any]:
    """The stale-write history, its verdict, and a per-item linearizability result built by hand in
    the shared format: ``x`` violates at w1's close-out, ``n1`` has an order."""
    b, _, _ = stale_write_history()
    hist = b.history()
    ops = tl.collect(hist)
    x = [o.id for o in ops.bars if o.item == "x"]
    n1 = [o.id for o in ops.bars if o.item == "n1"]
    lin = {"items": {"x": {"result": "violation", "excerpt": x[1:], "at": x[-1],
                           "expected": "refused: stale_lease (the token is not the live lease)"},
                     "n1": {"result": "linearizable", "order": n1}},
           "cross": [], "stats": {"items": 2, "linearizable": 1, "violations": 1, "unchecked": 0,
                                  "states_explored": 9, "max_states_item": 6}}
    return {"builder": b, "history": hist, "verdict": check(hist), "ops": ops, "lin": lin, "x": x, "n1": n1}


def test_timelines_page_renders_without_console_messages(chromium, story, tmp_path: Path) -> None:
    page = tl.render_page(story["history"], story["verdict"], story["lin"], items=["n1"], whole=True)
    path = tmp_path / "timelines.html"
    path.write_text(page, encoding="utf-8")
    dom, console = chromium.console(path.as_uri())
    assert console == []
    f = Figures()
    f.feed(dom)
    assert [fig.get("data-item") for fig in f.figures] == [None, "x", "n1"]  # the whole history, x, n1
    assert int(f.figures[0]["data-bars"]) == len(story["ops"].bars)
    assert {"pause", "resume", "clock", "power_cut", "kill"} <= set(f.faults)
    assert str(story["x"][-1]) in f.at
    assert sorted(int(n) for n in f.orders) == list(range(1, len(story["n1"]) + 1))
    assert "the model expected: refused: stale_lease" in dom


def test_console_check_sees_a_page_error(chromium, tmp_path: Path) -> None:
    """The check above can fail: a page whose inline script the CSP blocks prints to the console."""
    path = tmp_path / "bad.html"
    path.write_text("<!DOCTYPE html><html><head><meta http-equiv=\"Content-Security-Policy\" "
                    "content=\"default-src 'none'\"></head><body><script>console.log(1)</script></body></html>")
    _, console = chromium.console(path.as_uri())
    assert console and "Content Security Policy" in console[0]


def test_report_with_timelines_renders_without_console_messages(chromium, factory, story, tmp_path: Path) -> None:
    b = story["builder"]
    hpath = tmp_path / "history.jsonl"
    hpath.write_bytes(b.dumps())
    doc = factory.build()
    doc["safety"] = [{"adapter": "acme", "seed": 3, "verdict": "fail", "anomaly_count": 1, "history": str(hpath),
                      "anomalies": [{**a.to_json(), "clause": "core.lease.fencing"} for a in story["verdict"].anomalies],
                      "linearizability": story["lin"]}]
    path = tmp_path / "report.html"
    path.write_text(render_html(doc), encoding="utf-8")
    dom, console = chromium.console(path.as_uri())
    assert console == []
    assert 'data-js="ready"' in dom.split(">", 2)[1]  # the report's own script still runs under its CSP
    f = Figures()
    f.feed(dom)
    assert [fig.get("data-item") for fig in f.figures] == ["x"]
    assert f.figures[0].get("data-result") == "violation" and str(story["x"][-1]) in f.at


def test_screenshot_shows_bars_spans_and_the_failing_operation(chromium, story, tmp_path: Path) -> None:
    """One timeline alone at the page's top-left corner, so the SVG's coordinates are the screen's."""
    fig = tl.render_timeline(story["ops"], item="x", result=story["lin"]["items"]["x"])
    page = ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>body { margin: 0 } "
            f"{tl.CSS} figure.timeline {{ margin: 0 }} figure.timeline .tl-scroll {{ border: 0; overflow: visible }}"
            f"</style></head><body>{fig}</body></html>")
    path = tmp_path / "one.html"
    path.write_text(page, encoding="utf-8")
    shot = tmp_path / "one.png"
    width = 1600
    assert chromium.screenshot(path.as_uri(), shot, width, 700) == (width, 700)
    data = shot.read_bytes()

    def box(op: int) -> tuple[float, float, float, float]:
        m = re.search(rf'data-op="{op}"[^>]*>(?:<title>[^<]*</title>)?<svg x="([\d.]+)" y="([\d.]+)" '
                      rf'width="([\d.]+)" height="([\d.]+)"', fig)
        assert m is not None
        x, y, w, hh = map(float, m.groups())
        return x, y, w, hh

    at = story["x"][-1]  # w1's close-out: ok (green), outlined thick red
    x, y, w, hh = box(at)
    assert x + w < width
    r, g, b = chromium.pixel(data, int(x + w / 2), int(y + hh / 2) + 3)
    assert g > r and g > b, (r, g, b)  # the fill of an ok bar is green
    r, g, b = chromium.pixel(data, round(x + 1), int(y + hh / 2))
    assert r > 140 and g < 90 and b < 90, (r, g, b)  # the failing operation's red outline
    span = re.search(r'<rect class="tl-span" data-span="pause" data-process="w1" x="([\d.]+)" y="([\d.]+)" '
                     r'width="([\d.]+)" height="([\d.]+)"', fig)
    assert span is not None
    sx, sy, sw, sh = map(float, span.groups())
    r, g, b = chromium.pixel(data, int(sx + 3), int(sy + sh - 2))
    assert b - g >= 8 and r > g, (r, g, b)  # w1's lane shaded (purple) while it was paused
