"""A misbehaving subprocess adapter never hangs or crashes the harness.

Every case uses tests/protocol/adapters/misbehave.py in one mode: the call returns an
indefinite adapter error carrying the adapter's stderr tail, and ``reset`` brings up a working
process for the next test.  A mode that never answers meets a 0.5 s call timeout (the call
returns after it, never before); a mode that answers, however badly, gets a timeout of minutes
(patience.SAFETY_NET), so a slow machine cannot turn its answer into a timeout.  No case bounds
how long the harness takes: a harness that waited forever would hang the test, and the safety
net of minutes turns that into a failure.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import psutil
import pytest
from ledgercheck.transport.client import STDERR_LINE_CHARS, STDERR_LINES, AdapterError, WireClient
from patience import SAFETY_NET, until

TIMEOUT = 0.5  # the call timeout of the modes that never answer: it must expire


def _children_named(fragment: str) -> list[psutil.Process]:
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if any(fragment in part for part in p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


def _timed(fn: Callable[[], object]) -> tuple[object, float]:
    t = time.monotonic()
    out = fn()
    return out, time.monotonic() - t


# Modes that break the stream: the process is killed and replaced on reset.
STREAM_FAILURES = [
    ("crash", "adapter_crashed", "exit status 3"),
    ("hang", "timeout", "no answer within 0.5s"),
    ("close_stdout", "adapter_crashed", "closed its output"),
    ("garbage", "protocol_error", "not JSON"),
    ("partial_line", "timeout", "no answer within 0.5s"),
    ("wrong_id", "protocol_error", "answered id"),
    ("not_a_response", "protocol_error", "not a response object"),
    ("notification_flood", "timeout", "only notifications"),
]


@pytest.mark.parametrize(("mode", "code", "why"), STREAM_FAILURES, ids=[m[0] for m in STREAM_FAILURES])
def test_stream_failure_is_reported_and_reset_respawns(misbehaving: Callable[..., WireClient], mode: str, code: str, why: str) -> None:
    # Modes that answer (badly) get a timeout of minutes, so a slow machine cannot turn them into timeouts.
    timeout = TIMEOUT if code == "timeout" else SAFETY_NET
    c = misbehaving(mode)
    assert c.reset().ok
    first_pid = c.pid
    c.timeout = timeout  # for this call only: the reset before and after answer, however slowly
    out, took = _timed(lambda: c.call("get", work_id="w-1"))
    c.timeout = SAFETY_NET
    assert not out.ok and out.code == code and out.definite is False, out
    assert why in out.message
    assert f"misbehave[{mode}]" in out.message, "the adapter's stderr tail belongs in the message"
    if code == "timeout":
        assert took >= timeout, "a timeout before the timeout"
    assert c.broken is not None and c.proc is not None and c.proc.poll() is not None, "a broken adapter is killed"
    # until reset, calls fail at once without touching the dead process (no new request is sent)
    sent = c._next_id
    again = c.call("list")
    assert again.code == "adapter_crashed" and "earlier failure" in again.message and c._next_id == sent
    # reset brings up a fresh process that answers in step
    assert c.reset().ok
    assert c.pid != first_pid and c.spawns == 2 and c.broken is None
    answered = c.call("list")
    assert answered.code == "unsupported" and answered.definite


# Modes that answer in step with a bad value: reported, but the process is kept.
VALUE_FAILURES = [
    ("get_string", "malformed result"),
    ("int_work_id", "malformed result"),
    ("unknown_code", "unknown error code 'kaboom'"),
]


@pytest.mark.parametrize(("mode", "why"), VALUE_FAILURES, ids=[m[0] for m in VALUE_FAILURES])
def test_malformed_answer_is_a_protocol_error(misbehaving: Callable[..., WireClient], mode: str, why: str) -> None:
    c = misbehaving(mode)
    pid = c.pid
    out = c.call("get", work_id="w-1")
    assert out.code == "protocol_error" and out.definite is False, out
    assert why in out.message and f"misbehave[{mode}]" in out.message
    # the stream is still in step: the same process answers the next request and a reset
    assert c.broken is None and c.pid == pid
    assert c.call("list").code == "unsupported"
    assert c.reset().ok and c.pid == pid


def test_the_result_check_is_what_catches_a_wrong_type(misbehaving: Callable[..., WireClient]) -> None:
    c = misbehaving("get_string")
    c.checker = None  # as with check_results=False
    out = c.call("get", work_id="w-1")
    assert out.ok and out.value == "w-1 is queued"


def test_an_indefinite_code_stays_indefinite(misbehaving: Callable[..., WireClient]) -> None:
    out = misbehaving("claims_definite_timeout").call("get", work_id="w-1")
    assert out.code == "timeout" and out.definite is False and out.message == "slow disk"


@pytest.mark.parametrize(("mode", "why"), [
    ("handshake_error", "handshake failed: internal: license file missing"),
    ("major_version", "speaks protocol '2.3', the harness speaks 1.0"),
    ("bad_handshake", "bad handshake"),
    ("hello_hang", "no answer within 0.5s"),
    ("die_at_startup", "exit status 4"),
])
def test_startup_failure_is_one_line_and_leaves_no_process(misbehaving: Callable[..., WireClient], mode: str, why: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    if mode == "hello_hang":
        # the adapter's startup timeout must expire; its clock starts once the adapter has said
        # it hangs (however long the machine took to start it), so the line is there to report
        real = WireClient._request

        def after_its_first_line(self: WireClient, op: str, args: dict, timeout: float) -> object:
            if op == "hello":
                until(lambda: self.stderr_bytes > 0, "the hanging adapter's first stderr line")
            return real(self, op, args, timeout)

        monkeypatch.setattr(WireClient, "_request", after_its_first_line)
    startup = TIMEOUT if mode == "hello_hang" else SAFETY_NET  # only the hang meets its timeout
    with pytest.raises(AdapterError) as err:
        misbehaving(mode, startup_timeout=startup)
    msg = str(err.value)
    assert why in msg and "\n" not in msg
    assert f"misbehave[{mode}]" in msg, "the stderr tail explains the failure"
    assert not _children_named("misbehave.py"), "a failed handshake must not leave the process behind"


def test_a_respawn_that_fails_is_an_outcome_not_an_exception(misbehaving: Callable[..., WireClient]) -> None:
    c = misbehaving("crash")
    assert c.call("get", work_id="w-1").code == "adapter_crashed"
    c.argv = [sys.executable, c.argv[1], "die_at_startup"]  # the adapter's next start fails
    out = c.reset()
    assert out.code == "adapter_crashed" and "exit status 4" in out.message and not out.definite
    assert c.call("list").code == "adapter_crashed"
    c.argv = [sys.executable, c.argv[1], "ok"]
    assert c.reset().ok and c.call("get", work_id="w-1").ok


def test_an_adapter_that_stops_reading_cannot_block_a_large_request(misbehaving: Callable[..., WireClient]) -> None:
    c = misbehaving("deaf", timeout=TIMEOUT)
    big = {"contract": {"padding": "x" * (4 << 20)}}  # far more than a pipe buffer holds
    out, took = _timed(lambda: c.reset(big))
    assert out.code == "timeout" and "did not read its input" in out.message
    assert "misbehave[deaf]" in out.message
    assert took >= TIMEOUT  # it waited for the adapter to read, and gave up at its timeout


def test_stderr_flood_is_drained_and_bounded(misbehaving: Callable[..., WireClient]) -> None:
    c = misbehaving("flood_stderr")
    out = c.call("get", work_id="w-1")
    assert out.ok, out  # the adapter was never blocked on a full stderr pipe
    assert c.stderr_bytes > (4 << 20) - (1 << 17)
    tail = c.stderr_tail(10_000).splitlines()
    assert len(tail) <= STDERR_LINES and all(len(line) <= STDERR_LINE_CHARS for line in tail)


def test_closed_client_refuses_calls(misbehaving: Callable[..., WireClient]) -> None:
    c = misbehaving("ok")
    pid = c.pid
    c.close()
    assert c.call("get", work_id="w-1").code == "adapter_crashed"
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_large_answer_arrives_whole_and_an_overlong_one_is_refused(misbehaving: Callable[..., WireClient]) -> None:
    c = misbehaving("huge_result")
    out = c.call("get", work_id="w-1")
    assert out.ok and len(out.value["result"]) == 3 << 20
    assert c.call("list").code == "unsupported", "the stream is still in step after a long line"
    c.max_line = 1 << 20
    out = c.call("get", work_id="w-1")
    assert out.code == "protocol_error" and "longer than 1,048,576 bytes" in out.message and c.broken
