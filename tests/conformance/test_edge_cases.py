"""The clause cases of conformance/clauses/constructed/edges.py come from the contract's own data.

Each kind of case is drawn from the contract (its transition table, its operations' ``args``,
its batch limits), not from a list written per operation; these tests check that every place
the contract gives rise to has its case.  That each case fails on a ledger that breaks it, for
its clause, is tests/conformance/test_broken_hunts.py's (fixtures/testkit/broken_edges.py).
"""

from __future__ import annotations

from ledgercheck.conformance.clauses import all_cases
from ledgercheck.conformance.clauses.constructed import edges
from ledgercheck.conformance.harness import DRIVERS


def _names(spec) -> set[str]:
    return {c.name for c in all_cases(spec)}


def test_every_transition_with_optional_arguments_has_its_case(spec) -> None:
    names = _names(spec)
    want = {f"core.transition.allowed[{op}-{t.src}-to-{t.dst}-every-optional-arg]"
            for t in spec.transitions for op in t.ops
            if op in DRIVERS and any(not a.required and n != "now" for n, a in spec.operations[op].args.items())}
    assert want and want <= names, sorted(want - names)


def test_every_caller_name_of_a_storing_journal_operation_is_sent_at_its_edges(spec) -> None:
    names = _names(spec)
    got = {n.split("[", 1)[1].rsplit("-at-its-edges]", 1)[0] for n in names if n.endswith("-at-its-edges]")}
    # the operations that store a record from the caller's names alone, each name of theirs
    assert {"inbox_deliver-recipient", "inbox_deliver-message_id", "inbox_deliver-sender", "outbox_enqueue-key",
            "outbox_enqueue-destination"} <= got
    # and no operation the model refuses on a fresh ledger (an ack of nothing) or that only hands out a list
    assert not any(g.startswith(("inbox_ack", "inbox_nack", "outbox_mark_sent", "inbox_drain")) for g in got)
    draws = edges._draws(spec)
    forms = draws.string_forms("sender", "nonempty_string")
    assert len(forms) == len(set(forms)) >= 6 and all(f.strip() for f in forms)  # no blank form for a not-blank name
    assert "" in draws.string_forms("owner", "string")  # empty where the type allows it


def test_batch_limits_come_from_the_contract(spec) -> None:
    reads = {op: (producer, limit) for op, producer, limit in edges._bounded_reads(spec)}
    assert reads == {"inbox_drain": ("inbox_deliver", spec.inbox_drain_max),
                     "outbox_pending": ("outbox_enqueue", spec.outbox_pending_max)}
    names = _names(spec)
    assert {"inbox.drain.max[inbox_drain-batch-at-its-bounds]", "outbox.intent_first[outbox_pending-batch-at-its-bounds]"} <= names
