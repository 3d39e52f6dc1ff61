"""Cross-item checks of a safety history (Elle-style): rules between items that no single item's
linearization can see.

The operations are found from the contract, never by name: a *spawn* is an operation answering a
``create_result`` that is not itself a create (its first ``*_id`` argument names the parent); a
*join* is a read answering a ``work_list`` for one ``work_id``; a *tree cancel* is a write
answering a ``work_list`` for one ``work_id``; the *cancelled* statuses are those the cancel
profile's transitions lead to.

* ``partial_join``: a join of a parent answered ok without a child whose spawn had completed ok
  before the join was invoked.
* ``child_finished_under_cancelled_parent``: a tree cancel of an item answered ok, leaving out a
  descendant spawned (ok) before the cancel was invoked, and that descendant later reached a
  terminal status other than a cancelled one through an operation invoked after the cancel
  completed.

The inbox and the outbox are shared by every holder (a recipient's messages, the one outbound
queue), so no item's search sees them; their rules follow from the inbox and outbox clauses, the
operations again found by what the contract says they take and answer: a *delivery* takes a
``message_id`` and a ``sender``; a *drain* is a write answering a ``message_list`` (what it hands
out); a *nack* names a message and answers a ``nack_result`` (the one operation that returns a
handed-out message to pending); an *enqueue* answers an ``enqueue_result``; a *relay listing* is a
read answering an ``outbox_list``; *marking sent* names a ``key`` and answers an
``outbox_message``.  An operation answered ``refused`` did not happen; one answered ``indefinite``
(or never answered) may have happened at any time after its invoke.

* ``inbox_handed_twice`` (inbox.drain.inflight, inbox.ack): a message of one recipient handed out
  by two drains answered ok with no nack of it (not refused) that can come between them in real
  time, or handed out more times than one plus its nacks: two holders at once.
* ``inbox_delivered_twice`` (inbox.deliver.idempotent): two deliveries of one message id to one
  recipient both answered as new.
* ``inbox_sender_order`` (inbox.fifo.per_sender, inbox.nack.redeliver): a drain answered ok
  handed out a sender's message while an earlier message of the same sender (its delivery
  answered as new before the later one's was invoked) was certainly pending: never handed out by
  then, or handed out and given back by nacks answered before the drain, and no ack, other nack
  or unanswered drain that may have taken it before the drain.  The contract's order is per
  sender and holds across drains: a message nacked back keeps its place.
* ``outbox_phantom`` (outbox.intent_first): a relay listing or a mark-sent answered ok with a
  message whose key no enqueue that was not refused, invoked before that answer, could have made
  (an outbound message for a write that never happened).
* ``outbox_created_twice`` (outbox.dedupe): two enqueues of one key both answered ``created``.
* ``outbox_sent_still_pending`` (outbox.mark_sent): a relay listing invoked after a mark-sent of a
  key was answered ok still hands that message to the relay (it would be sent twice).
* ``outbox_dropped`` (outbox.intent_first): a relay listing answered with fewer messages than its
  batch holds, without a message whose enqueue was answered ok before the listing was invoked and
  that no mark-sent (not refused) invoked before the listing's answer can have taken out.

``roles`` names the operations (the safety campaign's ``profiles`` workload drives them too);
``cross_coverage`` says what a history reached of what these rules judge, and which profile it
drove without reaching what its rules need (a line of the verdict's ``missing``); ``attach_cross``
adds findings and coverage to a campaign's result.

Each finding: ``{"rule", "items", "ops", "text"}`` (op ids of the merged history; ``items`` names
work items, or for the inbox ``recipient/message_id`` and for the outbox ``outbox:key``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ledgercheck.spec import Spec, default_spec

from .history import History


def roles(spec: Spec) -> dict[str, str | None]:
    """The operations the cross-item rules (and the safety campaign's ``profiles`` workload) play
    with, found from what the contract says they take and answer (None: the contract has none)."""
    ops = spec.operations

    def one(pred: Any) -> str | None:
        return next((n for n, o in ops.items() if pred(o)), None)

    def write(o: Any) -> bool:
        return bool(o.kind != "read")

    return {
        "spawn": one(lambda o: o.returns == "create_result" and o.kind != "create"),
        "join": one(lambda o: o.kind == "read" and o.returns == "work_list" and "work_id" in o.args),
        "cascade": one(lambda o: write(o) and o.returns == "work_list" and "work_id" in o.args),
        "deliver": one(lambda o: write(o) and "message_id" in o.args and "sender" in o.args),
        "drain": one(lambda o: write(o) and o.returns == "message_list"),
        "ack": one(lambda o: write(o) and "message_id" in o.args and "sender" not in o.args and o.returns == "none"),
        "nack": one(lambda o: write(o) and "message_id" in o.args and o.returns == "nack_result"),
        "enqueue": one(lambda o: write(o) and o.returns == "enqueue_result"),
        "listing": one(lambda o: o.kind == "read" and o.returns == "outbox_list"),
        "mark": one(lambda o: write(o) and o.returns == "outbox_message" and "key" in o.args),
    }


def cross_coverage(history: History, spec: Spec | None = None) -> tuple[dict[str, int], list[str]]:
    """What the history reached of the behaviours the cross-item rules judge, and one line for
    each profile the history drove (some operation of it was invoked) without reaching what its
    rules need: such a run says nothing about them (the verdict is INCONCLUSIVE, as for claims)."""
    spec = spec or default_spec()
    r = roles(spec)
    cov = dict.fromkeys(("spawn_ok", "join_ok", "tree_cancel_ok", "inbox_delivered", "inbox_handed",
                         "inbox_handed_after_nack", "inbox_acked", "inbox_dead_lettered", "outbox_enqueued", "outbox_listed",
                         "outbox_marked_sent"), 0)
    invoked: set[str | None] = set()
    nacked: set[tuple[Any, Any]] = set()
    for inv, comp in _ops(history):
        name = inv.op
        invoked.add(name)
        ok = comp is not None and comp.outcome == "ok"
        if not ok:
            continue
        res = comp.result
        if name == r["spawn"]:
            cov["spawn_ok"] += 1
        elif name == r["join"]:
            cov["join_ok"] += 1
        elif name == r["cascade"]:
            cov["tree_cancel_ok"] += 1
        elif name == r["deliver"] and isinstance(res, Mapping) and res.get("delivered") is True:
            cov["inbox_delivered"] += 1
        elif name == r["drain"] and isinstance(res, list):
            for m in res:
                if isinstance(m, Mapping):
                    cov["inbox_handed"] += 1
                    cov["inbox_handed_after_nack"] += (inv.args.get("recipient"), m.get("message_id")) in nacked
        elif name == r["nack"]:
            nacked.add((inv.args.get("recipient"), inv.args.get("message_id")))
            cov["inbox_dead_lettered"] += isinstance(res, Mapping) and res.get("dead") is True
        elif name == r["ack"]:
            cov["inbox_acked"] += 1
        elif name == r["enqueue"] and isinstance(res, Mapping) and res.get("created") is True:
            cov["outbox_enqueued"] += 1
        elif name == r["listing"] and isinstance(res, list):
            cov["outbox_listed"] += len(res)
        elif name == r["mark"]:
            cov["outbox_marked_sent"] += 1
    again = repeated_requests(history, spec)
    for rule, (_, states) in _DEDUPE.items():
        cov[f"{rule}_first"] = again.get((rule, "first"), 0)
        for st in dict.fromkeys(x for need in states for x in _SAME_STATE.get((rule, need), (need,))):
            cov[f"{rule}_again_{st}"] = again.get((rule, st), 0)
    missing: list[str] = []
    if r["spawn"] in invoked and not (cov["spawn_ok"] and cov["join_ok"]):
        missing.append(f"spawn trees were driven but {'no spawn' if not cov['spawn_ok'] else 'no join'} completed ok: "
                       f"the spawn rules judged nothing")
    if {r["deliver"], r["drain"]} & invoked and not cov["inbox_handed"]:
        missing.append("the inbox was driven but no message was ever handed out: its cross-item rules judged nothing")
    if {r["enqueue"], r["listing"]} & invoked and not (cov["outbox_listed"] and cov["outbox_marked_sent"]):
        missing.append("the outbox was driven but " + ("no listing handed the relay a message" if not cov["outbox_listed"]
                                                       else "no message was marked sent") + ": its cross-item rules judged little")
    for rule, (clause, states) in _DEDUPE.items():
        if not cov[f"{rule}_first"]:
            continue  # nothing ever arrived: the profile's own line above says so
        needed = [st for st in states if st not in _ONLY_IF_REACHED or cov[_ONLY_IF_REACHED[st]]]
        unmet = [st for st in needed if not any(cov.get(f"{rule}_again_{x}", 0) for x in _SAME_STATE.get((rule, st), (st,)))]
        if unmet:
            missing.append(f"no request was repeated while its target was {' or '.join(_STATE_WORDS[st] for st in unmet)}: "
                           f"{rule} ({clause}) judged nothing of a dedupe that forgets a target in "
                           f"{'that state' if len(unmet) == 1 else 'those states'}")
    return cov, missing


# The dedupe rules and the states of their target a repeated request can meet: the last write of
# the target's operations before the repeat (every operation that moves a message or an outbound
# message is one of these roles).  A repeat is judged by the same rule whatever the state, but a
# ledger can keep its dedupe for some states and lose it in others (a dedupe that looks at pending
# rows only, one that deletes what was acked or sent), so a run judges the rule only for the states
# it repeated a request in.
_DEDUPE = {"inbox_delivered_twice": ("inbox.deliver.idempotent", ("pending", "handed", "acked", "dead")),
           "outbox_created_twice": ("outbox.dedupe", ("pending", "sent"))}
_SAME_STATE = {("inbox_delivered_twice", "pending"): ("pending", "nacked")}  # a nack gives the message back to pending
_ONLY_IF_REACHED = {"dead": "inbox_dead_lettered"}  # asked only of a run that dead-lettered a message
_STATE_WORDS = {"pending": "pending", "handed": "handed out (in flight)", "acked": "acknowledged",
                "dead": "dead-lettered", "sent": "marked sent"}


def repeated_requests(history: History, spec: Spec | None = None) -> dict[tuple[str, str], int]:
    """The repeated requests of the dedupe rules, counted by the state their target was surely in.

    A repeat is a delivery of a (recipient, message id), or an enqueue of an outbox key, invoked
    after a first one of it was answered as new.  Its target's state is the last of the target's
    operations that ended before the repeat was invoked (a delivery: pending; a drain that handed it
    out: handed; an ack: acked; a nack: nacked, or dead when its answer says so; a mark-sent: sent).
    A repeat is not counted when any operation of its target (or, while the target is pending, an
    unanswered drain of its recipient) may have taken effect while the repeat was in flight: its
    state is then not certain.  Also ``(rule, "first")``: how many targets were answered as new."""
    spec = spec or default_spec()
    r = roles(spec)
    recs = _ops(history)
    # target -> [(invoke time, end time, role, answer)]; the repeats' candidates with their rule
    touched: dict[tuple[str, str, str], list[tuple[float, float, str, Any]]] = {}
    requests: dict[tuple[str, str, str], list[tuple[Any, Any]]] = {}
    blind: dict[str, list[tuple[float, float]]] = {}  # recipient -> drains that may have handed anything
    for inv, comp in recs:
        a, name = inv.args, inv.op
        if not _happened(comp):
            continue
        span = (inv.t, _end(comp))
        box = a.get("recipient")
        if name == r["deliver"] and isinstance(box, str) and isinstance(a.get("message_id"), str):
            t = ("inbox_delivered_twice", box, a["message_id"])
            requests.setdefault(t, []).append((inv, comp))
            touched.setdefault(t, []).append((*span, "request", comp))
        elif name == r["drain"] and isinstance(box, str):
            if comp is None or comp.outcome != "ok" or not isinstance(comp.result, list):
                blind.setdefault(box, []).append(span)
                continue
            for m in comp.result:
                if isinstance(m, Mapping) and isinstance(m.get("message_id"), str):
                    touched.setdefault(("inbox_delivered_twice", box, m["message_id"]), []).append((*span, "handed", comp))
        elif name in (r["ack"], r["nack"]) and isinstance(box, str) and isinstance(a.get("message_id"), str):
            dead = name == r["nack"] and comp is not None and isinstance(comp.result, Mapping) and comp.result.get("dead") is True
            role = "acked" if name == r["ack"] else "dead" if dead else "nacked"
            touched.setdefault(("inbox_delivered_twice", box, a["message_id"]), []).append((*span, role, comp))
        elif name == r["enqueue"] and isinstance(a.get("key"), str):
            t = ("outbox_created_twice", "", a["key"])
            requests.setdefault(t, []).append((inv, comp))
            touched.setdefault(t, []).append((*span, "request", comp))
        elif name == r["mark"] and isinstance(a.get("key"), str):
            touched.setdefault(("outbox_created_twice", "", a["key"]), []).append((*span, "sent", comp))
    out: dict[tuple[str, str], int] = {}
    for t, reqs in requests.items():
        rule = t[0]
        news = [_end(c) for _, c in reqs if c is not None and c.outcome == "ok" and isinstance(c.result, Mapping)
                and (c.result.get("delivered") is True or c.result.get("created") is True)]
        if not news:
            continue
        out[(rule, "first")] = out.get((rule, "first"), 0) + 1
        first = min(news)
        for inv, comp in reqs:
            start, end = inv.t, _end(comp)
            if start <= first:
                continue
            others = [x for x in touched[t] if x[2] != "request"]  # a repeat leaves the state as it was
            if any(x[0] < end and x[1] > start for x in others):
                continue  # something of its target may have happened while it was in flight
            before = [x for x in others if x[1] < start]
            state = max(before, key=lambda x: x[1])[2] if before else "pending"
            if state in ("pending", "nacked") and any(b[0] < end for b in blind.get(t[1], ())):
                continue  # an unanswered drain may have handed it out
            out[(rule, state)] = out.get((rule, state), 0) + 1
    return out


def _ops(history: History) -> list[tuple[Any, Any]]:
    rows = history.rows
    idx = history.op_rows()
    out = []
    for i in idx.invokes:
        inv = rows[i]
        c = idx.completes.get(inv.id)  # type: ignore[union-attr]
        out.append((inv, rows[c] if c is not None else None))
    return out


def _wid(x: Any) -> str | None:
    if isinstance(x, Mapping):
        w = x.get("work_id")
        if isinstance(w, str):
            return w
        if isinstance(x.get("work"), Mapping) and isinstance(x["work"].get("work_id"), str):
            return x["work"]["work_id"]  # type: ignore[no-any-return]
    return None


def check_cross(history: History, spec: Spec | None = None) -> list[dict[str, Any]]:
    spec = spec or default_spec()
    ops = spec.operations
    spawners = {n: next((a for a in o.args if a.endswith("_id") and a != "work_id"), None)
                for n, o in ops.items() if o.returns == "create_result" and o.kind != "create"}
    joins = {n for n, o in ops.items() if o.kind == "read" and o.returns == "work_list" and "work_id" in o.args}
    cascades = {n for n, o in ops.items() if o.kind != "read" and o.returns == "work_list" and "work_id" in o.args}
    cancel_ops = {n for n, o in ops.items() if o.profile == "cancel"}
    cancelled = {t.dst for t in spec.transitions if set(t.ops) & cancel_ops}
    terminal = set(spec.terminal_statuses)

    recs = _ops(history)
    # child -> (parent, completion t of its spawn, spawn op id)
    parent: dict[str, tuple[str, float, int]] = {}
    for inv, comp in recs:
        arg = spawners.get(inv.op)
        if arg and comp is not None and comp.outcome == "ok":
            c, p = _wid(comp.result), inv.args.get(arg)
            if isinstance(c, str) and isinstance(p, str):
                parent.setdefault(c, (p, comp.t, inv.id))
    kids: dict[str, list[str]] = {}
    for c, (p, _, _) in parent.items():
        kids.setdefault(p, []).append(c)

    def descendants(w: str, before: float) -> list[str]:
        out, frontier = [], [w]
        while frontier:
            frontier = [c for x in frontier for c in kids.get(x, ()) if parent[c][1] < before]
            out += frontier
        return out

    found: list[dict[str, Any]] = []
    for inv, comp in recs:
        if comp is None or comp.outcome != "ok" or not isinstance(comp.result, list):
            continue
        p = inv.args.get("work_id")
        if not isinstance(p, str):
            continue
        got = {_wid(x) for x in comp.result}
        if inv.op in joins:
            missing = [c for c in kids.get(p, ()) if parent[c][1] < inv.t and c not in got]
            if missing:
                found.append({"rule": "partial_join", "items": [p, *missing],
                              "ops": [*(parent[c][2] for c in missing), inv.id],
                              "text": f"{inv.op}({p}) (#{inv.id}) answered {len(got)} children without {', '.join(missing)}, "
                                      f"spawned (ok) before it was asked"})
        elif inv.op in cascades:
            for c in descendants(p, inv.t):
                if c in got:
                    continue
                late = next(((i2, c2) for i2, c2 in recs if c2 is not None and c2.outcome == "ok" and i2.t > comp.t
                             and _wid(c2.result) == c and isinstance(c2.result, Mapping)
                             and (c2.result.get("status") or (c2.result.get("work") or {}).get("status")) in terminal - cancelled),
                            None)
                if late is not None:
                    i2, c2 = late
                    st = c2.result.get("status")
                    found.append({"rule": "child_finished_under_cancelled_parent", "items": [p, c],
                                  "ops": [parent[c][2], inv.id, i2.id],
                                  "text": f"{inv.op}({p}) (#{inv.id}) left out {c}, spawned before it, which then finished "
                                          f"{st} by {i2.op} #{i2.id} after the cancel was answered"})
    found += _inbox(recs, spec)
    found += _outbox(recs, spec)
    return found


INF = float("inf")


def _end(comp: Any) -> float:
    """When an operation's effect is over: its answer's time, or never for one not answered."""
    return comp.t if comp is not None and comp.outcome != "indefinite" else INF


def _happened(comp: Any) -> bool:
    """Whether an operation may have taken effect (not refused)."""
    return comp is None or comp.outcome != "refused"


def _between(a: tuple[float, float], n: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether some order consistent with real time puts ``n`` after ``a`` and before ``b``
    (each (invoke, end))."""
    return a[0] < n[1] and n[0] < b[1] and a[0] < b[1]


def _inbox(recs: list[tuple[Any, Any]], spec: Spec) -> list[dict[str, Any]]:
    ops = spec.operations
    delivers = {n for n, o in ops.items() if o.kind != "read" and "message_id" in o.args and "sender" in o.args}
    drains = {n for n, o in ops.items() if o.kind != "read" and o.returns == "message_list"}
    nacks = {n for n, o in ops.items() if o.kind != "read" and "message_id" in o.args and o.returns == "nack_result"}
    found: list[dict[str, Any]] = []
    handed: dict[tuple[str, str], list[tuple[Any, Any]]] = {}
    released: dict[tuple[str, str], list[tuple[Any, Any]]] = {}
    new: dict[tuple[str, str], list[Any]] = {}
    for inv, comp in recs:
        r, args = inv.args.get("recipient"), inv.args
        if not isinstance(r, str):
            continue
        if inv.op in drains and comp is not None and comp.outcome == "ok" and isinstance(comp.result, list):
            for m in comp.result:
                if isinstance(m, Mapping) and isinstance(m.get("message_id"), str):
                    handed.setdefault((r, m["message_id"]), []).append((inv, comp))
        elif inv.op in nacks and isinstance(args.get("message_id"), str) and _happened(comp):
            released.setdefault((r, args["message_id"]), []).append((inv, comp))
        elif inv.op in delivers and isinstance(args.get("message_id"), str) and comp is not None and comp.outcome == "ok" \
                and isinstance(comp.result, Mapping) and comp.result.get("delivered") is True:
            new.setdefault((r, args["message_id"]), []).append(inv)
    for (r, mid), hs in handed.items():
        if len(hs) < 2:
            continue
        ns = released.get((r, mid), [])
        spans = [(i.t, _end(c)) for i, c in ns]
        bad = None
        for x in range(len(hs)):
            for y in range(x + 1, len(hs)):
                a, b = (hs[x][0].t, hs[x][1].t), (hs[y][0].t, hs[y][1].t)
                if not any(_between(a, n, b) or _between(b, n, a) for n in spans):
                    bad = (hs[x], hs[y])
                    break
            if bad:
                break
        if bad is None and len(hs) > len(ns) + 1:
            bad = (hs[0], hs[-1])
        if bad is not None:
            (i1, _), (i2, _) = bad
            found.append({"rule": "inbox_handed_twice", "items": [f"{r}/{mid}"], "ops": [i1.id, i2.id, *(i.id for i, _ in ns)],
                          "text": f"message {mid!r} of {r!r} was handed out by {i1.op} #{i1.id} ({i1.process}) and {i2.op} "
                                  f"#{i2.id} ({i2.process}) with {len(ns)} nack(s) of it that can come between "
                                  f"({len(hs)} hand-outs in all)"})
    found += _sender_order(recs, spec, handed, released)
    for (r, mid), ds in new.items():
        if len(ds) > 1:
            found.append({"rule": "inbox_delivered_twice", "items": [f"{r}/{mid}"], "ops": [i.id for i in ds],
                          "text": f"message {mid!r} to {r!r} was delivered as new {len(ds)} times "
                                  f"({', '.join(f'#{i.id}' for i in ds)})"})
    return found


def _sender_order(recs: list[tuple[Any, Any]], spec: Spec, handed: Mapping[tuple[str, str], list[tuple[Any, Any]]],
                  released: Mapping[tuple[str, str], list[tuple[Any, Any]]]) -> list[dict[str, Any]]:
    """``inbox_sender_order`` (inbox.fifo.per_sender, inbox.nack.redeliver): a drain answered ok
    handed out a sender's message while an earlier message of that sender was certainly pending.

    "Earlier": its delivery was answered as new before every delivery (not refused) of the later
    one was invoked.  "Certainly pending" during the drain: every hand-out of it that may come
    before the drain was answered before the drain was invoked and was given back by as many nacks
    answered ok (not dead-lettered) before the drain was invoked; no ack of it (not refused), no
    other nack of it, and no drain of the recipient that did not answer (it may have handed it
    out) may come before the drain.  Anything less certain is not judged."""
    r_ = roles(spec)
    ops = spec.operations
    delivers = {n for n, o in ops.items() if o.kind != "read" and "message_id" in o.args and "sender" in o.args}
    drains = {n for n, o in ops.items() if o.kind != "read" and o.returns == "message_list"}
    acks = {r_["ack"]} - {None}
    # (recipient, message id) -> sender, and when it surely arrived (a delivery answered as new)
    sender: dict[tuple[str, str], str] = {}
    arrived: dict[tuple[str, str], float] = {}
    first_try: dict[tuple[str, str], float] = {}  # the first invoke of a delivery of it that was not refused
    acked: dict[tuple[str, str], list[Any]] = {}
    open_drains: dict[str, list[Any]] = {}  # recipient -> invokes of drains that did not answer
    for inv, comp in recs:
        r, mid = inv.args.get("recipient"), inv.args.get("message_id")
        if not isinstance(r, str):
            continue
        if inv.op in delivers and isinstance(mid, str) and isinstance(inv.args.get("sender"), str) and _happened(comp):
            sender.setdefault((r, mid), inv.args["sender"])
            first_try[(r, mid)] = min(first_try.get((r, mid), INF), inv.t)
            if comp is not None and comp.outcome == "ok" and isinstance(comp.result, Mapping) \
                    and comp.result.get("delivered") is True:
                arrived[(r, mid)] = min(arrived.get((r, mid), INF), comp.t)
        elif inv.op in acks and isinstance(mid, str) and _happened(comp):
            acked.setdefault((r, mid), []).append(inv)
        elif inv.op in drains and (comp is None or comp.outcome == "indefinite"):
            open_drains.setdefault(r, []).append(inv)
    by_sender: dict[tuple[str, str], list[str]] = {}
    for (r, mid), s in sender.items():
        by_sender.setdefault((r, s), []).append(mid)

    def pending_throughout(r: str, mid: str, d0: float, d1: float) -> bool:
        if any(i.t < d1 for i in acked.get((r, mid), ())) or any(i.t < d1 for i in open_drains.get(r, ())):
            return False
        hs = [(i, c) for i, c in handed.get((r, mid), ()) if i.t < d1]
        ns = [(i, c) for i, c in released.get((r, mid), ()) if i.t < d1]
        if any(c.t >= d0 for _, c in hs):
            return False
        back = [c for _, c in ns if c is not None and c.outcome == "ok" and c.t < d0
                and isinstance(c.result, Mapping) and c.result.get("dead") is False]
        return len(back) == len(ns) == len(hs)

    found: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str]] = set()
    for (r, later), hs in handed.items():
        s = sender.get((r, later))
        if s is None:
            continue
        for d_inv, d_comp in hs:
            got = {m.get("message_id") for m in d_comp.result if isinstance(m, Mapping)}
            for earlier in by_sender.get((r, s), ()):
                if earlier == later or earlier in got or (r, earlier, later) in seen:
                    continue
                if not arrived.get((r, earlier), INF) < first_try.get((r, later), -INF):
                    continue
                if pending_throughout(r, earlier, d_inv.t, d_comp.t):
                    seen.add((r, earlier, later))
                    found.append({"rule": "inbox_sender_order", "items": [f"{r}/{later}", f"{r}/{earlier}"], "ops": [d_inv.id],
                                  "text": f"{d_inv.op} #{d_inv.id} ({d_inv.process}) handed out {later!r} of sender {s!r} to "
                                          f"{r!r} while {earlier!r}, which that sender's messages had brought before it, was "
                                          f"pending"})
    return found


