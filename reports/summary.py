"""The verdict in one line, and the small summaries every renderer shares."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .text import one_line
from .verdicts import WINDOW_OK, anonymous_adapter, in_scope, unattributed_failures
from .verdicts import verdict_line as headline_of

PROBLEM_OUTCOMES = ("fail", "error", "xfail")


def blocking_clauses(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """MUST clauses that failed (or are declared known bugs) in profiles in scope."""
    scope = set(in_scope(doc))
    return [c for c in doc["clauses"] if c["profile"] in scope and c["level"] == "MUST" and c["outcome"] in ("fail", "xfail")]


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
    return [c for c in doc["clauses"] if c["profile"] in scope and c["level"] != "MUST"
            and c["outcome"] in ("fail", "xfail", "not_offered")]


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
