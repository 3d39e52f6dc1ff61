"""Cases by construction, replays (issue 32): every keyed operation of the contract replayed
after each kind of change to its context, checked against the model.

A keyed operation is one whose answer says whether this call made the record (its result type is
an object with one boolean beside the record: ``created``, ``delivered``, ``queued``): create,
spawn, effect_begin, inbox_deliver, outbox_enqueue, lane_push under contract 1.1.  Its contexts:

* for an operation that names a work item (an argument of type string named ``work_id`` or
  ``parent_id``): the item in every status class (trees.status_classes: every status, and running
  with its cancel intent), the item's lease lapsed while it runs, the item requeued after it
  finished;
* for an operation that names one item and answers with another (a spawn names the parent and
  answers with the child): the item it answered with in every status class, its lease lapsed, and
  requeued after it finished (``replay:<operation>:made-<context>``) — the record a replay hands
  back is that item's, so its changes are what a stale replay would hide;
* every other writing operation of its profile whose required arguments the first call's
  arguments and its record fill (an effect recorded or marked in each receipt state, a message
  drained, acked or nacked, an outbound message marked sent, a lane task handed out...), each
  enum-typed argument at each of its values, and one whose answer carries a flag of its own (a
  nack's ``dead``) repeated with the chain before it until the flag is set (dead-lettered);
* the ledger reopened by a new process (adapters that declare durable state).

Each case makes the first call, changes the context, and sends the very same call again through
the model, which says what a replay answers there.  Each operation's cases are registered under
the clause of its replay rule (``REPLAY_RULES``; tests/conformance/test_broken_trees.py checks it
is the clause the model names for the replay).  Param ids: ``replay:<operation>:<context>``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ledgercheck.conformance.clauses import CaseFn, cases, durable
from ledgercheck.conformance.harness import DriveBlocked, Harness, NotApplicable
from ledgercheck.conformance.stateful_args import ArgDraws
from ledgercheck.spec import Spec
from ledgercheck.transport.wire import result_types

from .trees import reach, status_classes

# keyed operation -> the clause of its replay rule (operations come from the contract: keyed_operations)
REPLAY_RULES = {"create": "core.create.unique_unit", "spawn": "spawn.replay", "effect_begin": "idem.begin",
                "inbox_deliver": "inbox.deliver.idempotent", "outbox_enqueue": "outbox.dedupe",
                "lane_push": "lanes.push.idempotent"}
ITEM_ARGS = ("work_id", "parent_id")
REPEATS = 16  # at most this many rounds of a context chain that drives a flag (a nack's dead) home
ENUMS = ArgDraws.ENUMS  # argument type -> the contract's list of its values (the stateful draws' own map)


def keyed_operations(spec: Spec) -> list[str]:
    """Operations whose result reports whether this call made the record."""
    types = result_types(spec)
    out = []
    for name, op in spec.operations.items():
        props = (types.get(op.returns) or {}).get("properties") or {}
        flags = [k for k, s in props.items() if s == {"type": "boolean"}]
        rest = [x for k, x in props.items() if k not in flags]
        records = all("$ref" in x or x.get("type") == "object" for x in rest)  # the flag, and the record if any
        if len(flags) == 1 and records and op.kind in ("create", "journal"):
            out.append(name)
    missing = [o for o in out if o not in REPLAY_RULES]
    if missing:
        raise ValueError(f"replays: the contract's keyed operations {missing} have no rule in REPLAY_RULES")
    return out


def enum_values(spec: Spec, typ: str) -> list[Any]:
    return list(getattr(spec, ENUMS[typ])) if typ in ENUMS else []


def _plain_value(typ: str, name: str) -> Any:
    return {"nonempty_string": f"{name}-1", "string": f"{name}-1", "any": {"v": name}, "object": {"v": name},
            "positive_int": 1, "nonnegative_int": 0, "boolean": True, "priority": None}.get(typ)


def first_args(spec: Spec, op: str, item: str | None) -> dict[str, Any]:
    """The first call's arguments: required ones, each the first value of its type."""
    args: dict[str, Any] = {}
    for name, a in spec.operations[op].args.items():
        if name == "now" or not a.required:
            continue
        if name in ITEM_ARGS and item is not None:
            args[name] = item
        elif a.type in ENUMS:
            args[name] = enum_values(spec, a.type)[0]
        else:
            args[name] = _plain_value(a.type, name)
    if op == "create":  # a unit of its own (the identity the replay repeats)
        args["source_id"] = "replayed-unit"
        if args["source_system"] in spec.run_id_required_for:
            args["source_run_id"] = "run-1"
    return args


