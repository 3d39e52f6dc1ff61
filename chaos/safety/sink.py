"""The effect sink: the ground truth of which effects really happened.

The sink is owned by the harness and knows nothing of the ledger under test.  It stands in for
the external providers a workload's steps talk to, one behaviour per effect kind of the
contract's step classes (``recovery.yaml``, ``step_classes``):

``keyed``       the provider deduplicates by the effect key: a second submission with the same
                key is counted as a submission but does not apply again; it answers with the
                first result.
``lookup``      every submission applies; the provider can be asked whether key K happened and
                with what result (:meth:`EffectSink.lookup`).
``unsafe``      every submission applies; nothing can be asked afterwards.
``rerunnable``  every execution is counted (a checkpointed model call costs each time).
``none``        pure, local computation: executions are logged but apply nothing.

Every submission is one SQLite transaction on the sink's own file with ``synchronous=FULL``:
once :meth:`submit` returns, the effect is on disk, whatever happens to the process next.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ledgercheck.spec import Spec, canonical_json, sha256_hex

APPLYING = {"keyed", "lookup", "unsafe", "rerunnable"}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS submission (
    seq INTEGER PRIMARY KEY,
    key TEXT NOT NULL,
    work_id TEXT NOT NULL,
    step_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    step_class TEXT NOT NULL,
    effect TEXT NOT NULL,
    applied INTEGER NOT NULL CHECK (applied IN (0, 1)),
    input_hash TEXT NOT NULL,
    result TEXT NOT NULL,
    worker TEXT NOT NULL,
    session TEXT NOT NULL,
    wall REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS submission_key ON submission(key, applied);
"""


class SinkError(Exception):
    """The sink file cannot be used; the message names it."""


@dataclass(frozen=True)
class Submission:
    seq: int
    key: str
    work_id: str
    step_id: str
    step_class: str
    effect: str
    applied: bool
    result: Any
    worker: str
    session: str


class EffectSink:
    """One sink file, opened by the harness and by every worker process."""

    def __init__(self, path: str | os.PathLike[str], spec: Spec, *, create: bool = False) -> None:
        self.path = str(path)
        self.spec = spec
        if not create and not os.path.exists(self.path):
            raise SinkError(f"{self.path}: no effect sink here")
        try:
            self.conn = sqlite3.connect(self.path, isolation_level=None, timeout=30.0, check_same_thread=False)
            self.conn.execute("PRAGMA busy_timeout = 30000")
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = FULL")
            if create:
                self.conn.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise SinkError(f"{self.path}: not a usable effect sink ({exc})") from None

    def close(self) -> None:
        try:
            self.conn.close()
        except sqlite3.Error:
            pass

    # ------------------------------------------------------------------ provider side
    def effect_of(self, step_class: str) -> str:
        try:
            return self.spec.step_classes[step_class]
        except KeyError:
            raise ValueError(f"unknown step class {step_class!r}") from None

    def submit(self, *, key: str, work_id: str, step_id: str, tool: str, step_class: str, input: Any,
               worker: str, session: str) -> Any:
        """Execute one step's effect as its provider would and return the provider's answer."""
        effect = self.effect_of(step_class)
        ih = sha256_hex(canonical_json(input))
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            seq = c.execute("SELECT ifnull(max(seq), 0) + 1 FROM submission").fetchone()[0]
            applied = effect in APPLYING
            result: Any = {"provider": tool, "ref": f"{tool}#{seq}", "sub": seq, "input": ih[:16]}
            if effect == "keyed":
                first = c.execute("SELECT result FROM submission WHERE key = ? AND applied = 1 ORDER BY seq LIMIT 1",
                                  (key,)).fetchone()
                if first is not None:
                    applied = False
                    result = json.loads(first[0])
            elif effect == "none":
                result = {"computed": ih[:16], "sub": seq}
            c.execute("INSERT INTO submission(seq, key, work_id, step_id, tool, step_class, effect, applied, input_hash, "
                      "result, worker, session, wall) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                      (seq, key, work_id, step_id, tool, step_class, effect, int(applied), ih,
                       canonical_json(result), worker, session, time.time()))
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise
        return result

    def lookup(self, key: str) -> Any | None:
        """Did the effect with this key happen?  The provider's result if so, else None."""
        r = self.conn.execute("SELECT result FROM submission WHERE key = ? AND applied = 1 ORDER BY seq LIMIT 1",
                              (key,)).fetchone()
        return None if r is None else json.loads(r[0])

    # ------------------------------------------------------------------ harness side
    def submissions(self, key: str | None = None) -> list[Submission]:
        sql = ("SELECT seq, key, work_id, step_id, step_class, effect, applied, result, worker, session "
               "FROM submission")
        rows = self.conn.execute(sql + (" WHERE key = ? ORDER BY seq" if key else " ORDER BY seq"),
                                 (key,) if key else ()).fetchall()
        return [Submission(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]), json.loads(r[7]), r[8], r[9]) for r in rows]

    def applied_counts(self, exclude_sessions: tuple[str, ...] = ()) -> dict[str, int]:
        """key -> number of submissions that applied an effect."""
        out: dict[str, int] = {}
        for s in self.submissions():
            if s.applied and s.session not in exclude_sessions:
                out[s.key] = out.get(s.key, 0) + 1
        return out

    def summary(self) -> Mapping[str, int]:
        r = self.conn.execute("SELECT count(*), ifnull(sum(applied), 0) FROM submission").fetchone()
        return {"submissions": r[0], "applied": r[1]}
