"""A wire adapter that misbehaves on purpose, one way per mode (``misbehave.py MODE``).

It greets and resets like a real adapter and answers ``get`` with a well-formed snapshot,
except where its mode says otherwise.  Before misbehaving it writes a line to stderr
naming the mode, so tests can check the harness reports the adapter's stderr tail.
Standard library only, so it starts fast.
"""

from __future__ import annotations

import json
import os
import sys
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "ok"
OUT = sys.stdout.buffer


def say(obj: object) -> None:
    OUT.write((json.dumps(obj) + "\n").encode())
    OUT.flush()


def note(text: str) -> None:
    sys.stderr.write(f"misbehave[{MODE}]: {text}\n")
    sys.stderr.flush()


def snapshot(work_id: object = "w-1") -> dict[str, object]:
    return {
        "work_id": work_id, "source_system": "manual", "source_id": "s", "source_run_id": None, "status": "queued",
        "status_reason": None, "priority": 3, "attempt": 0, "owner": None, "lease_token": None, "lease_version": 0,
        "lease_expires_at": None, "waiting_kind": None, "waiting_ref": None, "waiting_deadline": None,
        "next_retry_at": None, "error_class": None, "cancel_requested": False, "quarantined": False, "result": None,
        "created_at": 1.0, "started_at": None, "finished_at": None,
    }


def hang() -> None:
    """The misbehaviour itself: never answer (the harness's timeout ends it)."""
    while True:
        time.sleep(60)


# Modes that hang in get say so at the handshake: the line is in the harness's stderr tail before
# the call it will time out on is sent, however long the machine takes to run this process then.
HANGS_IN_GET = {"hang": "hanging in get", "partial_line": "printing half a line in get",
                "notification_flood": "flooding notifications in get"}


def handshake(rid: int) -> None:
    if MODE in HANGS_IN_GET:
        note(f"will be {HANGS_IN_GET[MODE]}")
    if MODE == "handshake_error":
        note("refusing the handshake")
        say({"id": rid, "ok": False, "error": {"code": "internal", "message": "license file missing", "definite": False}})
        return
    hs: dict[str, object] = {"name": "misbehave", "version": "0", "protocol": "1.0", "profiles": ["core"],
                             "capabilities": {"clock": "injected"}, "crash_points": [], "known_bugs": {}}
    if MODE == "major_version":
        note("speaking protocol 2.3")
        hs["protocol"] = "2.3"
    if MODE == "bad_handshake":
        note("handshake without a name")
        del hs["name"]
    say({"id": rid, "ok": True, "result": hs})


def get(rid: int) -> None:
    if MODE == "crash":
        note("crashing in get")
        os._exit(3)
    if MODE == "hang":
        note("hanging in get")
        hang()
    if MODE == "close_stdout":
        note("closing stdout in get")
        os.close(1)
        hang()
    if MODE == "garbage":
        note("printing garbage in get")
        OUT.write(b"Traceback (most recent call last): oops\n")
        OUT.flush()
        return
    if MODE == "partial_line":
        note("printing half a line in get")
        OUT.write(b'{"id": ')
        OUT.flush()
        hang()
    if MODE == "wrong_id":
        note("answering the wrong id in get")
        say({"id": rid + 7, "ok": True, "result": snapshot()})
        return
    if MODE == "not_a_response":
        note("answering a list in get")
        say([rid, "ok"])
        return
    if MODE == "get_string":
        note("get returns a string")
        say({"id": rid, "ok": True, "result": "w-1 is queued"})
        return
    if MODE == "int_work_id":
        note("get returns an integer work_id")
        say({"id": rid, "ok": True, "result": snapshot(work_id=17)})
        return
    if MODE == "unknown_code":
        note("get fails with an invented code")
        say({"id": rid, "ok": False, "error": {"code": "kaboom", "message": "no idea", "definite": True}})
        return
    if MODE == "claims_definite_timeout":
        say({"id": rid, "ok": False, "error": {"code": "timeout", "message": "slow disk", "definite": True}})
        return
    if MODE == "notification_flood":
        note("flooding notifications in get")
        while True:
            say({"event": "progress", "point": "x"})
    if MODE == "huge_result":
        big = snapshot()
        big["result"] = "x" * (3 << 20)
        say({"id": rid, "ok": True, "result": big})
        return
    if MODE == "flood_stderr":
        chunk = "e" * 1023 + "\n"
        for _ in range(4096):  # 4 MiB of stderr while answering
            sys.stderr.write(chunk)
        note("flooded stderr")
    say({"id": rid, "ok": True, "result": snapshot()})


def main() -> None:
    if MODE == "hello_hang":  # says so first, then never reads the hello
        note("hanging in hello")
        hang()
    if MODE == "die_at_startup":
        note("cannot open /etc/ledger.conf")
        sys.exit(4)
    if MODE == "deaf":
        note("never reading stdin")
        say({"id": 1, "ok": True, "result": {"name": "deaf", "version": "0", "protocol": "1.0", "profiles": []}})
        hang()
    for raw in sys.stdin.buffer:
        req = json.loads(raw)
        rid, op = req["id"], req["op"]
        if op == "hello":
            handshake(rid)
        elif op == "reset":
            say({"id": rid, "ok": True, "result": None})
        elif op == "get":
            get(rid)
        else:
            say({"id": rid, "ok": False, "error": {"code": "unsupported", "message": op, "definite": True}})


if __name__ == "__main__":
    main()
