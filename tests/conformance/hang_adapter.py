"""A wire adapter that greets, then never answers again (``hang_adapter.py hang``), or dies on
every operation after its greeting (``hang_adapter.py crash``).  Standard library only."""

from __future__ import annotations

import json
import os
import sys
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "hang"


def main() -> None:
    for raw in sys.stdin.buffer:
        req = json.loads(raw)
        if req["op"] == "hello":
            hs = {"name": "hang-adapter", "version": "0", "protocol": "1.0", "profiles": ["core"],
                  "capabilities": {"clock": "injected"}, "crash_points": [], "known_bugs": {}}
            sys.stdout.write(json.dumps({"id": req["id"], "ok": True, "result": hs}) + "\n")
            sys.stdout.flush()
            continue
        if MODE == "crash":
            os._exit(3)
        while True:
            time.sleep(60)


if __name__ == "__main__":
    main()
