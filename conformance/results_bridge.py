"""Turn the pytest reports of a ledger run into the results document (ledgercheck.reports)."""

from __future__ import annotations

import os
import shlex
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.reports.text import MESSAGE_LIMIT, recordable

from .items import INCOMPLETE, REPORTS, RESULTS_DOC, state


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def test_entries(reports: list[tuple[pytest.TestReport, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One entry per test, from its reports (setup skip, call, or a failed setup/teardown)."""
    by_id: dict[str, dict[str, Any]] = {}
    for rep, props in reports:
        e = by_id.get(rep.nodeid)
        if e is None:
            e = by_id[rep.nodeid] = {
                "nodeid": rep.nodeid,
                "clause": props.get("ledger_clause"),
                "kind": props.get("ledger_kind", "clause"),
                "outcome": "passed",
                "not_claimed": bool(props.get("ledger_not_claimed", False)),
                "not_offered": [],
                "duration_s": 0.0,
                "message": None,
                "counterexample": props.get("ledger_counterexample"),
                "replay": props.get("ledger_replay"),
            }
        e["duration_s"] = round(e["duration_s"] + float(getattr(rep, "duration", 0.0) or 0.0), 6)
        e["clause"] = props.get("ledger_clause", e["clause"])
        e["not_claimed"] = e["not_claimed"] or bool(props.get("ledger_not_claimed", False))
        e["replay"] = props.get("ledger_replay", e["replay"])
        e["counterexample"] = props.get("ledger_counterexample", e["counterexample"])
        e["not_offered"] = sorted(set(e["not_offered"]) | set(props.get("ledger_not_offered") or []))
        if isinstance(props.get("ledger_cost"), dict):  # its phase, process starts, round trips
            e["cost"] = props["ledger_cost"]
        if props.get("ledger_coverage"):  # what the test exercised through the harness (the run's coverage)
            e["exercised"] = props["ledger_coverage"]
        xfail = hasattr(rep, "wasxfail")
        if rep.skipped and props.get("ledger_not_offered") and not xfail:
            # the implementation does not offer an operation the test needs (docs/results.md)
            e["outcome"] = "not_offered"
            e["message"] = _skip_reason(rep)
        elif rep.skipped:
            e["outcome"] = "xfailed" if xfail else "skipped"
            e["message"] = _skip_reason(rep) if not xfail else f"known bug: {rep.wasxfail}"
        elif rep.failed and str(rep.longrepr or "").startswith("[XPASS(strict)]"):
            e["outcome"] = "xpassed"
            e["message"] = f"declared as a known bug but passed: {str(rep.longrepr)[len('[XPASS(strict)] '):]}"
        elif rep.failed:
            if props.get("ledger_error") is not None or rep.when != "call":
                e["outcome"] = "error"
                e["message"] = recordable(str(props.get("ledger_error") or _longrepr(rep)), MESSAGE_LIMIT)
            else:
                e["outcome"] = "failed"
                e["message"] = recordable(_longrepr(rep), MESSAGE_LIMIT)
        elif rep.passed and rep.when == "call":
            e["outcome"] = "xpassed" if xfail else "passed"
            if xfail:
                e["message"] = f"declared as a known bug ({rep.wasxfail}) but passed"
        # violations of other clauses the test saw (and set aside to judge its own): each is
        # evidence against its own clause
        for f in props.get("ledger_side_findings") or []:
            nodeid = f"{rep.nodeid}::seen[{f['clause']}]"
            by_id[nodeid] = {
                "nodeid": nodeid, "clause": f["clause"], "kind": "clause",
                "outcome": "xfailed" if f.get("known_bug") else "failed", "not_claimed": False, "not_offered": [],
                "duration_s": 0.0,
                "message": (f"known bug: {f['known_bug']}; " if f.get("known_bug") else "")
                + f"seen while testing {e['nodeid']}: " + "; ".join(f["messages"]),
                "counterexample": None, "replay": None,
            }
    return list(by_id.values())


def _skip_reason(rep: pytest.TestReport) -> str:
    lr = rep.longrepr
    if isinstance(lr, tuple) and len(lr) == 3:
        return str(lr[2]).removeprefix("Skipped: ")
    return str(lr)


def _longrepr(rep: pytest.TestReport) -> str:
    return str(rep.longreprtext or rep.longrepr or "")


def run_info(config: pytest.Config, started: float, kind: str = "conformance") -> dict[str, Any]:
    finished = time.time()
    workers = getattr(config.option, "numprocesses", None) or 0
    shard = config.getoption("ledger_shard")
    shard_doc = None
    if shard:
        k, n = shard.split("/")
        shard_doc = {"index": int(k), "count": int(n)}
    from ledgercheck.reports.text import without_secrets

    # a password in a store's or a database's URL (--ledger-example-db redis://:PW@host) is not
    # written into the results: shown as ***
    argv = ["pytest", *[without_secrets(a) for a in config.invocation_params.args]]
    command = without_secrets(config.getoption("ledger_reproduce") or " ".join(shlex.quote(a) for a in argv))
    return {
        "id": uuid.uuid4().hex,
        "kind": kind,
        "started_at": _iso(started),
        "finished_at": _iso(finished),
        "duration_s": round(finished - started, 3),
        "command": command,
        "argv": argv,
        "cwd": os.getcwd(),
        "seed": config.getoption("ledger_seed"),
        "hypothesis_profile": config.getoption("ledger_hypothesis_profile"),
        "timeout_scale": float(config.getoption("ledger_timeout_scale")),
        "shard": shard_doc,
        "workers": int(workers) if isinstance(workers, int) else 0,
        "incomplete": state(config, INCOMPLETE, None),
    }


def adapter_info(sess: Any) -> dict[str, Any]:
    from .items import artifact_sha256

    hs = dict(sess.client.handshake) if sess.client else {}
    return {
        "address": sess.address,
        "transport": sess.client.kind if sess.client else "unknown",
        "name": hs.get("name"),
        "version": hs.get("version"),
        "protocol": hs.get("protocol"),
        "profiles": list(hs.get("profiles") or []),
        "capabilities": dict(hs.get("capabilities") or {}),
        "crash_points": list(hs.get("crash_points") or []),
        "known_bugs": dict(hs.get("known_bugs") or {}),
        "artifact_sha256": artifact_sha256(sess.config.getoption("ledger_artifact_file")) or hs.get("artifact_sha256"),
    }


def build(config: pytest.Config, sess: Any, kind: str = "conformance", crash_windows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    from ledgercheck.reports.results import build_results, environment_info

    reports = state(config, REPORTS, [])
    tests = test_entries(reports)
    if crash_windows is None:
        crash_windows = [w for _, props in reports for w in (props.get("ledger_crash_windows") or [])]
    # what the adapter said (its name and version, its known bugs, messages, counterexamples, the
    # results its operations gave) is recorded with lone surrogates escaped and each text cut to
    # RECORDED_LIMIT characters: results.json is UTF-8, and reports are read by people
    return build_results(
        run=recordable(run_info(config, sess.started, kind)),
        spec=sess.base_spec,
        adapter=recordable(adapter_info(sess)),
        environment=environment_info(str(sess.artifacts.resolve().parent)),
        tests=recordable(tests),
        crash_windows=recordable(list(crash_windows)),
        requested_profiles=list(sess.requested),
        safety=recordable([props["ledger_safety"] for _, props in reports if props.get("ledger_safety")]),
        record_coverage=True,
    )


def write_run_results(config: pytest.Config, sess: Any, path: Path) -> None:
    """Write the run's results; anything that keeps them from being written is one
    :class:`ResultsError` naming the file and the cause (the plugin reports it and fails the run)."""
    from ledgercheck.reports.results import ResultsError, write_results

    try:
        doc = build(config, sess)
    except ResultsError as exc:
        raise ResultsError(f"{path}: the run's results could not be assembled: {exc}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    write_results(doc, str(path))
    config.stash[RESULTS_DOC] = doc


WINDOW_FACTS = ("point", "occurrence", "mode", "step_class", "verdict", "clauses", "decision_observed", "effects_observed",
                "final_status")


def decided(doc: Any, same_transport: bool = True) -> dict[str, Any]:
    """What a run of a results document decided, without what depends on how it ran (its times,
    workers, ids, paths): the clauses' outcomes, every crash window's verdict and what it
    observed, the verdicts, and every test's outcome with the clauses' counts.  Runs of the same
    adapter, seed and selection give the same answer whether serial or under ``-n N`` (the
    project's tests and bench/bench_certify.py compare them).

    With ``same_transport=False`` (an in-process run against a wire run of the same ledger) the
    tests skipped as not applicable are left out, with the clauses' counts: a test that stops
    the adapter at its own crash point (``arm``) needs a process to stop and does not apply in
    process, so it runs over the wire only; the clauses' outcomes must still agree."""
    counts = ("outcome", "tests", "passed", "failed", "errors", "skipped", "xfailed", "xpassed", "not_offered")
    tests = ((t["nodeid"], t["outcome"]) for t in doc["tests"])
    return {
        "verdict": doc["verdict"],
        "certified_profiles": sorted(doc["certified_profiles"]),
        "profiles": {p: v["verdict"] for p, v in doc["profiles"]["verdicts"].items()},
        "clauses": {c["id"]: {k: c[k] for k in (counts if same_transport else ("outcome",))} for c in doc["clauses"]},
        "tests": dict(sorted(t for t in tests if same_transport or t[1] != "skipped")),
        "crash_windows": sorted(([w.get(k) for k in WINDOW_FACTS] for w in doc["crash_windows"]), key=repr),
    }


def differences(a: Any, b: Any, limit: int = 10, same_transport: bool = True) -> list[str]:
    """Where :func:`decided` of two results documents differ, one line each (at most ``limit``).
    Without ``same_transport``, a test run in one and skipped in the other is no difference."""
    da, db = decided(a, same_transport), decided(b, same_transport)
    out: list[str] = []
    for key in da:
        x, y = da[key], db[key]
        if x == y:
            continue
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y)):
                if key == "tests" and not same_transport and (k not in x or k not in y):
                    continue  # skipped (not applicable) in one of the runs
                if x.get(k) != y.get(k):
                    out.append(f"{key}.{k}: {x.get(k)!r} != {y.get(k)!r}")
        elif isinstance(x, list) and isinstance(y, list):
            only_a = [w for w in x if w not in y]
            only_b = [w for w in y if w not in x]
            out.append(f"{key}: {len(only_a)} only in the first {only_a[:2]!r}, {len(only_b)} only in the second {only_b[:2]!r}")
        else:
            out.append(f"{key}: {x!r} != {y!r}")
    return out[:limit]


__all__ = ["build", "decided", "differences", "test_entries", "write_run_results"]
