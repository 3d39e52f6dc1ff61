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


class _Poller:
    """A poller stub: readable or not, counting the polls a spin makes."""

    def __init__(self, readable: bool) -> None:
        self.readable = readable
        self.polls = 0

    def poll(self, timeout: float = 0) -> list[tuple[int, int]]:
        self.polls += 1
        return [(0, 1)] if self.readable else []


def test_spinner_spins_on_a_quiet_machine_while_spins_are_answered() -> None:
    from ledgercheck.transport.wire import Spinner

    s = Spinner(0.0005, busy=lambda: False)
    answered = _Poller(readable=True)
    for _ in range(100):
        assert s.wait(answered) is True
    assert s.spins == s.hits == 100


def test_spinner_blocks_at_once_on_a_busy_machine_and_never_probes() -> None:
    from ledgercheck.transport.wire import Spinner

    s = Spinner(0.0005, busy=lambda: True)
    p = _Poller(readable=True)
    results = [s.wait(p) for _ in range(Spinner.PROBE_EVERY * 3)]
    # no spin at all, not even a probe (a probe's yields hand the CPU to the other work)
    assert s.spins == 0 and not any(results) and p.polls == 0


def test_spinner_stops_after_unanswered_spins_and_comes_back_when_answers_come() -> None:
    from ledgercheck.transport.wire import Spinner

    s = Spinner(0.0002, busy=lambda: False)
    silent = _Poller(readable=False)
    for _ in range(Spinner.MISSES):
        assert s.wait(silent) is False
    assert s.spins == Spinner.MISSES
    before = silent.polls
    for _ in range(Spinner.PROBE_EVERY - 1):  # blocked at once: no poll at all
        assert s.wait(silent) is False
    assert silent.polls == before
    answered = _Poller(readable=True)
    assert s.wait(answered) is True  # the probe is answered: spinning again from here
    assert all(s.wait(answered) for _ in range(10)) and answered.polls == 11


def test_spinner_looks_at_the_load_again_as_it_changes() -> None:
    from ledgercheck.transport.wire import Spinner

    load = {"busy": True}
    s = Spinner(0.0005, busy=lambda: load["busy"])
    s.LOOK_EVERY = 0.0  # look at every wait (the default looks a few times a second)
    p = _Poller(readable=True)
    assert s.wait(p) is False and p.polls == 0
    load["busy"] = False
    assert s.wait(p) is True and p.polls == 1


def test_spin_off_means_never_spinning() -> None:
    from ledgercheck.transport.wire import Spinner

    s = Spinner(0.0, busy=lambda: False)
    p = _Poller(readable=True)
    assert not any(s.wait(p) for _ in range(10)) and p.polls == 0


def test_runnable_count_is_read() -> None:
    from ledgercheck.transport.wire import runnable_elsewhere

    assert runnable_elsewhere() >= 0
