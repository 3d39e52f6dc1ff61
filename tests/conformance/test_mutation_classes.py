"""The mutant classes of the self-check (conformance/mutation/, docs/selfcheck.md): each new
operator rewrites exactly the calls of its class and leaves the others alone, and the rates are
reported per class."""

from __future__ import annotations

import io
import json
from collections.abc import Callable

from ledgercheck.conformance import mutation as M
from ledgercheck.reference.adapter import ReferenceAdapter
from ledgercheck.spec import default_spec
from ledgercheck.transport.clock import QUANTUM, plain

SPEC = default_spec()


def _server(name: str) -> tuple[M.MutantServer, Callable[..., dict], ReferenceAdapter]:
    adapter = ReferenceAdapter(SPEC)
    adapter.reset({})
    server = M.MutantServer(adapter, io.BytesIO(), SPEC, M.parse_mutant(SPEC, name))

    def call(op: str, **args: object) -> dict:
        return server.handle(json.dumps({"id": 1, "op": op, "args": args}).encode())

    return server, call, adapter


def _created(call: Callable[..., dict], **extra: object) -> str:
    return call("create", source_system="manual", source_id="x", now=0.0, **extra)["result"]["work"]["work_id"]


def test_every_mutant_has_a_class_and_the_new_classes_are_generated() -> None:
    mutants = M.generate(SPEC)
    classes = {m.klass for m in mutants}
    assert classes <= set(M.CLASS_OF.values()) | {"benign", "fence", "bound"}
    assert {"instant", "fence", "bound", "ident", "option", "row", "replay"} <= classes
    assert all(m.klass == "benign" for m in mutants if m.benign)
    assert {m.klass for m in mutants if m.family == "skip_fence"} == {"fence", "bound"}
    # derived from the contract: every duration argument, every token-fenced work operation,
    # every optional argument but the clock
    durations = {(o, n) for o, op in SPEC.operations.items() for n, a in op.args.items() if a.type in ("duration", "retry_policy")}
    assert {m.params[:2] for m in mutants if m.family == "arg_instant"} == durations
    fenced = {o for o, op in SPEC.operations.items() if "token" in op.args and "work_id" in op.args}
    assert {m.params[0] for m in mutants if m.family == "fence_owner"} == fenced
    optional = {(o, n) for o, op in SPEC.operations.items() if o not in ("hello", "reset")
                for n, a in op.args.items() if not a.required and n != "now"}
    assert {m.params for m in mutants if m.family == "drop_option"} == optional
    rows = [m for m in mutants if m.family == "row_swap"]
    assert rows and all(m.params[0] != "source_systems" for m in rows)  # rows that differ in prose only are skipped


def test_a_fence_by_owner_passes_a_stale_token_only_when_its_owner_holds_the_item_again() -> None:
    for second, passes in (("A", True), ("B", False)):
        server, call, adapter = _server("fence_owner:renew")
        w = _created(call)
        old = call("claim", owner="A", now=0.0)["result"]["lease_token"]
        call("expire", now=1000.0)
        assert call("requeue", work_id=w, now=1000.0)["ok"]
        assert call("claim", owner=second, now=1000.0)["result"]["lease_token"] != old
        out = call("renew", work_id=w, token=old, now=1000.0)
        assert out["ok"] is passes and server.fired == int(passes), second  # the reference alone refuses it
        adapter.close()


def test_a_sequence_check_off_at_its_first_value_only() -> None:
    server, call, adapter = _server("seq_first:log_append")
    bad = call("log_append", stream="s", expected_seq=-1, kind="k", now=0.0)  # an invalid call: the input checks' business
    assert bad["error"]["code"] == "invalid_argument" and server.fired == 0
    assert call("log_append", stream="s", expected_seq=SPEC.first_seq + 4, kind="k", now=0.0)["ok"] and server.fired == 1
    later = call("log_append", stream="s", expected_seq=SPEC.first_seq + 6, kind="k", now=0.0)
    assert not later["ok"] and later["error"]["code"] == "concurrent_append"  # a stream with entries: checked
    adapter.close()


