"""JUnit XML: one testsuite per profile, one testcase per (test or crash window, clause).

A testcase's ``name`` is the clause id and its ``classname`` the test's node id, so several tests
of one clause stay apart.  A clause that could not be decided without any failing test (no test
at all, or every test skipped) gets a testcase of its own with an ``error``, so a CI summary never
shows green for a run whose verdict is ERROR.  A run that did not finish (INCOMPLETE) gets a first
testsuite ``run`` whose one testcase is an ``error`` naming the tests left without an outcome.
A test that met an operation the implementation does not offer is ``skipped`` (never a failure)
with a message naming the operation and a property ``ledger_outcome=not_offered``; each suite's
properties carry the run's verdict (``run.verdict``: CERTIFIED, INCONCLUSIVE, ...), the findings by
severity and what its profile lacks and did not reach.  A run that did not reach what its verdict
needs (INCONCLUSIVE, or a failing run with gaps besides) gets a testsuite ``coverage`` with one
``error`` of type ``not_reached`` per gap, so CI never shows green for an INCONCLUSIVE run.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from .summary import adapter_label, verdict_line
from .text import one_line, visible
from .verdicts import window_nodeid


def _detail(message: str | None, counterexample: str | None = None, replay: str | None = None) -> str:
    parts = [visible(message or "")]
    if counterexample:
        parts.append("Counterexample:\n" + visible(counterexample))
    if replay:
        parts.append("Replay: " + visible(replay))
    return "\n\n".join(p for p in parts if p)


def _case(suite: ET.Element, clause: str, classname: str, seconds: float) -> ET.Element:
    """A testcase named by its clause id (or, for a test that names none, by its kind)."""
    return ET.SubElement(suite, "testcase", name=clause, classname=visible(classname), time=f"{seconds:.3f}")


def _mark(case: ET.Element, tag: str, kind: str, message: str, text: str = "") -> None:
    el = ET.SubElement(case, tag, type=kind, message=one_line(message, 240))
    if text:
        el.text = text


def _test_case(suite: ET.Element, t: Mapping[str, Any], profile: str, known: Mapping[str, str]) -> None:
    case = _case(suite, t["clause"] or t["kind"], t["nodeid"], t["duration_s"])
    o, msg = t["outcome"], t["message"]
    detail = _detail(msg, t["counterexample"], t["replay"])
    if o == "failed":
        _mark(case, "failure", "failed", msg or "failed", detail)
    elif o == "error":
        _mark(case, "error", "error", msg or "error", detail)
    elif o == "xpassed":
        why = known.get(t["clause"], "")
        _mark(case, "failure", "xpassed", f"passed although declared a known bug: {why}", detail)
    elif o == "not_offered":
        # not a failure: the implementation does not offer what the check needs (blocks its profile)
        ops = ", ".join(t.get("not_offered") or [])
        _mark(case, "skipped", "not_offered", f"not offered: {ops}" + (f" ({msg})" if msg and ops not in msg else ""))
        props = ET.SubElement(case, "properties")
        ET.SubElement(props, "property", name="ledger_outcome", value="not_offered")
        ET.SubElement(props, "property", name="ledger_not_offered", value=visible(ops))
    elif o == "xfailed":
        why = known.get(t["clause"]) or msg or "expected failure"
        _mark(case, "skipped", "xfail", f"known bug, blocks certification: {why}")
    elif o == "skipped":
        if t["not_claimed"]:
            why = f"profile {profile} is not claimed by the adapter" if profile else (msg or "not claimed by the adapter")
            _mark(case, "skipped", "not_claimed", why)
        else:
            _mark(case, "skipped", "skipped", msg or "skipped")


def _severity_properties(doc: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The findings by severity (safety anomalies, contract violations, operations not offered) as properties."""
    found = doc.get("findings") or []

    def of(sev: str) -> list[Mapping[str, Any]]:
        return [f for f in found if f["severity"] == sev]
    return [("findings.unsafe", ", ".join(f"{f['what']}={f['count']}" for f in of("unsafe"))),
            ("findings.violations", ", ".join(f["what"] for f in of("violation"))),
            ("findings.not_offered", ", ".join(f["what"] for f in of("not_offered"))),
            ("findings.not_reached", "; ".join(f["words"] for f in of("not_reached")))]


def _totals(suite: ET.Element, totals: dict[str, Any]) -> None:
    counts = {"tests": len(suite.findall("testcase")), "failures": len(suite.findall("testcase/failure")),
              "errors": len(suite.findall("testcase/error")), "skipped": len(suite.findall("testcase/skipped"))}
    seconds = sum(float(c.get("time", "0")) for c in suite.findall("testcase"))
    for k, v in counts.items():
        suite.set(k, str(v))
        totals[k] += v
    suite.set("time", f"{seconds:.3f}")
    totals["time"] += seconds


