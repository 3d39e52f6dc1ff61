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
Not yet checked (the safety workload does not exercise them): an outbox message for a close-out
that never happened, an inbox message handed to two holders.

Each finding: ``{"rule", "items", "ops", "text"}`` (op ids of the merged history).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ledgercheck.spec import Spec, default_spec

from .history import History


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
    return found

