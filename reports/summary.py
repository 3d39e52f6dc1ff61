"""The verdict in one line, and the small summaries every renderer shares."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .text import one_line
from .verdicts import anonymous_adapter, unattributed_failures

PROBLEM_OUTCOMES = ("fail", "error", "xfail")


def in_scope(doc: Mapping[str, Any]) -> list[str]:
    """Profiles that were requested and that the adapter claims, in contract order."""
    prof = doc["profiles"]
    return [p for p in prof["defined"] if p in prof["requested"] and p in prof["claimed"]]


def blocking_clauses(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """MUST clauses that failed (or are declared known bugs) in profiles in scope."""
    scope = set(in_scope(doc))
    return [c for c in doc["clauses"] if c["profile"] in scope and c["level"] == "MUST" and c["outcome"] in ("fail", "xfail")]


def error_clauses(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    scope = set(in_scope(doc))
    return [c for c in doc["clauses"] if c["profile"] in scope and c["outcome"] == "error"]


def warning_clauses(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """SHOULD clauses not met in profiles in scope: listed, never blocking."""
    scope = set(in_scope(doc))
    return [c for c in doc["clauses"] if c["profile"] in scope and c["level"] != "MUST" and c["outcome"] in ("fail", "xfail")]


def verdict_parts(doc: Mapping[str, Any]) -> tuple[str, str | None]:
    """The verdict line as (text made only of contract names and counts, adapter-supplied detail or None)."""
    verdict = doc["verdict"]
    verd = doc["profiles"]["verdicts"]
    if verdict == "INCOMPLETE":
        return incomplete_line(doc["run"]["incomplete"]), None
    if verdict == "CERTIFIED":
        line = f"CERTIFIED for profiles {', '.join(doc['certified_profiles'])}"
        warn = len(warning_clauses(doc))
        if warn:
            line += f" ({warn} SHOULD clause(s) not met)"
        return line, None
    if verdict == "NOT CERTIFIED":
        if not in_scope(doc):
            requested = ", ".join(doc["profiles"]["requested"]) or "none"
            return f"NOT CERTIFIED: the adapter claims none of the requested profiles ({requested})", None
        failed = [p for p in in_scope(doc) if verd[p]["verdict"] == "failed"]
        blocking = blocking_clauses(doc)
        known = sum(1 for c in blocking if c["outcome"] == "xfail")
        line = f"NOT CERTIFIED: {len(blocking)} clause(s) failed in profiles {', '.join(failed)}"
        if known:
            line += f" ({known} declared as known bug(s))"
        return line, None
    if doc["run"].get("error"):
        return "ERROR", str(doc["run"]["error"])
    errs = error_clauses(doc)
    if errs:
        profiles = [p for p in doc["profiles"]["defined"] if verd[p]["verdict"] == "error"]
        line = f"ERROR: {len(errs)} clause(s) could not be decided in profiles {', '.join(profiles)}"
        return line, f"{errs[0]['id']}: {errs[0]['message']}"
    loose = unattributed_failures(doc)
    if loose:
        first = loose[0]
        return (f"ERROR: {len(loose)} test(s) failed without naming a clause",
                f"{first['nodeid']}: {first['message'] or first['outcome']}")
    if anonymous_adapter(doc):
        return "ERROR: the adapter did not identify itself (no name or version from its handshake)", None
    return "ERROR", "unknown cause"


def incomplete_line(inc: Mapping[str, Any]) -> str:
    """``INCOMPLETE: <why>; ran 120 of 250 tests, 10 of 26 crash points (73 crash windows)``."""
    t, w = inc["tests"], inc["crash_windows"]
    covered = f"ran {t['finished']} of {t['planned']} tests"
    if w["points_planned"]:
        covered += f", {w['points_finished']} of {w['points_planned']} crash points ({w['finished']} crash windows"
        covered += f" of {w['planned']})" if w.get("planned") is not None else ")"
    return f"INCOMPLETE: {one_line(inc['message'], 200)}; {covered}"


def verdict_line(doc: Mapping[str, Any]) -> str:
    """``CERTIFIED for profiles core, lease`` / ``NOT CERTIFIED: N clause(s) failed in profiles ...`` /
    ``ERROR: ...`` / ``INCOMPLETE: ...`` -- plain text; each renderer escapes it for its output."""
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
        if clause_id in w["clauses"] and w["verdict"] != "pass":
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
