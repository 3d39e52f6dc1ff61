"""The lanes profile's operations: a lease per (session key, lane) and the lane's queue of
follow-up work.

A lane lease is live while now <= expires_at + grace (the contract's default lease timings),
lapsed after.  Within the model's tolerance of that instant either answer is allowed.  A write
with the lane's current token after its lease lapsed, while nobody has taken the lane over yet,
may be accepted or refused with stale_lease (the contract leaves it open); every other token is
refused.  Tasks are kept in arrival order; a task handed to a lease that is released or lapses
goes back to ``queued`` at its place when the lane changes hands.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from .base import Accept, Expectation, ModelBase, Refuse, Violation, _Bad, same_json

LIVE, LAPSED, EDGE, FREE = "live", "lapsed", "edge", "free"
LEASE_FIELDS = ("session_key", "lane", "owner", "token", "version", "expires_at")


class LanesOps(ModelBase):
    PROFILE = "lanes"

    def _lane(self, a: Mapping[str, Any]) -> dict[str, Any]:
        return self.lanes.setdefault((a["session_key"], a["lane"]), {
            "owner": None, "token": None, "version": 0, "expires_at": None, "released": False, "tokens": [], "tasks": []})

    def _lane_state(self, ln: Mapping[str, Any], now: float) -> str:
        if ln["token"] is None or ln["released"]:
            return FREE
        limit = ln["expires_at"] + self.spec.lease_default.grace
        if self._ambiguous(now, limit):
            return EDGE
        return LAPSED if now > limit else LIVE

    def _lane_guard(self, op: str, a: Mapping[str, Any]) -> tuple[dict[str, Any], Refuse | None, frozenset[str]]:
        """The lane, a refusal when the token is not its current lease, and the refusals that are
        also allowed (stale_lease when the current lease has lapsed or is at its edge)."""
        ln = self._lane(a)
        state = self._lane_state(ln, a["now"])
        if a["token"] != ln["token"] or state == FREE:
            why = "a token of an earlier lease" if a["token"] in ln["tokens"] else "not the lane's lease"
            return ln, Refuse(frozenset({"stale_lease"}), "lanes.fencing", f"{op}: {why} on lane {a['lane']!r}"), frozenset()
        return ln, None, frozenset({"stale_lease"}) if state in (LAPSED, EDGE) else frozenset()

    def _hand_back(self, ln: dict[str, Any]) -> None:
        for t in ln["tasks"]:
            if t["state"] == "handed":
                t["state"] = "queued"

    def _check_lease(self, res: Any, want: Mapping[str, Any], clause: str) -> list[Violation]:
        if not isinstance(res, Mapping):
            raise _Bad(clause, f"expected a lane lease, got {res!r:.80}")
        out = []
        for f in LEASE_FIELDS:
            if f == "token":
                continue
            got = res.get(f)
            ok = self._same("time", want[f], got) if f == "expires_at" else same_json(got, want[f])
            if not ok:
                out.append(Violation(clause, f"lane {want['lane']!r}: lease {f} is {got!r}, the contract says {want[f]!r}"))
        return out

    def _op_lane_acquire(self, a: dict[str, Any]) -> Expectation:
        ln = self._lane(a)
        state = self._lane_state(ln, a["now"])
        now = a["now"]

        def h(res: Any) -> list[Violation]:
            if res is None:
                if state in (FREE, LAPSED):
                    why = "released" if ln["released"] else "never leased" if ln["token"] is None else "lapsed"
                    return [Violation("lanes.takeover", f"lane {a['lane']!r} is {why} but acquire answered null")]
                return []
            if state == LIVE:
                return [Violation("lanes.exclusive", f"lane {a['lane']!r} was handed to {a['owner']!r} while the lease of "
                                  f"{ln['owner']!r} (expires {ln['expires_at']!r}) is live")]
            tok = res.get("token") if isinstance(res, Mapping) else None
            want = {"session_key": a["session_key"], "lane": a["lane"], "owner": a["owner"], "token": tok,
                    "version": ln["version"] + 1, "expires_at": now + self.spec.lease_default.ttl}
            out = self._check_lease(res, want, "lanes.takeover")
            if not isinstance(tok, str) or not tok or tok in ln["tokens"]:
                out.append(Violation("lanes.takeover", f"lane {a['lane']!r}: acquire must give a fresh token, got {tok!r}"))
            self._hand_back(ln)
            ln.update(owner=a["owner"], token=tok, version=want["version"], released=False,
                      expires_at=res.get("expires_at") if self._same("time", want["expires_at"], res.get("expires_at")) else want["expires_at"])
            ln["tokens"].append(tok)
            return out

        return Accept(h, "lanes.takeover", f"acquire of lane {a['lane']!r} answers")

    def _op_lane_renew(self, a: dict[str, Any]) -> Expectation:
        ln, refuse, also = self._lane_guard("lane_renew", a)
        if refuse:
            return refuse
        now = a["now"]

        def h(res: Any) -> list[Violation]:
            want = {"session_key": a["session_key"], "lane": a["lane"], "owner": ln["owner"], "token": ln["token"],
                    "version": ln["version"], "expires_at": now + self.spec.lease_default.ttl}
            out = self._check_lease(res, want, "lanes.renew")
            if res.get("token") != ln["token"]:
                out.append(Violation("lanes.renew", f"lane {a['lane']!r}: renew changed the token"))
            ln["expires_at"] = res.get("expires_at") if self._same("time", want["expires_at"], res.get("expires_at")) else want["expires_at"]
            return out

        return Accept(h, "lanes.renew", f"the holder renews lane {a['lane']!r}", also_refuse=also)

    def _op_lane_release(self, a: dict[str, Any]) -> Expectation:
        ln, refuse, also = self._lane_guard("lane_release", a)
        if refuse:
            return refuse

        def h(res: Any) -> list[Violation]:
            self._hand_back(ln)
            ln["released"] = True
            return []

        return Accept(h, "lanes.fencing", f"the holder releases lane {a['lane']!r}", also_refuse=also)

    def _op_lane_push(self, a: dict[str, Any]) -> Expectation:
        ln = self._lane(a)
        dup = any(t["task_id"] == a["task_id"] for t in ln["tasks"])

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, Mapping) or not isinstance(res.get("queued"), bool):
                raise _Bad("lanes.queue.durable", f"expected {{queued: bool}}, got {res!r:.80}")
            if dup:
                return [] if res["queued"] is False else [Violation("lanes.push.idempotent", f"task {a['task_id']!r} queued twice")]
            ln["tasks"].append({"task_id": a["task_id"], "body": copy.deepcopy(a.get("body")), "state": "queued"})
            return [] if res["queued"] is True else [Violation("lanes.queue.durable", f"first push of {a['task_id']!r} reported as not queued")]

        return Accept(h, "lanes.queue.durable", "a push is always accepted")

    def _op_lane_next(self, a: dict[str, Any]) -> Expectation:
        ln, refuse, also = self._lane_guard("lane_next", a)
        if refuse:
            return refuse

        def h(res: Any) -> list[Violation]:
            queued = [t for t in ln["tasks"] if t["state"] == "queued"]
            if res is None:
                if queued:
                    return [Violation("lanes.queue.durable", f"lane {a['lane']!r}: next answered null although "
                                      f"{queued[0]['task_id']!r} is queued")]
                return []
            if not isinstance(res, Mapping):
                raise _Bad("lanes.queue.order", f"expected a task or null, got {res!r:.80}")
            by_id = {t["task_id"]: t for t in ln["tasks"]}
            got = by_id.get(res.get("task_id"))
            if got is None or got["state"] == "done":
                return [Violation("lanes.queue.durable", f"lane {a['lane']!r}: next handed out {res.get('task_id')!r}, "
                                  f"which is {'done' if got else 'unknown'}")]
            if got["state"] == "handed":
                return [Violation("lanes.queue.durable", f"lane {a['lane']!r}: {got['task_id']!r} handed out again under the same lease")]
            out = []
            if got is not queued[0]:
                out.append(Violation("lanes.queue.order", f"lane {a['lane']!r}: next handed out {got['task_id']!r}, "
                                     f"the oldest queued task is {queued[0]['task_id']!r}"))
            if not same_json(res.get("body"), got["body"]) or res.get("state") != "handed":
                out.append(Violation("lanes.queue.durable", f"lane {a['lane']!r}: {got['task_id']!r} came back as "
                                     f"{res.get('state')!r} with body {res.get('body')!r:.40}"))
            got["state"] = "handed"
            return out

        return Accept(h, "lanes.fencing", f"the holder of lane {a['lane']!r} takes its next task", also_refuse=also)

    def _op_lane_done(self, a: dict[str, Any]) -> Expectation:
        ln, refuse, also = self._lane_guard("lane_done", a)
        if refuse:
            return refuse
        task = next((t for t in ln["tasks"] if t["task_id"] == a["task_id"]), None)
        # a lapsed lease nobody took over may also be refused as such
        if task is None:
            return Refuse(frozenset({"not_found"}) | also, "lanes.queue.durable", f"lane {a['lane']!r} has no task {a['task_id']!r}")
        if task["state"] != "handed":
            # a finished task may also be answered as unknown (the contract leaves it open)
            done = frozenset({"not_found"}) if task["state"] == "done" else frozenset()
            return Refuse(frozenset({"invalid_transition"}) | done | also, "lanes.queue.durable",
                          f"task {a['task_id']!r} is {task['state']}, not handed to the holder")

        def h(res: Any) -> list[Violation]:
            task["state"] = "done"
            return []

        return Accept(h, "lanes.queue.durable", f"the holder marks {a['task_id']!r} done", also_refuse=also)

    def _op_lane_tasks(self, a: dict[str, Any]) -> Expectation:
        ln = self._lane(a)

        def h(res: Any) -> list[Violation]:
            if not isinstance(res, list) or not all(isinstance(t, Mapping) for t in res):
                raise _Bad("lanes.queue.durable", f"expected a list of tasks, got {res!r:.80}")
            want = [t for t in ln["tasks"] if t["state"] != "done"]
            got_ids = [t.get("task_id") for t in res]
            want_ids = [t["task_id"] for t in want]
            if sorted(map(str, got_ids)) != sorted(want_ids) or len(set(got_ids)) != len(got_ids):
                return [Violation("lanes.queue.durable", f"lane {a['lane']!r} holds {got_ids}, the contract says {want_ids}")]
            if got_ids != want_ids:
                return [Violation("lanes.queue.order", f"lane {a['lane']!r} lists {got_ids}, arrival order is {want_ids}")]
            out = []
            for g, w in zip(res, want, strict=True):
                if g.get("state") != w["state"] or not same_json(g.get("body"), w["body"]):
                    out.append(Violation("lanes.queue.durable", f"lane {a['lane']!r}: {w['task_id']!r} is {g.get('state')!r} "
                                         f"(body {g.get('body')!r:.40}), the contract says {w['state']!r} ({w['body']!r:.40})"))
            return out

        return Accept(h, "lanes.queue.durable", "a lane's tasks can always be listed")
