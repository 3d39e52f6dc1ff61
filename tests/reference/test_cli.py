"""`ledgercheck ledger ...`, run in process through the real entry point (exit codes, stdout, stderr)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.reference.ledger import Ledger

from ledgercheck.cli import main

T0 = 100_000.0


class Run:
    def __init__(self, capsys: Any, db: Path) -> None:
        self.capsys, self.db = capsys, db

    def __call__(self, *args: str, db: Path | None = None) -> tuple[int, str, str]:
        self.capsys.readouterr()
        rc = main(["ledger", args[0], "--db", str(db or self.db), *args[1:]])
        out, err = self.capsys.readouterr()
        return rc, out, err

    def json(self, *args: str) -> Any:
        rc, out, err = self(*args, "--json")
        assert rc == 0, err
        return json.loads(out)


@pytest.fixture
def run(capsys: Any, db: Path) -> Run:
    return Run(capsys, db)


@pytest.fixture
def scene(db: Path, spec: Any) -> dict[str, dict[str, Any]]:
    """One record for each thing an operator should see, at T0 + 400."""
    lt = spec.lease_for("manual")
    with Ledger(db, spec) as led:
        def new(sid: str, now: float, **kw: Any) -> dict[str, Any]:
            return led.create(source_system="manual", source_id=sid, now=now, **kw)["work"]

        def run_(sid: str, now: float, **kw: Any) -> dict[str, Any]:
            return led.claim(owner="w-" + sid, work_id=new(sid, now, **kw)["work_id"], now=now)

        s = {"aging": new("aging", T0), "fresh": new("fresh", T0 + 390)}
        s["at_risk"] = run_("at_risk", T0 + 400 - lt.ttl + lt.renew_interval / 2)
        s["healthy"] = run_("healthy", T0 + 399)
        s["in_grace"] = run_("in_grace", T0 + 400 - lt.ttl - lt.grace / 2)
        s["lapsed"] = run_("lapsed", T0)
        w = run_("waits", T0 + 300)
        s["waits"] = led.set_waiting(work_id=w["work_id"], token=w["lease_token"], kind="user", ref="approval", timeout=105, now=T0 + 300)
        q = run_("unsafe", T0 - 10_000)
        led.effect_begin(work_id=q["work_id"], step_id="pay", tool="bank", input={"eur": 5}, step_class="non_idempotent_without_lookup",
                         token=q["lease_token"], now=T0 - 10_000)
        s["unsafe"] = q
        d = run_("done", T0)
        s["done"] = led.close_out(work_id=d["work_id"], token=d["lease_token"], status="done", now=T0 + 1)
    return s


def flags(listing: Any) -> dict[str, list[str]]:
    return {i["work"]["source_id"]: [f["flag"] for f in i["attention"]] for i in listing["items"]}


def test_list_shows_aging_work_and_leases_at_risk(run: Run, scene: Any) -> None:
    got = flags(run.json("list", "--now", str(T0 + 400)))
    assert got["aging"] == ["aging"] and got["fresh"] == []
    assert got["at_risk"] == ["lease_at_risk"] and got["healthy"] == []
    assert got["in_grace"] == ["lease_in_grace"]
    assert got["lapsed"][0] == "lease_lapsed" and got["unsafe"][0] == "lease_lapsed"
    assert got["waits"] == ["wait_near_deadline"] and got["done"] == []
    rc, out, _ = run("list", "--now", str(T0 + 400), "--attention")
    assert rc == 0 and "fresh" not in out and "lease_at_risk" in out and "aging: queued for" in out
    assert out.strip().splitlines()[-1].startswith("6 record(s)")
    running = run.json("list", "--status", "running", "--now", str(T0 + 400))["items"]
    assert {i["work"]["source_id"] for i in running} == {"at_risk", "healthy", "in_grace", "lapsed", "unsafe"}


def test_list_rejects_a_bad_status_and_clock(run: Run, scene: Any) -> None:
    rc, _, err = run("list", "--status", "paused")
    assert rc == 2 and "paused" in err and len(err.strip().splitlines()) == 1
    rc, _, err = run("list", "--now", "nan")
    assert rc == 2 and "--now" in err


def test_show_and_events(run: Run, scene: Any, db: Path) -> None:
    wid = scene["unsafe"]["work_id"]
    shown = run.json("show", wid, "--now", str(T0 + 400))
    with Ledger(db) as led:
        assert shown["work"] == led.get(work_id=wid) and shown["receipts"] == led.effect_list(work_id=wid)
        assert run.json("events", wid) == led.events(work_id=wid)
    rc, out, _ = run("events", wid)
    assert rc == 0 and "claimed" in out and "work_created" in out
    rc, _, err = run("show", "no-such-id")
    assert rc == 2 and "no-such-id" in err and str(run.db) in err and len(err.strip().splitlines()) == 1


def test_close_out_as_the_current_holder(run: Run, scene: Any, db: Path) -> None:
    wid = scene["healthy"]["work_id"]
    rc, out, err = run("close-out", wid, "--status", "done", "--result", '{"by": "operator"}', "--now", str(T0 + 401))
    assert rc == 0 and "closed out as done" in out
    assert "current lease token" in err and "w-healthy" in err  # it says whose lease it presented
    with Ledger(db) as led:
        w = led.get(work_id=wid)
        assert (w["status"], w["result"]) == ("done", {"by": "operator"})
        assert led.events(work_id=wid)[-1]["actor"] == "operator"


def test_close_out_refusals(run: Run, scene: Any) -> None:
    wid = scene["at_risk"]["work_id"]
    rc, _, err = run("close-out", wid, "--status", "done", "--token", "stale", "--now", str(T0 + 400))
    assert rc == 1 and "stale_lease" in err
    rc, _, err = run("close-out", scene["done"]["work_id"], "--status", "done", "--now", str(T0 + 400))
    assert rc == 1 and ("stale_lease" in err or "invalid_transition" in err)
    rc, _, err = run("close-out", wid, "--status", "done", "--result", "{nope", "--now", str(T0 + 400))
    assert rc == 2 and "--result" in err
    rc, _, err = run("close-out", wid, "--status", "waiting_user", "--now", str(T0 + 400))
    assert rc == 2 and "invalid_argument" in err
    rc, _, err = run("close-out", "nope", "--status", "done")
    assert rc == 2 and "no work 'nope'" in err


def test_waiting_as_the_current_holder(run: Run, scene: Any, db: Path) -> None:
    wid = scene["at_risk"]["work_id"]
    rc, _, err = run("waiting", wid, "--kind", "fax", "--ref", "r", "--now", str(T0 + 400))
    assert rc == 2 and "kind" in err
    w = run.json("waiting", wid, "--kind", "external", "--ref", "webhook-9", "--timeout", "60", "--now", str(T0 + 400))
    assert (w["status"], w["waiting_ref"], w["waiting_deadline"]) == ("waiting_external", "webhook-9", T0 + 460)


def test_recover_quarantines_and_requeue_releases(run: Run, scene: Any) -> None:
    victims = {v["work_id"]: v["decision"] for v in run.json("recover", "--now", str(T0 + 400))}
    assert victims == {scene["lapsed"]["work_id"]: "retry", scene["unsafe"]["work_id"]: "quarantine"}
    q = run.json("list", "--quarantined", "--now", str(T0 + 400))["items"]
    assert [i["work"]["work_id"] for i in q] == [scene["unsafe"]["work_id"]] and q[0]["attention"][0]["flag"] == "quarantined"
    rc, out, _ = run("recover", "--now", str(T0 + 401))
    assert rc == 0 and out.strip() == "nothing stale"
    rc, out, _ = run("requeue", scene["unsafe"]["work_id"], "--reason", "checked the bank", "--now", str(T0 + 402))
    assert rc == 0 and "was timeout, quarantined" in out
    assert run.json("list", "--quarantined")["items"] == []
    rc, _, err = run("requeue", scene["fresh"]["work_id"])
    assert rc == 1 and "invalid_transition" in err


def test_verify(run: Run, scene: Any, db: Path) -> None:
    rc, out, _ = run("verify")
    assert rc == 0 and out.startswith("ok:")
    c = sqlite3.connect(db)  # a buggy writer that bypasses the guard: a status change without its event
    c.execute("DROP TRIGGER work_guard")
    c.execute("UPDATE work SET status = 'cancelled', finished_at = 1 WHERE work_id = ?", (scene["fresh"]["work_id"],))
    c.commit()
    c.close()
    rc, out, _ = run("verify")
    assert rc == 1 and scene["fresh"]["work_id"] in out and "cancelled" in out
    rc, out, _ = run("verify", "--json")
    assert rc == 1 and json.loads(out)["ok"] is False


def test_the_stored_contract_is_used_and_can_be_overridden(run: Run, tmp_path: Path, overlay: Any) -> None:
    s2 = overlay("lease:\n  ttl: 7s\n  renew_interval: 2s\n  grace: 1s\n")
    db = tmp_path / "short.db"
    with Ledger(db, s2) as led:
        w = led.create(source_system="manual", source_id="a", now=T0)["work"]
        led.claim(owner="w", work_id=w["work_id"], now=T0)
    rc, out, _ = run("list", "--now", str(T0 + 9), db=db)
    assert rc == 0 and "lease_lapsed" in out  # the ledger's own 7s + 1s, not the shipped 45s + 30s
    long = tmp_path / "long-leases.yaml"
    long.write_text("extends: default\nlease:\n  ttl: 1h\n  renew_interval: 10m\n  grace: 10m\n"
                    "phases:\n  execution: {timeout: 2h}\n")  # a lease lapses within the execution budget
    rc, out, _ = run("list", "--now", str(T0 + 9), "--contract", str(long), db=db)
    assert rc == 0 and "lease_in_grace" in out and "lease_lapsed" not in out  # the expiry is recorded; grace is 10m now
    rc, _, err = run("list", "--contract", str(tmp_path / "nonexistent.yaml"), db=db)
    assert rc == 2 and "nonexistent.yaml" in err


def test_cli_refuses_missing_files_in_one_line(run: Run, tmp_path: Path) -> None:
    rc, _, err = run("list", db=tmp_path / "missing.db")
    assert rc == 2 and "no such ledger file" in err and len(err.strip().splitlines()) == 1
