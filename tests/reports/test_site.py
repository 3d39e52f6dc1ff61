"""The certification site (``ledgercheck site build``): pages, badges, trends and the track record,
checked as files and in a real headless Chromium (its script runs under the pages' CSP, injected
markup does not, every link resolves)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.reports.history import open_history
from ledgercheck.reports.render import write_bundle
from ledgercheck.reports.site import build, slug

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = sorted((ROOT / "docs" / "libraries").glob("*/results.json"))
REGISTRY = ROOT / "tests" / "fixtures" / "confirmations.yaml"
PWN = "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','img')\">"


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []
        self.rows: list[dict[str, str | None]] = []
        self.root: dict[str, str | None] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "html":
            self.root = a
        for key in ("href", "src"):
            if a.get(key):
                self.targets.append(str(a[key]))
        if tag == "tr" and a.get("data-impl"):
            self.rows.append(a)


@pytest.fixture(scope="module")
def runs(factory, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two versions of one implementation (the later one breaks what the first kept), one whose
    name carries markup, each written as ledgercheck writes results, and a history holding them."""
    base = tmp_path_factory.mktemp("runs")
    old = factory.build(tests=factory.tests(known_bugs=(), failing=()), windows=factory.windows(bad=()),
                        adapter=factory.adapter(known_bugs={}, version="2.4.0"),
                        run=factory.run(id="run-earlier", started_at="2025-03-01T09:55:00.000Z",
                                        finished_at="2025-03-01T10:00:00.000Z"))
    new = factory.build()
    hostile = factory.build(adapter=factory.adapter(name=PWN, version=PWN))
    paths = {}
    for key, doc in (("old", old), ("new", new), ("hostile", hostile)):
        paths[key] = write_bundle(doc, base / key)["results"]
    history = base / "history.db"
    h = open_history(history)
    for key in ("old", "new"):
        h.append(json.loads(Path(paths[key]).read_text(encoding="utf-8")), paths[key])
    h.close()
    return {"paths": paths, "history": history, "docs": {"old": old, "new": new}}