def _outbox(recs: list[tuple[Any, Any]], spec: Spec) -> list[dict[str, Any]]:
    ops = spec.operations
    enqueues = {n for n, o in ops.items() if o.kind != "read" and o.returns == "enqueue_result"}
    listings = {n for n, o in ops.items() if o.kind == "read" and o.returns == "outbox_list"}
    marks = {n for n, o in ops.items() if o.kind != "read" and o.returns == "outbox_message" and "key" in o.args}
    found: list[dict[str, Any]] = []
    made: dict[str, list[tuple[Any, Any]]] = {}  # key -> enqueues that may have happened
    marked: dict[str, list[tuple[Any, Any]]] = {}  # key -> mark-sents that may have happened
    shown: list[tuple[Any, Any, list[str]]] = []  # (invoke, completion, keys) of answers showing messages
    for inv, comp in recs:
        key = inv.args.get("key")
        if inv.op in enqueues and isinstance(key, str) and _happened(comp):
            made.setdefault(key, []).append((inv, comp))
        elif inv.op in marks and isinstance(key, str):
            if _happened(comp):
                marked.setdefault(key, []).append((inv, comp))
            if comp is not None and comp.outcome == "ok" and isinstance(comp.result, Mapping):
                shown.append((inv, comp, [str(comp.result.get("key", key))]))
        elif inv.op in listings and comp is not None and comp.outcome == "ok" and isinstance(comp.result, list):
            shown.append((inv, comp, [str(m.get("key")) for m in comp.result if isinstance(m, Mapping)]))
    for inv, comp, keys in shown:
        for k in keys:
            if not any(i.t < comp.t for i, _ in made.get(k, ())):
                found.append({"rule": "outbox_phantom", "items": [f"outbox:{k}"], "ops": [inv.id],
                              "text": f"{inv.op} #{inv.id} answered outbox message {k!r}, which no enqueue invoked before "
                                      f"its answer made (every one refused, or none)"})
    for k, es in made.items():
        created = [i for i, c in es if c is not None and c.outcome == "ok" and isinstance(c.result, Mapping)
                   and c.result.get("created") is True]
        if len(created) > 1:
            found.append({"rule": "outbox_created_twice", "items": [f"outbox:{k}"], "ops": [i.id for i in created],
                          "text": f"outbox key {k!r} was enqueued as a new message {len(created)} times "
                                  f"({', '.join(f'#{i.id}' for i in created)})"})
    for inv, comp, keys in shown:
        if inv.op not in listings:
            continue
        got = set(keys)
        for k in sorted(got):
            sent = next((i for i, c in marked.get(k, ()) if c is not None and c.outcome == "ok" and c.t < inv.t), None)
            if sent is not None:
                found.append({"rule": "outbox_sent_still_pending", "items": [f"outbox:{k}"], "ops": [sent.id, inv.id],
                              "text": f"{inv.op} #{inv.id} handed outbox message {k!r} to the relay after {sent.op} "
                                      f"#{sent.id} had marked it sent"})
        limit = inv.args.get("max") or spec.outbox_pending_max
        if len(keys) >= limit:
            continue
        for k, es in made.items():
            if k in got:
                continue
            e = next((i for i, c in es if c is not None and c.outcome == "ok" and c.t < inv.t), None)
            if e is None or any(i.t < comp.t for i, _ in marked.get(k, ())):
                continue
            found.append({"rule": "outbox_dropped", "items": [f"outbox:{k}"], "ops": [e.id, inv.id],
                          "text": f"{inv.op} #{inv.id} answered {len(keys)} of at most {limit} pending messages without "
                                  f"{k!r}, enqueued by #{e.id} before it and never marked sent"})
    return found



def attach_cross(result: Any, verdict: Any, spec: Spec | None = None) -> Any:
    """The cross-item rules on a safety campaign's history (chaos/safety.attach_verdict calls
    this for the ``profiles`` workload): each finding joins the result's anomalies (``class`` is
    the rule, ``work_id`` the first item or message it names, ``explanation`` its text), the
    reached behaviours its coverage, and what the run drove without reaching its ``missing`` (in
    ``verdict`` too, so a rendering of the verdict says it); the result's verdict again."""
    from .history import load_history

    history = load_history(result.history)
    found = check_cross(history, spec)
    cov, missing = cross_coverage(history, spec)
    result.anomalies = list(result.anomalies or []) + [
        {"class": f["rule"], "work_id": f["items"][0], "explanation": f["text"], "items": f["items"], "ops": f["ops"],
         "excerpt": [], "context": [], "cause": []} for f in found]
    result.coverage.update({k: v for k, v in cov.items()})
    for m in missing:
        if m not in verdict.missing:
            verdict.missing.append(m)
    result.missing = list(verdict.missing)
    result.verdict = "fail" if result.anomalies else "inconclusive" if result.missing else "pass"
    return result
