"""Harness-side clients for adapters: in-process Python objects and subprocesses on the wire.

Whatever the adapter does (raises, hangs, dies, prints garbage, answers the wrong id, returns a
malformed result), a call returns an :class:`~ledgercheck.conformance.model.Outcome`; it never
raises into the harness and never blocks past its deadline.  Failures that are the adapter's
fault carry the codes ``timeout``, ``adapter_crashed``, ``protocol_error`` or ``internal``
(indefinite: the operation may or may not have happened) and a message with the adapter's
stderr tail.

Addresses:
  ``reference`` or any name registered under the ``ledgercheck.adapters`` entry point group
  ``python:package.module:Factory``  an in-process adapter made by calling ``Factory()``
  ``exec:COMMAND ARGS...``          a subprocess speaking the wire protocol on stdin/stdout
"""

from __future__ import annotations

import collections
import importlib
import importlib.metadata
import inspect
import json
import os
import select
import shlex
import signal
import subprocess
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from ledgercheck import PROTOCOL_VERSION
from ledgercheck.spec import Spec, default_spec

from .model import Outcome
from .protocol import DEFINITE, LedgerError
from .wire import dumps, result_checker

ENTRY_POINT_GROUP = "ledgercheck.adapters"
HARNESS_CODES = {"timeout", "adapter_crashed", "protocol_error", "internal"}


class AdapterError(Exception):
    """An adapter could not be found, started or greeted; the message is one line."""


def parse_address(address: str) -> tuple[str, str]:
    if not isinstance(address, str) or not address.strip():
        raise AdapterError("empty adapter address")
    if address.startswith("exec:"):
        cmd = address[5:].strip()
        if not cmd:
            raise AdapterError("adapter address 'exec:' needs a command, e.g. exec:node adapter.js")
        return "exec", cmd
    if address.startswith("python:"):
        target = address[7:].strip()
        if ":" not in target:
            raise AdapterError(f"adapter address {address!r}: use python:package.module:Factory")
        return "python", target
    return "entry", address.strip()


def adapter_names() -> list[str]:
    return sorted(ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def load_inprocess(kind: str, target: str) -> Any:
    """Instantiate an in-process adapter from an entry point name or python:module:Factory."""
    if kind == "entry":
        eps = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == target]
        if not eps:
            known = ", ".join(adapter_names()) or "none installed"
            raise AdapterError(f"unknown adapter {target!r}: use python:MODULE:FACTORY, exec:COMMAND, or an installed adapter ({known})")
        try:
            factory = eps[0].load()
        except Exception as exc:  # noqa: BLE001 - report any import failure as one line
            raise AdapterError(f"adapter {target!r} ({eps[0].value}) failed to import: {type(exc).__name__}: {exc}") from None
        where = f"adapter {target!r}"
    else:
        mod_name, _, attr = target.partition(":")
        try:
            mod = importlib.import_module(mod_name)
        except Exception as exc:  # noqa: BLE001
            raise AdapterError(f"adapter python:{target}: cannot import {mod_name!r}: {type(exc).__name__}: {exc}") from None
        factory = mod
        for part in attr.split("."):
            factory = getattr(factory, part, None)
            if factory is None:
                raise AdapterError(f"adapter python:{target}: {mod_name!r} has no attribute {attr!r}")
        where = f"adapter python:{target}"
    try:
        return factory()
    except Exception as exc:  # noqa: BLE001
        raise AdapterError(f"{where}: the factory raised {type(exc).__name__}: {exc}") from None


