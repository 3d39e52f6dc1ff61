"""How outcomes of tests and crash windows become clause outcomes, profile verdicts and one verdict.

Everything here is a pure function of the results document's recorded facts (the clause list, the
tests, the crash windows, which profiles were requested and claimed, a run-level error); the
derived members of the document (`clauses[*].outcome` and counts, `profiles.verdicts`,
`verdict`, `certified_profiles`, `exit_code`, `timings`) are exactly what :func:`derive` returns.
`build_results`, `merge_results` and `validate_results` all go through it, so a document can
never be built one way and checked another.  docs/results.md states the same rules in prose.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

TEST_OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
CLAUSE_OUTCOMES = ("pass", "fail", "error", "xfail", "not_claimed", "not_requested")
PROFILE_VERDICTS = ("certified", "failed", "error", "not_claimed", "not_requested")
WINDOW_VERDICTS = {"pass": "passed", "fail": "failed", "error": "error"}
EXIT_CODES = {"CERTIFIED": 0, "NOT CERTIFIED": 1, "ERROR": 2, "INCOMPLETE": 2}
NO_TEST = "no test produced a result"
SLOWEST = 10


@dataclass(frozen=True)
class Evidence:
    """One test, or one crash window, as evidence about one clause."""

    nodeid: str
    outcome: str  # one of TEST_OUTCOMES
    not_claimed: bool = False
    message: str | None = None
    replay: str | None = None
    counterexample: str | None = None
    window: bool = False


def window_nodeid(w: Mapping[str, Any]) -> str:
    """A stable, readable name for a crash window, used where a test would show its node id."""
    mode = "" if w.get("mode", "kill") == "kill" else f"/{w['mode']}"
    sk = w.get("scan_kill")
    scan = f"@{sk[0]}#{sk[1]}" if sk else ""
    return f"crash-window::{w['point']}{mode}[{w['step_class']}]#{w['occurrence']}{scan}"


def window_key(w: Mapping[str, Any]) -> tuple[str, str, str, int, str]:
    sk = w.get("scan_kill")
    return (str(w["point"]), str(w.get("mode", "kill")), str(w["step_class"]), int(w["occurrence"]),
            f"{sk[0]}#{sk[1]}" if sk else "")


def evidence_by_clause(tests: Iterable[Mapping[str, Any]],
                       windows: Iterable[Mapping[str, Any]]) -> dict[str, list[Evidence]]:
    out: dict[str, list[Evidence]] = {}
    for t in tests:
        if t["clause"] is None:  # a test that names no clause is evidence for none
            continue
        out.setdefault(t["clause"], []).append(Evidence(
            nodeid=t["nodeid"], outcome=t["outcome"], not_claimed=bool(t.get("not_claimed")),
            message=t.get("message"), replay=t.get("replay"), counterexample=t.get("counterexample")))
    for w in windows:
        ev = Evidence(nodeid=window_nodeid(w), outcome=WINDOW_VERDICTS[w["verdict"]], message=w.get("message"),
                      replay=w.get("replay"), window=True)
        for cid in w["clauses"]:
            out.setdefault(cid, []).append(ev)
    return out


def _first_message(evs: Sequence[Evidence], outcomes: tuple[str, ...], default: str) -> str:
    for e in evs:
        if e.outcome in outcomes:
            text = e.message or default
            return f"{e.nodeid}: {text}"
    return default


def clause_outcome(evs: Sequence[Evidence], *, profile: str, requested: bool, claimed: bool,
                   known_bug: str | None = None) -> tuple[str, str | None]:
    """The outcome of one clause from its evidence, and a short message for anything but a pass.

    The order of the rules matters: an error anywhere means the clause could not be decided,
    then any failure (a strict expected failure that passed counts as one) decides "fail".
    """
    if any(e.outcome == "error" for e in evs):
        return "error", _first_message(evs, ("error",), "error")
    if any(e.outcome == "failed" for e in evs):
        return "fail", _first_message(evs, ("failed",), "failed")
    if any(e.outcome == "xpassed" for e in evs):
        first = next(e for e in evs if e.outcome == "xpassed")
        return "fail", f"{first.nodeid}: passed although the adapter declares it a known bug"
    ran = [e for e in evs if e.outcome != "skipped"]
    if not ran:
        if not requested:
            return "not_requested", None
        if not claimed:
            return "not_claimed", None
        if not evs:
            return "error", NO_TEST
        if all(e.not_claimed for e in evs):
            return "error", (f"{NO_TEST}: {len(evs)} test(s) skipped as not claimed, "
                             f"but the adapter claims profile {profile}")
        return "error", f"{NO_TEST}: all {len(evs)} test(s) skipped; " + _first_message(evs, ("skipped",), "skipped")
    if any(e.outcome == "xfailed" for e in ran):
        if known_bug:
            return "xfail", f"known bug: {known_bug}"
        return "xfail", _first_message(ran, ("xfailed",), "expected failure")
    return "pass", None


def _counts(evs: Sequence[Evidence]) -> dict[str, int]:
    c = {o: 0 for o in TEST_OUTCOMES}
    for e in evs:
        c[e.outcome] += 1
    return {"tests": len(evs), "passed": c["passed"], "failed": c["failed"], "errors": c["error"],
            "skipped": c["skipped"], "xfailed": c["xfailed"], "xpassed": c["xpassed"]}


def derive_clauses(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    prof = doc["profiles"]
    requested, claimed = set(prof["requested"]), set(prof["claimed"])
    known = doc["adapter"].get("known_bugs") or {}
    evidence = evidence_by_clause(doc["tests"], doc["crash_windows"])
    out = []
    for c in doc["clauses"]:
        evs = evidence.get(c["id"], [])
        outcome, message = clause_outcome(evs, profile=c["profile"], requested=c["profile"] in requested,
                                          claimed=c["profile"] in claimed, known_bug=known.get(c["id"]))
        rec = {k: c[k] for k in ("id", "profile", "level", "statement", "source")}
        rec.update(_counts(evs))
        rec.update(outcome=outcome, message=message)
        out.append(rec)
    return out


def profile_verdicts(doc: Mapping[str, Any], clauses: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    prof = doc["profiles"]
    requested, claimed = set(prof["requested"]), set(prof["claimed"])
    out: dict[str, dict[str, Any]] = {}
    for p in prof["defined"]:
        mine = [c for c in clauses if c["profile"] == p]
        by = {o: [c for c in mine if c["outcome"] == o] for o in CLAUSE_OUTCOMES}
        blocking = [c for c in by["fail"] + by["xfail"] if c["level"] == "MUST"]
        warnings = [c["id"] for c in mine if c["outcome"] in ("fail", "xfail") and c["level"] != "MUST"]
        if p not in requested:
            verdict = "not_requested"
        elif p not in claimed:
            verdict = "not_claimed"
        elif by["error"]:
            verdict = "error"
        elif blocking:
            verdict = "failed"
        else:
            verdict = "certified"
        out[p] = {"verdict": verdict, "clauses": len(mine), "passed": len(by["pass"]), "failed": len(by["fail"]),
                  "errors": len(by["error"]), "xfailed": len(by["xfail"]), "not_claimed": len(by["not_claimed"]),
                  "warnings": warnings}
    return out


def unattributed_failures(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Tests that failed or errored without naming the clause they found violated."""
    return [t for t in doc["tests"] if t["clause"] is None and t["outcome"] in ("failed", "error", "xpassed")]