def test_an_ignored_optional_argument_and_a_per_item_timing_moved_by_one_quantum() -> None:
    server, call, adapter = _server("drop_option:create:priority")
    w = _created(call, priority=SPEC.priority_min)
    assert call("get", work_id=w)["result"]["priority"] != SPEC.priority_min and server.fired == 1
    adapter.close()
    assert M._shift_timing(10, QUANTUM) == 10 + QUANTUM and M._shift_timing(QUANTUM, -QUANTUM) is None
    assert M._shift_timing({"initial_backoff": 2, "max_attempts": 3}, -QUANTUM) == {"initial_backoff": 2 - QUANTUM, "max_attempts": 3}
    assert M._shift_timing({"max_attempts": 3}, QUANTUM) is None and M._shift_timing(True, QUANTUM) is None


def test_a_table_row_handled_like_the_next_row() -> None:
    m = next(m for m in M.generate(SPEC) if m.family == "row_swap" and m.params[0] == "retry.error_classes")
    server, _, adapter = _server(m.name)
    doc = plain(SPEC.document)
    out = server._rewrite_request("reset", {"config": {"contract": doc}})
    table = M._get_path(out["config"]["contract"], m.params[0].split("."))
    assert table[m.params[1]] == table[m.params[2]] != M._get_path(doc, m.params[0].split("."))[m.params[1]]
    assert M._get_path(doc, m.params[0].split("."))[m.params[1]] != table[m.params[1]]  # the caller's copy untouched
    adapter.close()


def test_a_replay_answered_as_first_after_its_context_changed() -> None:
    server, call, adapter = _server("replay_stale:create")
    w = _created(call)
    again = call("create", source_system="manual", source_id="x", now=1.0)
    assert again["result"]["work"]["work_id"] == w and server.fired == 0  # nothing changed: the same answer, not rewritten
    call("claim", owner="A", now=2.0)
    third = call("create", source_system="manual", source_id="x", now=3.0)
    assert third["result"]["work"]["status"] == SPEC.initial_status and server.fired == 1  # the reference says running
    adapter.close()


def _row(name: str, klass: str, *, benign: bool = False, caught: bool = True, own: bool = True) -> dict:
    return {"mutant": name, "family": name.split(":")[0], "klass": klass, "benign": benign, "exercised": True, "fired": True,
            "caught": caught, "own_caught": caught and own}


def test_rates_per_class_and_a_class_below_its_floor_fails_the_campaign() -> None:
    rows = [_row(f"refuse_ok:{i}", "refusal") for i in range(40)] + [_row("fence_owner:renew", "fence", caught=False),
                                                                      _row("fence_owner:fail", "fence"),
                                                                      _row("reword", "benign", benign=True, caught=False)]
    per = M.class_figures(rows)
    assert per["fence"]["non_benign"] == 2 and per["fence"]["caught"] == 1 and per["refusal"]["caught"] == 40
    assert per["benign"] == {**per["benign"], "benign": 1, "benign_flagged": 0}
    figs = M.Figures(generated=43, exercised=43, non_benign=42, caught=41, own_caught=41, benign=1, benign_flagged=0, not_fired=0,
                     control_flagged=0, seconds=1.0, per_class=per)
    assert figs.caught_fraction >= M.FLOOR_CAUGHT  # overall the floors hold ...
    assert M.class_floors_missed(figs) == ["fence"] and not M.floors_hold(figs)  # ... not for the fence class
    text = M.figures_text(figs)
    assert "per class:" in text and any(ln.strip().startswith("fence") and "caught 1/2 (50.0%)" in ln for ln in text.splitlines())
    md = M.markdown(figs, [{**r, "own": [], "what": "", "catches": []} for r in rows])
    assert "| fence | 2 | 2 | 1/2 | 1/1 | 0/0 |" in md
    # rows of an older campaign (no class) get their family's
    assert "refusal" in M.class_figures([{k: v for k, v in _row("refuse_ok:x", "refusal").items() if k != "klass"}])


