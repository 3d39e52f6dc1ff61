"""Serve an in-process adapter over the wire protocol on stdin/stdout.

``ledgercheck serve reference`` makes the reference ledger a subprocess adapter, so the whole
suite can run against it out of process (``--ledger-adapter "exec:ledgercheck serve reference"``).
Any in-process adapter address works the same way.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from typing import IO, Any

from .client import AdapterError, load_inprocess, parse_address
from .protocol import LedgerError
from .wire import dumps


class _Armed:
    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.point: str | None = None
        self.occurrence = 0
        self.seen: dict[str, int] = {}

    def __call__(self, point: str) -> None:
        n = self.seen[point] = self.seen.get(point, 0) + 1
        if point == self.point and n == self.occurrence:
            self.out.write(dumps({"event": "crash_point", "point": point, "occurrence": n}))
            self.out.flush()
            while True:  # wait for the harness's SIGKILL; never exit politely
                time.sleep(3600)


def serve(adapter: Any, infile: IO[bytes], outfile: IO[bytes]) -> int:
    armed = _Armed(outfile)
    for raw in infile:
        if not raw.strip():
            continue
        try:
            req = json.loads(raw)
            rid, op, args = req["id"], req["op"], req.get("args") or {}
            if not isinstance(op, str) or not isinstance(args, dict):
                raise ValueError("op must be a string and args an object")
        except (ValueError, KeyError, TypeError) as exc:
            outfile.write(dumps({"id": None, "ok": False, "error": {"code": "invalid_argument", "message": f"bad request: {exc}", "definite": True}}))
            outfile.flush()
            continue
        try:
            if op == "arm":
                hook = getattr(adapter, "set_crash_hook", None)
                if hook is None:
                    raise LedgerError("unsupported", "this adapter has no crash points")
                armed.point, armed.occurrence, armed.seen = args["point"], int(args.get("occurrence", 1)), {}
                hook(armed)
                result = None
            else:
                fn = getattr(adapter, op, None)
                if fn is None or op.startswith("_"):
                    raise LedgerError("unsupported", f"no operation {op!r}")
                result = fn(**args)
            resp = {"id": rid, "ok": True, "result": result}
        except LedgerError as exc:
            resp = {"id": rid, "ok": False, "error": exc.to_wire()}
        except TypeError as exc:
            resp = {"id": rid, "ok": False, "error": {"code": "invalid_argument", "message": f"{op}: {exc}", "definite": True}}
        except Exception as exc:  # noqa: BLE001 - report, keep serving
            traceback.print_exc(file=sys.stderr)
            resp = {"id": rid, "ok": False, "error": {"code": "internal", "message": f"{type(exc).__name__}: {exc}", "definite": False}}
        try:
            outfile.write(dumps(resp))
        except (TypeError, ValueError) as exc:
            outfile.write(dumps({"id": rid, "ok": False, "error": {"code": "internal", "message": f"result is not JSON: {exc}", "definite": False}}))
        outfile.flush()
    close = getattr(adapter, "close", None)
    if callable(close):
        close()
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve an in-process adapter over the stdio wire protocol")
    p.add_argument("address", help="reference, an installed adapter name, or python:MODULE:FACTORY")
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    kind, target = parse_address(args.address)
    if kind == "exec":
        print("ledgercheck serve: exec: adapters already speak the wire protocol", file=sys.stderr)
        return 2
    try:
        adapter = load_inprocess(kind, target)
    except AdapterError as exc:
        print(f"ledgercheck serve: {exc}", file=sys.stderr)
        return 2
    return serve(adapter, sys.stdin.buffer, sys.stdout.buffer)
