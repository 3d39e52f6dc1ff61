"""A worker forked by the fork server runs in its requester's environment and working directory
as they are when it is spawned (chaos/crash/forkserver.py): a test that points adapters at its own
server after an earlier test started the fork server must not have its workers reach another one
(every item of a campaign then looks lost)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ledgercheck.chaos.crash.forkserver import ForkServer

PROBE = '''
import os

def probe(conn, cfg):
    conn.send({"value": os.environ.get(cfg["var"]), "cwd": os.getcwd()})
'''


@pytest.mark.thorough  # the server imports the whole harness once (about 4 s): long tier
def test_a_worker_sees_the_environment_of_its_spawn_not_of_the_servers_start(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "lc_fs_probe.py").write_text(PROBE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("LEDGERCHECK_FS_PROBE", raising=False)
    server = ForkServer()  # started before the variable is set, as an earlier test would
    try:
        here = tmp_path / "later"
        here.mkdir()
        monkeypatch.setenv("LEDGERCHECK_FS_PROBE", "the spawn's")
        monkeypatch.chdir(here)
        _pid, conn = server.spawn()
        conn.send({"entry": "lc_fs_probe:probe", "var": "LEDGERCHECK_FS_PROBE"})
        assert conn.poll(120), "the probe answered nothing"
        seen = conn.recv()
        assert seen == {"value": "the spawn's", "cwd": str(here)}
        conn.close()
        monkeypatch.delenv("LEDGERCHECK_FS_PROBE")
        _pid, conn = server.spawn()
        conn.send({"entry": "lc_fs_probe:probe", "var": "LEDGERCHECK_FS_PROBE"})
        assert conn.poll(120), "the probe answered nothing"
        assert conn.recv()["value"] is None
        conn.close()
    finally:
        server.close()
