"""Helpers of the checker's tests: an anomaly found alone, and an excerpt that proves it minimally."""

from __future__ import annotations

from typing import Any

from history_sim import START
from ledgercheck.chaos.safety.anomalies import Anomaly, Verdict, check, excerpt_history
from ledgercheck.chaos.safety.history import History

T0 = START  # ledger time of the first operation; ttl 45 s, grace 15 s: a lease lapses 60 s after it was granted


def kinds(v: Verdict) -> list[str]:
    return sorted({a.kind for a in v.anomalies})


def only(v: Verdict, kind: str) -> Anomaly:
    assert kinds(v) == [kind], [(a.kind, a.work_id, a.explanation) for a in v.anomalies]
    assert len(v.anomalies) == 1, [(a.kind, a.work_id) for a in v.anomalies]
    return v.anomalies[0]


def units(recs: Any) -> list[list[Any]]:
    """Records as removable units: an operation (invoke with its completion) or one record."""
    out: dict[Any, list[Any]] = {}
    for r in recs:
        key = ("op", r.id) if r.type in ("invoke", "complete") else ("rec", id(r))
        out.setdefault(key, []).append(r)
    return list(out.values())


def assert_proves(h: History, a: Anomaly) -> None:
    """The excerpt's proof (the excerpt but its cause: the fault that explains a lost item) alone,
    with the meta record, shows the anomaly, and every part of it is needed."""
    def found(v: Verdict) -> bool:
        return any(x.kind == a.kind and x.work_id == a.work_id for x in v.anomalies)

    cause = {id(r) for r in a.cause}
    assert cause <= {id(r) for r in a.excerpt}, "the cause is part of the excerpt"
    proof = [r for r in a.excerpt if id(r) not in cause]
    assert found(check(excerpt_history(h, a))), f"the excerpt does not show {a.kind}"
    assert found(check(History.of([h.meta, *proof]))), f"the excerpt's proof does not show {a.kind}"
    parts = units(proof)
    for i in range(len(parts)):
        rest = [r for j, p in enumerate(parts) if j != i for r in p]
        sub = History.of([h.meta, *rest])
        assert not found(check(sub)), f"{a.kind}: the excerpt still proves it without {parts[i]}"


def ops(a: Anomaly, op: str) -> list[Any]:
    return [r for r in a.excerpt if r.type == "complete" and r.op == op]
