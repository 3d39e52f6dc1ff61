"""Deliberately broken ledgers: the reference adapter with one recovery-relevant bug each.

Each wraps a real ReferenceAdapter (durable SQLite, same crash points) and changes one thing
through the adapter protocol only.  The chaos tests load them in worker processes as
``python:broken_ledgers:<Name>`` with this directory on sys.path.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ledgercheck.reference.adapter import ReferenceAdapter


class _Wrapped:
    """Forwards everything to a reference adapter; subclasses override one behaviour."""

    bug = "none"

    def __init__(self) -> None:
        self._inner = ReferenceAdapter()

    def hello(self, protocol: str = "1.0") -> dict[str, Any]:
        hs = dict(self._inner.hello(protocol))
        hs["name"] = f"broken-{self.bug}"
        return hs

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._inner, name)


class EagerReceipt(_Wrapped):
    """Stores the receipt as completed when the intent is recorded, before the effect is known
    (the caller still gets the pending receipt it expects, so a run without crashes looks fine)."""

    bug = "eager-receipt"

    def effect_begin(self, **kw: Any) -> dict[str, Any]:
        res = self._inner.effect_begin(**kw)
        if res["created"]:
            r = res["receipt"]
            self._inner.effect_record(key=r["key"], input_hash=r["input_hash"], result={"assumed": "ok"},
                                      token=kw.get("token"), now=kw["now"])
        return res


class DropMarker(_Wrapped):
    """Never keeps the in-flight marker: the intent lives only in this process's memory, and the
    receipt is written (as completed) when the outcome is recorded."""

    bug = "drop-marker"

    def __init__(self) -> None:
        super().__init__()
        self._intents: dict[str, dict[str, Any]] = {}

    def effect_begin(self, **kw: Any) -> dict[str, Any]:
        spec = self._inner.spec
        key = spec.effect_key(work_id=kw["work_id"], step_id=kw["step_id"], tool=kw["tool"])
        stored = self._inner.effect_lookup(key=key)
        if stored is not None:
            return {"receipt": stored, "created": False}
        self._intents[key] = dict(kw)
        return {"receipt": {"key": key, "work_id": kw["work_id"], "step_id": kw["step_id"], "tool": kw["tool"],
                            "step_class": kw["step_class"], "input_hash": spec.input_hash(kw["input"]),
                            "state": "pending", "result": None}, "created": True}

    def effect_record(self, **kw: Any) -> dict[str, Any]:
        intent = self._intents.pop(kw["key"], None)
        if intent is not None and self._inner.effect_lookup(key=kw["key"]) is None:
            self._inner.effect_begin(**intent)
        return self._inner.effect_record(**kw)


class NoFencing(_Wrapped):
    """Accepts any lease token: every write goes through with the item's current token."""

    bug = "no-fencing"

    def _live(self, work_id: str, token: Any) -> Any:
        current = self._inner.get(work_id=work_id).get("lease_token")
        return current if current is not None else token

    def renew(self, **kw: Any) -> dict[str, Any]:
        return self._inner.renew(**{**kw, "token": self._live(kw["work_id"], kw["token"])})

    def close_out(self, **kw: Any) -> dict[str, Any]:
        return self._inner.close_out(**{**kw, "token": self._live(kw["work_id"], kw["token"])})

    def set_waiting(self, **kw: Any) -> dict[str, Any]:
        return self._inner.set_waiting(**{**kw, "token": self._live(kw["work_id"], kw["token"])})

    def effect_begin(self, **kw: Any) -> dict[str, Any]:
        if kw.get("token") is not None:
            kw = {**kw, "token": self._live(kw["work_id"], kw["token"])}
        return self._inner.effect_begin(**kw)

    def effect_record(self, **kw: Any) -> dict[str, Any]:
        r = self._inner.effect_lookup(key=kw["key"])
        if r is not None and kw.get("token") is not None:
            kw = {**kw, "token": self._live(r["work_id"], kw["token"])}
        return self._inner.effect_record(**kw)


class WaitingIsStale(_Wrapped):
    """Recovery treats work that has waited longer than a lease lapse as stale: it takes the
    waiting item back as if its worker had died holding it."""

    bug = "waiting-is-stale"

    def recover(self, *, now: float) -> list[dict[str, Any]]:
        spec = self._inner.spec
        waiting_set = spec.operations["set_waiting"].event_for()
        for status in spec.waiting_statuses.values():
            for w in self._inner.list(status=status):
                lt = spec.lease_for(w["source_system"])
                since = max((e["at"] for e in self._inner.events(work_id=w["work_id"]) if e["type"] == waiting_set),
                            default=now)
                if now - since > lt.ttl + lt.grace:
                    old = since - 10 * (lt.ttl + lt.grace)
                    self._inner.resume(work_id=w["work_id"], owner="recovery-scan", now=old)
        return self._inner.recover(now=now)


class HangsOnRecover(_Wrapped):
    """The recovery scan never answers."""

    bug = "hangs"

    def recover(self, *, now: float) -> list[dict[str, Any]]:
        time.sleep(3600)
        return []


class DiesOnRecover(_Wrapped):
    """The process running the adapter exits in the middle of the recovery scan."""

    bug = "dies"

    def recover(self, *, now: float) -> list[dict[str, Any]]:
        os._exit(3)