class Client:
    """What the harness talks to.  Subclasses implement ``_call``."""

    kind = "abstract"

    def __init__(self, address: str, spec: Spec | None = None, check_results: bool = True) -> None:
        self.address = address
        self.spec = spec or default_spec()
        self.checker = result_checker(self.spec) if check_results else None
        self.handshake: dict[str, Any] = {}
        self.calls = 0

    # -- public ------------------------------------------------------------------------------
    def call(self, op: str, **args: Any) -> Outcome:
        self.calls += 1
        out = self._call(op, args)
        if out.ok and self.checker is not None:
            problem = self.checker.problem(op, out.value)
            if problem is not None:
                return Outcome.error("protocol_error", problem + self._tail_suffix(), definite=False)
        return out

    def reset(self, config: Mapping[str, Any] | None = None) -> Outcome:
        return self._call("reset", {"config": dict(config or {})})

    def close(self) -> None:  # pragma: no cover - overridden
        pass

    def stderr_tail(self, lines: int = 20) -> str:
        return ""

    @property
    def clock(self) -> str:
        return (self.handshake.get("capabilities") or {}).get("clock", "injected")

    @property
    def profiles(self) -> list[str]:
        return list(self.handshake.get("profiles") or [])

    @property
    def known_bugs(self) -> dict[str, str]:
        return dict(self.handshake.get("known_bugs") or {})

    @property
    def crash_points(self) -> list[str]:
        return list(self.handshake.get("crash_points") or [])

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- helpers -----------------------------------------------------------------------------
    def _tail_suffix(self) -> str:
        tail = self.stderr_tail(5).strip()
        return f" [adapter stderr: {tail[-400:]}]" if tail else ""

    def _greet(self, out: Outcome) -> None:
        if not out.ok:
            raise AdapterError(f"adapter {self.address}: handshake failed: {out.code}: {out.message}")
        if self.checker is not None:
            problem = self.checker.problem("hello", out.value)
            if problem is not None:
                raise AdapterError(f"adapter {self.address}: bad handshake: {problem}{self._tail_suffix()}")
        hs = dict(out.value)
        major = str(hs.get("protocol", "")).split(".")[0]
        if major != PROTOCOL_VERSION.split(".")[0]:
            raise AdapterError(f"adapter {self.address}: speaks protocol {hs.get('protocol')!r}, the harness speaks {PROTOCOL_VERSION}")
        unknown = [p for p in hs.get("profiles", []) if p not in self.spec.profiles]
        if unknown:
            raise AdapterError(f"adapter {self.address}: claims unknown profile(s) {', '.join(unknown)}")
        self.handshake = hs

    def _call(self, op: str, args: dict[str, Any]) -> Outcome:  # pragma: no cover - abstract
        raise NotImplementedError


class InProcessClient(Client):
    """Calls a Python adapter object directly."""

    kind = "in-process"

    def __init__(self, adapter: Any, address: str, spec: Spec | None = None, check_results: bool = True) -> None:
        super().__init__(address, spec, check_results)
        self.adapter = adapter
        self.last_traceback = ""
        self._sigs: dict[str, inspect.Signature | None] = {}
        hello = getattr(adapter, "hello", None)
        if hello is None:
            raise AdapterError(f"adapter {address}: object has no hello() method")
        self._greet(self._call("hello", {"protocol": PROTOCOL_VERSION}))

    def _sig(self, op: str, fn: Callable[..., Any]) -> inspect.Signature | None:
        if op not in self._sigs:
            try:
                self._sigs[op] = inspect.signature(fn)
            except (TypeError, ValueError):
                self._sigs[op] = None
        return self._sigs[op]

    def _call(self, op: str, args: dict[str, Any]) -> Outcome:
        fn = getattr(self.adapter, op, None)
        if fn is None or not callable(fn):
            return Outcome.error("unsupported", f"the adapter has no {op}() method")
        kwargs = {k: v for k, v in args.items() if v is not None}
        sig = self._sig(op, fn)
        if sig is not None:
            try:
                sig.bind(**kwargs)
            except TypeError as exc:
                code = "unsupported" if "unexpected keyword" in str(exc) else "invalid_argument"
                return Outcome.error(code, f"{op}: {exc}")
        try:
            return Outcome.success(fn(**kwargs))
        except LedgerError as exc:
            if exc.code not in self.spec.errors:
                return Outcome.error("protocol_error", f"{op} raised unknown error code {exc.code!r}: {exc.message}", definite=False)
            return Outcome.error(exc.code, exc.message, exc.definite)
        except Exception as exc:  # noqa: BLE001 - any adapter failure becomes an outcome
            self.last_traceback = traceback.format_exc(limit=8)
            frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
            where = f" at {os.path.basename(frame.filename)}:{frame.lineno}" if frame else ""
            return Outcome.error("internal", f"{op} raised {type(exc).__name__}: {exc}{where}", definite=False)

    def close(self) -> None:
        fn = getattr(self.adapter, "close", None)
        if callable(fn):
            try:
                fn()
            except Exception:  # noqa: BLE001
                pass

    def stderr_tail(self, lines: int = 20) -> str:
        return "\n".join(self.last_traceback.splitlines()[-lines:])