def test_a_replay_refused_instead_of_answered() -> None:
    server, call, adapter = _server("replay_refuse:inbox_deliver:idempotency_conflict")
    first = call("inbox_deliver", recipient="r", message_id="m1", sender="s", body={"n": 1}, now=0.0)
    other = call("inbox_deliver", recipient="r", message_id="m2", sender="s", body={"n": 2}, now=0.0)
    assert first["ok"] and other["ok"] and server.fired == 0  # first calls: answered
    again = call("inbox_deliver", recipient="r", message_id="m1", sender="s", body={"n": 1}, now=5.0)  # the clock aside: the same call
    assert not again["ok"] and again["error"]["code"] == "idempotency_conflict" and server.fired == 1
    assert M.parse_mutant(SPEC, "replay_refuse:inbox_deliver:idempotency_conflict").klass == "replay_refused"
    adapter.close()


def _tree(call: Callable[..., dict], finish_child: bool) -> tuple[str, str, str]:
    """root -> child -> grandchild; the child (an interior node) finished or not."""
    root = _created(call)
    child = call("spawn", parent_id=root, key="c", now=0.0)["result"]["work"]["work_id"]
    grand = call("spawn", parent_id=child, key="g", now=0.0)["result"]["work"]["work_id"]
    if finish_child:
        tok = call("claim", owner="A", work_id=child, now=1.0)["result"]["lease_token"]
        assert call("close_out", work_id=child, token=tok, status="done", now=2.0)["ok"]
    return root, child, grand


def test_a_cascade_that_does_not_descend_below_a_finished_node() -> None:
    for finished in (True, False):
        server, call, adapter = _server("tree_finished:cancel_tree")
        root, child, grand = _tree(call, finished)
        out = call("cancel_tree", work_id=root, now=3.0)
        ids = [w["work_id"] for w in out["result"]]
        status = call("get", work_id=grand)["result"]["status"]
        if finished:  # the grandchild under the finished child is left out and left running
            assert server.fired == 1 and grand not in ids and status != "cancelled"
        else:  # no finished interior node: the walk is the reference's
            assert server.fired == 0 and grand in ids and status == "cancelled"
        assert M.parse_mutant(SPEC, "tree_finished:cancel_tree").klass == "tree"
        adapter.close()
    # the reference alone cancels the grandchild under a finished child
    server, call, adapter = _server("none")
    root, child, grand = _tree(call, True)
    call("cancel_tree", work_id=root, now=3.0)
    assert call("get", work_id=grand)["result"]["status"] == "cancelled"
    adapter.close()


def test_an_ignored_argument_the_contract_records_nowhere_it_compares_is_benign() -> None:
    """drop_option is benign exactly for a passed-through argument of an operation answering with work
    items that no compared snapshot field records (status_reason is compare: none) and no answer carries;
    make the contract compare status_reason and the reasons count again."""
    import dataclasses

    from ledgercheck.transport.wire import result_types

    types = result_types(SPEC)
    benign = {m.params for m in M.generate(SPEC) if m.family == "drop_option" and m.benign}
    assert ("close_out", "reason") in benign and ("fail", "message") in benign and ("create", "payload") in benign
    assert ("inbox_nack", "error") in benign  # a journal's argument no answer of its profile carries, no clause names
    for op, name in benign:
        arg = SPEC.operations[op].args[name]
        assert arg.type in M.PASSED_THROUGH and not arg.blame and name not in SPEC.work_fields, (op, name)
        assert not any(M.mentions(c.statement, name) for c in SPEC.clauses if c.profile == SPEC.operations[op].profile), (op, name)
    # rule-carrying and recorded arguments stay non-benign
    for op, name in (("set_waiting", "timeout"), ("close_out", "result"), ("claim", "work_id"), ("create", "source_run_id"),
                     ("log_append", "payload"), ("inbox_deliver", "body"), ("effect_begin", "token"), ("lane_push", "body"),
                     ("wake_suspend", "token"), ("outbox_enqueue", "work_id")):
        assert (op, name) not in benign and M.unrecorded_option(SPEC, op, name, types) is None, (op, name)
    compared = dict(SPEC.work_fields)
    compared["status_reason"] = dataclasses.replace(compared["status_reason"], compare="exact")
    strict = dataclasses.replace(SPEC, work_fields=compared)
    assert M.unrecorded_option(strict, "close_out", "reason", types) is None
    assert M.unrecorded_option(strict, "fail", "message", types) is not None