def anonymous_adapter(doc: Mapping[str, Any]) -> bool:
    """The adapter never said what it is: nothing can be certified about it."""
    return doc["adapter"].get("name") is None or doc["adapter"].get("version") is None


def overall(doc: Mapping[str, Any], verdicts: Mapping[str, Mapping[str, Any]]) -> tuple[str, list[str]]:
    prof = doc["profiles"]
    in_scope = [p for p in prof["defined"] if p in prof["requested"] and p in prof["claimed"]]
    if doc["run"].get("incomplete"):  # first: a run that did not finish decides nothing
        return "INCOMPLETE", []
    if (doc["run"].get("error") or any(v["verdict"] == "error" for v in verdicts.values())
            or unattributed_failures(doc) or anonymous_adapter(doc)):
        return "ERROR", []
    if not in_scope or any(verdicts[p]["verdict"] == "failed" for p in in_scope):
        return "NOT CERTIFIED", []
    return "CERTIFIED", in_scope


def timings(doc: Mapping[str, Any]) -> dict[str, Any]:
    items: list[tuple[str, str, float]] = [(t["nodeid"], t["kind"], float(t["duration_s"])) for t in doc["tests"]]
    items += [(window_nodeid(w), "crash_window", float(w["duration_s"])) for w in doc["crash_windows"]]
    by_kind: dict[str, dict[str, Any]] = {}
    for _, kind, d in items:
        k = by_kind.setdefault(kind, {"count": 0, "duration_s": 0.0})
        k["count"] += 1
        k["duration_s"] += d
    for k in by_kind.values():
        k["duration_s"] = round(k["duration_s"], 6)
    slowest = sorted(items, key=lambda i: (-i[2], i[0]))[:SLOWEST]
    return {"total_s": round(float(doc["run"]["duration_s"]), 6),
            "tests_s": round(sum(d for _, _, d in items), 6),
            "by_kind": by_kind,
            "slowest": [{"nodeid": n, "duration_s": d} for n, _, d in slowest]}


def derive(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The derived members of a results document, computed from its recorded facts."""
    clauses = derive_clauses(doc)
    verdicts = profile_verdicts(doc, clauses)
    verdict, certified = overall(doc, verdicts)
    return {"clauses": clauses, "verdicts": verdicts, "verdict": verdict, "certified_profiles": certified,
            "exit_code": EXIT_CODES[verdict], "timings": timings(doc)}


def apply(doc: dict[str, Any]) -> dict[str, Any]:
    """Write the derived members into ``doc`` (in place) and return it."""
    d = derive(doc)
    doc["clauses"] = d["clauses"]
    doc["profiles"]["verdicts"] = d["verdicts"]
    doc["verdict"] = d["verdict"]
    doc["certified_profiles"] = d["certified_profiles"]
    doc["exit_code"] = d["exit_code"]
    doc["timings"] = d["timings"]
    return doc
