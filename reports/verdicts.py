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

TEST_OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "not_offered")
CLAUSE_OUTCOMES = ("pass", "fail", "error", "xfail", "not_offered", "not_claimed", "not_requested")
PROFILE_VERDICTS = ("certified", "failed", "not_offered", "error", "not_claimed", "not_requested")
SEVERITIES = ("unsafe", "violation", "not_offered", "warning")  # findings, most severe first
# safety anomaly classes (docs/safety.md) in the words of a verdict line, most severe first
ANOMALY_WORDS = {
    "lost_work": "loses work", "duplicate_effect": "runs work twice", "split_ownership": "two owners at once",
    "stale_write_accepted": "accepts stale writes", "terminal_changed": "changes finished work",
    "stuck_work": "strands work",
}
# operations whose absence a reader knows by another name
LACK_WORDS = {"events": "event trail"}
# a crash window's verdict as evidence about its clauses; "permitted" (what happened is allowed by
# the adapter's declaration, not by the contract: an effect run again under at-least-once, an item
# brought back only by an operator under reclaim: operator) fails nothing, and is rendered with a
# mark of its own, never as a pass
WINDOW_VERDICTS = {"pass": "passed", "permitted": "passed", "fail": "failed", "error": "error"}
WINDOW_OK = ("pass", "permitted")  # window verdicts that are not a failure or an error
EXIT_CODES = {"CERTIFIED": 0, "NOT CERTIFIED": 1, "ERROR": 2, "INCOMPLETE": 2}
NO_TEST = "no test produced a result"
SLOWEST = 10


@dataclass(frozen=True)
class Evidence:
    """One test, or one crash window, as evidence about one clause."""

    nodeid: str
    outcome: str  # one of TEST_OUTCOMES
    not_claimed: bool = False
    not_offered: tuple[str, ...] = ()
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
            not_offered=tuple(t.get("not_offered") or ()),
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
    then any failure (a strict expected failure that passed counts as one) decides "fail"; a
    declared known bug comes next, then a test that met an operation the implementation does not
    offer ("not_offered": the clause was not judged, and it is never a failure).
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
    if any(e.outcome == "not_offered" for e in ran):
        return "not_offered", "not offered: " + ", ".join(lacks_of(ran))
    return "pass", None


def lacks_of(evs: Iterable[Evidence]) -> list[str]:
    """The operations (variants) that tests of a clause found not offered, sorted."""
    return sorted({op for e in evs if e.outcome == "not_offered" for op in e.not_offered})


def _counts(evs: Sequence[Evidence]) -> dict[str, int]:
    c = {o: 0 for o in TEST_OUTCOMES}
    for e in evs:
        c[e.outcome] += 1
    return {"tests": len(evs), "passed": c["passed"], "failed": c["failed"], "errors": c["error"],
            "skipped": c["skipped"], "xfailed": c["xfailed"], "xpassed": c["xpassed"], "not_offered": c["not_offered"]}


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
        rec.update(outcome=outcome, message=message, lacks=lacks_of(evs) if outcome == "not_offered" else [])
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
        lacking = [c for c in by["not_offered"] if c["level"] == "MUST"]
        warnings = [c["id"] for c in mine if c["outcome"] in ("fail", "xfail", "not_offered") and c["level"] != "MUST"]
        if p not in requested:
            verdict = "not_requested"
        elif p not in claimed:
            verdict = "not_claimed"
        elif by["error"]:
            verdict = "error"
        elif blocking:
            verdict = "failed"
        elif lacking:
            verdict = "not_offered"
        else:
            verdict = "certified"
        out[p] = {"verdict": verdict, "clauses": len(mine), "passed": len(by["pass"]), "failed": len(by["fail"]),
                  "errors": len(by["error"]), "xfailed": len(by["xfail"]), "not_claimed": len(by["not_claimed"]),
                  "not_offered": len(by["not_offered"]),
                  "lacks": sorted({op for c in lacking for op in c["lacks"]}), "warnings": warnings}
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
    if not in_scope or any(verdicts[p]["verdict"] in ("failed", "not_offered") for p in in_scope):
        return "NOT CERTIFIED", []
    return "CERTIFIED", in_scope


def whole_set(doc: Mapping[str, Any]) -> str | None:
    """The name of the recorded profile set that lists every defined profile (the whole contract)."""
    every = set(doc["profiles"]["defined"])
    return next((n for n, m in (doc["profiles"].get("sets") or {}).items() if set(m) == every), None)


