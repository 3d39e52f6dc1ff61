"""The verdict in one line, and the small summaries every renderer shares."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .text import one_line
from .verdicts import WINDOW_OK, anonymous_adapter, by_impact, in_scope, unattributed_failures
from .verdicts import verdict_line as headline_of

PROBLEM_OUTCOMES = ("fail", "error", "xfail")


def blocking_clauses(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """MUST clauses that failed (or are declared known bugs) in profiles in scope, the most severe
    impact first (contract order within one impact)."""
    scope = set(in_scope(doc))
    return list(by_impact([c for c in doc["clauses"] if c["profile"] in scope and c["level"] == "MUST"
                           and c["outcome"] in ("fail", "xfail")]))


def not_offered_clauses(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """MUST clauses of profiles in scope not judged: an operation they need is not offered."""
    scope = set(in_scope(doc))
    return [c for c in doc["clauses"] if c["profile"] in scope and c["level"] == "MUST" and c["outcome"] == "not_offered"]


def error_clauses(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    scope = set(in_scope(doc))
    return [c for c in doc["clauses"] if c["profile"] in scope and c["outcome"] == "error"]


def warning_clauses(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """SHOULD clauses not met in profiles in scope: listed, never blocking."""
    scope = set(in_scope(doc))
    return list(by_impact([c for c in doc["clauses"] if c["profile"] in scope and c["level"] != "MUST"
                           and c["outcome"] in ("fail", "xfail", "not_offered")]))


def coverage_totals(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """The run's coverage in a few numbers (over the profiles in scope), or None when the run
    recorded none: transitions reached, not offered and in scope, the ones never reached, clauses
    with a case run, crash points hit and windows run."""
    cov = doc.get("coverage")
    if not isinstance(cov, Mapping) or "profiles" not in cov:
        return None
    profiles = cov["profiles"].values()
    points = cov["crash_points"]
    hit = [p for p in points if p["kill"] + p["takeover"] + p["scan-kill"]]
    return {
        "transitions": sum(g["transitions"] for g in profiles), "reached": sum(g["reached"] for g in profiles),
        "not_offered": sum(g["not_offered"] for g in profiles),
        "missing": list(dict.fromkeys(m for g in profiles for m in g["missing"])),
        "clauses": sum(g["clauses"] for g in profiles), "clauses_run": sum(g["clauses_run"] for g in profiles),
        "not_run": [c for g in profiles for c in g["not_run"]],
        "points": len(points), "points_hit": len(hit), "windows": len(doc["crash_windows"]),
    }


def coverage_line(doc: Mapping[str, Any]) -> str | None:
    """``transitions 25 of 25 reached; clauses 119 of 119 with a case run; crash points 8 of 8 hit
    (181 windows); safety campaign: no anomaly``: what the run exercised, in one line."""
    tot = coverage_totals(doc)
    parts = []
    if tot is not None:
        tr = f"transitions {tot['reached']} of {tot['transitions']} reached"
        if tot["not_offered"]:
            tr += f" ({tot['not_offered']} not offered)"
        parts += [tr, f"clauses {tot['clauses_run']} of {tot['clauses']} with a case run",
                  f"crash points {tot['points_hit']} of {tot['points']} hit ({tot['windows']} windows)"]
    for camp in doc.get("safety") or []:
        v = camp.get("verdict")
        words = {"pass": "no anomaly", "fail": "anomalies", "inconclusive": "inconclusive"}.get(str(v), str(v))
        missing = [str(m) for m in camp.get("missing") or []]
        parts.append(f"safety campaign (seed {camp.get('seed')}): {words}" + (f" ({'; '.join(missing)})" if missing else ""))
    return "; ".join(parts) or None


def safety_situations(camp: Mapping[str, Any]) -> list[tuple[str, int]]:
    """The situations a safety campaign reached, as its checker counted them (its ``coverage``)."""
    cov = camp.get("coverage")
    if not isinstance(cov, Mapping):
        return []
    return [(str(k), int(v)) for k, v in cov.items() if isinstance(v, int) and not isinstance(v, bool)]


def verdict_parts(doc: Mapping[str, Any]) -> tuple[str, str | None]:
    """The verdict line as (text made only of contract names and counts, adapter-supplied detail or None).

    The text is the document's ``verdict_line`` (ledgercheck.reports.verdicts.headline, the one
    wording every renderer and the published matrices use); an ERROR adds the adapter's detail."""
    line = headline_of(doc)
    if doc["verdict"] != "ERROR":
        return line, None
    if doc["run"].get("error"):
        return "ERROR", str(doc["run"]["error"])
    errs = error_clauses(doc)
    if errs:
        return line, f"{errs[0]['id']}: {errs[0]['message']}"
    loose = unattributed_failures(doc)
    if loose:
        first = loose[0]
        return line, f"{first['nodeid']}: {first['message'] or first['outcome']}"
    if anonymous_adapter(doc):
        return line, None
    return "ERROR", "unknown cause"


def verdict_line(doc: Mapping[str, Any]) -> str:
    """The verdict line (ledgercheck.reports.verdicts.headline) with an ERROR's detail -- plain
    text; each renderer escapes it for its output."""
    line, detail = verdict_parts(doc)
    if detail is None:
        return line
    if line == "ERROR":
        return f"ERROR: {one_line(detail, 200)}"
    return f"{line} (first: {one_line(detail, 160)})"


def first_problem(doc: Mapping[str, Any], clause_id: str) -> dict[str, Any] | None:
    """The first test or crash window that made a clause fail or error, for its replay command."""
    for t in doc["tests"]:
        if t["clause"] == clause_id and t["outcome"] in ("failed", "error", "xpassed"):
            return {"nodeid": t["nodeid"], "message": t["message"], "replay": t["replay"],
                    "counterexample": t["counterexample"]}
    for w in doc["crash_windows"]:
        if clause_id in w["clauses"] and w["verdict"] not in WINDOW_OK:
            return {"nodeid": f"crash window {w['point']} x {w['step_class']} #{w['occurrence']}",
                    "message": w["message"], "replay": w["replay"], "counterexample": None}
    return None


def adapter_label(doc: Mapping[str, Any]) -> tuple[str, str]:
    """The adapter's name and version for display; an adapter that never identified itself says so."""
    a = doc["adapter"]
    return (a["name"] if a.get("name") is not None else "(unidentified adapter)",
            a["version"] if a.get("version") is not None else "(no version)")


def fmt_seconds(s: float) -> str:
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.1f} s"
    m, sec = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m} min {sec} s"
    hr, m = divmod(m, 60)
    return f"{hr} h {m} min"
