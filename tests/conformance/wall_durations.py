"""Wall-clock adapters for tests/conformance/test_wall_durations.py: the reference ledger on its
own clock (tests/chaos/wall_reference.py), one that notes the durations it is sent, and one whose
renewals answer ok but leave the lease where the claim put it."""

from __future__ import annotations

import time
from typing import Any

from tests.chaos.wall_reference import WallReference

SENT: list[tuple[str, dict[str, Any]]] = []  # (operation, arguments) as the Noting adapter received them


class Noting(WallReference):
    """Notes the arguments of every create and set_waiting it is sent."""

    def create(self, **kw: Any) -> Any:
        SENT.append(("create", dict(kw)))
        return self.__getattr__("create")(**kw)

    def set_waiting(self, **kw: Any) -> Any:
        SENT.append(("set_waiting", dict(kw)))
        return self.__getattr__("set_waiting")(**kw)


class StaleRenew(WallReference):
    """A renewal counts from the instant of the claim, not from its own: the lease it answers
    (and keeps) ends where the claim's ended, however late the holder renews."""

    def reset(self, config: dict[str, Any] | None = None) -> None:
        self.claimed_at: dict[str, float] = {}
        super().reset(config)

    def claim(self, **kw: Any) -> Any:
        at = time.time()
        out = self.__getattr__("claim")(**kw)
        if isinstance(out, dict) and isinstance(out.get("work_id"), str):
            self.claimed_at[out["work_id"]] = at
        return out

    def renew(self, **kw: Any) -> Any:
        kw["now"] = self.claimed_at.get(kw.get("work_id"), time.time())
        return self.ledger.renew(**kw)


class LibraryProfiles(WallReference):
    """The wall reference claiming what the wall-clock library adapters claim (core, trail,
    cancel, lease, retry): no waits, whose default budgets are hours of contract time."""

    def hello(self, protocol: str = "1.0") -> Any:
        hs = super().hello(protocol)
        hs["profiles"] = [p for p in hs["profiles"] if p in ("core", "trail", "cancel", "lease", "retry")]
        return hs


class DefaultGrace(WallReference):
    """The monitor gives work of every source the default grace: a control lease (whose grace the
    contract shortens) is timed out only as late as a default one would be."""

    def expire(self, **kw: Any) -> Any:
        spec = self.ledger.spec
        longer = spec.lease_default.grace - spec.lease_for("control").grace
        kw["now"] = time.time() - longer
        return self.ledger.expire(**kw)