def in_scope(doc: Mapping[str, Any]) -> list[str]:
    """Profiles that were requested and that the adapter claims, in contract order."""
    prof = doc["profiles"]
    return [p for p in prof["defined"] if p in prof["requested"] and p in prof["claimed"]]


def anomaly_counts(doc: Mapping[str, Any]) -> dict[str, int]:
    """Safety anomalies of the run's safety campaigns by class, most severe class first."""
    counts: dict[str, int] = {}
    for camp in doc.get("safety") or []:
        summary = camp.get("summary")
        pairs = summary.items() if isinstance(summary, Mapping) and summary else \
            [(a["class"], 1) for a in camp.get("anomalies") or []]
        for kind, n in pairs:
            counts[str(kind)] = counts.get(str(kind), 0) + int(n)
    rank = {k: i for i, k in enumerate(ANOMALY_WORDS)}
    return dict(sorted(counts.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))


def lack_words(what: str) -> str:
    """An operation that is not offered, as a verdict line names it (``events`` is the event trail)."""
    return LACK_WORDS.get(what, what)


def findings(doc: Mapping[str, Any], clauses: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Everything a reader should know, most severe first: safety anomalies (the work itself went
    wrong), contract violations (MUST clauses failed or declared known bugs), operations not
    offered (with the clauses they keep from being judged), then SHOULD clauses not met.  Only
    profiles in scope count, except for anomalies, which the safety campaign finds whatever is claimed."""
    scope = set(in_scope(doc))
    out: list[dict[str, Any]] = []
    blamed: dict[str, set[str]] = {}
    for camp in doc.get("safety") or []:
        for a in camp.get("anomalies") or []:
            blamed.setdefault(str(a["class"]), set()).add(str(a["clause"]))
    for kind, n in anomaly_counts(doc).items():
        out.append({"severity": "unsafe", "what": kind, "words": ANOMALY_WORDS.get(kind, kind.replace("_", " ")),
                    "count": n, "clauses": sorted(blamed.get(kind, ())), "message": None})
    mine = [c for c in clauses if c["profile"] in scope]
    for c in mine:
        if c["level"] == "MUST" and c["outcome"] in ("fail", "xfail"):
            out.append({"severity": "violation", "what": c["id"], "words": "known bug" if c["outcome"] == "xfail" else "failed",
                        "count": 1, "clauses": [c["id"]], "message": c["message"]})
    lacking: dict[str, list[str]] = {}
    for c in mine:
        if c["level"] == "MUST" and c["outcome"] == "not_offered":
            for op in c["lacks"]:
                lacking.setdefault(op, []).append(c["id"])
    for op, ids in sorted(lacking.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        out.append({"severity": "not_offered", "what": op, "words": lack_words(op), "count": len(ids),
                    "clauses": ids, "message": None})
    for c in mine:
        if c["level"] != "MUST" and c["outcome"] in ("fail", "xfail", "not_offered"):
            out.append({"severity": "warning", "what": c["id"], "words": c["outcome"].replace("_", " "), "count": 1,
                        "clauses": [c["id"]], "message": c["message"]})
    return out


def incomplete_line(inc: Mapping[str, Any]) -> str:
    """``INCOMPLETE: <why>; ran 120 of 250 tests, 10 of 26 crash points (73 crash windows)``."""
    from .text import one_line

    t, w = inc["tests"], inc["crash_windows"]
    covered = f"ran {t['finished']} of {t['planned']} tests"
    if w["points_planned"]:
        covered += f", {w['points_finished']} of {w['points_planned']} crash points ({w['finished']} crash windows"
        covered += f" of {w['planned']})" if w.get("planned") is not None else ")"
    return f"INCOMPLETE: {one_line(inc['message'], 200)}; {covered}"


def _listed(ids: Sequence[str], limit: int = 3) -> str:
    return ", ".join(ids[:limit]) + (", ..." if len(ids) > limit else "")


def headline(doc: Mapping[str, Any], clauses: Sequence[Mapping[str, Any]], found: Sequence[Mapping[str, Any]], verdict: str,
             verdicts: Mapping[str, Mapping[str, Any]], certified: Sequence[str]) -> str:
    """The one verdict line every renderer shows, made only of contract names and counts:

    ``INCOMPLETE: ...`` (first of all) / ``ERROR: ...`` / ``UNSAFE: loses work (2), runs work twice
    (5); 3 contract violations (...); lacks: event trail`` / ``NOT CERTIFIED: 3 contract violations
    (...); lacks: event trail, cancel`` / ``SAFE; lacks: event trail`` (the safety campaign found
    nothing, nothing was violated, some operations are not offered) / ``CERTIFIED for profiles ...``."""
    if verdict == "INCOMPLETE":
        return incomplete_line(doc["run"]["incomplete"])
    if verdict == "ERROR":
        return _error_line(doc, clauses, verdicts)
    unsafe = [f for f in found if f["severity"] == "unsafe"]
    violations = [f["what"] for f in found if f["severity"] == "violation"]
    lacks = [f["words"] for f in found if f["severity"] == "not_offered"]
    warnings = [f for f in found if f["severity"] == "warning"]
    tail = []
    if violations:
        known = sum(1 for f in found if f["severity"] == "violation" and f["words"] == "known bug")
        tail.append(f"{len(violations)} contract violation{'s' if len(violations) != 1 else ''} ({_listed(violations)})"
                    + (f", {known} declared as known bug{'s' if known != 1 else ''}" if known else ""))
    if lacks:
        tail.append("lacks: " + ", ".join(lacks))
    if unsafe:
        line = "UNSAFE: " + ", ".join(f"{f['words']} ({f['count']})" for f in unsafe)
        return "; ".join([line, *tail])
    if verdict == "CERTIFIED":
        line = f"CERTIFIED for profiles {', '.join(certified)}"
        whole = whole_set(doc)
        if whole is not None and set(certified) == set(doc["profiles"]["defined"]):
            line += f" (the whole contract: {whole})"
        if warnings:
            line += f" ({len(warnings)} SHOULD clause(s) not met)"
        return line
    if not in_scope(doc):
        requested = ", ".join(doc["profiles"]["requested"]) or "none"
        return f"NOT CERTIFIED: the adapter claims none of the requested profiles ({requested})"
    safe = bool(doc.get("safety")) and not violations
    if safe:
        return "; ".join(["SAFE", *tail])
    return "NOT CERTIFIED: " + "; ".join(tail) if tail else "NOT CERTIFIED"


def _error_line(doc: Mapping[str, Any], clauses: Sequence[Mapping[str, Any]],
                verdicts: Mapping[str, Mapping[str, Any]]) -> str:
    """The ERROR verdict in contract names and counts (renderers add the adapter's own detail)."""
    if doc["run"].get("error"):
        return "ERROR"
    scope = set(in_scope(doc))
    errs = [c for c in clauses if c["profile"] in scope and c["outcome"] == "error"]
    if errs:
        profiles = [p for p in doc["profiles"]["defined"] if verdicts[p]["verdict"] == "error"]
        return f"ERROR: {len(errs)} clause(s) could not be decided in profiles {', '.join(profiles)}"
    loose = unattributed_failures(doc)
    if loose:
        return f"ERROR: {len(loose)} test(s) failed without naming a clause"
    if anonymous_adapter(doc):
        return "ERROR: the adapter did not identify itself (no name or version from its handshake)"
    return "ERROR"


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
    found = findings(doc, clauses)
    return {"clauses": clauses, "verdicts": verdicts, "verdict": verdict, "certified_profiles": certified,
            "exit_code": EXIT_CODES[verdict], "timings": timings(doc), "findings": found,
            "verdict_line": headline(doc, clauses, found, verdict, verdicts, certified)}


def verdict_line(doc: Mapping[str, Any]) -> str:
    """The one verdict line of a results document (see :func:`headline`): what every renderer shows
    and the published matrices list.  A document written before the line was recorded gets it
    derived from its facts."""
    line = doc.get("verdict_line")
    return line if isinstance(line, str) and line else derive(doc)["verdict_line"]


def apply(doc: dict[str, Any]) -> dict[str, Any]:
    """Write the derived members into ``doc`` (in place) and return it."""
    d = derive(doc)
    doc["clauses"] = d["clauses"]
    doc["profiles"]["verdicts"] = d["verdicts"]
    doc["verdict"] = d["verdict"]
    doc["certified_profiles"] = d["certified_profiles"]
    doc["exit_code"] = d["exit_code"]
    doc["timings"] = d["timings"]
    doc["findings"] = d["findings"]
    doc["verdict_line"] = d["verdict_line"]
    return doc
