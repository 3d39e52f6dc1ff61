"""How outcomes of tests and crash windows become clause outcomes, profile verdicts and one verdict.

Everything here is a pure function of the results document's recorded facts (the clause list, the
tests and what they exercised, the crash windows, the safety campaigns, which profiles were
requested and claimed, a run-level error, the coverage plan); the derived members of the document
(`clauses[*].outcome` and counts, `profiles.verdicts`, `verdict`, `certified_profiles`,
`exit_code`, `timings`, `findings`, `verdict_line`, `coverage` but its plan) are exactly what
:func:`derive` returns.
`build_results`, `merge_results` and `validate_results` all go through it, so a document can
never be built one way and checked another.  docs/results.md states the same rules in prose.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ledgercheck.spec.contract import IMPACTS

TEST_OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "not_offered")
CLAUSE_OUTCOMES = ("pass", "fail", "error", "xfail", "not_offered", "not_run", "not_claimed", "not_requested")
PROFILE_VERDICTS = ("certified", "failed", "not_offered", "inconclusive", "error", "not_claimed", "not_requested")
SEVERITIES = ("unsafe", "violation", "not_offered", "not_reached", "warning")  # findings, most severe first
# a clause's impact (what a violation does to a user's work, spec.contract.IMPACTS) as a verdict line counts it
IMPACT_WORDS = {"ownership": "ownership", "integrity": "integrity", "behaviour": "behaviour",
                "validation": "input validation", "reporting": "reporting"}
# what a planned transition came to in a run (docs/results.md, "Coverage")
MOVE_STATES = ("reached", "missing", "not_offered", "out_of_scope")
HEADLINED = 3  # contract violations a verdict line names in words; the rest are counted by impact
# safety anomaly classes (docs/safety.md) in the words of a verdict line, most severe first
ANOMALY_WORDS = {
    "lost_work": "loses work", "duplicate_effect": "runs work twice", "split_ownership": "two owners at once",
    "stale_write_accepted": "accepts stale writes", "terminal_changed": "changes finished work",
    "stuck_work": "strands work", "refused_but_applied": "does what it said it refused",
}
# operations whose absence a reader knows by another name
LACK_WORDS = {"events": "event trail"}
# a crash window's verdict as evidence about its clauses; "permitted" (what happened is allowed by
# the adapter's declaration, not by the contract: an effect run again under at-least-once, an item
# brought back only by an operator under reclaim: operator) fails nothing, and is rendered with a
# mark of its own, never as a pass
WINDOW_VERDICTS = {"pass": "passed", "permitted": "passed", "fail": "failed", "error": "error"}
WINDOW_OK = ("pass", "permitted")  # window verdicts that are not a failure or an error
EXIT_CODES = {"CERTIFIED": 0, "NOT CERTIFIED": 1, "ERROR": 2, "INCOMPLETE": 2, "INCONCLUSIVE": 2}
NO_TEST = "no test produced a result"
# what a results document copies of each clause from the contract (the rest of a clause record is derived)
CLAUSE_FACTS = ("id", "profile", "level", "impact", "headline", "statement", "source")
NOT_RUN = "no case of it ran in this run (deselected, or in another shard)"
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
                   known_bug: str | None = None, coverage: bool = False) -> tuple[str, str | None]:
    """The outcome of one clause from its evidence, and a short message for anything but a pass.

    The order of the rules matters: an error anywhere means the clause could not be decided,
    then any failure (a strict expected failure that passed counts as one) decides "fail"; a
    declared known bug comes next, then a test that met an operation the implementation does not
    offer ("not_offered": the clause was not judged, and it is never a failure).  In a run that
    records its coverage (``coverage``), a clause of a profile under certification that no test
    or crash window gave evidence about at all was not run ("not_run": deselected, or left to
    another shard); without that record it is an error, as a run that does not say what it
    planned cannot tell a deselected clause from one nothing checks.
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
            return ("not_run", NOT_RUN) if coverage else ("error", NO_TEST)
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
    recorded = coverage_recorded(doc)
    out = []
    for c in doc["clauses"]:
        evs = evidence.get(c["id"], [])
        outcome, message = clause_outcome(evs, profile=c["profile"], requested=c["profile"] in requested,
                                          claimed=c["profile"] in claimed, known_bug=known.get(c["id"]),
                                          coverage=recorded)
        rec = {k: c[k] for k in CLAUSE_FACTS if k in c}
        rec.update(_counts(evs))
        rec.update(outcome=outcome, message=message, lacks=lacks_of(evs) if outcome == "not_offered" else [])
        out.append(rec)
    return out


