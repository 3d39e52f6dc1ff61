"""The reference ledger as an adapter: registered under the ``ledgercheck.adapters`` entry point
exactly as a vendor's package would register its own."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ledgercheck.conformance.protocol import Handshake, LedgerError
from ledgercheck.spec import Spec, SpecError, default_spec
from ledgercheck.spec.load import spec_from_document

from ledgercheck import PROTOCOL_VERSION, __version__

from .ledger import CRASH_POINTS, Ledger, LedgerOpenError


class ReferenceAdapter:
    """Serves the contract from a fresh SQLite ledger per reset.

    ``reset(config)`` understands:
      ``dir``          keep the database in this directory (state survives a new process)
      ``contract``     the merged contract document the harness tests against
      ``synchronous``  NORMAL (default) or FULL
      ``pointer``      also maintain active-work.json next to the database
    """

    def __init__(self, spec: Spec | None = None, synchronous: str = "NORMAL") -> None:
        self.spec = spec or default_spec()
        self.synchronous = synchronous
        self.ledger: Ledger | None = None
        self._tmp: str | None = None
        self.crash_hook: Callable[[str], None] | None = None

    # ------------------------------------------------------------------ session
    def hello(self, protocol: str = PROTOCOL_VERSION) -> Handshake:
        return {
            "name": "ledgercheck-reference",
            "version": __version__,
            "protocol": PROTOCOL_VERSION,
            "profiles": list(self.spec.profiles),
            "capabilities": {"clock": "injected", "durable": True, "concurrent": True},
            "crash_points": list(CRASH_POINTS),
            "known_bugs": {},
        }

    def reset(self, config: dict[str, Any] | None = None) -> None:
        config = config or {}
        self.close()
        if config.get("contract") is not None:
            try:
                self.spec = spec_from_document(config["contract"])
            except SpecError as exc:
                raise LedgerError("invalid_argument", f"reset: the contract does not validate: {exc.problems[0]}") from None
        if config.get("dir"):
            root = Path(config["dir"])
            root.mkdir(parents=True, exist_ok=True)
        else:
            self._tmp = tempfile.mkdtemp(prefix="ledgercheck-ref-")
            root = Path(self._tmp)
        sync = str(config.get("synchronous", self.synchronous)).upper()
        if sync not in ("NORMAL", "FULL"):
            raise LedgerError("invalid_argument", f"reset: synchronous must be NORMAL or FULL, not {sync!r}")
        try:
            self.ledger = Ledger(
                root / "ledger.db",
                self.spec,
                synchronous=sync,
                pointer_file=(root / "active-work.json") if config.get("pointer") else None,
                crash_hook=self.crash_hook,
            )
        except LedgerOpenError as exc:
            raise LedgerError("invalid_argument", f"reset: {exc}") from None

    def close(self) -> None:
        if self.ledger is not None:
            self.ledger.close()
            self.ledger = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def set_crash_hook(self, hook: Callable[[str], None] | None) -> None:
        """Called with a point name at each of the ledger's own crash points (chaos runs)."""
        self.crash_hook = hook
        if self.ledger is not None:
            self.ledger.crash_hook = hook

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        ledger = self.__dict__.get("ledger")
        if ledger is None:
            raise LedgerError("invalid_argument", f"{name}: the adapter has no open ledger; call reset first")
        return getattr(ledger, name)
