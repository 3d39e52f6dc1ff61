"""Several real processes claiming from one ledger file at once."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.reference.ledger import Ledger
from ledgercheck.reference.verify import verify

ITEMS = 150
CLAIMERS = 3


def claim_round(procs: list[str], db: Path, tmp: Path, tag: str) -> list[dict[str, Any]]:
    go = tmp / f"go-{tag}"
    outs = [tmp / f"claims-{tag}-{i}.jsonl" for i in range(CLAIMERS)]
    ps = [subprocess.Popen([*procs, "claim", str(db), str(o), str(go)], stderr=subprocess.PIPE, text=True) for o in outs]
    go.touch()  # all start together
    for p in ps:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    return [json.loads(line) for o in outs for line in o.read_text().splitlines()]


@pytest.fixture
def filled(db: Path) -> Path:
    with Ledger(db) as led:
        for i in range(ITEMS):
            led.create(source_system="manual", source_id=f"job-{i}", priority=i % 4, now=0.0)
    return db


def test_concurrent_claimers_never_share_an_item(procs: list[str], filled: Path, tmp_path: Path) -> None:
    claims = claim_round(procs, filled, tmp_path, "a")
    ids = [c["work_id"] for c in claims]
    assert len(ids) == len(set(ids)) == ITEMS
    assert {c["lease_version"] for c in claims} == {1}
    with Ledger(filled) as led:
        by_id = {c["work_id"]: c for c in claims}
        for w in led.list():
            evs = led.events(work_id=w["work_id"])
            claimed = [e for e in evs if e["type"] == "claimed"]
            assert len(claimed) == 1 and claimed[0]["data"]["owner"] == by_id[w["work_id"]]["owner"]
            assert w["status"] == "done" and w["result"] == {"by": by_id[w["work_id"]]["owner"]}
        assert verify(led) == []
    assert len({c["owner"] for c in claims}) > 1, "the claimers did not overlap; the test proves nothing"


def test_lease_version_grows_on_every_acquire_and_stale_tokens_write_nothing(procs: list[str], filled: Path, tmp_path: Path) -> None:
    first = {c["work_id"]: c for c in claim_round(procs, filled, tmp_path, "a")}
    with Ledger(filled) as led:
        for wid in first:
            led.requeue(work_id=wid, now=10.0)
    second = {c["work_id"]: c for c in claim_round(procs, filled, tmp_path, "b")}
    assert set(second) == set(first)
    assert all(second[w]["lease_version"] == first[w]["lease_version"] + 1 for w in first)
    assert all(second[w]["token"] != first[w]["token"] for w in first)
    with Ledger(filled) as led:
        for wid in first:
            led.requeue(work_id=wid, now=20.0)
        live = {}
        while (w := led.claim(owner="holder", now=21.0)) is not None:
            live[w["work_id"]] = w
            assert w["lease_version"] == 3
        for wid, old in list(first.items())[:20]:
            snap, trail = led.get(work_id=wid), led.events(work_id=wid)
            for stale in (old["token"], second[wid]["token"]):
                for fn, kw in [(led.renew, {}), (led.close_out, {"status": "done"}), (led.fail, {"error_class": "rate_limited"}),
                               (led.set_waiting, {"kind": "user", "ref": "r"}),
                               (led.effect_begin, {"step_id": "s", "tool": "t", "input": 1, "step_class": "pure"})]:
                    with pytest.raises(Exception) as info:
                        fn(work_id=wid, token=stale, now=22.0, **kw)
                    assert getattr(info.value, "code", None) == "stale_lease"
            assert led.get(work_id=wid) == snap and led.events(work_id=wid) == trail and led.effect_list(work_id=wid) == []
            assert snap["lease_token"] == live[wid]["lease_token"]
