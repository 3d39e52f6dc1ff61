"""``ledgercheck serve``: request framing, dispatch and the arm request, without a subprocess."""

from __future__ import annotations

import io
import json
from typing import Any

from ledgercheck.transport.protocol import LedgerError
from ledgercheck.transport.server import Server, serve
from ledgercheck.transport.wire import dumps


class Toy:
    """A small adapter with one crash point."""

    def __init__(self) -> None:
        self.hook: Any = None
        self.closed = False
        self.items: dict[str, int] = {}

    def hello(self, protocol: str = "1.0") -> dict[str, Any]:
        return {"name": "toy", "version": "0", "protocol": "1.0", "profiles": [], "crash_points": ["toy.write"]}

    def reset(self, config: dict[str, Any] | None = None) -> None:
        self.items = {}

    def set_crash_hook(self, hook: Any) -> None:
        self.hook = hook

    def get(self, *, work_id: str) -> Any:
        if work_id == "set":
            return {1, 2}  # not JSON
        if work_id not in self.items:
            raise LedgerError("not_found", f"no work {work_id!r}")
        return self.items[work_id]

    def close(self) -> None:
        self.closed = True


def _handle(server: Server, line: bytes) -> dict[str, Any]:
    return json.loads(server.encode(server.handle(line)))


def test_framing_errors_are_answered_not_fatal() -> None:
    s = Server(Toy(), io.BytesIO())
    for line, rid in [(b"not json\n", None), (b"[1, 2]\n", None), (b'{"id": "7", "op": "get"}\n', None),
                      (b'{"id": true, "op": "get"}\n', None), (b'{"id": 7, "op": 5}\n', 7),
                      (b'{"id": 8, "op": "get", "args": []}\n', 8), (b"\xff\xfe\n", None)]:
        resp = _handle(s, line)
        assert resp["ok"] is False and resp["id"] == rid and resp["error"]["code"] == "invalid_argument", line
        assert resp["error"]["definite"] is True


def test_dispatch_codes() -> None:
    s = Server(Toy(), io.BytesIO())
    assert _handle(s, dumps({"id": 1, "op": "nope", "args": {}}))["error"]["code"] == "unsupported"
    assert _handle(s, dumps({"id": 2, "op": "_private", "args": {}}))["error"]["code"] == "unsupported"
    assert _handle(s, dumps({"id": 3, "op": "get", "args": {"work_id": "x"}}))["error"] == {
        "code": "not_found", "message": "no work 'x'", "definite": True}
    assert _handle(s, dumps({"id": 4, "op": "get", "args": {}}))["error"]["code"] == "invalid_argument"
    bad = _handle(s, dumps({"id": 5, "op": "get", "args": {"work_id": "set"}}))
    assert bad["error"]["code"] == "internal" and bad["error"]["definite"] is False and "not JSON" in bad["error"]["message"]
    # null and omitted arguments are the same
    assert _handle(s, dumps({"id": 6, "op": "reset", "args": {"config": None}})) == {"id": 6, "ok": True, "result": None}
    assert _handle(s, dumps({"id": 7, "op": "reset"})) == {"id": 7, "ok": True, "result": None}


def test_arm_checks_the_point_and_installs_the_hook() -> None:
    toy = Toy()
    out = io.BytesIO()
    s = Server(toy, out)
    _handle(s, dumps({"id": 1, "op": "hello", "args": {"protocol": "1.0"}}))
    assert _handle(s, dumps({"id": 2, "op": "arm", "args": {"point": "toy.other"}}))["error"]["code"] == "invalid_argument"
    assert _handle(s, dumps({"id": 3, "op": "arm", "args": {"point": "toy.write", "occurrence": "2"}}))["error"]["code"] == "invalid_argument"
    assert _handle(s, dumps({"id": 4, "op": "arm", "args": {"point": "toy.write", "occurrence": 2}})) == {"id": 4, "ok": True, "result": None}
    assert toy.hook is not None
    toy.hook("toy.write")  # the first pass is not the armed one: no announcement, no block
    toy.hook("toy.other")
    assert out.getvalue() == b""


def test_arm_without_crash_points_is_unsupported() -> None:
    class Plain:
        def hello(self, protocol: str = "1.0") -> dict[str, Any]:
            return {"name": "p", "version": "0", "protocol": "1.0", "profiles": []}

    s = Server(Plain(), io.BytesIO())
    assert _handle(s, dumps({"id": 1, "op": "arm", "args": {"point": "x"}}))["error"]["code"] == "unsupported"


def test_serve_answers_in_order_skips_blank_lines_and_closes_at_eof() -> None:
    toy = Toy()
    requests = b"".join([dumps({"id": 1, "op": "hello", "args": {"protocol": "1.0"}}), b"\n", b"   \n",
                         dumps({"id": 2, "op": "get", "args": {"work_id": "x"}}),
                         dumps({"id": 3, "op": "reset", "args": {"config": {}}})])
    out = io.BytesIO()
    assert serve(toy, io.BytesIO(requests), out) == 0
    answers = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [a["id"] for a in answers] == [1, 2, 3]
    assert [a["ok"] for a in answers] == [True, False, True]
    assert toy.closed


def test_serve_on_a_real_pipe_frames_lines_split_and_joined_across_reads() -> None:
    """On a pipe the server reads the descriptor itself (to spin for the next request before
    blocking): requests that arrive several to a read, split across reads, or without a final
    newline at end of input are all answered, in order."""
    import array
    import fcntl
    import os
    import termios
    import threading

    from patience import until

    toy = Toy()
    r, w = os.pipe()

    def read_by_the_server() -> None:
        """Wait until the server has read everything written so far (the pipe holds no byte), so
        what is written next comes in a read of its own, however the two threads are scheduled."""
        def pending() -> int:
            n = array.array("i", [0])
            fcntl.ioctl(r, termios.FIONREAD, n)
            return n[0]
        until(lambda: pending() == 0, "the server reading the pipe", every=0.001)
    reqs = [dumps({"id": i, "op": "get", "args": {"work_id": f"w{i}"}}) for i in range(1, 6)]
    big = dumps({"id": 6, "op": "get", "args": {"work_id": "x" * 200_000}})
    last = dumps({"id": 7, "op": "hello", "args": {"protocol": "1.0"}}).rstrip(b"\n")

    def feed() -> None:
        os.write(w, reqs[0] + reqs[1] + reqs[2][:7])  # two whole lines and the start of a third
        read_by_the_server()
        os.write(w, reqs[2][7:] + reqs[3])
        read_by_the_server()
        os.write(w, reqs[4] + b"\n")  # and a blank line
        for k in range(0, len(big), 65_536):  # a line longer than one read
            os.write(w, big[k:k + 65_536])
        os.write(w, last)  # no newline: end of input ends the line
        os.close(w)

    t = threading.Thread(target=feed)
    t.start()
    out = io.BytesIO()
    with os.fdopen(r, "rb") as infile:
        assert serve(toy, infile, out) == 0
    t.join()
    answers = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [a["id"] for a in answers] == [1, 2, 3, 4, 5, 6, 7]
    assert [a["error"]["code"] for a in answers[:6]] == ["not_found"] * 6
    assert answers[6]["result"]["name"] == "toy"
    assert toy.closed
