"""A wire adapter that leaves processes behind (``escapees.py MODE PIDFILE``).

At the handshake it starts a child that sleeps for ten minutes and writes the child's pid to
PIDFILE; then it answers like a plain adapter, except where its mode says otherwise:

``orphan``         the child stays in the adapter's process group and holds its stdout; the
                   adapter exits when asked ``get`` (so the harness sees no end of output).
``setsid``         the child calls setsid (a session and group of its own); the adapter stays
                   until its input closes.
``setsid_orphan``  the same child; the adapter exits when asked ``get``, so the child is
                   re-parented before the harness closes it.
Standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

MODE, PIDFILE = sys.argv[1], sys.argv[2]
OUT = sys.stdout.buffer
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def say(obj: object) -> None:
    OUT.write((json.dumps(obj) + "\n").encode())
    OUT.flush()


def start_child() -> None:
    if MODE == "orphan":  # same group, inherits stdout
        child = subprocess.Popen(SLEEPER, stdin=subprocess.DEVNULL)
    else:
        child = subprocess.Popen(SLEEPER, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
    with open(PIDFILE, "w", encoding="ascii") as f:
        f.write(str(child.pid))


def main() -> None:
    for raw in sys.stdin.buffer:
        req = json.loads(raw)
        rid, op = req["id"], req["op"]
        if op == "hello":
            start_child()
            say({"id": rid, "ok": True, "result": {"name": "escapees", "version": "0", "protocol": "1.0",
                                                   "profiles": ["core"], "capabilities": {"clock": "injected"},
                                                   "crash_points": [], "known_bugs": {}}})
        elif op == "get" and MODE in ("orphan", "setsid_orphan"):
            os._exit(0)
        else:
            say({"id": rid, "ok": False, "error": {"code": "unsupported", "message": op, "definite": True}})


if __name__ == "__main__":
    main()
