"""Timelines of safety histories (reports/timeline.py): bars, fault spans and markers (any fault name),
the chosen item's operations, a linearizability result's order or failing excerpt, escaping, the
size bounds; the ``history check --html`` page and the compliance report's timelines section."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.chaos.safety.anomalies import check
from ledgercheck.reports import timeline as tl
from ledgercheck.reports.html_report import render_html
from timeline_support import Recs, stale_write_history

SVG = "{http://www.w3.org/2000/svg}"


def svg_of(fig: str) -> ET.Element:
    """The figure's SVG, parsed as XML (so it is well-formed: every value escaped)."""
    m = re.search(r"<svg .*</svg>", fig, re.S)
    assert m is not None
    return ET.fromstring(m.group(0))


def groups(root: ET.Element, cls: str) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if cls in (g.get("class") or "").split()]


def two_workers() -> Recs:
    r = Recs()
    r.call("producer", "create", 0.0, 0.1, result={"work_id": "a", "status": "queued"}, source_id="s1")
    r.call("w1", "claim", 0.2, 0.5, result={"work_id": "a", "status": "running", "lease_token": "t1"}, owner="w1")
    r.call("w2", "claim", 0.3, 0.4, outcome="refused", owner="w2", work_id="a")
    r.invoke("w2", "close_out", 0.6, work_id="a", token="t1")  # never completed
    r.call("w1", "close_out", 0.7, 0.9, outcome="indefinite", work_id="a", token="t1")
    r.call("w1", "get", 0.45, 0.48, work_id="b")  # overlaps w1's claim: a second row of w1's lane
    return r


# ----------------------------------------------------------------------------------- bars
def test_bars_one_per_operation_coloured_by_outcome() -> None:
    ops = tl.collect(two_workers().history())
    root = svg_of(tl.render_timeline(ops, whole=True))
    bars = {int(g.get("data-op")): g for g in groups(root, "tl-bar")}
    assert sorted(bars) == [0, 1, 2, 3, 4, 5]
    assert {i: g.get("data-outcome") for i, g in bars.items()} == \
        {0: "ok", 1: "ok", 2: "refused", 3: "indefinite", 4: "indefinite", 5: "ok"}
    assert "open" in bars[3].get("class").split() and "open" not in bars[4].get("class").split()
    labels = {i: "".join(g.itertext()) for i, g in bars.items()}
    assert "create a" in labels[0] and "claim a" in labels[1] and "close_out a" in labels[3]
    assert bars[0].get("data-item") == "a"  # the create's item from its answer, the claim's likewise

    def box(i: int) -> tuple[float, float, float]:
        s = bars[i].find(f"{SVG}svg")
        return float(s.get("x")), float(s.get("x")) + float(s.get("width")), float(s.get("y"))

    # invocation before completion, real-time order kept; overlapping operations of one lane stacked
    assert box(0)[1] <= box(1)[0] + 1e-6 and box(1)[0] < box(2)[0] < box(2)[1] < box(1)[1]
    assert box(5)[2] != box(1)[2]  # w1's get overlaps its claim: drawn on a second row
    assert box(3)[1] >= max(box(i)[1] for i in bars)  # never completed: runs to the right edge
    text = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    for lane in ("producer", "w1", "w2", "nemesis"):
        assert lane in text


def test_labels_fit_their_bars() -> None:
    ops = tl.collect(two_workers().history())
    root = svg_of(tl.render_timeline(ops, whole=True))
    for g in groups(root, "tl-bar"):
        s = g.find(f"{SVG}svg")
        label = s.find(f"{SVG}text").text
        if "open" not in g.get("class"):
            assert float(s.get("width")) >= min(tl.LABEL_MAX, tl.CHAR_W * len(label)), label