def test_a_limit_the_contract_sets_as_a_maximum_may_be_smaller_and_a_batch_limit_has_its_reads_clause() -> None:
    limits = {m.params: m for m in M.generate(SPEC) if m.family == "limit"}
    assert limits[("inbox.drain_max", "-")].benign and not limits[("inbox.drain_max", "+")].benign  # "at most the requested number"
    assert "inbox.drain.max" in limits[("inbox.drain_max", "+")].own
    assert not any(m.benign for p, m in limits.items() if p[0] != "inbox.drain_max")
    # no clause names pending_max: the clause the model names for the read it defaults (what its cases blame)
    from ledgercheck.conformance.model import Model

    clause = Model(SPEC).expect("outbox_pending", {"now": 0.0}).clause
    assert limits[("outbox.pending_max", "-")].own == (clause,) == limits[("outbox.pending_max", "+")].own


def test_an_ignored_item_argument_of_a_moving_operation_owns_the_transition_clause() -> None:
    """claim(work_id) answered with another item: the transition asked for was not performed (what the
    harness reports, core.transition.allowed); the words of the clauses alone gave spawn.wakes_parent."""
    own = {m.params: m.own for m in M.generate(SPEC) if m.family == "drop_option"}
    assert "core.transition.allowed" in own[("claim", "work_id")]
    assert "core.transition.allowed" not in own[("outbox_enqueue", "work_id")]  # it moves nothing


def test_no_row_swap_makes_a_contract_the_contracts_own_checks_refuse() -> None:
    """A swapped row the contract's checks refuse (a step class without effect given an allowance) is
    no ledger anyone runs: the reference refuses the reset. Such swaps are not generated; the ones
    generated are valid contracts."""
    import copy

    from ledgercheck.spec.load import _spec_from_document

    doc = plain(SPEC.document)
    rows = [m for m in M.generate(SPEC) if m.family == "row_swap"]
    assert rows
    for m in rows:
        swapped = copy.deepcopy(doc)
        table = M._get_path(swapped, m.params[0].split("."))
        table[m.params[1]] = copy.deepcopy(table[m.params[2]])
        _spec_from_document(swapped)  # raises SpecError for a refused one
    names = {m.name for m in rows}
    assert "row_swap:matrix:pure:idempotent_with_key" not in names  # pure takes an allowance: refused
    assert "row_swap:matrix:idempotent_with_key:checkpointed" in names
    limits = {m.name for m in M.generate(SPEC) if m.family == "limit"}
    assert "limit:eventlog.first_seq:+" in limits and "limit:eventlog.first_seq:-" not in limits  # first_seq 0: refused


def test_an_ignored_filter_of_a_read_owns_the_reads_clause() -> None:
    from ledgercheck.conformance.model import Model

    clause = Model(SPEC).expect("list", {"now": 0.0}).clause
    own = {m.params: m.own for m in M.generate(SPEC) if m.family == "drop_option"}
    assert clause in own[("list", "quarantined")] and clause in own[("list", "status")]


def test_an_ignored_argument_kept_in_a_record_owns_the_records_clauses() -> None:
    """A log entry's payload, a lane task's body, an outbound message's work id: the clauses saying what
    the ledger stores and hands back for the record (alter's rule for such answers), not only the clauses
    whose words name the argument (outbox.dedupe for 'payload')."""
    own = {m.params: m.own for m in M.generate(SPEC) if m.family == "drop_option"}
    assert "eventlog.read" in own[("log_append", "payload")]
    assert "lanes.queue.durable" in own[("lane_push", "body")]
    assert "outbox.intent_first" in own[("outbox_enqueue", "work_id")]
    assert own[("wake_suspend", "timer_at")] == ("wakeups.timer",)  # a typed rule: only its own clause


