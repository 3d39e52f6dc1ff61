"""An adapter whose state does not survive its process (for the lease-campaign tests)."""

from ledgercheck.reference.adapter import ReferenceAdapter


class Volatile(ReferenceAdapter):
    def hello(self, protocol: str = "1.0"):
        hs = super().hello(protocol)
        hs["capabilities"] = {"clock": "injected", "durable": False, "concurrent": False}
        return hs


class StuckLeases(ReferenceAdapter):
    """Neither the monitor nor the recovery scan ever lets go of a lapsed lease."""

    def expire(self, *, now: float):
        return []

    def recover(self, *, now: float):
        return []
