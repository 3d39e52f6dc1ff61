"""The renderers: Markdown summary, JUnit XML, HTML report, the state-machine SVG and the bundle."""

from __future__ import annotations

import base64
import hashlib
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from ledgercheck.reports.diagram import Layout, render_state_svg
from ledgercheck.reports.render import render_html, render_junit, render_markdown, verdict_line, write_bundle
from ledgercheck.reports.results import load_results
from ledgercheck.reports.text import h, md_text

PIPE = re.compile(r"(?<!\\)\|")


class Tags(HTMLParser):
    """Every start tag with its attributes, and the text of script elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts.append(data)

    def find(self, tag: str, **attrs: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items())]


def parse(html: str) -> Tags:
    p = Tags()
    p.feed(html)
    p.close()
    return p


# ---- Markdown ---------------------------------------------------------------------------------------

def test_markdown_is_short_and_complete(realistic) -> None:
    md = render_markdown(realistic)
    lines = md.splitlines()
    assert len(lines) < 45
    assert lines[0] == "### ❌ ledgercheck: NOT CERTIFIED — `acme-ledger` `2.4.1`"
    assert f"**{md_text(verdict_line(realistic))}**" in md
    profile_rows = [line for line in lines if re.match(r"\| [a-z]+ \| (✅|❌|⚠️|➖|🚫)", line)]
    assert [r.split("|")[1].strip() for r in profile_rows] == realistic["profiles"]["defined"]
    assert "| lease | ❌ failed | 11 | 1 | 0 | 0 | 0 | 0 |" in lines
    assert "| inbox | ➖ not claimed | 0 | 0 | 0 | 0 | 0 | 7 |" in lines
    for cid, replay in (("lease.fencing", "ledgercheck replay --adapter exec:./bin/acme-ledger --clause lease.fencing"),
                        ("recovery.matrix", "ledgercheck chaos replay --point after_submit_before_record")):
        row = next(line for line in lines if line.startswith(f"| `{cid}` |"))
        assert replay in row
    assert any(line.startswith("| `retry.cap` | MUST | behaviour | known bug |") for line in lines)
    assert any(line.startswith("| `core.claim.order` | SHOULD |") for line in lines)
    assert "Crash windows: 30 run, 29 passed, 1 failed or errored." in md
    assert "](" not in md and "://" not in md  # link-free


def test_markdown_tables_keep_their_shape(realistic) -> None:
    table: list[str] = []
    for line in [*render_markdown(realistic).splitlines(), ""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table:
            widths = {len(PIPE.findall(row)) for row in table}
            assert len(widths) == 1, table
            table = []


# ---- JUnit ------------------------------------------------------------------------------------------

def test_junit_parses_back(realistic) -> None:
    root = ET.fromstring(render_junit(realistic))
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [*realistic["profiles"]["defined"], "unattributed"]
    clause_ids = {c["id"] for c in realistic["clauses"]}
    named = {case.get("name") for s in suites[:-1] for case in s.findall("testcase")}
    assert named == clause_ids  # every testcase of a profile suite is named by its clause id, every clause appears
    cases = [case for s in suites[:-1] for case in s.findall("testcase")]
    assert len(cases) == sum(c["tests"] for c in realistic["clauses"])
    failing = sorted((c.get("name"), c.get("classname")) for c in cases if c.find("failure") is not None)
    # (the factory gives each clause one to three cases by its place in the contract, and the last
    # one fails: which case that is moves when a clause is added)
    last = {t["clause"]: t["nodeid"] for t in realistic["tests"] if t["outcome"] == "failed"}
    assert failing == [
        ("core.claim.order", last["core.claim.order"]),
        ("lease.fencing", last["lease.fencing"]),
        ("recovery.effects_allowed", "crash-window::after_submit_before_record[non_idempotent_with_lookup]#1"),
        ("recovery.matrix", "crash-window::after_submit_before_record[non_idempotent_with_lookup]#1"),
    ]
    fencing = next(c for c in cases if c.get("name") == "lease.fencing" and c.find("failure") is not None)
    text = fencing.find("failure").text
    assert "Counterexample:\nstate = LedgerMachine()" in text and "Replay: ledgercheck replay" in text
    xfail = [c for c in cases if c.get("name") == "retry.cap"]
    assert xfail and all(c.find("skipped").get("type") == "xfail" for c in xfail)
    by_name = {x.get("name"): x for x in suites}
    inbox = by_name["inbox"]
    assert inbox.get("skipped") == inbox.get("tests") != "0"
    for s in [root, *suites]:
        assert int(s.get("tests")) == len(s.findall(".//testcase"))
        assert int(s.get("failures")) == len(s.findall(".//testcase/failure"))
        assert int(s.get("skipped")) == len(s.findall(".//testcase/skipped"))
    props = {p.get("name"): p.get("value") for p in by_name["lease"].find("properties")}
    assert props["profile.verdict"] == "failed" and props["spec.digest"] == realistic["spec"]["digest"]


def test_junit_shows_undecided_clauses_as_errors(factory) -> None:
    tests = [t for t in factory.tests(known_bugs=(), failing=()) if t["clause"] != "waiting.deadline"]
    doc = factory.build(tests=tests, windows=factory.windows(bad=()), adapter=factory.adapter(known_bugs={}))
    root = ET.fromstring(render_junit(doc))
    errors = root.findall(".//testcase/error/..")
    assert [(c.get("name"), c.find("error").get("message")) for c in errors] == [
        ("waiting.deadline", "no test produced a result")]
    assert root.get("errors") == "1"


# ---- HTML -------------------------------------------------------------------------------------------

def test_html_is_self_contained(realistic) -> None:
    html = render_html(realistic)
    tags = parse(html)
    assert [t for t, _ in tags.tags if t in ("link", "img", "iframe", "object", "embed", "base")] == []
    for tag, attrs in tags.tags:
        for name, value in attrs.items():
            if name in ("src", "href", "action", "xlink:href") and value:
                assert value.startswith("#"), (tag, name, value)  # in-page anchors only
    assert "@import" not in html and "url(http" not in html
    assert len(tags.find("script")) == 1
    csp = tags.find("meta", **{"http-equiv": "Content-Security-Policy"})[0]["content"]
    digest = base64.b64encode(hashlib.sha256(tags.scripts[0].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp and "default-src 'none'" in csp


def test_html_content(realistic) -> None:
    html = render_html(realistic)
    tags = parse(html)
    rows = tags.find("tr")
    clause_rows = [a for a in rows if a.get("data-clause")]
    assert [a["data-clause"] for a in clause_rows] == [c["id"] for c in realistic["clauses"]]
    assert {a["data-clause"]: a["data-outcome"] for a in clause_rows} == {c["id"]: c["outcome"] for c in realistic["clauses"]}
    cards = {a["data-profile"]: a["data-verdict"] for a in tags.find("div") if a.get("data-verdict")}
    assert cards == {p: v["verdict"] for p, v in realistic["profiles"]["verdicts"].items()}
    assert f'id="verdict" data-verdict="NOT CERTIFIED">{h(verdict_line(realistic))}</p>' in html
    problems = {a["data-clause"] for a in tags.find("article") if a.get("data-clause")}
    assert problems == {"lease.fencing", "retry.cap", "recovery.matrix", "recovery.effects_allowed", "core.claim.order"}
    assert html.count('<pre class="counterexample">state = LedgerMachine()') == 2  # lease.fencing, core.claim.order
    assert "ledgercheck chaos replay --point after_submit_before_record" in html
    windows = [a for a in tags.find("tr") if a.get("data-window")]
    assert len(windows) == 30 + 1  # all windows, and the failing one again up front
    s = realistic["spec"]
    for needle in (s["digest"], *s["files"].values(), realistic["adapter"]["artifact_sha256"],
                   realistic["run"]["command"].replace("'", "&#x27;"), "AMD EPYC 7763 64-Core Processor",
                   'class="should"', "ledger::stateful[core-machine]"):
        assert needle in html, needle


def test_html_embeds_the_results_hash(realistic, tmp_path: Path) -> None:
    paths = write_bundle(realistic, tmp_path)
    assert set(paths) == {"results", "results_sha256", "html", "markdown", "junit"}
    sha = hashlib.sha256(Path(paths["results"]).read_bytes()).hexdigest()
    html = Path(paths["html"]).read_text()
    assert f'<code id="results-sha256">{sha}</code>' in html
    assert f'<meta name="ledgercheck-results-sha256" content="{sha}">' in html
    assert f"results.json sha256 `{sha[:16]}`" in Path(paths["markdown"]).read_text()
    ET.parse(paths["junit"])
    assert load_results(paths["results"]) == realistic


# ---- state machine ----------------------------------------------------------------------------------

def test_state_machine_svg(realistic) -> None:
    spec = realistic["spec"]
    svg = ET.fromstring(render_state_svg(spec))
    ns = {"s": "http://www.w3.org/2000/svg"}
    statuses = svg.findall(".//s:g[@data-status]", ns)
    assert [g.get("data-status") for g in statuses] == [s["name"] for s in spec["statuses"]]
    terminal = {g.get("data-status") for g in statuses if "terminal" in g.get("class").split()}
    assert terminal == {"done", "failed", "timeout", "cancelled"}
    edges = svg.findall(".//s:g[@class='sm-edge']", ns)
    assert sorted((e.get("data-from"), e.get("data-to")) for e in edges) == sorted(
        (t["from"], t["to"]) for t in spec["transitions"])
    titles = {(e.get("data-from"), e.get("data-to")): e.find("s:title", ns).text for e in edges}
    assert titles[("running", "cancelled")] == "running → cancelled via close_out [cancel_requested]"
    labels = [t.text for t in svg.findall(".//s:text[@class='sm-label']", ns)]
    assert sorted(labels) == sorted(", ".join(t["ops"]) + (f" [{t['guard']}]" if t["guard"] else "")
                                    for t in spec["transitions"])


def test_state_machine_layout_has_no_overlaps(realistic) -> None:
    lay = Layout(realistic["spec"]["statuses"], realistic["spec"]["transitions"])
    boxes: list[Any] = [n for n in lay.nodes.values()]
    for i, a in enumerate(boxes):
        assert 0 <= a.x and a.x + a.w <= lay.width and 0 <= a.y and a.y + a.h <= lay.height
        for b in boxes[i + 1:]:
            assert a.x + a.w <= b.x or b.x + b.w <= a.x or a.y + a.h <= b.y or b.y + b.h <= a.y, (a.name, b.name)
    for i, a in enumerate(lay.labels):
        assert all(not a.overlaps(b, 0) for b in lay.labels[i + 1:])
    assert {lay.nodes[s].layer for s in ("done", "failed", "timeout", "cancelled")} == {max(n.layer for n in boxes)}
    assert lay.nodes["queued"].layer == 0