def render_junit(doc: Mapping[str, Any]) -> str:
    a, s, r = doc["adapter"], doc["spec"], doc["run"]
    known = a["known_bugs"]
    by_id = {c["id"]: c for c in doc["clauses"]}
    name, version = adapter_label(doc)
    root = ET.Element("testsuites", name=visible(f"ledgercheck {name} {version}"))
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
    inc = r.get("incomplete")
    if inc:  # first, so CI shows a run that did not finish as what it is
        suite = ET.SubElement(root, "testsuite", name="run", timestamp=r["started_at"])
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="verdict", value=visible(verdict_line(doc)))
        left = inc["tests"]["unfinished"]
        text = "\n".join(visible(n) for n in left)
        _mark(_case(suite, "ledgercheck.run", "ledgercheck.incomplete", float(r["duration_s"])), "error", "incomplete",
              verdict_line(doc), text)
        _totals(suite, totals)
    for profile in doc["profiles"]["defined"]:
        pv = doc["profiles"]["verdicts"][profile]
        suite = ET.SubElement(root, "testsuite", name=profile, timestamp=r["started_at"])
        props = ET.SubElement(suite, "properties")
        lacks = ", ".join(pv.get("lacks") or [])
        gap = ((doc.get("coverage") or {}).get("profiles") or {}).get(profile) or {}
        unreached = ", ".join([*gap.get("missing", []), *gap.get("not_run", [])])
        for k, v in (("profile.verdict", pv["verdict"]), ("profile.lacks", lacks), ("profile.not_reached", unreached),
                     ("run.verdict", doc["verdict"]), ("verdict", verdict_line(doc)),
                     *_severity_properties(doc), ("spec.name", s["name"]),
                     ("spec.version", s["version"]), ("spec.digest", s["digest"]), ("adapter.name", name),
                     ("adapter.version", version), ("adapter.address", a["address"]),
                     ("harness.version", doc["harness"]["version"]), ("run.id", r["id"]),
                     ("run.command", r["command"]), ("run.seed", "" if r["seed"] is None else r["seed"])):
            ET.SubElement(props, "property", name=k, value=visible(v))
        mine = [c for c in doc["clauses"] if c["profile"] == profile]
        ids = {c["id"] for c in mine}
        shown: dict[str, bool] = {c["id"]: False for c in mine}  # clause id -> a failing/error case shown
        for t in doc["tests"]:
            if t["clause"] in ids:
                _test_case(suite, t, profile, known)
                shown[t["clause"]] |= t["outcome"] in ("failed", "error", "xpassed")
        for w in doc["crash_windows"]:
            for cid in w["clauses"]:
                if cid not in ids:
                    continue
                case = _case(suite, cid, window_nodeid(w), w["duration_s"])
                if w["verdict"] == "permitted":  # passes, and says what the declaration allowed
                    ET.SubElement(case, "system-out").text = visible(w["message"] or "permitted")
                elif w["verdict"] != "pass":
                    tag = "failure" if w["verdict"] == "fail" else "error"
                    text = _detail(w["message"], None, w["replay"])
                    _mark(case, tag, f"crash_window_{w['verdict']}", w["message"] or w["verdict"], text)
                    shown[cid] = True
        for c in mine:
            o = by_id[c["id"]]["outcome"]
            if o == "error" and not shown[c["id"]]:
                _mark(_case(suite, c["id"], "ledgercheck.clause", 0.0), "error", "undecided", c["message"] or "error")
            elif o in ("not_requested", "not_claimed") and c["tests"] == 0:
                why = "profile not requested" if o == "not_requested" else "profile not claimed by the adapter"
                _mark(_case(suite, c["id"], f"ledgercheck.{o}", 0.0), "skipped", o, why)
        _totals(suite, totals)
    gaps = [f for f in doc.get("findings") or [] if f["severity"] == "not_reached"]
    if gaps:  # what the run did not reach: never green (INCONCLUSIVE, or said beside a failure)
        suite = ET.SubElement(root, "testsuite", name="coverage", timestamp=r["started_at"])
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="run.verdict", value=visible(doc["verdict"]))
        ET.SubElement(props, "property", name="verdict", value=visible(verdict_line(doc)))
        for f in gaps:
            detail = "\n".join(x for x in (f["message"], ", ".join(f["clauses"])) if x)
            _mark(_case(suite, f"coverage.{f['what']}", "ledgercheck.coverage", 0.0), "error", "not_reached",
                  f["words"], visible(detail))
        _totals(suite, totals)
    loose = [t for t in doc["tests"] if t["clause"] is None]
    if loose:  # tests that name no clause (a stateful run that found nothing, or failed without saying what)
        suite = ET.SubElement(root, "testsuite", name="unattributed", timestamp=r["started_at"])
        for t in loose:
            _test_case(suite, t, "", known)
        _totals(suite, totals)
    for k, v in totals.items():
        root.set(k, f"{v:.3f}" if k == "time" else str(v))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
