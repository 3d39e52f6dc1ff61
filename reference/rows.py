"""Rows of the ``work`` table as snapshots, and the JSON codec the ledger stores with."""

from __future__ import annotations

import json
from json import encoder as _json_encoder
from typing import Any

from .schema import SNAPSHOT_COLUMNS

SELECT_WORK = "SELECT " + ", ".join(SNAPSHOT_COLUMNS) + ", seq, event_count, retry_policy FROM work"
INSERT_EVENT = ("INSERT INTO work_event(work_id, seq, type, from_status, to_status, at, actor, data) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)")

_N = len(SNAPSHOT_COLUMNS)
_CANCEL = SNAPSHOT_COLUMNS.index("cancel_requested")
_QUARANTINED = SNAPSHOT_COLUMNS.index("quarantined")
_RESULT = SNAPSHOT_COLUMNS.index("result")

decode = json.loads


def _unsupported(o: Any) -> Any:
    raise TypeError(f"{type(o).__name__} is not JSON")


def _make_encoder() -> Any:
    """One encoder for everything the ledger stores: compact, UTF-8, no NaN/Infinity.

    ``json.dumps`` builds a new encoder on every call; the C encoder is built once here
    (values are checked to be plain, acyclic JSON before they get this far).
    """
    c_make = getattr(_json_encoder, "c_make_encoder", None)
    if c_make is None:  # pragma: no cover - CPython always has the C accelerator
        return json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
    c_enc = c_make(None, _unsupported, _json_encoder.encode_basestring, None, ":", ",", False, False, False)

    def encode(value: Any) -> str:
        if type(value) is str:
            return _json_encoder.encode_basestring(value)
        return "".join(c_enc(value, 0))

    return encode


encode = _make_encoder()


class Rec:
    """A record read inside a transaction: its snapshot plus the bookkeeping columns."""

    __slots__ = ("snap", "seq", "n", "rp")

    def __init__(self, snap: dict[str, Any], seq: int, n: int, rp: str | None) -> None:
        self.snap = snap
        self.seq = seq
        self.n = n  # events so far
        self.rp = rp  # retry policy override (JSON) or None


def load(r: tuple[Any, ...]) -> Rec:
    snap = dict(zip(SNAPSHOT_COLUMNS, r, strict=False))  # r also has the bookkeeping columns
    snap["cancel_requested"] = r[_CANCEL] == 1
    snap["quarantined"] = r[_QUARANTINED] == 1
    if r[_RESULT] is not None:
        snap["result"] = decode(r[_RESULT])
    return Rec(snap, r[_N], r[_N + 1], r[_N + 2])