def context_ops(spec: Spec, op: str) -> list[tuple[str, dict[str, Any]]]:
    """The other writing operations of ``op``'s profile that the first call's arguments and record
    can fill, once per value of each enum-typed argument: (operation, arguments not yet filled)."""
    prof = spec.operations[op].profile
    out: list[tuple[str, dict[str, Any]]] = []
    for name, o in spec.operations.items():
        if name == op or o.profile != prof or o.kind in ("read", "session", "create") or prof is None:
            continue
        need = [a for n, a in o.args.items() if a.required and n != "now"]
        enums = [a for a in need if a.type in ENUMS]
        if len(enums) > 1:
            continue
        variants = [{enums[0].name: v} for v in enum_values(spec, enums[0].type)] if enums else [{}]
        out += [(name, v) for v in variants]
    return out


def _fill(h: Harness, op: str, first: dict[str, Any], record: dict[str, Any], fixed: dict[str, Any],
          item: str | None) -> dict[str, Any] | None:
    args: dict[str, Any] = dict(fixed)
    for name, a in h.spec.operations[op].args.items():
        if name in args or name == "now":
            continue
        if name in first:
            args[name] = first[name]
        elif name in record and record[name] is not None:
            args[name] = record[name]
        elif name == "token" and item is not None and h.token(item):
            args[name] = h.token(item)
        elif a.required:
            v = _plain_value(a.type, name)
            if v is None:
                return None
            args[name] = v
    return args


def _record(out: Any) -> dict[str, Any]:
    v = out.value if out.ok else None
    if isinstance(v, dict):
        inner = next((x for x in v.values() if isinstance(x, dict)), None)
        return {**(inner or {}), **{k: x for k, x in v.items() if not isinstance(x, dict)}}
    return {}


def _takes_item(spec: Spec, op: str) -> bool:
    return any(n in ITEM_ARGS and a.required for n, a in spec.operations[op].args.items())


def _makes_item(spec: Spec, op: str) -> bool:
    return spec.operations[op].kind == "create"


def _answers_item(spec: Spec, op: str) -> bool:
    """The answer carries a work item as its record (a spawn's child), whatever item it names."""
    props = (result_types(spec).get(spec.operations[op].returns) or {}).get("properties") or {}
    return any(x.get("$ref", "").endswith("/work") for x in props.values() if isinstance(x, dict))


def _case(op: str, context: str, change: Callable[[Harness, str | None, dict[str, Any], dict[str, Any]], None],
          reopens: bool = False, made: bool = False) -> CaseFn:
    """``made``: the context changes the item the first call answered with (a spawn's child), not
    the one it names (the parent)."""
    def fn(h: Harness) -> None:
        h.need(op)

        def run(reopen: Callable[[], None] | None) -> None:
            item = h.create(source_id="replay-context") if _takes_item(h.spec, op) else None
            args = first_args(h.spec, op, item)
            first = h.do(op, **args)
            if not first.ok:
                raise NotApplicable(f"the first {op} was refused ({first.code})")
            if _makes_item(h.spec, op):
                item = first.value["work"]["work_id"]
            target = _record(first).get("work_id") if made else item
            if reopen is not None:
                reopen()
            else:
                try:
                    change(h, target, args, _record(first))
                except DriveBlocked as exc:
                    raise NotApplicable(str(exc)) from exc
            h.do(op, **args)  # the replay: the model says what it answers here
            h.do(op, **args)  # and again: a replay changes nothing
            for w in dict.fromkeys(x for x in (item, target) if x is not None):
                h.do("get", work_id=w)

        if reopens:
            with durable(h) as reopen:
                run(reopen)
        else:
            run(None)
    return fn


