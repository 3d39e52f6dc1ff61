"""What needs an operator's attention in a ledger at a given instant.

Budgets come from the Spec: the claim phase timeout for queued work (a ``report`` phase), the
execution phase timeout, the lease timings of the record's source system (renew_interval for a
lease at risk, grace for a lapsed one) and the waiting budget implied by the record's deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ledgercheck.spec import Spec

NEAR_DEADLINE = 0.1  # a wait is near its deadline in the last tenth of its budget


@dataclass(frozen=True)
class Flag:
    name: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"flag": self.name, "detail": self.detail}


def duration(seconds: float) -> str:
    """'45s', '7m12s', '2h05m', '3d04h' (negative values get a minus sign)."""
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    if s < 60:
        return f"{sign}{s:.3g}s" if s < 10 else f"{sign}{s:.0f}s"
    if s < 3600:
        return f"{sign}{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{sign}{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{sign}{int(s // 86400)}d{int(s % 86400 // 3600):02d}h"


def assess(spec: Spec, w: dict[str, Any], since: float | None, now: float) -> list[Flag]:
    """Flags for one record; ``since`` is when it entered its current status."""
    out: list[Flag] = []
    st = spec.statuses[w["status"]]
    if st.initial and since is not None:
        budget = spec.phase_timeout("claim")
        if budget is not None and now - since > budget:
            out.append(Flag("aging", f"queued for {duration(now - since)}, the claim budget is {duration(budget)}"))
    if st.leased and w["lease_expires_at"] is not None:
        lt = spec.lease_for(w["source_system"])
        exp = w["lease_expires_at"]
        if now > exp + lt.grace:
            out.append(Flag("lease_lapsed", f"lease lapsed {duration(now - exp - lt.grace)} ago (expiry + {duration(lt.grace)} grace); "
                                            "the monitor or a recovery scan takes it"))
        elif now > exp:
            out.append(Flag("lease_in_grace", f"lease expired {duration(now - exp)} ago, {duration(exp + lt.grace - now)} of grace left"))
        elif exp - now <= lt.renew_interval:
            out.append(Flag("lease_at_risk", f"lease expires in {duration(exp - now)}, within the renew interval {duration(lt.renew_interval)}"))
        budget = spec.phase_timeout("execution")
        if budget is not None and w["started_at"] is not None and now - w["started_at"] > budget:
            out.append(Flag("execution_over_budget", f"running for {duration(now - w['started_at'])}, the execution budget is {duration(budget)}"))
        if w["cancel_requested"]:
            out.append(Flag("cancel_requested", "cancellation requested; the holder should close it out as cancelled"))
    if st.waiting_kind and w["waiting_deadline"] is not None:
        left = w["waiting_deadline"] - now
        if left < 0:
            out.append(Flag("wait_overdue", f"waiting on {w['waiting_ref']!r} {duration(-left)} past its deadline; the monitor times it out"))
        elif since is not None and left <= NEAR_DEADLINE * (w["waiting_deadline"] - since):
            out.append(Flag("wait_near_deadline", f"waiting on {w['waiting_ref']!r}, deadline in {duration(left)} "
                                                  f"of a {duration(w['waiting_deadline'] - since)} budget"))
    if w["next_retry_at"] is not None and now >= w["next_retry_at"]:
        out.append(Flag("retry_due", f"retry due {duration(now - w['next_retry_at'])} ago; promote_due queues it"))
    if w["quarantined"]:
        out.append(Flag("quarantined", "a person must decide; release it with `ledgercheck ledger requeue`"))
    return out
