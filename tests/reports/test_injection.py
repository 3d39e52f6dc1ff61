"""Adapter-supplied text is hostile: it must come out inert in HTML, Markdown, XML and the terminal."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from typing import Any

import pytest
from ledgercheck.reports.render import render_html, render_junit, render_markdown
from ledgercheck.reports.results import build_results
from ledgercheck.reports.terminal import summary_text
from ledgercheck.reports.text import md_code, visible

NAME = "<script>alert(1)</script>"
VERSION = '1.0" onmouseover="alert(2)'
BUG = "</pre><img src=x onerror=alert(3)>"
MESSAGE = "</pre><script>alert(4)</script> | pipe `tick` ``double``\nsecond line | [link](javascript:alert(5)) https://evil.example/x"
CONTROL = "bell\x07 nul\x00 esc\x1b[31mred\x1b[0m cr\rlf del\x7f nonchar\ufffe"
COUNTER = "state = M()\n</pre><b>bold</b>\n```\nfence"
REPLAY = "ledgercheck replay | `rm -rf /` | <x>"


@pytest.fixture(scope="module")
def evil(factory: Any) -> dict[str, Any]:
    f = factory
    tests = f.tests()
    for t in tests:
        if t["clause"] == "lease.fencing" and t["outcome"] == "failed":
            t.update(message=MESSAGE, counterexample=COUNTER, replay=REPLAY)
        if t["clause"] == "core.claim.order" and t["outcome"] == "failed":
            t.update(message=CONTROL)
    windows = f.windows()
    for w in windows:
        if w["verdict"] == "fail":
            w.update(message=MESSAGE, replay=REPLAY, replay_file="out/</pre>.json")
    adapter = f.adapter(name=NAME, version=VERSION, address="exec:./x --flag='a&b' <y>",
                        known_bugs={"retry.cap": BUG}, capabilities={"clock": "<b>wall</b>"})
    run = f.run(command="ledgercheck certify --adapter '<script>x</script>'", cwd="/tmp/</pre>")
    env = {**f.environment(), "cpu_model": "<marquee>cpu</marquee>"}
    return build_results(run=run, spec=f.spec, adapter=adapter, environment=env, tests=tests, crash_windows=windows)


class Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.handlers: list[tuple[str, str]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.handlers += [(tag, k) for k, _ in attrs if k.startswith("on")]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_html_escapes_everything(evil) -> None:
    html = render_html(evil)
    p = Collect()
    p.feed(html)
    assert p.tags.count("script") == 1  # ours
    assert not {"img", "marquee", "b"} & set(p.tags)
    assert p.handlers == []
    for raw in (NAME, BUG, "</pre><script>", "<marquee>", 'onmouseover="alert(2)'):
        assert raw not in html
    text = "".join(p.text)
    for shown in (NAME, BUG, "<marquee>cpu</marquee>", "'a&b' <y>", VERSION):
        assert shown in text  # visible to the reader, as text
    assert "\x00" not in html and "\x1b" not in html and "\x07" not in html and "\ufffe" not in html
    assert "esc\\x1b[31mred" in text and "nonchar\\ufffe" in text
    assert "state = M()\n</pre><b>bold</b>" in text  # the counterexample keeps its lines


def _outside_code_spans(md: str) -> str:
    """Markdown text with its code spans removed (CommonMark: a backtick run closes at the next run of
    the same length)."""
    out, i = [], 0
    while i < len(md):
        if md[i] == "`":
            j = i
            while j < len(md) and md[j] == "`":
                j += 1
            fence = md[i:j]
            end = re.search(rf"(?<!`){fence}(?!`)", md[j:])
            if end is None:
                out.append(fence)
                i = j
                continue
            i = j + end.end()
            out.append("\x00")  # placeholder for the span
            continue
        out.append(md[i])
        i += 1
    return "".join(out)


def test_markdown_keeps_adapter_text_inert(evil) -> None:
    md = render_markdown(evil)
    bare = _outside_code_spans(md)
    for bad in ("<", "](", "://", "javascript", "alert", "rm -rf"):
        assert bad not in bare, bad
    lines = md.splitlines()
    assert not any(line.startswith(("second line", "fence", "</pre>")) for line in lines)  # no newline got through
    rows = [line for line in lines if "second line" in line]
    assert rows and all(line.startswith("| `") for line in rows)
    header = next(line for line in lines if line.startswith("| Clause |"))
    pipes = re.compile(r"(?<!\\)\|")
    for row in rows:
        assert len(pipes.findall(row)) == len(pipes.findall(header))
    assert "esc\\x1b[31mred" in md and "\x1b" not in md and "\x00" not in md


@pytest.mark.parametrize("text", ["plain", "`", "a `b` c", "``x``", "ends with `", "| pipe |", " x ", "a\nb"])
def test_md_code_round_trips(text: str) -> None:
    span = md_code(text, table=True)
    fence = re.match(r"`+", span).group()
    inner = span[len(fence):-len(fence)]
    if inner.startswith(" ") and inner.endswith(" ") and inner.strip():
        inner = inner[1:-1]
    assert inner.replace("\\|", "|") == " ".join(text.split())
    assert fence not in inner


def test_junit_is_valid_xml_and_keeps_text(evil) -> None:
    xml = render_junit(evil)
    root = ET.fromstring(xml)  # control characters would make this fail
    assert root.get("name") == f"ledgercheck {NAME} {VERSION}"
    failure = next(f for f in root.iter("failure") if "second line" in (f.text or ""))
    assert "</pre><script>alert(4)</script> | pipe" in failure.text and REPLAY in failure.text
    assert failure.get("message").startswith("</pre><script>alert(4)</script> | pipe `tick` ``double`` second line")
    ctrl = next(f for f in root.iter("failure") if "bell" in f.get("message"))
    assert ctrl.get("message") == " ".join(visible(CONTROL).split())
    assert "esc\\x1b[31mred" in ctrl.text


def test_terminal_summary_has_no_control_characters(evil) -> None:
    text = summary_text(evil, "results.json", "0" * 64)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text)
    assert NAME in text and "esc\\x1b[31mred" in text


def test_run_error_detail_is_inert(factory) -> None:
    doc = factory.build(tests=[], windows=[], run=factory.run(error="adapter died: <img src=x onerror=alert(6)> | `x`\n|"),
                        adapter={"address": "exec:./x"})
    html, md = render_html(doc), render_markdown(doc)
    assert ET.fromstring(render_junit(doc)).get("name") == "ledgercheck (unidentified adapter) (no version)"
    assert "<img" not in html and "&lt;img src=x onerror=alert(6)&gt;" in html
    assert "<img" not in _outside_code_spans(md)
    assert "**ERROR** ``adapter died: <img src=x onerror=alert(6)> | `x` |``" in md