# ---------------------------------------------------------------------------------- faults
def test_every_fault_drawn_by_name_known_or_not() -> None:
    r = two_workers()
    r.nemesis("pause", 0.25, "w2")
    r.nemesis("resume", 0.55, "w2")
    r.nemesis("partition", 0.35, "w1")
    r.nemesis("heal", 0.8, "lc-ns1")  # a heal names the host's namespace, not the worker
    r.nemesis("kill", 0.65, "w2", point="after_effect")
    r.nemesis("power_cut", 0.66, None)
    r.nemesis("clock", 0.42, "w1", point={"mode": "skew", "offset_s": 2.5})
    r.nemesis("<b>brand_new</b>", 0.43, "w9")
    ops = tl.collect(r.history())
    root = svg_of(tl.render_timeline(ops, whole=True))
    marks = [(g.get("data-fault"), g.get("data-process")) for g in groups(root, "tl-fault")]
    assert marks == [("pause", "w2"), ("partition", "w1"), ("clock", "w1"), ("<b>brand_new</b>", "w9"),
                     ("resume", "w2"), ("kill", "w2"), ("power_cut", ""), ("heal", "lc-ns1")]
    text = " ".join("".join(g.itertext()) for g in groups(root, "tl-fault"))
    assert "power_cut" in text and "clock w1" in text and "<b>brand_new</b> w9" in text
    assert "offset_s" in text  # the record's point, in its tooltip
    spans = {(s.get("data-span"), s.get("data-process")): s for s in root.iter(f"{SVG}rect") if s.get("data-span")}
    assert set(spans) == {("pause", "w2"), ("partition", "w1")}
    by = {f.fault: f for f in ops.faults}
    assert by["pause"].end == 0.55 and by["partition"].end == 0.8  # closed by the resume, by the heal
    # a span covers its lane from the fault to its close
    x = {g.get("data-fault"): float(g.find(f"{SVG}line").get("x1")) for g in groups(root, "tl-fault")}
    p = spans[("pause", "w2")]
    assert float(p.get("x")) == pytest.approx(x["pause"], abs=0.2)
    assert float(p.get("x")) + float(p.get("width")) == pytest.approx(x["resume"], abs=0.2)


def test_a_span_never_closed_runs_to_the_edge() -> None:
    r = two_workers()
    r.nemesis("pause", 0.25, "w2")
    ops = tl.collect(r.history())
    assert ops.faults[0].end is None
    root = svg_of(tl.render_timeline(ops, whole=True))
    span = next(s for s in root.iter(f"{SVG}rect") if s.get("data-span") == "pause")
    lanes = [s for s in root.iter(f"{SVG}rect") if s.get("class") == "tl-lane"]
    assert float(span.get("x")) + float(span.get("width")) == pytest.approx(
        float(lanes[0].get("x")) + float(lanes[0].get("width")), abs=0.5)


# ---------------------------------------------------------------------------------- escaping
def test_every_value_is_escaped() -> None:
    evil = "<script>alert(1)</script>\"'&"
    r = Recs()
    r.call(evil, evil, 0.0, 0.1, result={"work_id": evil, "status": evil}, owner=evil)
    r.call("w1", "close_out", 0.2, 0.3, work_id=evil, token=evil)
    r.nemesis(evil, 0.15, evil, point=evil)
    ops = tl.collect(r.history())
    result = {"result": "violation", "excerpt": [0, 1], "at": 1, "expected": evil}
    fig = tl.render_timeline(ops, item=evil, result=result, caption=evil)
    assert "<script" not in fig and "&lt;script&gt;" in fig
    root = svg_of(fig)  # well-formed
    assert any(g.get("data-fault") == evil for g in groups(root, "tl-fault"))
    assert {g.get("data-item") for g in groups(root, "tl-bar")} == {evil}
    page = tl.render_page(r.history(), None, {"items": {evil: result}}, items=[evil])
    assert "<script" not in page.split("</head>", 1)[1]


# ------------------------------------------------------------------------------ item and result
def test_the_chosen_items_operations_are_highlighted() -> None:
    ops = tl.collect(two_workers().history())
    root = svg_of(tl.render_timeline(ops, item="b", whole=True))
    focus = {int(g.get("data-op")) for g in groups(root, "focus")}
    dim = {int(g.get("data-op")) for g in groups(root, "dim")}
    assert focus == {5} and dim == {0, 1, 2, 3, 4}


def test_linearization_order_numbered_on_the_bars() -> None:
    ops = tl.collect(two_workers().history())
    result = {"result": "linearizable", "order": [0, 2, 1, 4, 3]}
    fig = tl.render_timeline(ops, item="a", result=result)
    root = svg_of(fig)
    nums = {}
    for g in groups(root, "tl-bar"):
        for n in groups(g, "tl-num"):
            nums[int(g.get("data-op"))] = int(n.get("data-order"))
    assert nums == {0: 1, 2: 2, 1: 3, 4: 4, 3: 5}
    assert 'data-result="linearizable"' in fig and "linearizable; the numbers on the bars" in fig


def test_violation_marks_the_excerpt_and_the_failing_operation() -> None:
    ops = tl.collect(two_workers().history())
    result = {"result": "violation", "excerpt": [1, 2, 4], "at": 4, "expected": "refused: the lease moved on"}
    fig = tl.render_timeline(ops, item="a", result=result)
    root = svg_of(fig)
    assert {int(g.get("data-op")) for g in groups(root, "excerpt")} == {1, 2, 4}
    assert [int(g.get("data-op")) for g in groups(root, "at")] == [4]
    note = [t for t in root.iter(f"{SVG}text") if t.get("class") == "tl-at-note"]
    assert len(note) == 1 and note[0].get("data-at") == "4"
    assert "the model expected: refused: the lease moved on" in note[0].text
    assert "at operation #4 every ordering fails" in fig
    assert not groups(root, "tl-num")  # no order is claimed for a violation


