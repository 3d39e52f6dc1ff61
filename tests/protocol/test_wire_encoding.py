"""Protocol lines: compact JSON, never NaN or infinities, whatever the fast encoder does."""

from __future__ import annotations

import json
import math

import pytest
from ledgercheck.transport.wire import dumps, loads

NONFINITE = [math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("bad", NONFINITE, ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("where", ["top", "nested-list", "beside-null", "in-tuple"])
def test_non_finite_floats_are_refused_wherever_they_are(bad: float, where: str) -> None:
    obj = {"top": {"now": bad}, "nested-list": {"a": [1, [2, {"b": bad}]]}, "beside-null": {"x": None, "y": bad},
           "in-tuple": {"t": (None, bad)}}[where]
    with pytest.raises(ValueError):
        dumps(obj)


@pytest.mark.parametrize("obj", [
    {"id": 1, "ok": True, "result": None},
    {"x": None, "y": 1.5, "z": [None, 0.0, -2.25e300], "s": "null NaN Infinity"},
    {"t": (1, None, 2.5), "nested": {"u": (None,)}},
    {"big": 2 ** 70, "n": None},
    {"unicode": "é ∑ \u2028", "empty": {}, "list": []},
])
def test_lines_round_trip_and_match_the_standard_encoder(obj: dict) -> None:
    line = dumps(obj)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert loads(line) == json.loads(json.dumps(obj))


def test_a_client_does_not_send_arguments_that_are_not_json(spec) -> None:
    from ledgercheck.transport.client import connect

    c = connect("exec:ledgercheck serve reference", spec)
    try:
        assert c.reset().ok
        pid = c.pid
        out = c.call("renew", work_id="w-1", token="t", now=math.nan)
        assert not out.ok and out.code == "invalid_argument" and "not JSON" in out.message and out.definite
        assert c.call("list").ok, "the adapter is still in step after the refused request"
        assert c.pid == pid and c.broken is None
    finally:
        c.close()


def test_spin_wait_is_bounded_and_sees_data_at_once() -> None:
    import os
    import select
    import time

    from ledgercheck.transport.wire import spin_until_readable

    r, w = os.pipe()
    try:
        p = select.poll()
        p.register(r, select.POLLIN)
        t, cpu = time.perf_counter(), time.process_time()
        assert spin_until_readable(p, 0.002) is False  # nothing to read: gives up after its budget
        # it spun its whole budget, and no more: the CPU time it burnt (the wall time it took can
        # be anything on a busy machine, where the spinning process waits its turn)
        assert time.perf_counter() - t >= 0.002 and time.process_time() - cpu < 0.5
        assert spin_until_readable(p, 0) is False  # 0 = off
        os.write(w, b"x\n")
        assert spin_until_readable(p, 10.0) is True  # data already there: returns at once
    finally:
        os.close(r)
        os.close(w)


def test_spin_setting_is_read_from_the_environment() -> None:
    import subprocess
    import sys

    code = "from ledgercheck.transport import wire; print(wire.SPIN_SECONDS)"
    run = lambda v: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,  # noqa: E731
                                   env={**__import__("os").environ, "LEDGERCHECK_WIRE_SPIN_US": v})
    assert float(run("0").stdout) == 0.0
    assert float(run("250").stdout) == 0.00025
    bad = run("fast")
    assert bad.returncode != 0 and "LEDGERCHECK_WIRE_SPIN_US='fast'" in bad.stderr.strip().splitlines()[-1]
