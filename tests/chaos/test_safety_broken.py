"""The safety campaign's broken ledgers (fixtures/testkit/broken_safety.py).

First each bug is shown directly through the adapter API, with two adapter objects on one
directory standing for two worker processes, beside the correct ledger doing the right thing in
the same steps; then each ledger goes through the campaign runner and must be reported as
exactly its anomaly, while the reference under the same settings shows none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ledgercheck.fixtures.testkit import broken_safety as bs
from ledgercheck.reference.adapter import ReferenceAdapter
from ledgercheck.transport.protocol import LedgerError

T0 = 1_000_000.0
TTL, GRACE = 45.0, 30.0  # the default contract's lease for source system "manual"
LAPSED = T0 + TTL + GRACE + 1


def two(cls: type, where: Path) -> tuple[Any, Any]:
    """Two adapters on one ledger directory: two worker processes."""
    a, b = cls(), cls()
    a.reset({"dir": str(where)})
    b.reset({"dir": str(where)})
    return a, b


def make(adapter: Any, n: int = 1) -> list[str]:
    return [adapter.create(source_system="manual", source_id=f"s{i}", now=T0)["work"]["work_id"] for i in range(n)]


def monitor(adapter: Any, now: float) -> None:
    """What a monitor process runs for a ledger that reclaims by lease."""
    adapter.expire(now=now)
    adapter.recover(now=now)


def test_every_broken_ledger_names_what_it_breaks() -> None:
    assert len(bs.ALL) == 7
    found = {a for cls in bs.ALL for a in cls.ANOMALIES}
    assert found == {"split_ownership", "lost_work", "stale_write_accepted", "duplicate_effect", "stuck_work"}
    for cls in bs.ALL:
        assert len(cls.ANOMALIES) == 1 and cls.WHAT, cls.__name__
        hs = cls().hello()
        assert hs["capabilities"]["durable"] is True and hs["capabilities"]["delivery"] in ("at-least-once", "effectively-once")


class _Declares(ReferenceAdapter):
    delivery = "exactly-once"

    def hello(self, protocol: str = "1.0") -> Any:
        hs = super().hello(protocol)
        hs["capabilities"]["delivery"] = self.delivery
        return hs


def test_a_declaration_outside_the_protocol_is_refused_in_one_line() -> None:
    from ledgercheck.transport.client import AdapterError, connect

    with pytest.raises(AdapterError) as err:
        connect(f"python:{__name__}:_Declares")
    msg = str(err.value)
    assert "bad handshake" in msg and "delivery" in msg and "\n" not in msg
    _Declares.delivery = "effectively-once"
    try:
        client = connect(f"python:{__name__}:_Declares")
        assert client.handshake["capabilities"]["delivery"] == "effectively-once"
        client.close()
    finally:
        _Declares.delivery = "exactly-once"


# ---------------------------------------------------------------------------------------- (a)
class _Interleaved(bs.ClaimReadsThenWrites):
    """Worker A's claim, with worker B's whole claim run between A's read and A's write."""

    other: Any = None

    def _between(self) -> None:
        if self.other is not None:
            self.seen = self.other.claim(owner="B", now=T0 + 1)


def test_claim_in_two_transactions_gives_one_item_to_two_workers(tmp_path: Path) -> None:
    a, b = two(_Interleaved, tmp_path)
    [wid] = make(a)
    a.other = b
    got_a = a.claim(owner="A", now=T0 + 1)
    got_b = a.seen
    assert got_a["work_id"] == got_b["work_id"] == wid
    assert got_a["lease_token"] != got_b["lease_token"] and {got_a["owner"], got_b["owner"]} == {"A", "B"}


def test_reference_claim_under_the_same_interleaving_hands_the_item_out_once(tmp_path: Path) -> None:
    a, b = two(ReferenceAdapter, tmp_path)
    make(a)
    got_b = b.claim(owner="B", now=T0 + 1)
    assert got_b is not None and a.claim(owner="A", now=T0 + 1) is None


# ---------------------------------------------------------------------------------------- (b)
def test_a_dead_workers_deleted_item_is_gone(tmp_path: Path) -> None:
    a, b = two(bs.DequeueDeletes, tmp_path)
    [wid] = make(a)
    assert a.claim(owner="A", now=T0)["work_id"] == wid
    a.close()  # A dies holding it
    with pytest.raises(LedgerError) as err:
        b.get(work_id=wid)
    assert err.value.code == "not_found"
    assert b.list() == [] and b.claim(owner="B", now=LAPSED) is None


def test_small_queue_hands_a_dead_workers_item_out_again_after_the_lease(tmp_path: Path) -> None:
    a, b = two(bs.SmallQueue, tmp_path)
    [wid] = make(a)
    first = a.claim(owner="A", now=T0)
    a.close()
    assert b.claim(owner="B", now=T0 + TTL + GRACE) is None  # not before the lease lapsed
    again = b.claim(owner="B", now=LAPSED)
    assert again["work_id"] == wid and again["attempt"] == 2 and again["lease_version"] == first["lease_version"] + 1
    assert b.close_out(work_id=wid, token=again["lease_token"], status="done", now=LAPSED, result={"ok": 1})["status"] == "done"


def test_dequeue_deletes_finishes_work_its_worker_survives(tmp_path: Path) -> None:
    a, b = two(bs.DequeueDeletes, tmp_path)
    [wid] = make(a)
    got = a.claim(owner="A", now=T0)
    done = a.close_out(work_id=wid, token=got["lease_token"], status="done", now=T0 + 1, result={"n": 1})
    assert done["status"] == "done" and b.get(work_id=wid)["result"] == {"n": 1}


# ---------------------------------------------------------------------------------------- (c)
@pytest.mark.parametrize("cls, taken", [(bs.ReopenRequeuesClaimed, True), (ReferenceAdapter, False)])
def test_a_reopen_takes_a_live_holders_item(cls: type, taken: bool, tmp_path: Path) -> None:
    a = cls()
    a.reset({"dir": str(tmp_path)})
    [wid] = make(a)
    held = a.claim(owner="A", now=T0 + 1)
    b = cls()
    b.reset({"dir": str(tmp_path)})  # a second worker process starts, A still at work
    got = b.claim(owner="B", now=T0 + 2)
    if taken:
        assert got["work_id"] == wid and got["lease_token"] != held["lease_token"]
    else:
        assert got is None and b.get(work_id=wid)["lease_token"] == held["lease_token"]


# ---------------------------------------------------------------------------------------- (d)
@pytest.mark.parametrize("cls, accepted", [(bs.CloseOutIgnoresToken, True), (ReferenceAdapter, False)])
def test_a_paused_workers_close_out_after_a_takeover(cls: type, accepted: bool, tmp_path: Path) -> None:
    a, b = two(cls, tmp_path)
    [wid] = make(a)
    old = a.claim(owner="A", now=T0)
    monitor(b, LAPSED)  # A was paused past its lease: the monitor brings the item back
    new = b.claim(owner="B", now=LAPSED)
    assert new["work_id"] == wid
    if accepted:
        assert a.close_out(work_id=wid, token=old["lease_token"], status="done", now=LAPSED + 1)["status"] == "done"
    else:
        with pytest.raises(LedgerError) as err:
            a.close_out(work_id=wid, token=old["lease_token"], status="done", now=LAPSED + 1)
        assert err.value.code == "stale_lease"


# ---------------------------------------------------------------------------------------- (e)
@pytest.mark.parametrize("cls, remembered", [(bs.JournalInProcessMemory, False), (ReferenceAdapter, True)])
def test_the_next_holder_finds_a_dead_workers_receipt(cls: type, remembered: bool, tmp_path: Path) -> None:
    a, b = two(cls, tmp_path)
    assert a.hello()["capabilities"]["delivery"] == "effectively-once"
    [wid] = make(a)
    held = a.claim(owner="A", now=T0)
    step = {"work_id": wid, "step_id": "send", "tool": "mail", "input": {"to": "x"}, "step_class": "non_idempotent_with_lookup"}
    r = a.effect_begin(**step, now=T0, token=held["lease_token"])["receipt"]
    a.effect_record(key=r["key"], input_hash=r["input_hash"], result={"id": 7}, now=T0, token=held["lease_token"])
    a.close()  # A dies after the effect, before its close-out
    monitor(b, LAPSED)
    again = b.claim(owner="B", now=LAPSED)
    assert again["work_id"] == wid
    begun = b.effect_begin(**step, now=LAPSED, token=again["lease_token"])
    if remembered:
        assert begun["created"] is False and begun["receipt"]["state"] == "completed"
    else:
        assert begun["created"] is True and begun["receipt"]["state"] == "pending"  # B applies it again


# ---------------------------------------------------------------------------------------- (f)
@pytest.mark.parametrize("cls, back", [(bs.NeverReclaims, False), (ReferenceAdapter, True)])
def test_a_dead_workers_item_comes_back_after_its_lease(cls: type, back: bool, tmp_path: Path) -> None:
    a, b = two(cls, tmp_path)
    assert "reclaim" not in a.hello()["capabilities"] or a.hello()["capabilities"]["reclaim"] == "lease"
    [wid] = make(a)
    a.claim(owner="A", now=T0)
    a.close()
    monitor(b, LAPSED)
    got = b.claim(owner="B", now=LAPSED)
    if back:
        assert got["work_id"] == wid
    else:
        assert got is None and b.get(work_id=wid)["status"] == "running"


# ------------------------------------------------------------------------------ the campaign
# Four worker processes, a steady stream of items (so a fault nearly always finds a worker
# holding one), two seconds of faults.  Each broken ledger runs under the faults that exercise
# its bug (several of them in one run, so the bug shows every time; what is asserted is the set
# of anomaly classes, never a count), and the reference and SmallQueue run under every fault mix
# used here and must show nothing.
SETTINGS: dict[str, Any] = {"workers": 4, "items": 80, "seed": 1, "duration": 2.0}
FAULTS: dict[type, str] = {
    bs.ClaimReadsThenWrites: "kill,pause,reopen",  # a plain race: every claim can lose it
    bs.DequeueDeletes: "kill",
    bs.ReopenRequeuesClaimed: "reopen",
    bs.CloseOutIgnoresToken: "pause",
    bs.JournalInProcessMemory: "pause",
    bs.NeverReclaims: "kill",
    bs.ClaimSkipsRecovered: "kill",
}
MIXES = sorted(set(FAULTS.values()))
WIDEST = max(MIXES, key=lambda m: len(m.split(",")))  # kill,pause,reopen


def campaign_classes(address: str, faults: str, out: Path) -> tuple[set[str], Any]:
    from ledgercheck.chaos.safety.campaign import run_campaign

    result = run_campaign(address, faults=faults, out_dir=str(out), **SETTINGS)
    assert result.checked, result.notes
    assert result.mode == "processes"
    return {a["class"] for a in result.anomalies or []}, result


def _why(result: Any) -> tuple[Any, ...]:
    return ([a["explanation"] for a in result.anomalies or []][:5], result.nemesis, result.final, result.notes[:5])


def _broken() -> list:
    # DequeueDeletes and ClaimSkipsRecovered are the long tier's: by default
    # tests/chaos/test_safety_campaign.py::test_cli_exit_codes runs DequeueDeletes under kills through
    # `ledgercheck safety` and asserts exactly lost_work, which ClaimSkipsRecovered shows here too (its
    # item kept, never handed out again; 10-11 s, and the default run is at its budget)
    slow = (bs.DequeueDeletes, bs.ClaimSkipsRecovered)
    return [pytest.param(c, marks=[pytest.mark.thorough] if c in slow else []) for c in bs.ALL]


@pytest.mark.parametrize("cls", _broken(), ids=lambda c: c.__name__)
def test_the_campaign_reports_exactly_the_ledgers_anomaly(cls: type, tmp_path: Path) -> None:
    found, result = campaign_classes(f"python:ledgercheck.fixtures.testkit.broken_safety:{cls.__name__}", FAULTS[cls], tmp_path)
    assert set(cls.ANOMALIES) <= found <= set(cls.ANOMALIES) | set(getattr(cls, "MAY_ALSO", ())), _why(result)


def _mixes() -> list:
    # one fault at a time is the long tier's: the default keeps the reference under every fault
    # at once (the broken ledgers' widest mix), and SmallQueue under kills alone below
    return [pytest.param(f, marks=[] if f == WIDEST else [pytest.mark.thorough]) for f in MIXES]


@pytest.mark.parametrize("faults", _mixes())
def test_the_reference_shows_no_anomaly_under_the_same_campaigns(faults: str, tmp_path: Path) -> None:
    found, result = campaign_classes("python:ledgercheck.reference.adapter:ReferenceAdapter", faults, tmp_path)
    assert found == set(), _why(result)
    # every item finished; one whose attempts a retryable failure and faults used up is quarantined
    assert set(result.final) <= {"done", "quarantined"} and sum(result.final.values()) == SETTINGS["items"], _why(result)
    assert sum(result.nemesis.get(f, 0) for f in faults.split(",")) >= 3, _why(result)


def test_small_queue_loses_nothing_where_its_deleting_variant_does(tmp_path: Path) -> None:
    found, result = campaign_classes("python:ledgercheck.fixtures.testkit.broken_safety:SmallQueue", FAULTS[bs.DequeueDeletes], tmp_path)
    assert found == set(), _why(result)
    assert result.final == {"done": SETTINGS["items"]} and result.nemesis.get("kill", 0) >= 3, _why(result)  # no fail()
