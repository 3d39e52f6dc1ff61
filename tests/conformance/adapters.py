"""Small adapters for testing how the plugin treats claims, known bugs and misbehaviour.

Importable as ``python:adapters:<Name>`` when tests/conformance is on PYTHONPATH (the test
helpers put it there for subprocess runs).
"""

from __future__ import annotations

from typing import Any

from ledgercheck.fixtures.testkit.broken import ClaimIgnoresPriority
from ledgercheck.reference.adapter import ReferenceAdapter
from ledgercheck.transport.protocol import Handshake


class CoreOnly(ReferenceAdapter):
    def hello(self, protocol: str = "1.0") -> Handshake:
        hs = super().hello(protocol)
        hs.update(name="core-only", profiles=["core"])
        return hs


class DeclaresClaimOrderBug(ClaimIgnoresPriority):
    """Really has the bug and says so: the clause becomes a strict expected failure."""

    def hello(self, protocol: str = "1.0") -> Handshake:
        hs = super().hello(protocol)
        hs["known_bugs"] = {"core.claim.order": "claims newest first; fix scheduled"}
        return hs


class DeclaresBugItDoesNotHave(ReferenceAdapter):
    """Declares a known bug but conforms: the strict expected failure passes unexpectedly."""

    def hello(self, protocol: str = "1.0") -> Handshake:
        hs = super().hello(protocol)
        hs["known_bugs"] = {"core.claim.order": "we thought so"}
        return hs


class CancelExplodes(ReferenceAdapter):
    """An adapter that crashes inside one operation: its tests are errors, never passes."""

    def cancel(self, **kw: Any) -> Any:
        raise RuntimeError("segfault in the cancel path (simulated)")


class HostileStrings(ReferenceAdapter):
    """Adapter-supplied strings that try to break reports."""

    def hello(self, protocol: str = "1.0") -> Handshake:
        hs = super().hello(protocol)
        hs.update(name="<script>alert('x')</script>|`md`", version="1.0</pre><img src=x onerror=alert(1)>")
        return hs

    def cancel(self, **kw: Any) -> Any:
        from ledgercheck.transport.protocol import LedgerError

        raise LedgerError("not_found", "<b>boom</b> | `x` \n## heading")


# ---------------------------------------------------------------------------------------------
# Correct ledgers that choose differently where the contract leaves room.  The harness must
# pass them: a false alarm on a correct implementation is as bad as a missed bug.

class FencesBeforeConflict(ReferenceAdapter):
    """effect_record with a dead token *and* another input hash: refuses stale_lease (the
    contract makes both refusals MUST and orders neither).  A call with a missing or malformed
    argument is refused invalid_argument first, as core.invalid_argument says, fence or not."""

    def effect_record(self, *, key: str, input_hash: str, now: float, result: Any = None, token: str | None = None) -> Any:
        from ledgercheck.spec.args import arg_problem
        from ledgercheck.transport.protocol import LedgerError

        well_formed = arg_problem(self.spec, "effect_record", {"key": key, "input_hash": input_hash, "now": now,
                                                               "result": result, "token": token}) is None
        rec = self.ledger.effect_lookup(key=key) if well_formed else None
        if rec is not None and token is not None and input_hash != rec["input_hash"]:
            live = self.ledger.get(work_id=rec["work_id"])["lease_token"]
            if token != live:
                raise LedgerError("stale_lease", "the token is not the item's live lease")
        return self.ledger.effect_record(key=key, input_hash=input_hash, now=now, result=result, token=token)


class _RecoveryMarking(ReferenceAdapter):
    """Recovery as the reference does it, then some of the receipts it marked set back to
    pending (straight in the file, as another implementation's scan would have left them)."""

    def _keep_pending(self, receipt: dict[str, Any], decision: str) -> bool:
        raise NotImplementedError

    def recover(self, *, now: float) -> Any:
        led = self.ledger
        before = {r[0]: (r[1], r[2]) for r in led.conn.execute("SELECT key, work_id, step_class FROM effect WHERE state = 'pending'")}
        victims = led.recover(now=now)
        decided = {v["work_id"]: v["decision"] for v in victims}
        back = [k for k, (wid, cls) in before.items()
                if wid in decided and self._keep_pending({"work_id": wid, "step_class": cls}, decided[wid])]
        for k in back:
            led.conn.execute("UPDATE effect SET state = 'pending' WHERE key = ?", (k,))
        led._cache.clear()
        return victims


