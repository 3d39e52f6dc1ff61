"""The safety campaign inside a conformance run: one test item, ``ledgercheck::safety::campaign``.

It runs for every adapter that offers create, claim and close-out (profile core), whatever its
handshake declares: several worker processes on one durable ledger (one process for a non-durable
one), kills, takeovers (a holder paused past ttl + grace while another worker takes its item, by
the declared path) and reopens, the recorded history judged by the offline checker
(ledgercheck.chaos.safety.anomalies).  Any anomaly fails the item; each anomaly is blamed on the
contract clause it breaks (the most specific clause of a profile the adapter claims, else the
core clause it also breaks), so the run's verdict counts it.  A campaign without anomaly that did
not reach what it must (the checker's coverage, the campaign's own: no item handed out, no
takeover, work left) is inconclusive: the item is skipped with the reason "inconclusive: ...",
never passed.  The campaign's summary (verdict, anomalies with their proof, coverage, missing,
observations, the history's path) goes into the item's user properties as ``ledger_safety`` and
from there into results.json's ``safety`` section.

Short, and sized by evidence (``CAMPAIGN``: 24 items, 4 workers, 3 s of faults, leases lapsing in
0.6 s, every fault three times): bench/safety_detection.py shows it finds, at each of seeds 0-5,
what the standalone campaign (``ledgercheck safety``, 100 items) finds in the broken ledgers of
fixtures/testkit/broken_safety.py and in the published libraries, and what it costs the reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from .clauses import NoCheck
from .harness import ClauseFailure
from .items import LedgerItem, _run_dir, blamed

# The campaign certify runs.  bench/safety_detection.py measures what it finds, seed by seed,
# against the broken ledgers and the published libraries, next to the standalone campaign.
CAMPAIGN: dict[str, Any] = {
    "workers": 4,
    "items": 24,
    "duration": 3.0,  # seconds of faults
    "lapse": 0.6,  # real seconds a lease's ttl + grace takes (injected clocks)
    "min_each": 3,  # every fault at least this many times: three takeovers, three kills, three reopens
}
TIME_LIMIT = 30.0

# anomaly class -> clauses it breaks, most specific first; the last is a core clause
CLAUSES: dict[str, tuple[str, ...]] = {
    "lost_work": ("recovery.no_loss", "core.running.renew_or_leave"),
    "stuck_work": ("recovery.no_loss", "core.running.renew_or_leave"),
    "split_ownership": ("lease.single_holder", "core.close_out.explicit"),
    "stale_write_accepted": ("lease.fencing", "core.close_out.explicit"),
    "terminal_changed": ("core.terminal.immutable",),
    "duplicate_effect": ("idem.duplicate_returns_stored", "recovery.effects_allowed", "core.close_out.explicit"),
    # a definite refusal that took effect: the clause of the refusal's own code says it writes nothing
    "refused_but_applied": ("core.transition.forbidden",),
}
# refused_but_applied by the refusal's error code (core clauses that say the refusal writes nothing)
REFUSAL_CLAUSES = {"not_found": "core.not_found", "invalid_argument": "core.invalid_argument",
                   "invalid_transition": "core.transition.forbidden"}


def certify_campaign(address: str, spec: Any, seed: int, out_dir: str, *, wall_scale: float = 0.01,
                     timeout_scale: float = 1.0, tmp_root: str | None = None) -> Any:
    """The campaign certify runs against ``address`` (chaos/safety/campaign.py's run_campaign, checked)."""
    from ledgercheck.chaos.safety.campaign import run_campaign

    return run_campaign(address, spec, seed=seed, out_dir=out_dir, time_limit=TIME_LIMIT * timeout_scale,
                        wall_scale=wall_scale, op_timeout=30.0 * timeout_scale, tmp_root=tmp_root, **CAMPAIGN)


def blamed_clause(kind: str, claimed: Sequence[str], anomaly: Mapping[str, Any] | None = None) -> str:
    """The clause an anomaly class is evidence against, given the profiles the adapter claims (a
    refusal that took effect: the clause of its error code, read from the excerpt)."""
    if kind == "refused_but_applied" and anomaly is not None:
        for rec in anomaly.get("excerpt") or []:
            code = (rec.get("error") or {}).get("code") if rec.get("outcome") == "refused" else None
            if code in REFUSAL_CLAUSES:
                return REFUSAL_CLAUSES[code]
    options = CLAUSES.get(kind, ("core.running.renew_or_leave",))
    return next((c for c in options if c.split(".")[0] in _profiles(claimed)), options[-1])


def _profiles(claimed: Sequence[str]) -> set[str]:
    # clause ids are prefixed by profile, except idempotency's "idem."
    return {("idem" if p == "idempotency" else p) for p in claimed}


def safety_record(result: Any, claimed: Sequence[str]) -> dict[str, Any]:
    """What results.json keeps of one campaign."""
    anomalies = [{**a, "clause": blamed_clause(a["class"], claimed, a)} for a in result.anomalies or []]
    summary: dict[str, int] = {}
    for a in anomalies:
        summary[a["class"]] = summary.get(a["class"], 0) + 1
    return {
        "adapter": result.address, "declared": dict(result.declared), "mode": result.mode, "seed": result.seed,
        "workers": result.workers, "items": result.items, "faults": list(result.faults),
        "nemesis": dict(result.nemesis), "final": dict(result.final), "ops": result.ops,
        "elapsed_s": result.elapsed, "history": result.history,
        "verdict": "fail" if anomalies else "inconclusive" if result.missing else "pass",
        "coverage": dict(result.coverage), "missing": list(result.missing), "takeovers": dict(result.takeovers),
        "summary": summary, "anomalies": anomalies[:20], "anomaly_count": len(anomalies),
        "observations": list((result.observations or {}).get("notes") or []), "notes": list(result.notes),
    }


class SafetyItem(LedgerItem):
    """The safety campaign against the adapter under test (ledgercheck.chaos.safety.campaign)."""

    kind = "chaos"
    phase = "safety"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.clause = None
        self.profile = "core"
        self.add_marker(pytest.mark.ledger_clause(None, "core", "chaos"))
        self.user_properties += [("ledger_kind", "chaos"), ("ledger_profile", "core")]
        from ledgercheck.chaos.safety.campaign import applicable

        hs = self.sess.client.handshake if self.sess.client else {}
        why = applicable(hs)
        if why:
            self.user_properties.append(("ledger_not_claimed", True))
            self.add_marker(pytest.mark.skip(reason=f"not claimed: {why}"))

    def runtest(self) -> None:
        from ledgercheck.chaos.crash.points import ChaosError

        sess = self.sess
        seed = self.config.getoption("ledger_seed") or 0
        out = sess.artifacts / "safety" / sess.slug / _run_dir(self.config)
        try:
            result = certify_campaign(sess.address, sess.base_spec, seed, str(out), wall_scale=sess.wall_scale,
                                      timeout_scale=sess.timeout_scale)
        except ChaosError as exc:
            self.user_properties.append(("ledger_error", f"safety campaign: {exc}"))
            raise NoCheck(f"the safety campaign could not run: {exc}") from None
        record = safety_record(result, sess.claimed)
        self.user_properties.append(("ledger_safety", record))
        if record["verdict"] == "inconclusive":
            # no anomaly, but the campaign did not reach what it must: never a pass
            pytest.skip(f"inconclusive: {'; '.join(record['missing'])}")
        if record["anomalies"]:
            found = [blamed(sess.spec, a["clause"], f"{a['class']} {a['work_id']}: {a['explanation']}")
                     for a in record["anomalies"]]
            self.user_properties.append(("ledger_clause", found[0].clause))
            kinds = ", ".join(f"{k} x{n}" for k, n in record["summary"].items())
            unreached = f"; not reached: {'; '.join(record['missing'])}" if record["missing"] else ""
            raise ClauseFailure(found, f"the safety campaign found {record['anomaly_count']} anomal"
                                       f"{'y' if record['anomaly_count'] == 1 else 'ies'} ({kinds}){unreached}; "
                                       f"history: {result.history}")

