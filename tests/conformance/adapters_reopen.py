"""Variants of the reference for the tests of a ledger opened again in the same process
(docs/protocol.md, ``reset``).  Importable as ``python:adapters_reopen:<Name>`` when
tests/conformance is on PYTHONPATH."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ledgercheck.reference.adapter import ReferenceAdapter
from ledgercheck.transport.protocol import LedgerError


class NoSecondOpen(ReferenceAdapter):
    """Durable (a new process opens a dir another left), but this process cannot open a dir it
    has opened before: the second reset naming it answers ``unsupported`` (as a library whose
    client object cannot be started twice in one process would)."""

    def reset(self, config: dict[str, Any] | None = None) -> None:
        d = (config or {}).get("dir")
        if d:
            opened: set[str] = self.__dict__.setdefault("_opened", set())
            root = str(Path(d).resolve())
            if root in opened:
                raise LedgerError("unsupported", "reset: this process cannot open a ledger directory a second time")
            opened.add(root)
        super().reset(config)
