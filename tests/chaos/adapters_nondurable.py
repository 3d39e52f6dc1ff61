"""Small variants of the reference for the lease-campaign tests."""

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


class LongLeases(ReferenceAdapter):
    """Leases of 50 minutes, whatever the contract's ttl (as graphile-worker frees a dead worker's lock
    only after 4 hours): the ledger keeps its own, longer lease and reports it."""

    def reset(self, config):
        import copy

        config = dict(config)
        doc = copy.deepcopy(config.get("contract"))
        if isinstance(doc, dict):
            doc["lease"]["ttl"] = "50m"  # the contract requires ttl + grace below the execution budget
            for over in (doc["lease"].get("by_source") or {}).values():
                over.pop("ttl", None)
            config["contract"] = doc
        return super().reset(config)


class FirstLeaseOnly(ReferenceAdapter):
    """Close-out is fenced against the first lease ever issued, not the live one: after a
    takeover the new holder can never finish the item."""

    def close_out(self, *, work_id: str, token: str, **kw):
        from ledgercheck.transport.protocol import LedgerError

        assert self.ledger is not None
        if self.ledger.get(work_id=work_id)["lease_version"] > 1:
            raise LedgerError("stale_lease", f"close_out: {work_id}: the token is not the first lease")
        return super().close_out(work_id=work_id, token=token, **kw)


class RenewsTooFar(ReferenceAdapter):
    """A renewal answers with a lease ten ttls long."""

    def renew(self, *, work_id: str, token: str, now: float, **kw):
        snap = dict(self.ledger.renew(work_id=work_id, token=token, now=now, **kw))
        snap["lease_expires_at"] = now + 10 * self.spec.lease_for(snap["source_system"]).ttl
        return snap


class NoRenew(ReferenceAdapter):
    """An adapter without a renew operation (like a queue with no heartbeat)."""

    def __getattr__(self, name: str):
        if name == "renew":
            raise AttributeError(name)
        return super().__getattr__(name)


def _declaring(base, **caps):
    """``base`` with some of its declared capabilities changed."""

    class Declaring(base):
        def hello(self, protocol: str = "1.0"):
            hs = super().hello(protocol)
            hs["capabilities"] = {**hs["capabilities"], **caps}
            return hs

    return Declaring


class AtLeastOnce(_declaring(ReferenceAdapter, delivery="at-least-once")):
    """The reference, declaring only at-least-once (its runtime then runs an effect again after a crash)."""


class ReclaimedByOperator(_declaring(ReferenceAdapter, reclaim="operator")):
    """The reference, declaring that a dead worker's item comes back only through an operator."""


def _journal_in_memory():
    from ledgercheck.fixtures.testkit.broken_safety import JournalInProcessMemory

    return JournalInProcessMemory


class JournalInMemoryAtLeastOnce(_declaring(_journal_in_memory(), delivery="at-least-once")):
    """fixtures/testkit/broken_safety.py's JournalInProcessMemory, declaring at-least-once instead of effectively-once."""


class AtMostOnce(_declaring(ReferenceAdapter, delivery="at-most-once")):
    """The reference declaring at-most-once: its recovery scan takes a dead worker's item back to
    run again, and a runtime that does not journal its effect runs it twice (the declaration is wrong)."""


class AtMostOnceTimesOut(_declaring(ReferenceAdapter, delivery="at-most-once")):
    """At-most-once kept: a dead worker's item is marked timeout by the monitor and never handed
    out again by the ledger itself (no recovery scan)."""

    def recover(self, *, now: float):
        from ledgercheck.transport.protocol import LedgerError

        raise LedgerError("unsupported", "this ledger has no recovery scan")
