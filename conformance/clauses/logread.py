"""Clause tests of the logread profile (spec/contract/clauses/logread.yaml)."""


from __future__ import annotations

from ..harness import Harness
from . import case, check


# ------------------------------------------------------------------ log reads
@case("logread.last_seq", "follows-appends")
def _last_seq(h: Harness) -> None:
    first = h.spec.first_seq
    h.do("log_last_seq", stream="run-7")
    for i in range(3):
        got = h.do("log_append", stream="run-7", expected_seq=first - 1 + i, kind="tool.called")
        last = h.do("log_last_seq", stream="run-7")
        check(last.value["seq"] == got.value["seq"], "logread.last_seq", f"after an append at {got.value['seq']} last_seq is {last.value}", h)
    h.do("log_append", stream="run-7", expected_seq=first - 1, kind="stale")  # refused: last_seq stays
    h.do("log_last_seq", stream="run-7")
    h.do("log_last_seq", stream="Run-7")


@case("logread.tail", "bounded-from-seq")
def _tail(h: Harness) -> None:
    first = h.spec.first_seq
    for i in range(5):
        h.do("log_append", stream="run-8", expected_seq=first - 1 + i, kind=f"k{i}", payload={"i": i})
    for start, n in ((first, 2), (first + 1, 3), (first + 3, 9), (first + 9, 1), (0, 5)):
        h.do("log_tail", stream="run-8", from_seq=start, max=n)
    h.do("log_tail", stream="never-written", from_seq=first, max=4)
