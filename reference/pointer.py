"""active-work.json: a derived view of the live leases, for operators and dashboards.

The database is the source of truth; this file is only ever rebuilt from it, never read back
into it.  Each rewrite reads the leased records *while holding* an advisory lock on a sidecar
``.lock`` file, writes a temporary file in the same directory and renames it over the old one,
so a reader sees either the old or the new document, and the last writer always publishes a
state read after every commit that preceded it.  A writer killed half-way leaves at most a
stale temporary file (removed at the next open) and a stale pointer (rebuilt at the next open).
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

FORMAT = "ledgercheck-active-work/1"


class ActivePointer:
    def __init__(self, path: str | os.PathLike[str], ledger_path: str | os.PathLike[str], durable: bool = False) -> None:
        self.path = Path(path)
        self.ledger_path = str(ledger_path)
        self.durable = durable
        self._lock_path = self.path.with_name(self.path.name + ".lock")

    def _locked(self) -> int:
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def rewrite(self, active: Callable[[], list[dict[str, Any]]]) -> None:
        """Publish ``active()`` (called under the lock) as the new document."""
        fd = self._locked()
        try:
            doc = {"format": FORMAT, "ledger": self.ledger_path,
                   "note": "derived from the ledger database, which is the source of truth", "active": active()}
            tmp_fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name + ".", suffix=".tmp")
            try:
                with os.fdopen(tmp_fd, "w", encoding="utf-8") as fh:
                    fh.write(json.dumps(doc, indent=1) + "\n")
                    if self.durable:
                        fh.flush()
                        os.fsync(fh.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
            if self.durable:
                dfd = os.open(self.path.parent, os.O_RDONLY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
        finally:
            os.close(fd)

    def reconcile(self, active: Callable[[], list[dict[str, Any]]]) -> None:
        """Remove temporary files left by killed writers, then rebuild the document."""
        fd = self._locked()
        try:
            for leftover in self.path.parent.glob(self.path.name + ".*.tmp"):
                try:
                    leftover.unlink()
                except OSError:
                    pass
        finally:
            os.close(fd)
        self.rewrite(active)


def read_pointer(path: str | os.PathLike[str]) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)