def _status_change(cls: Any) -> Callable[..., None]:
    def change(h: Harness, item: str | None, args: dict[str, Any], record: dict[str, Any]) -> None:
        assert item is not None
        reach(h, item, cls)
    return change


def _lapse(h: Harness, item: str | None, args: dict[str, Any], record: dict[str, Any]) -> None:
    assert item is not None
    h.drive(item, next(s for s, st in h.spec.statuses.items() if st.leased))
    h.advance_to(h.lapse_time(item))


def _requeued(h: Harness, item: str | None, args: dict[str, Any], record: dict[str, Any]) -> None:
    assert item is not None
    edge = next((t for t in h.spec.transitions if t.requeue), None)
    if edge is None:
        raise NotApplicable("the contract has no requeue edge")
    h.drive(item, edge.src)
    h.drive(item, edge.dst)


def _other_op(chain: list[tuple[str, dict[str, Any]]]) -> Callable[..., None]:
    """The context operations in order (the profile's first one, then the one the case is about),
    each filled from the first call and the records answered so far."""
    def change(h: Harness, item: str | None, args: dict[str, Any], record: dict[str, Any]) -> None:
        record = dict(record)
        for _ in range(REPEATS):
            for other, fixed in chain:
                h.need(other)
                if item is not None and "token" in h.spec.operations[other].args and not h.token(item):
                    h.drive(item, next(s for s, st in h.spec.statuses.items() if st.leased))
                full = _fill(h, other, args, record, fixed, item)
                if full is None:
                    raise NotApplicable(f"{other} needs an argument the first call cannot fill")
                out = h.do(other, **full)
                record.update(_record(out))
            # an operation whose answer carries a flag of its own (a nack's ``dead``) is repeated,
            # with the chain before it, until the flag is set: the context it ends in
            flags = [v for v in (out.value or {}).values() if isinstance(v, bool)] if out.ok and isinstance(out.value, dict) else []
            if not flags or all(flags):
                return
    return change


def _contexts(spec: Spec, op: str) -> Iterable[tuple[str, CaseFn]]:
    if _takes_item(spec, op) or _makes_item(spec, op):
        for cls in status_classes(spec):
            yield f"replay:{op}:item-{cls.label}", _case(op, f"item-{cls.label}", _status_change(cls))
        yield f"replay:{op}:lease-lapsed", _case(op, "lease-lapsed", _lapse)
        yield f"replay:{op}:requeued", _case(op, "requeued", _requeued)
    if _takes_item(spec, op) and _answers_item(spec, op):
        # the item the answer carries is another one (a spawn's child): its own changes of context
        for cls in status_classes(spec):
            yield f"replay:{op}:made-{cls.label}", _case(op, f"made-{cls.label}", _status_change(cls), made=True)
        yield f"replay:{op}:made-lease-lapsed", _case(op, "made-lease-lapsed", _lapse, made=True)
        yield f"replay:{op}:made-requeued", _case(op, "made-requeued", _requeued, made=True)
    ctx = [] if _makes_item(spec, op) else context_ops(spec, op)  # a created item's context: its statuses above
    for i, (other, fixed) in enumerate(ctx):
        label = other + "".join(f"-{v}" for v in fixed.values())
        chain = [(other, fixed)] if i == 0 or ctx[0][0] == other else [ctx[0], (other, fixed)]
        yield f"replay:{op}:after-{label}", _case(op, label, _other_op(chain))
    yield f"replay:{op}:reopened", _case(op, "reopened", lambda *a: None, reopens=True)


def _gen(op: str) -> Callable[[Spec], Iterable[tuple[str, CaseFn]]]:
    def gen(spec: Spec) -> Iterable[tuple[str, CaseFn]]:
        if op in keyed_operations(spec):
            yield from _contexts(spec, op)
    return gen


for _op, _clause in REPLAY_RULES.items():
    cases(_clause)(_gen(_op))