def profile_verdicts(doc: Mapping[str, Any], clauses: Sequence[Mapping[str, Any]],
                     cov: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Each profile's verdict; ``cov``: the run's coverage (:func:`coverage`), whose gaps make a
    profile that would certify inconclusive."""
    prof = doc["profiles"]
    requested, claimed = set(prof["requested"]), set(prof["claimed"])
    gaps = (cov or {}).get("profiles") or {}
    out: dict[str, dict[str, Any]] = {}
    for p in prof["defined"]:
        mine = [c for c in clauses if c["profile"] == p]
        by = {o: [c for c in mine if c["outcome"] == o] for o in CLAUSE_OUTCOMES}
        blocking = [c for c in by["fail"] + by["xfail"] if c["level"] == "MUST"]
        lacking = [c for c in by["not_offered"] if c["level"] == "MUST"]
        warnings = [c["id"] for c in mine if c["outcome"] in ("fail", "xfail", "not_offered") and c["level"] != "MUST"]
        gap = gaps.get(p) or {}
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
        elif by["not_run"] or gap.get("missing"):
            verdict = "inconclusive"
        else:
            verdict = "certified"
        out[p] = {"verdict": verdict, "clauses": len(mine), "passed": len(by["pass"]), "failed": len(by["fail"]),
                  "errors": len(by["error"]), "xfailed": len(by["xfail"]), "not_claimed": len(by["not_claimed"]),
                  "not_offered": len(by["not_offered"]), "not_run": len(by["not_run"]),
                  "lacks": sorted({op for c in lacking for op in c["lacks"]}), "warnings": warnings}
    return out


def unattributed_failures(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Tests that failed or errored without naming the clause they found violated."""
    return [t for t in doc["tests"] if t["clause"] is None and t["outcome"] in ("failed", "error", "xpassed")]


def anonymous_adapter(doc: Mapping[str, Any]) -> bool:
    """The adapter never said what it is: nothing can be certified about it."""
    return doc["adapter"].get("name") is None or doc["adapter"].get("version") is None


def inconclusive_campaigns(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The safety campaigns that found no anomaly but did not reach what their verdict needs
    (their ``verdict`` is "inconclusive", their ``missing`` says what was not reached)."""
    return [c for c in doc.get("safety") or [] if c.get("verdict") == "inconclusive"]


def overall(doc: Mapping[str, Any], verdicts: Mapping[str, Mapping[str, Any]]) -> tuple[str, list[str]]:
    """INCOMPLETE > ERROR > NOT CERTIFIED (a definite failure) > INCONCLUSIVE > CERTIFIED."""
    prof = doc["profiles"]
    in_scope = [p for p in prof["defined"] if p in prof["requested"] and p in prof["claimed"]]
    inc = doc["run"].get("incomplete")
    # a run stopped by -x/--maxfail after a failure found that failure: NOT CERTIFIED (or ERROR),
    # never certified; any other run that did not finish decides nothing
    if inc and inc.get("reason") != "stopped_after_failure":
        return "INCOMPLETE", []
    if (doc["run"].get("error") or any(v["verdict"] == "error" for v in verdicts.values())
            or unattributed_failures(doc) or anonymous_adapter(doc)):
        return "ERROR", []
    if inc or not in_scope or any(verdicts[p]["verdict"] in ("failed", "not_offered") for p in in_scope):
        return "NOT CERTIFIED", []
    if any(verdicts[p]["verdict"] == "inconclusive" for p in in_scope) or inconclusive_campaigns(doc):
        return "INCONCLUSIVE", []
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


# ---- coverage -------------------------------------------------------------------------------------


def coverage_recorded(doc: Mapping[str, Any]) -> bool:
    """Whether the run recorded what it exercised (a ``coverage`` plan, written by the plugin)."""
    cov = doc.get("coverage")
    return isinstance(cov, Mapping) and isinstance(cov.get("plan"), Mapping)


def move_label(src: str, op: str, dst: str) -> str:
    """A transition as reports name it: ``running -expire-> timeout``."""
    return f"{src} -{op}-> {dst}"


def _move(text: str) -> tuple[str, str, str]:
    src, op, dst = text.split(" ")
    return src, op, dst


def _closure(start: Iterable[str], moves: Iterable[tuple[str, str, str]]) -> set[str]:
    """The statuses reachable from ``start`` along ``moves``."""
    moves = list(moves)
    seen = set(start)
    grew = True
    while grew:
        grew = False
        for src, _op, dst in moves:
            if src in seen and dst not in seen:
                seen.add(dst)
                grew = True
    return seen


def coverage(doc: Mapping[str, Any], clauses: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """What the run exercised, from its tests' records (``exercised``), its crash windows and the
    plan (docs/results.md, "Coverage"); None for a run that recorded no plan.

    Every (from, operation, to) of the contract's transition table is *reached* when a test saw
    the model and the implementation agree on that move; *not offered* when a call that would
    have made it was answered ``unsupported``, when its operation (or every operation that makes
    its guard hold) was found not offered, or when its from-status is reached only through moves
    not offered; *out of scope* when its operation's profile is not requested and claimed, or the
    profiles in scope cannot take work to its from-status; *missing* otherwise."""
    if not coverage_recorded(doc):
        return None
    plan = doc["coverage"]["plan"]
    prof = doc["profiles"]
    requested, claimed = set(prof["requested"]), set(prof["claimed"])
    scope = requested & claimed
    owner: Mapping[str, str | None] = plan["operations"]
    setters: Mapping[str, Sequence[str]] = plan["guards"]
    reached: Counter[tuple[str, str, str]] = Counter()
    refused_unoffered: set[tuple[str, str, str]] = set()
    calls: dict[tuple[str | None, str], list[int]] = {}
    labels: set[str] = set()  # operations (variants) some test found not offered
    for t in doc["tests"]:
        labels.update(t.get("not_offered") or ())
        ex = t.get("exercised")
        if not ex:
            continue
        reached.update({_move(m) for m in ex["transitions"]})
        refused_unoffered.update(_move(m) for m in ex["not_offered"])
        for call in ex["calls"]:
            status, op, answer = call.split(" ")
            calls.setdefault((None if status == "-" else status, op), [0, 0])[0 if answer == "accepted" else 1] += 1
    first = prof["defined"][0]

    def profile_of(op: str) -> str:
        return owner.get(op) or first

    def in_scope(op: str) -> bool:
        return profile_of(op) in scope

    table = [(t["from"], op, t["to"], t["guard"]) for t in doc["spec"]["transitions"] for op in t["ops"]]
    usable = [m for m in table if in_scope(m[1]) and (m[3] is None or any(in_scope(g) for g in setters.get(m[3], ())))]

    def offered(m: tuple[str, str, str, str | None]) -> bool:
        src, op, dst, guard = m
        if (src, op, dst) in reached:
            return True
        if (src, op, dst) in refused_unoffered or op in labels:
            return False
        return guard is None or any(in_scope(g) and g not in labels for g in setters.get(guard, ()))

    initial = [s["name"] for s in doc["spec"]["statuses"] if s["initial"]]
    can = _closure(initial, [m[:3] for m in usable])
    open_to = _closure(initial, [m[:3] for m in usable if offered(m)])
    rows: list[dict[str, Any]] = []
    for m in table:
        src, op, dst, _guard = m
        p = profile_of(op)
        if m not in usable or src not in can:
            state = "out_of_scope"
        elif (src, op, dst) in reached:
            state = "reached"
        elif not offered(m) or src not in open_to:
            state = "not_offered"
        else:
            state = "missing"
        rows.append({"from": src, "operation": op, "to": dst, "profile": p, "state": state,
                     "tests": reached.get((src, op, dst), 0)})
    profiles: dict[str, dict[str, Any]] = {}
    for p in prof["defined"]:
        if p not in scope:
            continue
        mine = [r for r in rows if r["profile"] == p and r["state"] != "out_of_scope"]
        own = [c for c in clauses if c["profile"] == p]
        profiles[p] = {
            "transitions": len(mine),
            "reached": sum(1 for r in mine if r["state"] == "reached"),
            "not_offered": sum(1 for r in mine if r["state"] == "not_offered"),
            "missing": [move_label(r["from"], r["operation"], r["to"]) for r in mine if r["state"] == "missing"],
            "clauses": len(own),
            "clauses_run": sum(1 for c in own if c["tests"] - c["skipped"] > 0),
            "not_run": [c["id"] for c in own if c["outcome"] == "not_run"],
        }
    order = {s["name"]: i for i, s in enumerate(doc["spec"]["statuses"])}
    states_ops = [{"status": s, "operation": op, "accepted": n[0], "refused": n[1]}
                  for (s, op), n in sorted(calls.items(), key=lambda kv: (order.get(kv[0][0] or "", -1), kv[0][1]))]
    points: dict[str, dict[str, int]] = {}
    for name in list(plan.get("crash_points") or []) + list(doc["adapter"].get("crash_points") or []):
        points.setdefault(str(name), {"kill": 0, "takeover": 0, "scan-kill": 0, "failed": 0, "permitted": 0})
    for w in doc["crash_windows"]:
        pt = points.setdefault(str(w["point"]), {"kill": 0, "takeover": 0, "scan-kill": 0, "failed": 0, "permitted": 0})
        pt[str(w.get("mode", "kill"))] = pt.get(str(w.get("mode", "kill")), 0) + 1
        pt["failed"] += w["verdict"] not in WINDOW_OK  # failed or errored
        pt["permitted"] += w["verdict"] == "permitted"
    return {
        "transitions": rows,
        "states_operations": states_ops,
        "clause_cases": {c["id"]: c["tests"] - c["skipped"] for c in clauses if c["profile"] in scope},
        "crash_points": [{"point": k, **v} for k, v in points.items()],
        "profiles": profiles,
    }


def not_reached(cov: Mapping[str, Any] | None, doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What a run did not reach, one finding per profile in scope with gaps (transitions missing,
    clauses without a case run) and one per safety campaign left inconclusive."""
    out: list[dict[str, Any]] = []
    for p, g in ((cov or {}).get("profiles") or {}).items():
        if not g["missing"] and not g["not_run"]:
            continue
        words = []
        if g["missing"]:
            words.append(f"{len(g['missing'])} of {g['transitions']} transitions never reached")
        if g["not_run"]:
            words.append(f"no case run for {len(g['not_run'])} of {g['clauses']} clauses")
        out.append({"severity": "not_reached", "what": p, "words": f"{p}: " + ", ".join(words),
                    "count": len(g["missing"]) + len(g["not_run"]), "clauses": list(g["not_run"]),
                    "message": "; ".join(g["missing"]) or None, "impact": None, "known_bug": False})
    for camp in inconclusive_campaigns(doc):
        missing = [str(m) for m in camp.get("missing") or []] or ["the campaign did not say what it missed"]
        out.append({"severity": "not_reached", "what": "safety", "words": "the safety campaign: " + "; ".join(missing),
                    "count": len(missing), "clauses": [], "message": "; ".join(missing), "impact": None,
                    "known_bug": False})
    return out


def impact_rank(c: Mapping[str, Any]) -> int:
    """Where a clause's impact stands, most severe first (a clause recorded without one: behaviour)."""
    impact = c.get("impact") or "behaviour"
    return IMPACTS.index(impact) if impact in IMPACTS else len(IMPACTS)


def by_impact(clauses: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Clauses most severe impact first, in contract order within one impact."""
    return sorted(clauses, key=impact_rank)  # (sorted is stable: contract order within one impact)


VIOLATED = re.compile(r"^clause violated: ([a-z0-9_.]+(?:, [a-z0-9_.]+)*)$", re.M)


def blocked_by(doc: Mapping[str, Any], clause: str, failing: set[str]) -> list[str]:
    """The other clauses that stopped every failing test of ``clause`` before its own check ran
    (each test's failure names only them, and each of them fails on its own account), or [] when
    some evidence judges ``clause`` itself: a failure that names it, one that names no clause (an
    adapter error, a wrong answer shape), a failed crash window or an unexpected pass of a known bug."""
    others: set[str] = set()
    for t in doc.get("tests") or []:
        if t.get("clause") != clause or t.get("outcome") not in ("failed", "xpassed", "xfailed"):
            continue
        m = VIOLATED.search(t.get("message") or "")
        if t.get("outcome") != "failed" or m is None:
            return []
        named = set(m.group(1).split(", "))
        if clause in named:
            return []
        others |= named
    if any(clause in (w.get("clauses") or []) and WINDOW_VERDICTS.get(w.get("verdict"), "") == "failed"
           for w in doc.get("crash_windows") or []):
        return []
    return sorted(others) if others and others <= failing else []


def findings(doc: Mapping[str, Any], clauses: Sequence[Mapping[str, Any]],
             cov: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Everything a reader should know, most severe first: safety anomalies (the work itself went
    wrong), contract violations (MUST clauses failed or declared known bugs) by the impact the
    contract gives each clause (ownership, integrity, behaviour, validation, reporting), operations
    not offered (with the clauses they keep from being judged), what the run did not reach
    (``cov``, and safety campaigns left inconclusive), then SHOULD clauses not met.  Only profiles
    in scope count, except for anomalies, which the safety campaign finds whatever is claimed."""
    scope = set(in_scope(doc))
    out: list[dict[str, Any]] = []
    blamed: dict[str, set[str]] = {}
    for camp in doc.get("safety") or []:
        for a in camp.get("anomalies") or []:
            blamed.setdefault(str(a["class"]), set()).add(str(a["clause"]))
    for kind, n in anomaly_counts(doc).items():
        out.append({"severity": "unsafe", "what": kind, "words": ANOMALY_WORDS.get(kind, kind.replace("_", " ")),
                    "count": n, "clauses": sorted(blamed.get(kind, ())), "message": None, "impact": None,
                    "known_bug": False})
    mine = [c for c in clauses if c["profile"] in scope]
    failing = {c["id"] for c in clauses if c["outcome"] == "fail"}
    stopped: list[tuple[str, list[str]]] = []
    for c in by_impact([c for c in mine if c["level"] == "MUST" and c["outcome"] in ("fail", "xfail")]):
        others = blocked_by(doc, c["id"], failing) if c["outcome"] == "fail" else []
        if others:  # its own check never ran: not a finding about it, but about what stopped it
            stopped.append((c["id"], others))
            continue
        out.append({"severity": "violation", "what": c["id"], "words": c.get("headline") or f"breaks {c['id']}",
                    "count": 1, "clauses": [c["id"]], "message": c["message"], "impact": c.get("impact") or "behaviour",
                    "known_bug": c["outcome"] == "xfail"})
    lacking: dict[str, list[str]] = {}
    for c in mine:
        if c["level"] == "MUST" and c["outcome"] == "not_offered":
            for op in c["lacks"]:
                lacking.setdefault(op, []).append(c["id"])
    for op, ids in sorted(lacking.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        out.append({"severity": "not_offered", "what": op, "words": lack_words(op), "count": len(ids),
                    "clauses": ids, "message": None, "impact": None, "known_bug": False})
    if stopped:
        named = [f"{c} at {'/'.join(o)}" for c, o in stopped]
        out.append({"severity": "not_reached", "what": "blocked",
                    "words": f"{len(stopped)} clause{'s' if len(stopped) != 1 else ''} not judged: every test of "
                             f"{'them' if len(stopped) != 1 else 'it'} stopped at another clause's violation "
                             f"({_listed(named, 2)})",
                    "count": len(stopped), "clauses": [c for c, _ in stopped], "message": None, "impact": None,
                    "known_bug": False})
    out += not_reached(cov, doc)
    for c in by_impact([c for c in mine if c["level"] != "MUST" and c["outcome"] in ("fail", "xfail", "not_offered")]):
        out.append({"severity": "warning", "what": c["id"], "words": c["outcome"].replace("_", " "), "count": 1,
                    "clauses": [c["id"]], "message": c["message"], "impact": c.get("impact") or "behaviour",
                    "known_bug": c["outcome"] == "xfail"})
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


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def violation_words(violations: Sequence[Mapping[str, Any]], limit: int = HEADLINED) -> str:
    """Contract violations, worst first, as a verdict line says them: the first ``limit`` in the
    contract's plain words (``accepts a stale holder's writes (lease.fencing)``), the rest counted
    by impact (``; 23 more contract violations (2 integrity, 12 behaviour, 9 input validation)``)."""
    shown = [f"{f['words']} ({f['what']}{', known bug' if f.get('known_bug') else ''})" for f in violations[:limit]]
    text = ", ".join(shown)
    rest = violations[limit:]
    if rest:
        by = Counter(f.get("impact") or "behaviour" for f in rest)
        kinds = ", ".join(f"{by[i]} {IMPACT_WORDS.get(i, i)}" for i in (*IMPACTS, *sorted(set(by) - set(IMPACTS))) if by[i])
        text += f"; {len(rest)} more contract violation{'s' if len(rest) != 1 else ''} ({kinds})"
    known = sum(1 for f in rest if f.get("known_bug"))
    if known:
        text += f", {known} more declared as known bug{'s' if known != 1 else ''}"
    return text


def gap_words(cov: Mapping[str, Any] | None, doc: Mapping[str, Any], limit: int = HEADLINED) -> list[str]:
    """What the run did not reach, as a verdict line says it: transitions never reached, clauses no
    case of which ran, and what each inconclusive safety campaign missed."""
    out = []
    profiles = (cov or {}).get("profiles") or {}
    missing = list(dict.fromkeys(m for g in profiles.values() for m in g["missing"]))
    if missing:
        total = sum(g["transitions"] for g in profiles.values())
        out.append(f"{len(missing)} of {total} transitions never reached ({_listed(missing, limit)})")
    not_run = [c for g in profiles.values() for c in g["not_run"]]
    if not_run:
        total = sum(g["clauses"] for g in profiles.values())
        out.append(f"no case run for {len(not_run)} of {total} clauses ({_listed(not_run, limit)})")
    for camp in inconclusive_campaigns(doc):
        missing_there = [str(m) for m in camp.get("missing") or []] or ["it did not say what it missed"]
        out.append("the safety campaign: " + "; ".join(missing_there))
    return out


def headline(doc: Mapping[str, Any], clauses: Sequence[Mapping[str, Any]], found: Sequence[Mapping[str, Any]], verdict: str,
             verdicts: Mapping[str, Mapping[str, Any]], certified: Sequence[str],
             cov: Mapping[str, Any] | None = None) -> str:
    """The one verdict line every renderer shows, worst first, in the contract's plain words:

    ``INCOMPLETE: ...`` (first of all) / ``ERROR: ...`` / ``UNSAFE: loses work (2), runs work twice
    (5); accepts a stale holder's writes (lease.fencing), ...; lacks: event trail`` / ``NOT
    CERTIFIED: accepts a stale holder's writes (lease.fencing), changes finished work
    (core.terminal.immutable); 20 more contract violations (3 behaviour, 12 input validation, 5
    reporting); lacks: event trail, cancel; 2 of 21 transitions never reached (...)`` / ``SAFE;
    lacks: event trail`` (the safety campaign found nothing, nothing was violated, some operations
    are not offered) / ``INCONCLUSIVE: 2 of 21 transitions never reached (...); the safety
    campaign: no live holder was displaced`` / ``CERTIFIED for profiles ...``."""
    if verdict == "INCOMPLETE":
        return incomplete_line(doc["run"]["incomplete"])
    if verdict == "ERROR":
        return _error_line(doc, clauses, verdicts)
    unsafe = [f for f in found if f["severity"] == "unsafe"]
    violations = [f for f in found if f["severity"] == "violation"]
    lacks = [f["words"] for f in found if f["severity"] == "not_offered"]
    warnings = [f for f in found if f["severity"] == "warning"]
    gaps = gap_words(cov, doc) + [f["words"] for f in found if f["severity"] == "not_reached" and f["what"] == "blocked"]
    tail = []
    if violations:
        tail.append(violation_words(violations))
    if lacks:
        tail.append("lacks: " + ", ".join(lacks))
    tail += gaps
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
    if verdict == "INCONCLUSIVE":
        return "INCONCLUSIVE: " + "; ".join(tail)
    if not in_scope(doc):
        requested = ", ".join(doc["profiles"]["requested"]) or "none"
        return f"NOT CERTIFIED: the adapter claims none of the requested profiles ({requested})"
    inc = doc["run"].get("incomplete")
    if inc:  # stopped by -x/--maxfail: say what was not run
        t = inc["tests"]
        tail.append(f"stopped after the first failure(s) (-x/--maxfail): ran {t['finished']} of {t['planned']} tests")
    camps = doc.get("safety") or []
    safe = bool(camps) and not violations and all(c.get("verdict") == "pass" for c in camps)
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
    out = {"total_s": round(float(doc["run"]["duration_s"]), 6),
           "tests_s": round(sum(d for _, _, d in items), 6),
           "by_kind": by_kind,
           "slowest": [{"nodeid": n, "duration_s": d} for n, _, d in slowest]}
    phases = cost_phases(doc["tests"])
    if phases:
        out["phases"] = phases
    return out


COST_FIELDS = ("starts", "start_s", "stop_s", "round_trips", "round_trip_s", "workers", "worker_start_s")


def cost_phases(tests: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per phase (clause, reopen, stateful, crash_windows, lease_campaign, safety): the tests that
    recorded their ``cost``, their time and what they spent on the adapter; {} when none did."""
    phases: dict[str, dict[str, Any]] = {}
    for t in tests:
        c = t.get("cost")
        if not isinstance(c, Mapping):
            continue
        p = phases.setdefault(str(c["phase"]), {"count": 0, "duration_s": 0.0, **dict.fromkeys(COST_FIELDS, 0)})
        p["count"] += 1
        p["duration_s"] += float(t["duration_s"])
        for k in COST_FIELDS:
            p[k] += c[k]
    for p in phases.values():
        for k in p:
            if k.endswith("_s"):
                p[k] = round(p[k], 6)
    return dict(sorted(phases.items()))


def derive(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The derived members of a results document, computed from its recorded facts."""
    clauses = derive_clauses(doc)
    cov = coverage(doc, clauses)
    verdicts = profile_verdicts(doc, clauses, cov)
    verdict, certified = overall(doc, verdicts)
    found = findings(doc, clauses, cov)
    return {"clauses": clauses, "verdicts": verdicts, "verdict": verdict, "certified_profiles": certified,
            "exit_code": EXIT_CODES[verdict], "timings": timings(doc), "findings": found, "coverage": cov,
            "verdict_line": headline(doc, clauses, found, verdict, verdicts, certified, cov)}


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
    if d["coverage"] is not None:
        doc["coverage"] = {"plan": doc["coverage"]["plan"], **d["coverage"]}
    return doc