class WireClient(Client):
    """Spawns ``argv`` and speaks JSON lines with it.  A broken process is replaced on reset."""

    kind = "wire"

    def __init__(self, argv: list[str], address: str, spec: Spec | None = None, *, timeout: float = 10.0,
                 startup_timeout: float = 30.0, env: Mapping[str, str] | None = None, cwd: str | None = None,
                 check_results: bool = True, on_notification: Callable[[dict[str, Any]], None] | None = None) -> None:
        super().__init__(address, spec, check_results)
        self.argv = argv
        self.timeout = timeout
        self.startup_timeout = startup_timeout
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.on_notification = on_notification
        self.proc: subprocess.Popen[bytes] | None = None
        self.broken: str | None = None
        self._stderr: collections.deque[str] = collections.deque(maxlen=200)
        self._buf = b""
        self._next_id = 1
        self._spawn()

    # -- process management --------------------------------------------------------------------
    def _spawn(self) -> None:
        self._stderr.clear()
        self._buf = b""
        try:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         bufsize=0, start_new_session=True, env=self.env, cwd=self.cwd)
        except FileNotFoundError:
            raise AdapterError(f"adapter {self.address}: command not found: {self.argv[0]}") from None
        except OSError as exc:
            raise AdapterError(f"adapter {self.address}: cannot start: {exc.strerror}") from None
        threading.Thread(target=self._drain_stderr, args=(self.proc,), daemon=True).start()
        self.broken = None
        out = self._request("hello", {"protocol": PROTOCOL_VERSION}, self.startup_timeout)
        self._greet(out)

    def _drain_stderr(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        for line in iter(proc.stderr.readline, b""):
            self._stderr.append(line.decode("utf-8", "replace").rstrip("\n"))

    def kill(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for f in (proc.stdin, proc.stdout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass

    def close(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None and self.broken is None:
            try:
                assert proc.stdin is not None
                proc.stdin.close()  # a polite adapter exits on EOF
                proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        self.proc = None

    def stderr_tail(self, lines: int = 20) -> str:
        return "\n".join(list(self._stderr)[-lines:])

    def reset(self, config: Mapping[str, Any] | None = None) -> Outcome:
        if self.broken is not None or self.proc is None or self.proc.poll() is not None:
            self.kill()
            try:
                self._spawn()
            except AdapterError as exc:
                self.broken = str(exc)
                return Outcome.error("adapter_crashed", str(exc), definite=False)
        return super().reset(config)

    # -- the protocol --------------------------------------------------------------------------
    def _fail(self, code: str, why: str) -> Outcome:
        self.broken = why
        msg = why + self._tail_suffix()
        self.kill()
        return Outcome.error(code, msg, definite=False)

    def _readline(self, deadline: float) -> bytes | None:
        """One line from the adapter's stdout; None on timeout, b'' at end of file."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                rest, self._buf = self._buf, b""
                return rest if rest else b""
            self._buf += chunk
            if len(self._buf) > (64 << 20):
                return b"\x00overlong"
        line, _, self._buf = self._buf.partition(b"\n")
        return line + b"\n"

    def _request(self, op: str, args: dict[str, Any], timeout: float) -> Outcome:
        if self.broken is not None:
            return Outcome.error("adapter_crashed", f"adapter is unusable after an earlier failure: {self.broken}", definite=False)
        proc = self.proc
        assert proc is not None and proc.stdin is not None
        rid = self._next_id
        self._next_id += 1
        try:
            proc.stdin.write(dumps({"id": rid, "op": op, "args": args}))
        except (BrokenPipeError, ValueError, OSError):
            code = proc.poll()
            return self._fail("adapter_crashed", f"{op}: adapter closed its input (exit status {code})")
        deadline = time.monotonic() + timeout
        while True:
            line = self._readline(deadline)
            if line is None:
                return self._fail("timeout", f"{op}: no answer within {timeout:g}s")
            if line == b"":
                try:
                    code = proc.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    code = None
                return self._fail("adapter_crashed", f"{op}: adapter closed its output (exit status {code})")
            if line == b"\x00overlong":
                return self._fail("protocol_error", f"{op}: answer longer than 64 MiB")
            try:
                msg = json.loads(line)
            except (ValueError, UnicodeDecodeError):
                shown = line[:120].decode("utf-8", "replace").strip()
                return self._fail("protocol_error", f"{op}: adapter printed a line that is not JSON: {shown!r}")
            if isinstance(msg, dict) and "event" in msg and "id" not in msg:
                if self.on_notification is not None:
                    self.on_notification(msg)
                continue
            if not isinstance(msg, dict) or not isinstance(msg.get("ok"), bool) or "id" not in msg:
                return self._fail("protocol_error", f"{op}: answer is not a response object: {line[:120]!r}")
            if msg["id"] != rid:
                return self._fail("protocol_error", f"{op}: answered id {msg['id']!r} to request {rid}")
            if msg["ok"]:
                if "result" not in msg:
                    return self._fail("protocol_error", f"{op}: ok response without a result")
                return Outcome.success(msg["result"])
            err = msg.get("error")
            if not isinstance(err, dict) or not isinstance(err.get("code"), str):
                return self._fail("protocol_error", f"{op}: error response without an error code: {line[:120]!r}")
            code = err["code"]
            if code not in self.spec.errors:
                return Outcome.error("protocol_error", f"{op}: unknown error code {code!r}: {err.get('message', '')}", definite=False)
            definite = err.get("definite")
            if not isinstance(definite, bool):
                definite = code in DEFINITE
            return Outcome.error(code, str(err.get("message") or code), definite)

    def _call(self, op: str, args: dict[str, Any]) -> Outcome:
        return self._request(op, {k: v for k, v in args.items() if v is not None}, self.timeout)

    def arm(self, point: str, occurrence: int = 1) -> Outcome:
        """Ask the adapter to stop at its own crash point (it then announces it and blocks)."""
        return self._request("arm", {"point": point, "occurrence": occurrence}, self.timeout)


def connect(address: str, spec: Spec | None = None, *, timeout: float = 10.0, startup_timeout: float = 30.0,
            check_results: bool = True, env: Mapping[str, str] | None = None,
            on_notification: Callable[[dict[str, Any]], None] | None = None) -> Client:
    """Open a client for an adapter address (see the module docstring)."""
    kind, target = parse_address(address)
    if kind == "exec":
        try:
            argv = shlex.split(target)
        except ValueError as exc:
            raise AdapterError(f"adapter address {address!r}: {exc}") from None
        return WireClient(argv, address, spec, timeout=timeout, startup_timeout=startup_timeout, env=env,
                          check_results=check_results, on_notification=on_notification)
    return InProcessClient(load_inprocess(kind, target), address, spec, check_results)