class MarksOnlyTheDecidingReceipt(_RecoveryMarking):
    """Reconcile/quarantine mark the receipt whose class called for the decision; a receipt
    that alone would have been retried (a pure step beside it) stays pending."""

    def _keep_pending(self, receipt: dict[str, Any], decision: str) -> bool:
        return self.spec.receipt_decision("pending", receipt["step_class"]) != decision


class LeavesReconciledReceiptPending(_RecoveryMarking):
    """Broken: reconcile leaves even the deciding receipt pending (recovery.receipt_marking)."""

    def _keep_pending(self, receipt: dict[str, Any], decision: str) -> bool:
        return True


class CompletesByMark(ReferenceAdapter):
    """effect_mark(state="completed") is a receipt transition the table allows; this ledger
    accepts it (no result) where the reference insists on effect_record."""

    def effect_mark(self, *, key: str, state: str, now: float) -> Any:
        if state != "completed":
            return self.ledger.effect_mark(key=key, state=state, now=now)
        led = self.ledger
        rec = led.effect_lookup(key=key)
        if rec is None or (rec["state"], "completed") not in self.spec.receipt_transitions:
            return led.effect_mark(key=key, state=state, now=now)  # its own refusal
        led.conn.execute("UPDATE effect SET state = 'completed', updated_at = ? WHERE key = ?", (now, key))
        return led.effect_lookup(key=key)


class SeqGapAfterRefusedCloseOut(ReferenceAdapter):
    """Advances an item's event counter before validating a close-out: the next event after a
    refused close-out skips a seq (trail.append_only).  The cancel clause tests see it
    while judging their own clause; the finding must still reach trail.append_only."""

    def reset(self, config: dict[str, Any] | None = None) -> None:
        super().reset(config)
        self._gaps: dict[str, list[int]] = {}

    def close_out(self, **kw: Any) -> Any:
        from ledgercheck.transport.protocol import LedgerError

        try:
            return self.ledger.close_out(**kw)
        except LedgerError as exc:
            if exc.code in ("invalid_transition", "invalid_argument"):
                self._gaps.setdefault(kw["work_id"], []).append(len(self.ledger.events(work_id=kw["work_id"])))
            raise

    def events(self, *, work_id: str) -> list[dict[str, Any]]:
        evs = self.ledger.events(work_id=work_id)
        gaps = self._gaps.get(work_id, [])
        for i, e in enumerate(evs):
            e["seq"] += sum(1 for g in gaps if g <= i)
        return evs


class DeclaresSeqGap(SeqGapAfterRefusedCloseOut):
    def hello(self, protocol: str = "1.0") -> Handshake:
        hs = super().hello(protocol)
        hs["known_bugs"] = {"trail.append_only": "seq burnt by refused close-outs; fix scheduled"}
        return hs


class OutboxNewestFirst(ReferenceAdapter):
    """Lists pending outbox messages newest first: breaks outbox.order, a SHOULD.  A stateful
    run notes it as a warning and explores on (a SHOULD must not cut the MUST checks short)."""

    def outbox_pending(self, **kw: Any) -> Any:
        return list(reversed(self.ledger.outbox_pending(**kw)))


class ClaimsOnlyNext(ReferenceAdapter):
    """A queue that only hands out the next item: ``claim`` with a ``work_id`` is unsupported
    (a malformed one is still refused as such)."""

    def claim(self, *, owner: str, now: float, work_id: Any = None) -> Any:
        from ledgercheck.transport.protocol import LedgerError

        if work_id is not None:
            if not isinstance(work_id, str):
                raise LedgerError("invalid_argument", "claim: work_id must be a string")
            raise LedgerError("unsupported", "claim: this queue hands out the next item only")
        assert self.ledger is not None
        return self.ledger.claim(owner=owner, now=now)
