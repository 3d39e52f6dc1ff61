"""In-process adapters that misbehave on purpose (loaded with python:inproc_adapters:NAME)."""

from __future__ import annotations

import sys
from typing import Any

HANDSHAKE = {"name": "inproc", "version": "0", "protocol": "1.0", "profiles": ["core"], "capabilities": {"clock": "injected"}}


class Base:
    def hello(self, protocol: str = "1.0") -> dict[str, Any]:
        return dict(HANDSHAKE)

    def reset(self, config: dict[str, Any] | None = None) -> None:
        return None


class Raising(Base):
    """Raises whatever its operations feel like."""

    def get(self, *, work_id: str) -> dict[str, Any]:
        raise RuntimeError(f"database handle went away while reading {work_id}")

    def list(self, *, status: str | None = None, quarantined: bool | None = None) -> list[Any]:
        return [1 / 0]

    def events(self, *, work_id: str) -> list[Any]:
        sys.exit(2)

    def expire(self, *, now: float) -> list[Any]:
        # a bug inside the adapter that looks like an argument problem
        return len(now)  # type: ignore[arg-type,return-value]


class Lacking(Base):
    """Offers get only, with the wrong parameter names for the rest."""

    def get(self, *, work_id: str) -> dict[str, Any]:
        raise NotImplementedError

    def claim(self, *, worker: str, now: float) -> None:
        return None


class Malformed(Base):
    """Returns values of the wrong shape."""

    def get(self, *, work_id: str) -> Any:
        return "queued"

    def list(self, *, status: str | None = None, quarantined: bool | None = None) -> Any:
        return {"items": []}

    def create(self, **kw: Any) -> Any:
        return {"work": {"work_id": 5}, "created": "yes"}

    def events(self, *, work_id: str) -> Any:
        from ledgercheck.transport.protocol import LedgerError

        raise LedgerError("disk_on_fire", "an invented error code")


class NoHello:
    def get(self, *, work_id: str) -> None:
        return None


class BadFactory:
    def __init__(self) -> None:
        raise OSError("cannot read\nthe license file")


class OldProtocol(Base):
    def hello(self, protocol: str = "1.0") -> dict[str, Any]:
        return {**HANDSHAKE, "protocol": "0.9"}
