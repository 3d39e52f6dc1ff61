"""Offline consistency check of a ledger file (what ``ledgercheck ledger verify`` runs).

Beyond SQLite's own integrity check it confirms the ledger's invariants record by record: the
event trail starts with the creation event and has gapless seqs, its count matches the record's
bookkeeping, every status change has its transition event and every transition event continues
from the previous status, folding the events gives back the snapshot, and lease, waiting and
terminal fields agree with the status.  Append-only log streams must be gapless too, and every
guard trigger the schema creates for the contract must be present and unchanged (a ledger without
its triggers still reads fine, but no longer refuses forbidden writes).

It reports every problem it finds and keeps going: a record whose events are all gone is one
problem among the others, not the end of the check.
"""

from __future__ import annotations

from typing import Any

from ledgercheck.spec.rules import fold
from ledgercheck.transport.protocol import LedgerError

from .ledger import Ledger


def verify(ledger: Ledger) -> list[str]:
    """Every problem found, one line each (empty when the ledger is consistent)."""
    spec = ledger.spec
    problems = [f"integrity: {p}" for p in ledger.integrity_check()]
    counts = dict(ledger._read("SELECT work_id, event_count FROM work"))
    fold_fields = [(n, f.compare) for n, f in spec.work_fields.items() if f.fold and f.compare != "none"]
    problems += _trigger_problems(ledger)
    for snap in ledger.list():
        wid = snap["work_id"]
        try:
            events = ledger.events(work_id=wid)
        except LedgerError as exc:
            if exc.code != "not_found":
                raise
            problems.append(f"{wid}: the record has no events at all (its trail is lost; the record counts "
                            f"{counts.get(wid)})")
            continue
        except ValueError as exc:
            problems.append(f"{wid}: the event trail cannot be read: {exc}")
            continue
        problems += [f"{wid}: {p}" for p in _trail(ledger, snap, events, counts.get(wid))]
        folded = fold(spec, events)
        for name, compare in fold_fields:
            if not _same(compare, folded.get(name), snap.get(name)):
                problems.append(f"{wid}: fold(events).{name} = {folded.get(name)!r}, the record has {snap.get(name)!r}")
    first = spec.first_seq
    for stream, n, lo, hi in ledger._read("SELECT stream, count(*), min(seq), max(seq) FROM log_entry GROUP BY stream"):
        if lo != first or hi != first + n - 1:
            problems.append(f"log stream {stream!r}: {n} entries span seq {lo}..{hi}, not {first}..{first + n - 1}")
    return problems


def _trigger_problems(ledger: Ledger) -> list[str]:
    """Guard triggers the schema generator creates for this contract that are missing or altered."""
    have, want = ledger.guard_triggers()
    out = []
    for name, sql in want.items():
        if name not in have:
            out.append(f"trigger {name}: missing (the ledger no longer refuses the writes it guards)")
        elif have[name] != sql:
            out.append(f"trigger {name}: differs from the one the schema creates for this contract")
    return out


def _trail(ledger: Ledger, snap: dict[str, Any], events: list[dict[str, Any]], count: int | None) -> list[str]:
    spec = ledger.spec
    out = []
    seqs = [e["seq"] for e in events]
    if seqs != list(range(spec.first_seq, spec.first_seq + len(events))):
        out.append(f"event seqs {seqs} are not gapless from {spec.first_seq}")
    if count != len(events):
        out.append(f"the record counts {count} events, the trail has {len(events)}")
    if not events or events[0]["type"] != spec.operations["create"].event or events[0]["to_status"] != spec.initial_status:
        out.append("the trail does not start with the creation event")
    status = None
    for e in events:
        if e["to_status"] is None:
            if spec.events[e["type"]].transition:
                out.append(f"transition event {e['seq']} ({e['type']}) has no to_status")
            continue
        if status is not None:
            if e["from_status"] != status:
                out.append(f"event {e['seq']} moves from {e['from_status']}, but the item was {status}")
            elif not spec.allowed(status, e["to_status"]):
                out.append(f"event {e['seq']} records the forbidden move {status} -> {e['to_status']}")
        status = e["to_status"]
    if status != snap["status"]:
        out.append(f"the last transition event leaves the item {status}, the record says {snap['status']}")
    st = spec.statuses[snap["status"]]
    if st.leased != (snap["lease_token"] is not None) or st.leased != (snap["owner"] is not None):
        out.append(f"status {snap['status']} with owner {snap['owner']!r} and lease token {snap['lease_token']!r}")
    if bool(st.waiting_kind) != (snap["waiting_ref"] is not None):
        out.append(f"status {snap['status']} with waiting_ref {snap['waiting_ref']!r}")
    if st.terminal != (snap["finished_at"] is not None):
        out.append(f"status {snap['status']} with finished_at {snap['finished_at']!r}")
    return out


def _same(compare: str, a: Any, b: Any) -> bool:
    if compare == "presence":
        return (a is None) == (b is None)
    if compare == "time" and a is not None and b is not None:
        return abs(float(a) - float(b)) <= 1e-9
    return a == b and (a is None or b is None or type(a) is type(b) or {type(a), type(b)} <= {int, float})
