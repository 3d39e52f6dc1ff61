"""Processes an adapter leaves behind are ended with it (docs/protocol.md, "Processes").

The adapter in adapters/escapees.py starts a ten-minute sleeper at its handshake: one that stays
in its process group holding its output while the adapter exits, one that calls setsid while
the adapter lives on, and one that calls setsid and is re-parented when the adapter exits.
After the harness is done with the adapter, none of them may still run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psutil
import pytest
from ledgercheck.services import reaper
from ledgercheck.spec import Spec
from ledgercheck.transport.client import WireClient
from patience import SAFETY_NET, until

from .conftest import ADAPTERS


def _alive(pid: int) -> bool:
    return not reaper.gone(pid)


def _start(spec: Spec, mode: str, pidfile: Path) -> tuple[WireClient, int]:
    """The adapter in ``mode``: its calls time out after 1 s in the orphan mode, where the call
    must time out (the answer never comes), else after the safety net of minutes (they answer)."""
    argv = [sys.executable, str(ADAPTERS / "escapees.py"), mode, str(pidfile)]
    client = WireClient(argv, f"exec:escapees.py {mode}", spec, timeout=1.0 if mode == "orphan" else SAFETY_NET,
                        startup_timeout=SAFETY_NET)
    child = int(pidfile.read_text())
    assert _alive(child), "the fixture's child should be running after the handshake"
    return client, child


def test_a_child_holding_the_output_dies_with_its_exited_parent(spec: Spec, tmp_path: Path) -> None:
    client, child = _start(spec, "orphan", tmp_path / "pid")
    try:
        assert psutil.Process(child).ppid() == client.pid
        out = client.call("get", work_id="w-1")
        # the adapter exited, but its child still holds the pipe: no end of output, a timeout
        assert not out.ok and out.code == "timeout", out
        # SIGKILLed with the adapter (a signal lands when the process next runs: polled for)
        until(lambda: not _alive(child), "the child in the adapter's process group gone with the adapter")
    finally:
        client.close()


@pytest.mark.parametrize("mode", ["setsid", "setsid_orphan"])
def test_a_child_that_left_the_group_dies_at_close(spec: Spec, tmp_path: Path, mode: str) -> None:
    client, child = _start(spec, mode, tmp_path / "pid")
    try:
        assert os.getsid(child) == child != os.getsid(client.pid or 0)  # a session of its own
        if mode == "setsid_orphan":
            out = client.call("get", work_id="w-1")
            assert not out.ok and out.code == "adapter_crashed", out
        else:
            out = client.call("get", work_id="w-1")
            assert not out.ok and out.code == "unsupported", out
            assert _alive(client.pid or 0)
    finally:
        client.close()
    until(lambda: not _alive(child), f"the setsid child ({mode}) gone after the adapter's close")


def test_the_tag_finds_a_reparented_process_and_nothing_else(tmp_path: Path) -> None:
    """The tag net on its own: a process that carries the tag is found, one with another value is not."""
    import subprocess
    import uuid

    tag = uuid.uuid4().hex
    mine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                            env={**os.environ, reaper.ADAPTER_TAG: tag}, start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                             env={**os.environ, reaper.ADAPTER_TAG: tag + "x"}, start_new_session=True)
    try:
        assert reaper.tagged(reaper.ADAPTER_TAG, tag) == [mine.pid]
        assert reaper.sweep(reaper.ADAPTER_TAG, tag) == [mine.pid]
        assert mine.wait(SAFETY_NET) == -9
        assert other.poll() is None
    finally:
        for p in (mine, other):
            p.kill()
            p.wait(SAFETY_NET)
