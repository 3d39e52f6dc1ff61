"""Serve an in-process adapter over the wire protocol on stdin/stdout, and describe the protocol.

``ledgercheck serve reference`` makes the reference ledger a subprocess adapter, so the whole
suite can run against it out of process (``--ledger-adapter "exec:ledgercheck serve reference"``).
Any in-process adapter address works the same way.

``ledgercheck protocol schema|reference|transcript|docs`` writes the protocol's JSON Schema,
the generated operation reference and a recorded session (see ``docs/protocol.md``).
"""

from __future__ import annotations

import argparse
import io
import os
import select
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from ledgercheck import PROTOCOL_VERSION

from .client import AdapterError, Dispatcher, WireClient, connect, load_inprocess, parse_address
from .wire import LOAD_ERRORS, Spinner, dumps, loads


class _Armed:
    """The crash hook ``arm`` installs: at the chosen pass of a point, announce it and block."""

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


def _error(rid: Any, code: str, message: str, definite: bool) -> dict[str, Any]:
    return {"id": rid, "ok": False, "error": {"code": code, "message": message, "definite": definite}}


class Server:
    """Answers protocol requests with an in-process adapter (one request at a time)."""

    def __init__(self, adapter: Any, out: IO[bytes]) -> None:
        self.adapter = adapter
        self.out = out
        self.dispatch = Dispatcher(adapter)
        self.armed = _Armed(out)
        self.crash_points: list[str] | None = None

    def handle(self, raw: bytes) -> dict[str, Any]:
        try:
            req = loads(raw)
        except LOAD_ERRORS as exc:
            return _error(None, "invalid_argument", f"bad request: not JSON: {exc}", True)
        if not isinstance(req, dict):
            return _error(None, "invalid_argument", "bad request: not an object", True)
        rid = req.get("id")
        op, args = req.get("op"), req.get("args", {})
        if not isinstance(rid, int) or isinstance(rid, bool):
            return _error(None, "invalid_argument", "bad request: id must be an integer", True)
        if not isinstance(op, str) or not isinstance(args, dict):
            return _error(rid, "invalid_argument", "bad request: op must be a string and args an object", True)
        if op == "arm":
            return self._arm(rid, args)
        out = self.dispatch(op, args)
        if out.ok:
            if op == "hello" and isinstance(out.value, dict):
                self.crash_points = list(out.value.get("crash_points") or [])
                caps = out.value.get("capabilities")
                if isinstance(caps, dict) and "pipeline" not in caps:
                    # this server reads requests as they come and answers them in order, so the
                    # harness may send several before reading the first answer (docs/protocol.md)
                    return {"id": rid, "ok": True, "result": {**out.value, "capabilities": {**caps, "pipeline": True}}}
            return {"id": rid, "ok": True, "result": out.value}
        return _error(rid, out.code, out.message, out.definite)

    def _arm(self, rid: int, args: Mapping[str, Any]) -> dict[str, Any]:
        hook = getattr(self.adapter, "set_crash_hook", None)
        if hook is None:
            return _error(rid, "unsupported", "this adapter has no crash points", True)
        point, occurrence = args.get("point"), args.get("occurrence", 1)
        if not isinstance(point, str) or (self.crash_points is not None and point not in self.crash_points):
            return _error(rid, "invalid_argument", f"arm: unknown crash point {point!r} (known: {', '.join(self.crash_points or [])})", True)
        if not isinstance(occurrence, int) or isinstance(occurrence, bool) or occurrence < 1:
            return _error(rid, "invalid_argument", "arm: occurrence must be an integer >= 1", True)
        self.armed.point, self.armed.occurrence, self.armed.seen = point, occurrence, {}
        hook(self.armed)
        return {"id": rid, "ok": True, "result": None}

    def encode(self, resp: dict[str, Any]) -> bytes:
        try:
            return dumps(resp)
        except (TypeError, ValueError) as exc:
            return dumps(_error(resp.get("id"), "internal", f"the result is not JSON: {exc}", False))