def test_a_row_swap_that_changes_only_what_the_crash_windows_judge_is_benign() -> None:
    """The rows in which a step class's kind of effect or a matrix row's effect allowance alone differs:
    every clause naming the table and the column is judge: chaos (recovery.effects_allowed), so no answer
    of a ledger changes. A row that changes a decision stays a mutant; make the allowance's clause one
    the clause tests judge and the allowance rows count again."""
    import dataclasses

    from ledgercheck.conformance.mutation.generate import _chaos_judged

    rows = {m.params: m for m in M.generate(SPEC) if m.family == "row_swap"}
    benign = {p for p, m in rows.items() if m.benign}
    assert ("matrix", "idempotent_with_key", "checkpointed") in benign
    assert {p for p in benign if p[0] == "step_classes"} == {p for p in rows if p[0] == "step_classes"}
    doc = plain(SPEC.document)
    for (table, row, other), m in rows.items():
        path = tuple(table.split("."))
        a, b = M._get_path(doc, (*path, row)), M._get_path(doc, (*path, other))
        decisions = table == "matrix" and any(a[p]["decision"] != b[p]["decision"] for p in a)
        assert m.benign is (not decisions and table != "retry.error_classes"), m.name
    judged = tuple(dataclasses.replace(c, judge=None) if c.id == "recovery.effects_allowed" else c for c in SPEC.clauses)
    strict = dataclasses.replace(SPEC, clauses=judged)
    path = ("matrix",)
    assert _chaos_judged(SPEC, path, doc["matrix"]["idempotent_with_key"], doc["matrix"]["checkpointed"]) == ["recovery.effects_allowed"]
    assert _chaos_judged(strict, path, doc["matrix"]["idempotent_with_key"], doc["matrix"]["checkpointed"]) == []
    assert _chaos_judged(strict, ("step_classes",), doc["step_classes"]["checkpointed"], doc["step_classes"]["pure"]) == []


def test_list_orders_are_their_operations_clauses() -> None:
    """list's and effect_list's orders are clauses of the contract (core.list.order, idem.list.order);
    work_list is shared by list, children and cancel_tree, so its description fixes no one operation's
    order: children's is spawn.join's, cancel_tree's is left open (benign)."""
    reorder = {m.params[0]: m for m in M.generate(SPEC) if m.family == "reorder"}
    assert "core.list.order" in reorder["list"].own and "idem.list.order" in reorder["effect_list"].own
    assert reorder["children"].own == ("spawn.join",) and reorder["cancel_tree"].benign
    assert not reorder["events"].benign and not reorder["log_tail"].benign and not reorder["lane_tasks"].benign


def test_a_limit_one_less_owns_the_clause_of_the_count_that_remains() -> None:
    """max_attempts one less fails work while the contract says attempts remain (retry.schedule's
    sentence); one more schedules a retry at the limit (retry.exhausted's)."""
    limits = {m.params: m for m in M.generate(SPEC) if m.family == "limit"}
    assert "retry.schedule" in limits[("retry.policy.max_attempts", "-")].own
    assert "retry.exhausted" in limits[("retry.policy.max_attempts", "-")].own
    assert limits[("retry.policy.max_attempts", "+")].own == ("retry.exhausted",)


def test_a_stale_repeat_of_a_move_owns_the_fields_clauses_that_name_the_move() -> None:
    """A requeue repeated after another stint is a new move; its first answer handed back reports the
    lease version going back, which lease.version.monotonic ("across resumes and requeues") forbids."""
    stale = {m.params[0]: m for m in M.generate(SPEC) if m.family == "replay_stale"}
    assert "lease.version.monotonic" in stale["requeue"].own
    assert len(stale["requeue"].own) == len(set(stale["requeue"].own))
    assert "lease.version.monotonic" not in stale["inbox_deliver"].own  # moves no item
