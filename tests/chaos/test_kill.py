"""The kill is real: the worker announces the point, blocks, and only a signal ends or moves it."""

from __future__ import annotations

import psutil
from ledgercheck.chaos.crash.pool import WorkerPool, descendants
from ledgercheck.chaos.safety.sink import EffectSink
from ledgercheck.chaos.safety.workload import default_workload
from ledgercheck.spec import Spec
from patience import until


def _prepared(pool: WorkerPool, spec: Spec, tmp_path, point: str) -> tuple[object, dict]:
    EffectSink(tmp_path / "s.db", spec, create=True).close()
    h = pool.get()
    wl = default_workload(spec, 0).to_dict()
    assert h.request({"cmd": "open", "dir": str(tmp_path / "l"), "sink": str(tmp_path / "s.db"), "workload": wl,
                      "now": 1000.0}, 60)["ok"]
    assert h.request({"cmd": "setup"}, 60)["ok"]
    assert h.request({"cmd": "arm", "point": point, "occurrence": 1}, 60)["ok"]
    h.send({"cmd": "run"})
    return h, h.recv(60)


def test_worker_blocks_at_the_point_until_sigkill(spec: Spec, tmp_path) -> None:
    with WorkerPool("reference", spec, spare=1) as pool:
        h, msg = _prepared(pool, spec, tmp_path, "after_submit_before_record")
        assert msg["event"] == "crash_point" and msg["point"] == "after_submit_before_record"
        assert msg["ctx"]["stage"] == "submitted" and msg["pid"] == h.pid
        p = psutil.Process(h.pid)
        # it waits (blocked, asleep, on its control connection); it does not exit or carry on
        until(lambda: p.status() in (psutil.STATUS_SLEEPING, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD),
              "the worker blocking at the point")
        assert p.is_running() and p.status() == psutil.STATUS_SLEEPING
        assert not h.conn.poll(0)
        killed = h.kill()
        assert h.pid in killed
        assert not psutil.pid_exists(h.pid) or psutil.Process(h.pid).status() == psutil.STATUS_ZOMBIE


def test_sigstop_and_sigcont(spec: Spec, tmp_path) -> None:
    with WorkerPool("reference", spec, spare=1) as pool:
        h, msg = _prepared(pool, spec, tmp_path, "after_claim")
        h.suspend()
        # the signal is delivered asynchronously: polled for
        until(lambda: psutil.Process(h.pid).status() == psutil.STATUS_STOPPED, "the worker stopped by SIGSTOP")
        h.resume()
        h.send({"cmd": "continue", "now": 1000.0})
        done = h.recv(60)
        assert done["ok"] and done["outcome"]  # it carried on and finished the workload
        h.kill()


def test_wire_adapter_dies_with_its_worker(spec: Spec, tmp_path) -> None:
    with WorkerPool("exec:ledgercheck serve reference", spec, spare=1) as pool:
        h, msg = _prepared(pool, spec, tmp_path, "ledger.after_commit")
        assert msg["point"] == "ledger.after_commit"
        children = descendants(h.pid)
        assert children  # the adapter subprocess, blocked at its own crash point
        killed = h.kill()
        assert set(children) <= set(killed)
        for c in children:
            assert not psutil.pid_exists(c) or psutil.Process(c).status() == psutil.STATUS_ZOMBIE
