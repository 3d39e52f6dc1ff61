"""Crash points over the wire: arm, announce, SIGKILL, restart on the same directory.

The reference ledger served by ``ledgercheck serve reference`` passes ``ledger.after_event_insert``
inside each write transaction (the item and its event are written, not committed) and
``ledger.after_commit`` right after the commit.  Killing the process at the first must lose
the write; killing it at the second must keep it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil
import pytest
from ledgercheck.spec import Spec
from ledgercheck.transport.client import WireClient, connect

T0 = 1_000_000.0


def _open(address: str, spec: Spec, root: Path, seen: list[dict[str, Any]] | None = None) -> WireClient:
    c = connect(address, spec, timeout=600.0, on_notification=None if seen is None else seen.append)
    assert isinstance(c, WireClient)
    assert c.reset({"dir": str(root)}).ok
    return c


def _crash_create(c: WireClient, point: str, occurrence: int, source_ids: list[str]) -> list[Any]:
    """Arm ``point`` and create one item per source id; returns the outcomes."""
    alive_at_point: list[bool] = []
    c.on_notification = lambda msg: alive_at_point.append(c.proc is not None and c.proc.poll() is None)
    assert c.arm(point, occurrence).ok
    outs = [c.call("create", source_system="manual", source_id=s, now=T0 + i) for i, s in enumerate(source_ids)]
    assert alive_at_point == [True], "the adapter announces the point, then blocks (it does not exit on its own)"
    return outs


@pytest.mark.parametrize(("point", "survives"), [("ledger.after_commit", True), ("ledger.after_event_insert", False)])
def test_kill_at_a_crash_point_then_restart_on_the_same_dir(serve_reference: str, spec: Spec, tmp_path: Path,
                                                            point: str, survives: bool) -> None:
    seen: list[dict[str, Any]] = []
    c = _open(serve_reference, spec, tmp_path, seen)
    assert point in c.crash_points
    pid = c.pid
    assert pid is not None
    outs = _crash_create(c, point, 2, ["first", "second"])
    assert outs[0].ok and outs[0].value["created"] is True, "the first pass of the point is not the armed one"
    crashed = outs[1]
    assert crashed.code == "adapter_crashed" and crashed.definite is False
    assert f"killed at crash point {point!r} (occurrence 2)" in crashed.message
    assert c.last_crash_point == {"event": "crash_point", "point": point, "occurrence": 2}
    assert not psutil.pid_exists(pid), "the harness killed and reaped the adapter"
    c.close()

    again = _open(serve_reference, spec, tmp_path)
    try:
        items = again.call("list")
        assert items.ok
        ids = [w["source_id"] for w in items.value]
        assert ids == (["first", "second"] if survives else ["first"])
        for w in items.value:
            events = again.call("events", work_id=w["work_id"]).value
            assert [e["type"] for e in events] == ["work_created"], "exactly the committed event, no half-written one"
        # the lost create can simply be made again
        redo = again.call("create", source_system="manual", source_id="second", now=T0 + 10)
        assert redo.ok and redo.value["created"] is (not survives)
        # unknown points and occurrences are refused, and nothing is armed by a refused request
        bad = again.arm("ledger.nowhere")
        assert bad.code == "invalid_argument" and "ledger.after_commit" in bad.message
        assert again.arm(point, 0).code == "invalid_argument"
        assert again.call("create", source_system="manual", source_id="calm", now=T0 + 11).ok
    finally:
        again.close()


def test_arm_on_an_adapter_without_crash_points(node_address: str, spec: Spec) -> None:
    c = connect(node_address, spec, timeout=600.0)
    assert isinstance(c, WireClient)
    try:
        assert c.crash_points == []
        out = c.arm("ledger.after_commit")
        assert out.code == "unsupported" and out.definite
    finally:
        c.close()