def test_unchecked_result_says_why() -> None:
    ops = tl.collect(two_workers().history())
    fig = tl.render_timeline(ops, item="a", result={"result": "unchecked", "reason": "over the search budget"})
    assert "Item a: unchecked: over the search budget." in fig


# ---------------------------------------------------------------------------------- bounds
def big(n_items: int, per_item: int = 4) -> Recs:
    r = Recs()
    t = 0.0
    for i in range(n_items):
        for k in range(per_item):
            r.call(f"w{(i + k) % 8}", "renew", t, t + 0.002, work_id=f"i{i}", token="x")
            t += 0.001
        if i % 50 == 0:
            r.nemesis("kill", t, f"w{i % 8}")
    return r


def test_a_window_around_the_item_bounded_in_operations_and_bytes() -> None:
    r = big(5000)  # 20,000 operations
    hist = r.history()
    ops = tl.collect(hist)
    fig = tl.render_timeline(ops, item="i2500")
    root = svg_of(fig)
    bars = groups(root, "tl-bar")
    assert len(bars) <= tl.MAX_BARS
    assert {int(g.get("data-op")) for g in groups(root, "focus")} == {b.id for b in ops.bars if b.item == "i2500"}
    assert len(fig) < 400_000
    # a small limit leaves operations out, and says how many
    small = tl.render_timeline(ops, item="i2500", max_bars=10, context=50)
    assert len(groups(svg_of(small), "tl-bar")) == 10 and "more in these time ranges left out" in small
    with pytest.raises(tl.TimelineError, match="20000 operations, over the 5000"):
        tl.render_timeline(ops, whole=True)
    # a page of many failing items draws at most MAX_TIMELINES of them, and names the rest
    lin = {"items": {f"i{i}": {"result": "violation", "excerpt": [4 * i], "at": 4 * i, "expected": "x"}
                     for i in range(60)}}
    page = tl.render_page(hist, None, lin)
    assert page.count('<figure class="timeline"') == tl.MAX_TIMELINES
    assert "20 more item(s) not drawn" in page
    assert len(page) < tl.MAX_TIMELINES * 400_000


def test_the_window_keeps_context_either_side() -> None:
    r = big(100)
    ops = tl.collect(r.history())
    view = tl.window(ops, item="i50", context=8)
    ids = [b.id for b in view.bars]
    mine = [b.id for b in ops.bars if b.item == "i50"]
    assert set(mine) <= set(ids) and min(ids) < min(mine) and max(ids) > max(mine)
    assert len(ids) < 40  # not the whole history


def test_operations_far_apart_get_a_window_each_with_the_gap_counted() -> None:
    r = big(400)  # item i10 early, item i390 late, 1,500 operations between them
    ops = tl.collect(r.history())
    first = [b.id for b in ops.bars if b.item == "i10"]
    last = [b.id for b in ops.bars if b.item == "i390"]
    view = tl.window(ops, [first[0], last[-1]], context=6)
    ids = {b.id for b in view.bars}
    assert {first[0], last[-1]} <= ids and len(ids) < 60
    assert len(view.breaks) == 1
    a, z, n = view.breaks[0]
    between = [b for b in ops.bars if a < b.t0 < z]
    assert n == len([b for b in between if b.id not in ids]) and n > 1000
    fig = tl.render_timeline(ops, focus=[first[0], last[-1]], context=6)
    root = svg_of(fig)
    assert [g.get("data-skipped") for g in groups(root, "tl-break")] == [str(n)]
    assert f"2 windows, {n} operations between them not shown" in fig


