"""Small hand-built safety histories for the timeline tests."""

from __future__ import annotations

from typing import Any

from history_sim import HistoryBuilder
from ledgercheck.chaos.safety.history import FORMAT, History

T0 = 1_000_000.0
META = {"type": "meta", "format": FORMAT, "adapter": {"name": "hand-built"}, "declared": {}, "timings": {"ttl": 45}}


class Recs:
    """Records written by hand: each call appends one, times as given."""

    def __init__(self) -> None:
        self.recs: list[dict[str, Any]] = [dict(META)]
        self.next = 0

    def invoke(self, process: str, op: str, t: float, **args: Any) -> int:
        oid = self.next
        self.next += 1
        self.recs.append({"type": "invoke", "id": oid, "process": process, "op": op, "args": args, "t": t})
        return oid

    def complete(self, oid: int, process: str, op: str, outcome: str, t: float, result: Any = None,
                 error: Any = None) -> None:
        self.recs.append({"type": "complete", "id": oid, "process": process, "op": op, "outcome": outcome,
                          "result": result, "error": error, "t": t})

    def call(self, process: str, op: str, t0: float, t1: float, outcome: str = "ok", result: Any = None,
             **args: Any) -> int:
        oid = self.invoke(process, op, t0, **args)
        self.complete(oid, process, op, outcome, t1, result, None if outcome == "ok" else {"code": "x"})
        return oid

    def nemesis(self, fault: str, t: float, process: str | None = None, point: Any = None) -> None:
        self.recs.append({"type": "nemesis", "fault": fault, "process": process, "point": point, "t": t})

    def history(self) -> History:
        recs = sorted(self.recs[1:], key=lambda r: r["t"])
        return History.of([self.recs[0], *recs])


def stale_write_history(noise: int = 6) -> tuple[HistoryBuilder, str, str]:
    """A history whose item ``x`` has a stale write accepted (w1's close-out with the token of a
    lease taken over by w2), among ``noise`` correct items, with a kill, a pause and faults no
    timeline knows by name.  Returns the builder and the ids of the tokens (w1's, w2's)."""
    b = HistoryBuilder()
    for i in range(noise):
        b.create("producer", f"n{i}", T0)
    b.create("producer", "x", T0)
    for i in range(noise // 2):
        t = b.claim("w3", f"n{i}", T0 + 1 + i)
        b.close_out("w3", f"n{i}", t, T0 + 2 + i)
    ta = b.claim("w1", "x", T0 + 5)
    b.nemesis("pause", "w1")
    b.nemesis("clock", "w2", point={"mode": "skew", "offset_s": 3})
    b.expire("monitor", T0 + 70)
    b.recover("monitor", T0 + 70)
    tb = b.claim("w2", "x", T0 + 71)
    b.nemesis("resume", "w1")
    b.close_out("w1", "x", ta, T0 + 72)  # accepted with the superseded token: the broken ledger
    b.nemesis("power_cut", None)
    for i in range(noise // 2, noise):
        t = b.claim("w3", f"n{i}", T0 + 80 + i)
        b.close_out("w3", f"n{i}", t, T0 + 81 + i)
    b.nemesis("kill", "w3")
    b.final(T0 + 200)
    return b, ta, tb