@pytest.fixture(scope="module")
def site(runs, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("site")
    done = build([*runs["paths"].values(), *PUBLISHED], out, history=str(runs["history"]), confirmations=str(REGISTRY))
    return out, done


def test_every_link_of_every_page_resolves(site) -> None:
    out, done = site
    pages = [p for p in done["files"] if p.endswith(".html")]
    assert {"index.html", "track-record.html", "impl/acme-ledger.html"} <= set(pages)
    for page in pages:
        parser = Links()
        parser.feed((out / page).read_text(encoding="utf-8"))
        for target in parser.targets:
            if target.startswith(("http://", "https://", "#")):
                continue
            assert (out / page).parent.joinpath(target.split("#")[0]).resolve().exists(), (page, target)


def test_the_index_in_a_browser(chromium, site) -> None:
    out, done = site
    dom = chromium.dump_dom((out / "index.html").as_uri())
    parser = Links()
    parser.feed(dom)
    assert parser.root.get("data-js") == "ready"  # the sorting script ran under the page's CSP
    assert "data-pwned" not in dom.split(">", 2)[1] and "&lt;img src=x onerror=" in dom
    assert len(parser.rows) == len(done["implementations"])
    # safety first: every UNSAFE implementation before the others
    verdicts = re.findall(r'<tr data-impl="[^"]+"><td>.*?</td><td>.*?</td><td class="v-([a-z-]+)"', dom)
    assert verdicts and verdicts == sorted(verdicts, key=lambda v: v != "unsafe")
    assert "unsafe" in verdicts and "certified" in verdicts


def test_an_implementation_page_shows_its_findings_changes_and_trends(chromium, site, runs) -> None:
    out, _ = site
    dom = chromium.dump_dom((out / "impl" / "acme-ledger.html").as_uri())
    new = runs["docs"]["new"]
    assert re.search(r'id="verdict">([^<]*)<', dom).group(1) == new["verdict_line"].replace("&", "&amp;")
    assert "Against version 2.4.0" in dom and "<h3>Regressed</h3>" in dom
    # one page per version too, the older one with nothing before it
    older = (out / "impl" / "acme-ledger" / "2-4-0.html").read_text(encoding="utf-8")
    assert "No earlier version given" in older and 'id="verdict">CERTIFIED' in older
    assert (out / "impl" / "acme-ledger" / "2-4-1.html").read_text(encoding="utf-8").count("<h3>Regressed</h3>") == 1
    regressed = [c["id"] for c in new["clauses"] if c["outcome"] == "fail"]
    assert all(f"<code>{c}</code>: pass → fail" in dom for c in regressed)
    # the history's two runs drawn: one point per run in each chart
    charts = re.findall(r'<svg class="trend" data-trend="([^"]+)".*?</svg>', dom, re.S)
    assert charts == ["clauses passed (%)", "safety anomalies", "run time (s)"]
    assert dom.count("<circle") == 3 * 2


def test_a_published_library_page_carries_its_anomalies_with_excerpts(site) -> None:
    out, _ = site
    doc = json.loads((ROOT / "docs" / "libraries" / "pg-boss" / "results.json").read_text(encoding="utf-8"))
    page = (out / "impl" / "pg-boss.html").read_text(encoding="utf-8")
    anomalies = [a for c in doc["safety"] for a in c["anomalies"]]
    assert anomalies and page.count('<div class="anomaly"') == len(anomalies)
    assert all(a["work_id"] in page for a in anomalies)
    # each drawn as a timeline of its proof's operations
    drawn = re.findall(r'<figure class="timeline" data-item="([^"]+)" data-bars="(\d+)">', page)
    assert [w for w, _ in drawn] == [a["work_id"] for a in anomalies]
    assert all(int(n) == len({r["id"] for r in a["excerpt"]}) for (_, n), a in zip(drawn, anomalies, strict=True))


def test_badges_are_svg_with_the_verdict(chromium, site, tmp_path: Path) -> None:
    out, done = site
    for name in done["implementations"]:
        tree = ET.parse(out / "badges" / f"{slug(name)}.svg")
        text = [t.text for t in tree.iter("{http://www.w3.org/2000/svg}text")]
        assert text[0] == "ledgercheck" and text[1] in ("unsafe", "not certified", "certified", "inconclusive", "error")
    assert "unsafe" in (out / "badges" / "pg-boss.svg").read_text(encoding="utf-8")
    assert "certified" in (out / "badges" / "ledgercheck-reference" / "core.svg").read_text(encoding="utf-8")
    width, height = chromium.screenshot((out / "badges" / "pg-boss.svg").as_uri(), tmp_path / "badge.png", 200, 40)
    assert (width, height) == (200, 40)


def test_the_track_record_lists_confirmed_findings_with_their_scripts(site) -> None:
    out, _ = site
    page = (out / "track-record.html").read_text(encoding="utf-8")
    rows = re.findall(r'<tr data-library="([^"]+)" data-finding="([^"]+)">', page)
    assert ("pg-boss", "stale_write_accepted") in rows and ("rq", "stale_write_accepted") in rows
    assert all(lib != "bullmq" for lib, _ in rows)  # a pass shown with the library alone is not a bug
    assert "confirm_pgboss.js" in page and "ledgercheck replay" in page


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "results.json"
    bad.write_text("{not json", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "ledgercheck", "site", "build", str(bad), "--out", str(tmp_path / "s")],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and str(bad) in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "ledgercheck", "site", "build", *map(str, PUBLISHED[:1]),
                           "--out", str(tmp_path / "s"), "--history", str(tmp_path / "none.db")],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "none.db" in proc.stderr and "Traceback" not in proc.stderr


def test_the_committed_site_is_what_build_renders(tmp_path: Path) -> None:
    """docs/site is rebuilt by ``python -m ledgercheck.fixtures.libraries.publish`` (``--render-only`` too) from
    the published results; it must be what the current code renders from them (the track record's
    links to the scripts are relative to where the site is, so they are compared without them)."""
    from ledgercheck.fixtures.libraries.publish import LIBRARIES

    committed = ROOT / "docs" / "site"
    done = build([ROOT / "docs" / "libraries" / n / "results.json" for n, _t, _p in LIBRARIES], tmp_path,
                 confirmations=str(REGISTRY))
    on_disk = {str(p.relative_to(committed)) for p in committed.rglob("*") if p.is_file()}
    assert on_disk == set(done["files"])
    for rel in done["files"]:
        a, b = (committed / rel).read_text(encoding="utf-8"), (tmp_path / rel).read_text(encoding="utf-8")
        if rel == "track-record.html":
            a, b = (re.sub(r'href="[^"]*/tests/fixtures/', 'href="', x) for x in (a, b))
        assert a == b, f"docs/site/{rel} is stale: run python -m ledgercheck.fixtures.libraries.publish --render-only"