# ---------------------------------------------------------------------------------- the CLI
def ledgercheck(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ledgercheck", *args], capture_output=True, text=True, check=False)


def test_history_check_html_for_the_failing_item_and_any_item_asked(tmp_path: Path) -> None:
    b, _, _ = stale_write_history()
    path = tmp_path / "h.jsonl"
    path.write_bytes(b.dumps())
    out = tmp_path / "t.html"
    p = ledgercheck("history", "check", str(path), "--html", str(out), "--item", "n1")
    assert p.returncode == 1, p.stderr  # the anomaly's exit status, unchanged
    page = out.read_text()
    assert [m for m in re.findall(r'<section class="tl-item" data-item="([^"]*)"', page)] == ["x", "n1"]
    assert "stale_write_accepted" in page and 'data-fault="power_cut"' in page
    lin = tmp_path / "lin.json"
    lin.write_text(json.dumps({"linearizability": {"items": {"n1": {"result": "violation", "excerpt": [],
                                                                    "at": None, "expected": "?"}}}}))
    p = ledgercheck("history", "check", str(path), "--json", "--html", str(out), "--linearizability", str(lin))
    assert p.returncode == 1 and json.loads(p.stdout)["verdict"] == "anomalies"  # stdout stays JSON
    assert re.findall(r'<section class="tl-item" data-item="([^"]*)"', out.read_text()) == ["x", "n1"]


@pytest.mark.parametrize(("args", "message"), [
    (["--item", "nope"], "no operation of item 'nope' in the history"),
    (["--linearizability", "MISSING"], "cannot read a linearizability result"),
    (["--linearizability", "BAD"], "not a linearizability result"),
])
def test_history_check_html_bad_input_one_line_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    b, _, _ = stale_write_history()
    path = tmp_path / "h.jsonl"
    path.write_bytes(b.dumps())
    (tmp_path / "BAD").write_text("[1, 2]")
    args = [str(tmp_path / a) if a in ("MISSING", "BAD") else a for a in args]
    p = ledgercheck("history", "check", str(path), "--html", str(tmp_path / "t.html"), *args)
    assert p.returncode == 2 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "Traceback" not in p.stderr
    p = ledgercheck("history", "check", str(path), "--item", "x")
    assert p.returncode == 2 and "go with --html OUT" in p.stderr


def test_whole_history_over_the_limit_refused(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    hist = big(1300).history()  # 5,200 operations
    path.write_text("".join(json.dumps(_dict(r)) + "\n" for r in hist.records))
    p = ledgercheck("history", "check", str(path), "--html", str(tmp_path / "t.html"), "--whole")
    assert p.returncode == 2 and "over the 5000 a whole-history timeline draws" in p.stderr, p.stderr


def _dict(rec: Any) -> dict[str, Any]:
    from ledgercheck.chaos.safety.history import to_dict

    return to_dict(rec)


# ------------------------------------------------------------------------- the compliance report
def campaign(tmp_path: Path, lin: dict[str, Any] | None = None, keep_history: bool = True) -> dict[str, Any]:
    b, _, _ = stale_write_history()
    path = tmp_path / "history.jsonl"
    path.write_bytes(b.dumps())
    v = check(b.history())
    camp = {"adapter": "acme", "seed": 3, "verdict": "fail", "anomalies": [
        {**a.to_json(), "clause": "core.lease.fencing"} for a in v.anomalies], "anomaly_count": len(v.anomalies),
        "history": str(path) if keep_history else None}
    if lin is not None:
        camp["linearizability"] = lin
    return camp


def test_report_draws_each_failing_items_timeline(factory, tmp_path: Path) -> None:
    doc = factory.build()
    doc["safety"] = [campaign(tmp_path)]
    page = render_html(doc)
    section = page.split('<section id="timelines">', 1)[1].split("</section>", 1)[0]
    assert '<a href="#timelines">Timelines</a>' in page
    assert re.findall(r'<div class="tl-item" data-item="([^"]*)"', section) == ["x"]
    root = svg_of(section)
    assert {g.get("data-item") for g in groups(root, "focus")} == {"x"}
    proof = set(tl.anomaly_ids(doc["safety"][0]["anomalies"]))
    assert proof and {int(g.get("data-op")) for g in groups(root, "excerpt")} == proof  # the proof, outlined
    assert {g.get("data-fault") for g in groups(root, "tl-fault")} >= {"pause", "resume"}  # from the history


def test_report_draws_linearizability_violations_from_the_history(factory, tmp_path: Path) -> None:
    doc = factory.build()
    lin = {"items": {"n2": {"result": "violation", "excerpt": [8, 9], "at": 9, "expected": "refused"},
                     "n1": {"result": "linearizable", "order": [1, 7, 8]}}, "cross": [], "stats": {}}
    doc["safety"] = [campaign(tmp_path, lin)]
    section = render_html(doc).split('<section id="timelines">', 1)[1].split("</section>", 1)[0]
    assert re.findall(r'<div class="tl-item" data-item="([^"]*)"', section) == ["x", "n2"]
    assert 'data-at="9"' in section and "the model expected: refused" in section
    doc["safety"] = [campaign(tmp_path, lin, keep_history=False)]
    section = render_html(doc).split('<section id="timelines">', 1)[1].split("</section>", 1)[0]
    assert re.findall(r'<div class="tl-item" data-item="([^"]*)"', section) == ["x", "n2"]
    n2 = section.split('data-item="n2"', 1)[1]
    assert "not linearizable" in n2 and "Its timeline needs the history: the campaign kept no history" in n2
    assert "The operations of the proof only (the history is not at hand" in section  # x, from its proof


def test_report_without_failing_items_has_no_timelines(factory) -> None:
    doc = factory.build()
    doc["safety"] = [{"adapter": "acme", "seed": 1, "verdict": "pass", "anomalies": [], "anomaly_count": 0,
                      "history": None, "linearizability": {"items": {"a": {"result": "linearizable", "order": []}}}}]
    page = render_html(doc)
    assert 'id="timelines"' not in page and "#timelines" not in page