def _fd_lines(fd: int) -> Iterator[bytes]:
    """Lines read straight from a pipe's descriptor (the last one may lack its newline).

    Reading the descriptor ourselves (rather than through a buffered file) tells when no
    request is waiting, so the loop can spin briefly for the next one before it blocks."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    spinner = Spinner()
    buf = b""
    while True:
        nl = buf.find(b"\n")
        if nl >= 0:
            yield buf[: nl + 1]
            buf = buf[nl + 1:]
            continue
        parts = [buf]
        while True:
            spinner.wait(poller)
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                if any(parts):
                    yield b"".join(parts)
                return
            nl = chunk.find(b"\n")
            if nl >= 0:
                yield b"".join(parts) + chunk[: nl + 1]
                buf = chunk[nl + 1:]
                break
            parts.append(chunk)


def _lines(infile: IO[bytes]) -> Iterator[bytes]:
    try:
        fd = infile.fileno()
        os.fstat(fd)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):  # not a real file (a BytesIO)
        return iter(infile.readline, b"")
    # nothing has been read through ``infile`` yet (serve reads the requests from the start)
    return _fd_lines(fd)


def serve(adapter: Any, infile: IO[bytes], outfile: IO[bytes]) -> int:
    """Answer requests from ``infile`` until end of input, then close the adapter."""
    server = Server(adapter, outfile)
    write, flush = outfile.write, outfile.flush
    for raw in _lines(infile):
        if not raw.strip():
            continue
        write(server.encode(server.handle(raw)))
        flush()
    close = getattr(adapter, "close", None)
    if callable(close):
        close()
    return 0


# ---------------------------------------------------------------------------------------------
# A recorded session: the transcript in docs/protocol.md comes from here.

T0 = 1_000_000.0


def _session(c: WireClient) -> None:
    """Drive a short, representative session (every step is a real call)."""
    c.reset({})
    made = c.call("create", source_system="conversation", source_id="msg-1", priority=2, payload={"text": "hi"}, now=T0)
    wid = made.value["work"]["work_id"]
    c.call("create", source_system="conversation", source_id="msg-1", now=T0 + 0.5)
    c.call("create", source_system="scheduler", source_id="nightly-report", now=T0 + 0.5)
    w = c.call("claim", owner="worker-1", now=T0 + 1).value
    tok = w["lease_token"]
    c.call("claim", owner="worker-2", now=T0 + 1.5)
    c.call("renew", work_id=wid, token=tok, now=T0 + 15)
    c.call("close_out", work_id=wid, token="not-the-lease", status="done", now=T0 + 16)
    c.call("close_out", work_id=wid, token=tok, status="waiting_user", now=T0 + 16)
    c.call("cancel", work_id=wid, reason="the user withdrew", now=T0 + 17)
    c.call("close_out", work_id=wid, token=tok, status="cancelled", reason="the user withdrew", now=T0 + 18)
    c.call("claim", owner="worker-1", work_id=wid, now=T0 + 19)
    c.call("requeue", work_id=wid, reason="operator retry", now=T0 + 20)
    c.call("claim", owner="worker-2", now=T0 + 21)
    c.call("expire", now=T0 + 21 + 45 + 30 + 0.125)
    c.call("events", work_id=wid)
    c.call("get", work_id="no-such-work")
    c.call("list", status="timeout")
    c.arm("ledger.after_commit", 1)
    c.call("create", source_system="manual", source_id="ticket-7", now=T0 + 100)


def record_transcript(address: str = "exec:ledgercheck serve reference") -> list[tuple[str, str]]:
    """Run the demo session against ``address``; every line that crossed the pipe, in order."""
    lines: list[tuple[str, str]] = []

    def tap(direction: str, line: bytes) -> None:
        lines.append((direction, line.decode("utf-8").rstrip("\n")))

    client = connect(address, tap=tap)
    if not isinstance(client, WireClient):
        client.close()
        raise AdapterError(f"{address}: a transcript needs an exec: address")
    try:
        _session(client)
    finally:
        client.close()
    return lines


def format_transcript(lines: list[tuple[str, str]]) -> str:
    return "".join(f"{d} {text}\n" for d, text in lines)


# ---------------------------------------------------------------------------------------------
# Keeping docs/protocol.md current

BEGIN = "<!-- BEGIN GENERATED: {} -->"
END = "<!-- END GENERATED: {} -->"


def replace_block(text: str, name: str, body: str) -> str:
    """``text`` with the block between the named markers replaced by ``body``."""
    b, e = BEGIN.format(name), END.format(name)
    i, j = text.find(b), text.find(e)
    if i < 0 or j < i:
        raise ValueError(f"markers {b} ... {e} not found")
    return text[: i + len(b)] + "\n" + body.rstrip("\n") + "\n" + text[j:]


def read_block(text: str, name: str) -> str:
    b, e = BEGIN.format(name), END.format(name)
    i, j = text.find(b), text.find(e)
    if i < 0 or j < i:
        raise ValueError(f"markers {b} ... {e} not found")
    return text[i + len(b): j].strip("\n") + "\n"


def transcript_block(lines: list[tuple[str, str]]) -> str:
    return "```text\n" + format_transcript(lines) + "```\n"


def parse_transcript_block(block: str) -> list[tuple[str, str]]:
    out = []
    for raw in block.splitlines():
        if raw.startswith(("> ", "< ")):
            out.append((raw[0], raw[2:]))
    return out


# ---------------------------------------------------------------------------------------------
# Command line

def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve an in-process adapter over the stdio wire protocol")
    p.add_argument("address", help="reference, an installed adapter name, or python:MODULE:FACTORY")
    p.set_defaults(func=cmd_serve)

    q = sub.add_parser("protocol", help="the adapter wire protocol: JSON Schema, operation reference, transcript")
    qs = q.add_subparsers(dest="protocol_command", required=True, metavar="WHAT")
    s = qs.add_parser("schema", help="print (or write, or check) the JSON Schema of every protocol message")
    s.add_argument("-o", "--output", help="write to this file instead of standard output")
    s.add_argument("--check", action="store_true", help="exit 1 if --output differs from what would be written")
    s.set_defaults(func=cmd_schema)
    r = qs.add_parser("reference", help="print the operation reference generated from the contract (Markdown)")
    r.set_defaults(func=cmd_reference)
    t = qs.add_parser("transcript", help="run a short demo session and print every line that crossed the pipe")
    t.add_argument("address", nargs="?", default="exec:ledgercheck serve reference", help="an exec: adapter address")
    t.set_defaults(func=cmd_transcript)
    d = qs.add_parser("docs", help="refresh the generated parts of docs/protocol.md")
    d.add_argument("path", nargs="?", default="docs/protocol.md")
    d.add_argument("--check", action="store_true", help="exit 1 if the operation reference is stale (writes nothing)")
    d.add_argument("--transcript", action="store_true", help="also record a new transcript")
    d.set_defaults(func=cmd_docs)


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


def _spec() -> Any:
    from ledgercheck.spec import default_spec

    return default_spec()


def _write_or_check(path: str | None, text: str, check: bool, what: str, emit: Callable[[str], Any]) -> int:
    if path is None:
        if check:
            print(f"ledgercheck protocol: --check needs --output ({what})", file=sys.stderr)
            return 2
        emit(text)
        return 0
    p = Path(path)
    if check:
        try:
            current = p.read_text(encoding="utf-8") if p.exists() else ""
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text" \
                if isinstance(exc, UnicodeDecodeError) else str(exc)
            print(f"ledgercheck protocol: {path}: cannot read: {why}", file=sys.stderr)
            return 2
        if current != text:
            print(f"{path}: stale {what}; run: ledgercheck protocol {what} -o {path}", file=sys.stderr)
            return 1
        print(f"{path}: up to date")
        return 0
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"ledgercheck protocol: {path}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from .wire import schema_text

    return _write_or_check(args.output, schema_text(_spec()), args.check, "schema", sys.stdout.write)


def cmd_reference(args: argparse.Namespace) -> int:
    from .protocol_docs import reference_markdown

    sys.stdout.write(reference_markdown(_spec()))
    return 0


def cmd_transcript(args: argparse.Namespace) -> int:
    try:
        sys.stdout.write(format_transcript(record_transcript(args.address)))
    except AdapterError as exc:
        print(f"ledgercheck protocol transcript: {exc}", file=sys.stderr)
        return 2
    return 0


def cmd_docs(args: argparse.Namespace) -> int:
    from .protocol_docs import reference_markdown

    p = Path(args.path)
    try:
        text = p.read_text(encoding="utf-8")
        new = replace_block(text, "reference", reference_markdown(_spec()))
        if args.check:
            if new != text:
                print(f"{p}: the operation reference is stale; run: ledgercheck protocol docs {p}", file=sys.stderr)
                return 1
            print(f"{p}: up to date")
            return 0
        if args.transcript:
            new = replace_block(new, "transcript", transcript_block(record_transcript()))
    except (OSError, ValueError, AdapterError) as exc:
        print(f"ledgercheck protocol docs: {p}: {exc}", file=sys.stderr)
        return 2
    p.write_text(new, encoding="utf-8")
    print(f"wrote {p} (protocol {PROTOCOL_VERSION})")
    return 0
