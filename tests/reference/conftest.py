"""Fixtures for the reference ledger's own tests: real SQLite files in a temporary directory."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.reference.ledger import Ledger
from ledgercheck.spec import Spec, default_spec, load_spec
from ledgercheck.transport.protocol import LedgerError

PROCS = Path(__file__).resolve().parent / "procs.py"  # helper processes, run as a script


@pytest.fixture(scope="session")
def procs() -> list[str]:
    """argv prefix that runs tests/reference/procs.py with this interpreter."""
    return [sys.executable, str(PROCS)]


@pytest.fixture(scope="session")
def spec() -> Spec:
    return default_spec()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def ledger(db: Path, spec: Spec) -> Iterator[Ledger]:
    led = Ledger(db, spec)
    yield led
    led.close()


@pytest.fixture
def overlay(tmp_path: Path) -> Callable[[str], Spec]:
    """Load the shipped contract with an overlay given as YAML text."""

    def load(text: str) -> Spec:
        path = tmp_path / f"overlay-{abs(hash(text))}.yaml"
        path.write_text("extends: default\n" + text, encoding="utf-8")
        return load_spec([path])

    return load


class Kit:
    """Shortcuts for driving a ledger into a state."""

    def __init__(self, led: Ledger) -> None:
        self.led = led
        self.n = 0

    def new(self, now: float = 0.0, **kw: Any) -> dict[str, Any]:
        self.n += 1
        kw.setdefault("source_system", "manual")
        kw.setdefault("source_id", f"item-{self.n}")
        return self.led.create(now=now, **kw)["work"]

    def running(self, now: float = 0.0, owner: str = "w1", **kw: Any) -> dict[str, Any]:
        w = self.new(now=now, **kw)
        return self.led.claim(owner=owner, work_id=w["work_id"], now=now)

    def waiting(self, now: float = 0.0, kind: str = "user", **kw: Any) -> dict[str, Any]:
        w = self.running(now=now, **kw)
        return self.led.set_waiting(work_id=w["work_id"], token=w["lease_token"], kind=kind, ref="ref-1", now=now)

    def closed(self, status: str = "done", now: float = 0.0, **kw: Any) -> dict[str, Any]:
        w = self.running(now=now, **kw)
        if status == "cancelled":
            self.led.cancel(work_id=w["work_id"], now=now)
        return self.led.close_out(work_id=w["work_id"], token=w["lease_token"], status=status, now=now)

    def reach(self, status: str, now: float = 0.0, **kw: Any) -> dict[str, Any]:
        """A fresh record in ``status`` (terminal ones through a close-out by the holder)."""
        spec = self.led.spec
        if status == spec.initial_status:
            return self.new(now=now, **kw)
        st = spec.statuses[status]
        if st.leased:
            return self.running(now=now, **kw)
        if st.waiting_kind:
            return self.waiting(now=now, kind=st.waiting_kind, **kw)
        if status == "retry_scheduled":
            w = self.running(now=now, **kw)
            return self.led.fail(work_id=w["work_id"], token=w["lease_token"], error_class="transient_network", now=now)
        if st.terminal:
            return self.closed(status, now=now, **kw)
        raise AssertionError(f"no way to reach {status}")

    def events(self, work: dict[str, Any]) -> list[dict[str, Any]]:
        return self.led.events(work_id=work["work_id"])

    def refused(self, code: str, fn: Callable[..., Any], **kw: Any) -> LedgerError:
        """Call ``fn`` and require LedgerError ``code`` with nothing written to the touched record."""
        wid = kw.get("work_id")
        before = (self.led.get(work_id=wid), self.led.events(work_id=wid)) if wid and self._exists(wid) else None
        with pytest.raises(LedgerError) as info:
            fn(**kw)
        assert info.value.code == code, f"expected {code}, got {info.value.code}: {info.value.message}"
        if before is not None:
            assert (self.led.get(work_id=wid), self.led.events(work_id=wid)) == before, "a refused operation wrote something"
        return info.value

    def _exists(self, wid: str) -> bool:
        try:
            self.led.get(work_id=wid)
            return True
        except LedgerError:
            return False


@pytest.fixture
def kit(ledger: Ledger) -> Kit:
    return Kit(ledger)


def raw(db: Path) -> sqlite3.Connection:
    """A plain sqlite3 connection to a ledger file, for writes that bypass the ledger."""
    c = sqlite3.connect(str(db), isolation_level=None, timeout=600.0)
    c.execute("PRAGMA foreign_keys = ON")
    return c


@pytest.fixture
def rawdb() -> Callable[[Path], sqlite3.Connection]:
    return raw
