"""Harness-side clients for adapters: in-process Python objects and subprocesses on the wire.

Whatever the adapter does (raises, hangs, dies, prints garbage, answers the wrong id, returns a
malformed result), a call returns an :class:`~ledgercheck.transport.protocol.Outcome`; it never
raises into the harness and never blocks past its deadline.  Failures that are the adapter's
fault carry the codes ``timeout``, ``adapter_crashed``, ``protocol_error`` or ``internal``
(indefinite: the operation may or may not have happened) and a message with the adapter's
stderr tail.

Addresses:
  ``reference`` or any name registered under the ``ledgercheck.adapters`` entry point group
  ``python:package.module:Factory``  an in-process adapter made by calling ``Factory()``
  ``exec:COMMAND ARGS...``          a subprocess speaking the wire protocol on stdin/stdout

The protocol itself is described in ``docs/protocol.md``.
"""

from __future__ import annotations

import collections
import importlib
import inspect
import itertools
import operator
import os
import select
import shlex
import subprocess
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from ledgercheck.spec import Spec, default_spec
from ledgercheck.spec.rules import indefinite_errors

from ledgercheck import PROTOCOL_VERSION

from . import costs
from .protocol import LedgerError, Outcome, is_definite
from .wire import LOAD_ERRORS, Spinner, dumps, loads, result_checker

ENTRY_POINT_GROUP = "ledgercheck.adapters"
# python: addresses published before the modules of fixtures/ moved into fixtures/libraries/ and
# fixtures/testkit/ (issue 34) still load: old module -> the module it became
MOVED_MODULES = {
    "ledgercheck.fixtures.adapters": "ledgercheck.fixtures.libraries",
    "ledgercheck.fixtures.adapters._common": "ledgercheck.fixtures.libraries._common",
    "ledgercheck.fixtures.adapters.celery_adapter": "ledgercheck.fixtures.libraries.celery_adapter",
    "ledgercheck.fixtures.adapters.celery_app": "ledgercheck.fixtures.libraries.celery_app",
    "ledgercheck.fixtures.adapters.dbos_adapter": "ledgercheck.fixtures.libraries.dbos_adapter",
    "ledgercheck.fixtures.adapters.persistqueue_adapter": "ledgercheck.fixtures.libraries.persistqueue_adapter",
    "ledgercheck.fixtures.adapters.pgqueuer_adapter": "ledgercheck.fixtures.libraries.pgqueuer_adapter",
    "ledgercheck.fixtures.adapters.procrastinate_adapter": "ledgercheck.fixtures.libraries.procrastinate_adapter",
    "ledgercheck.fixtures.adapters.rq_adapter": "ledgercheck.fixtures.libraries.rq_adapter",
    "ledgercheck.fixtures.broken": "ledgercheck.fixtures.testkit.broken",
    "ledgercheck.fixtures.broken_clocks": "ledgercheck.fixtures.testkit.broken_clocks",
    "ledgercheck.fixtures.broken_edges": "ledgercheck.fixtures.testkit.broken_edges",
    "ledgercheck.fixtures.broken_inputs": "ledgercheck.fixtures.testkit.broken_inputs",
    "ledgercheck.fixtures.broken_instants": "ledgercheck.fixtures.testkit.broken_instants",
    "ledgercheck.fixtures.broken_journal": "ledgercheck.fixtures.testkit.broken_journal",
    "ledgercheck.fixtures.broken_lanes": "ledgercheck.fixtures.testkit.broken_lanes",
    "ledgercheck.fixtures.broken_linear": "ledgercheck.fixtures.testkit.broken_linear",
    "ledgercheck.fixtures.broken_paths": "ledgercheck.fixtures.testkit.broken_paths",
    "ledgercheck.fixtures.broken_power": "ledgercheck.fixtures.testkit.broken_power",
    "ledgercheck.fixtures.broken_recovery": "ledgercheck.fixtures.testkit.broken_recovery",
    "ledgercheck.fixtures.broken_replies": "ledgercheck.fixtures.testkit.broken_replies",
    "ledgercheck.fixtures.broken_safety": "ledgercheck.fixtures.testkit.broken_safety",
    "ledgercheck.fixtures.broken_spawn": "ledgercheck.fixtures.testkit.broken_spawn",
    "ledgercheck.fixtures.broken_timing": "ledgercheck.fixtures.testkit.broken_timing",
    "ledgercheck.fixtures.broken_trees": "ledgercheck.fixtures.testkit.broken_trees",
    "ledgercheck.fixtures.eventsourced": "ledgercheck.fixtures.testkit.eventsourced",
    "ledgercheck.fixtures.eventsourced.ledger": "ledgercheck.fixtures.testkit.eventsourced.ledger",
    "ledgercheck.fixtures.independent": "ledgercheck.fixtures.testkit.independent",
    "ledgercheck.fixtures.netns": "ledgercheck.fixtures.testkit.netns",
    "ledgercheck.fixtures.pg_ledger": "ledgercheck.fixtures.testkit.pg_ledger",
    "ledgercheck.fixtures.postgres": "ledgercheck.services.postgres",
    "ledgercheck.fixtures.publish": "ledgercheck.fixtures.libraries.publish",
    "ledgercheck.fixtures.redis": "ledgercheck.services.redis",
    "ledgercheck.fixtures.servers": "ledgercheck.services.servers",
}
HARNESS_CODES = indefinite_errors(default_spec())
MAX_LINE = 64 << 20  # longest response line the harness accepts
STDERR_LINES = 200  # stderr lines kept per process
STDERR_LINE_CHARS = 2000  # longer stderr lines are cut
CLOSE_GRACE = 2.0  # seconds a process gets to exit after its stdin is closed
# A read's buffer: an answer usually fits in the first 64 KiB (a pipe's own buffer on Linux); a
# longer line is gathered in 1 MiB reads.  The first read stays small because os.read allocates
# its whole buffer before it shrinks it: 1 MiB each time cost ~14 us of a ~40 us round trip.
READ_FIRST = 1 << 16
READ_CHUNK = 1 << 20
PIPELINE_BYTES = 16 << 10  # pipelined requests written at once: well inside a pipe's buffer (64 KiB on Linux, 16 KiB at least)

_is = operator.is_
_NONES = itertools.repeat(None)  # (endless, stateless: shared by every call)

Tap = Callable[[str, bytes], None]  # ("<" adapter to harness | ">" harness to adapter, the line)


class AdapterError(Exception):
    """An adapter could not be found, started or greeted; the message is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


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


# The kit's own adapters, as its packaging registers them (pyproject.toml; a test keeps the two
# the same): found without reading every installed distribution's entry points, which costs a
# served adapter process (``exec:ledgercheck serve reference``, started for every crash window)
# a sixth of its start.  These names always mean the kit's adapters.
OWN_ADAPTERS = {"reference": "ledgercheck.reference.adapter:ReferenceAdapter",
                "reference-pg": "ledgercheck.reference.adapter:PgReferenceAdapter"}


def _entry_points() -> Any:
    import importlib.metadata

    return importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)


def adapter_names() -> list[str]:
    return sorted({ep.name for ep in _entry_points()} | set(OWN_ADAPTERS))


def load_inprocess(kind: str, target: str) -> Any:
    """Instantiate an in-process adapter from an entry point name or python:module:Factory."""
    own = target if kind == "entry" and target in OWN_ADAPTERS else None
    if own is not None:
        kind, target = "python", OWN_ADAPTERS[own]
    if kind == "entry":
        eps = [ep for ep in _entry_points() if ep.name == target]
        if not eps:
            known = ", ".join(adapter_names()) or "none installed"
            raise AdapterError(f"unknown adapter {target!r}: use python:MODULE:FACTORY, exec:COMMAND, or an installed adapter ({known})")
        try:
            factory = eps[0].load()
        except Exception as exc:  # noqa: BLE001 - report any import failure as one line
            raise AdapterError(f"adapter {target!r} ({eps[0].value}) failed to import: {type(exc).__name__}: {_one_line(str(exc))}") from None
        where = f"adapter {target!r}"
    else:
        mod_name, _, attr = target.partition(":")
        try:
            mod = importlib.import_module(MOVED_MODULES.get(mod_name, mod_name))
        except Exception as exc:  # noqa: BLE001
            raise AdapterError(f"adapter python:{target}: cannot import {mod_name!r}: {type(exc).__name__}: {_one_line(str(exc))}") from None
        factory = mod
        for part in attr.split("."):
            factory = getattr(factory, part, None)
            if factory is None:
                raise AdapterError(f"adapter python:{target}: {mod_name!r} has no attribute {attr!r}")
        where = f"adapter {own!r}" if own is not None else f"adapter python:{target}"
    if not callable(factory):
        raise AdapterError(f"{where}: {target!r} is not callable")
    try:
        return factory()
    except Exception as exc:  # noqa: BLE001
        raise AdapterError(f"{where}: the factory raised {type(exc).__name__}: {_one_line(str(exc))}") from None


class Dispatcher:
    """Calls one operation on a Python adapter object and turns whatever happens into an Outcome.

    Shared by :class:`InProcessClient` and by ``ledgercheck serve``, so an adapter behaves the
    same in process and on the wire: a missing method or an unknown argument is ``unsupported``,
    a missing or misspelt required argument ``invalid_argument``, a :class:`LedgerError` its own
    code, and any other exception ``internal`` (indefinite).
    """

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter
        self.last_traceback = ""
        self._params: dict[Any, _Params | None] = {}

    def _parameters(self, fn: Callable[..., Any]) -> _Params | None:
        # keyed by the underlying function: adapters that forward through __getattr__ hand out
        # a new bound method per call (and per reset), but the function stays the same
        key = getattr(fn, "__func__", fn)
        try:
            return self._params[key]
        except KeyError:
            pass
        except TypeError:  # unhashable callable
            return _Params.of(fn)
        got = self._params[key] = _Params.of(fn)
        return got

    def __call__(self, op: str, args: Mapping[str, Any]) -> Outcome:
        try:
            fn = None if op.startswith("_") else getattr(self.adapter, op, None)
        except LedgerError as exc:
            return Outcome.error(exc.code, exc.message, exc.definite)
        except Exception:  # noqa: BLE001 - a failing attribute lookup means no such operation
            fn = None
        if fn is None or not callable(fn):
            return Outcome.error("unsupported", f"the adapter has no {op}() operation")
        # null arguments are left out (an explicit null is an absent argument); a call without
        # one is passed on as it is (``v is None`` for each value, in C: never ``==``)
        kwargs = args if type(args) is dict and not any(map(_is, args.values(), _NONES)) \
            else {k: v for k, v in args.items() if v is not None}
        try:
            params = self._params[getattr(fn, "__func__", fn)]
        except (KeyError, TypeError):
            params = self._parameters(fn)
        if params is not None:
            keys = kwargs.keys()
            if not (params.required <= keys and (params.any_name or keys <= params.names)):
                problem = params.problem(kwargs)
                if problem is not None:
                    return Outcome.error(problem[0], f"{op}: {problem[1]}")
        try:
            return Outcome(True, fn(**kwargs))
        except LedgerError as exc:
            return Outcome.error(exc.code, exc.message, exc.definite)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - any adapter failure becomes an outcome
            self.last_traceback = traceback.format_exc(limit=8)
            frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
            where = f" at {os.path.basename(frame.filename)}:{frame.lineno}" if frame else ""
            return Outcome.error("internal", f"{op} raised {type(exc).__name__}: {_one_line(str(exc), 200)}{where}", definite=False)


class _Params:
    """The keyword parameters of an adapter method, checked with two set operations per call."""

    __slots__ = ("sig", "names", "required", "any_name")

    def __init__(self, sig: inspect.Signature) -> None:
        P = inspect.Parameter
        ps = sig.parameters.values()
        self.sig = sig
        self.any_name = any(p.kind is P.VAR_KEYWORD for p in ps)
        self.names = frozenset(p.name for p in ps if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY))
        self.required = frozenset(p.name for p in ps if p.default is P.empty and p.kind not in (P.VAR_KEYWORD, P.VAR_POSITIONAL))

    @classmethod
    def of(cls, fn: Callable[..., Any]) -> _Params | None:
        try:
            return cls(inspect.signature(fn))
        except (TypeError, ValueError):
            return None

    def problem(self, kwargs: Mapping[str, Any]) -> tuple[str, str] | None:
        keys = kwargs.keys()
        if self.required <= keys and (self.any_name or keys <= self.names):
            return None
        unknown = [] if self.any_name else sorted(k for k in keys if k not in self.names)
        if unknown:
            return "unsupported", f"the adapter takes no argument {', '.join(map(repr, unknown))}"
        missing = sorted(self.required - keys)
        if missing:
            return "invalid_argument", f"missing required argument {', '.join(map(repr, missing))}"
        try:
            self.sig.bind(**kwargs)
        except TypeError as exc:
            return "invalid_argument", str(exc)
        return None


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
        return self._checked(op, self._call(op, args))

    def call_many(self, calls: list[tuple[str, dict[str, Any]]]) -> list[Outcome]:
        """Several independent calls, answered in order, each checked as :meth:`call` checks it.
        A wire adapter that declares ``capabilities.pipeline`` gets them all before it answers
        the first (docs/protocol.md, "Pipelining"); any other gets them one by one."""
        self.calls += len(calls)
        return [self._checked(op, out) for (op, _), out in zip(calls, self._call_many(calls), strict=True)]

    def _call_many(self, calls: list[tuple[str, dict[str, Any]]]) -> list[Outcome]:
        return [self._call(op, args) for op, args in calls]

    def _checked(self, op: str, out: Outcome) -> Outcome:
        if out.ok:
            chk = self.checker
            if chk is not None:
                quick = chk.quick.get(op)  # (what ResultChecker.problem tries first)
                problem = chk.problem(op, out.value) if quick is not None and not quick(out.value) else None
                if problem is not None:
                    return Outcome.error("protocol_error", problem + self._tail_suffix(), definite=False)
        elif out.code not in self.spec.errors:
            return Outcome.error("protocol_error", f"{op}: unknown error code {out.code!r}: {_one_line(out.message, 200)}"
                                 + self._tail_suffix(), definite=False)
        elif out.definite and not self.spec.errors[out.code]:
            # the contract says this code is indefinite, whatever the adapter claimed
            return Outcome.error(out.code, out.message, definite=False)
        return out

    def reset(self, config: Mapping[str, Any] | None = None) -> Outcome:
        out = self._call("reset", {"config": dict(config or {})})
        if not out.ok and out.code not in self.spec.errors:
            return Outcome.error("protocol_error", f"reset: unknown error code {out.code!r}: {out.message}", definite=False)
        return out

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
        if not isinstance(out.value, Mapping):
            raise AdapterError(f"adapter {self.address}: bad handshake: {out.value!r:.80}")
        hs = dict(out.value)
        major = str(hs.get("protocol", "")).split(".")[0]
        if major != PROTOCOL_VERSION.split(".")[0]:
            raise AdapterError(f"adapter {self.address}: speaks protocol {hs.get('protocol')!r}, the harness speaks {PROTOCOL_VERSION}")
        claims = hs.get("profiles", [])
        known, unknown = self.spec.expand_profiles(p for p in claims if isinstance(p, str))
        unknown += tuple(p for p in claims if not isinstance(p, str))
        if unknown:
            raise AdapterError(f"adapter {self.address}: claims unknown profile(s) {', '.join(map(str, unknown))}")
        if any(p in self.spec.profile_sets for p in claims):
            hs["profiles"] = list(known)  # a profile set stands for its members
        self.handshake = hs

    def _call(self, op: str, args: dict[str, Any]) -> Outcome:  # pragma: no cover - abstract
        raise NotImplementedError


class InProcessClient(Client):
    """Calls a Python adapter object directly."""

    kind = "in-process"

    def __init__(self, adapter: Any, address: str, spec: Spec | None = None, check_results: bool = True) -> None:
        super().__init__(address, spec, check_results)
        self.adapter = adapter
        self._dispatch = Dispatcher(adapter)
        self._call = self._dispatch  # type: ignore[method-assign]  # (the method below, one call less)
        hello = getattr(adapter, "hello", None)
        if hello is None:
            raise AdapterError(f"adapter {address}: object has no hello() method")
        self._greet(self._call("hello", {"protocol": PROTOCOL_VERSION}))

    @property
    def last_traceback(self) -> str:
        return self._dispatch.last_traceback

    def _call(self, op: str, args: dict[str, Any]) -> Outcome:
        return self._dispatch(op, args)

    def close(self) -> None:
        fn = getattr(self.adapter, "close", None)
        if callable(fn):
            try:
                fn()
            except Exception:  # noqa: BLE001
                pass

    def stderr_tail(self, lines: int = 20) -> str:
        return "\n".join(self.last_traceback.splitlines()[-lines:])


class _StderrTail:
    """Drains a process's stderr on a thread, keeping a bounded tail of lines.

    The thread reads only while it holds the lock, and holds it until what it read is in the
    tail: so whoever holds the lock and finds the pipe empty knows every byte written so far is
    in the tail (:meth:`settle`), however late the thread got to run on a busy machine."""

    SETTLE_LIMIT = 30.0  # seconds settle waits for a process that keeps writing (a flood): a safety net

    def __init__(self, fd: int) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self.total = 0
        self._fd = fd
        self._done = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True, name="adapter-stderr")
        self._thread.start()

    def _run(self) -> None:
        partial = b""
        while True:
            try:
                select.select([self._fd], [], [])  # readable: data, or the end of the stream
            except (OSError, ValueError):
                break
            with self._lock:
                try:
                    chunk = os.read(self._fd, 1 << 16)
                except OSError:
                    chunk = b""
                if chunk:
                    self.total += len(chunk)
                    parts = (partial + chunk).split(b"\n")
                    partial = parts.pop()[-STDERR_LINE_CHARS:]
                    for p in parts:
                        self.lines.append(p[:STDERR_LINE_CHARS].decode("utf-8", "replace").rstrip("\r"))
                    continue
                if partial:
                    self.lines.append(partial.decode("utf-8", "replace"))
                self._done = True
                break
        try:
            os.close(self._fd)
        except OSError:
            pass

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def settle(self, limit: float | None = None) -> None:
        """Wait until what the adapter already wrote is in the tail (so an error message about
        the adapter carries the lines it printed just before): until the pipe is found empty
        under the lock, or the stream has ended.  A process that writes without pause is waited
        for at most ``limit`` seconds (SETTLE_LIMIT)."""
        end = time.monotonic() + (self.SETTLE_LIMIT if limit is None else limit)
        while True:
            with self._lock:
                if self._done or not self._thread.is_alive():
                    return
                try:
                    ready, _, _ = select.select([self._fd], [], [], 0)
                except (OSError, ValueError):
                    return
            if not ready or time.monotonic() > end:
                return
            time.sleep(0.001)

    def tail(self, lines: int) -> list[str]:
        with self._lock:
            return list(self.lines)[-lines:]


class WireClient(Client):
    """Spawns ``argv`` and speaks JSON lines with it.  A broken process is replaced on reset.

    Stream-level failures (timeout, exit, closed output, a line that is not a response, the
    wrong id) make the process unusable: it is killed, and the next :meth:`reset` starts a new
    one.  A well-framed but malformed result or an unknown error code is reported as a
    ``protocol_error`` too, but the process stays in step and is kept.

    When the adapter announces a crash point (``{"event": "crash_point", ...}``), the client
    calls ``on_notification`` (the process is still blocked at the point), then kills it with
    SIGKILL and the pending call returns ``adapter_crashed``.
    """

    kind = "wire"

    def __init__(self, argv: list[str], address: str, spec: Spec | None = None, *, timeout: float = 10.0,
                 startup_timeout: float = 30.0, env: Mapping[str, str] | None = None, cwd: str | None = None,
                 check_results: bool = True, on_notification: Callable[[dict[str, Any]], None] | None = None,
                 tap: Tap | None = None) -> None:
        super().__init__(address, spec, check_results)
        self.argv = list(argv)
        self.timeout = timeout
        self.startup_timeout = startup_timeout
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.on_notification = on_notification
        self.tap = tap
        self.proc: subprocess.Popen[bytes] | None = None
        self.broken: str | None = None
        self.last_crash_point: dict[str, Any] | None = None
        self.spawns = 0
        self.max_line = MAX_LINE
        self._stderr: _StderrTail | None = None
        self._buf = b""
        self._next_id = 1
        self._poll_in: Any = None
        self._poll_out: Any = None
        self._spinner = Spinner()
        self._spawn()

    # -- process management --------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def _spawn(self) -> None:
        self._buf = b""
        self.last_crash_point = None
        # a tag every process below the adapter inherits: close() finds them by it even after
        # they left the adapter's process group and lost their parent (see reaper.py)
        from ledgercheck.services import reaper  # (psutil: only a process that starts adapters needs it)

        self._tag = uuid.uuid4().hex
        env = dict(self.env if self.env is not None else os.environ)
        env[reaper.ADAPTER_TAG] = self._tag
        self._seen: dict[int, Any] = {}
        started = time.perf_counter()
        try:
            proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    bufsize=0, start_new_session=True, env=env, cwd=self.cwd)
        except FileNotFoundError:
            raise AdapterError(f"adapter {self.address}: command not found: {self.argv[0]}") from None
        except OSError as exc:
            raise AdapterError(f"adapter {self.address}: cannot start {self.argv[0]}: {exc.strerror}") from None
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self.spawns += 1
        self._stderr = _StderrTail(os.dup(proc.stderr.fileno()))
        proc.stderr.close()
        os.set_blocking(proc.stdin.fileno(), False)
        self._poll_in = select.poll()
        self._poll_in.register(proc.stdout.fileno(), select.POLLIN)
        self._poll_out = select.poll()
        self._poll_out.register(proc.stdin.fileno(), select.POLLOUT)
        self.broken = None
        out = self._request("hello", {"protocol": PROTOCOL_VERSION}, self.startup_timeout)
        try:
            self._greet(out)
            self.snapshot()
        except AdapterError as exc:
            costs.add_start(time.perf_counter() - started)
            self.broken = "handshake failed"
            self.kill()
            msg = str(exc)
            raise AdapterError(msg if "[adapter stderr:" in msg else msg + self._tail_suffix()) from None
        costs.add_start(time.perf_counter() - started)

    def snapshot(self) -> None:
        """Remember the processes now below the adapter, so a kill reaches them even once the
        adapter has exited and they were re-parented (taken at start and on every failure)."""
        from ledgercheck.services import reaper

        if self.proc is not None:
            for p in reaper.processes(reaper.descendants(self.proc.pid)):
                self._seen.setdefault(p.pid, p)

    def kill(self) -> None:
        """SIGKILL everything the adapter started and reap it; never blocks for long.

        The process group goes whether or not its leader is still alive (a child holding the
        adapter's output outlives its parent there), then every descendant seen (now or
        earlier) and every process carrying this adapter's tag (one that called ``setsid``)."""
        from ledgercheck.services import reaper

        proc = self.proc
        if proc is None:
            return
        self.snapshot()
        reaper.kill_group(proc.pid)
        if proc.poll() is None:
            try:
                proc.kill()
            except OSError:
                pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        reaper.sweep(reaper.ADAPTER_TAG, self._tag, self._seen.values())
        self._seen = {}
        for f in (proc.stdin, proc.stdout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        if self._stderr is not None:
            self._stderr.settle()  # what the process wrote before it went is in the tail

    def close(self) -> None:
        proc = self.proc
        started = time.perf_counter()
        if proc is not None and proc.poll() is None and self.broken is None:
            try:
                assert proc.stdin is not None
                proc.stdin.close()  # a polite adapter exits on end of input
                proc.wait(timeout=CLOSE_GRACE)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        self.proc = None
        if proc is not None:
            costs.add_stop(time.perf_counter() - started)

    def stderr_tail(self, lines: int = 20) -> str:
        if self._stderr is None:
            return ""
        self._stderr.settle()
        return "\n".join(self._stderr.tail(lines))

    @property
    def stderr_bytes(self) -> int:
        """How many bytes the current process wrote to stderr."""
        return self._stderr.total if self._stderr is not None else 0

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
        self.kill()
        return Outcome.error(code, why + self._tail_suffix(), definite=False)

    def _write(self, data: bytes, deadline: float) -> str | None:
        """Write a whole request; None when done, else why not (timeout or a closed pipe)."""
        assert self.proc is not None and self.proc.stdin is not None
        fd = self.proc.stdin.fileno()
        view = memoryview(data)
        while view:
            try:
                n = os.write(fd, view)
                view = view[n:]
                continue
            except BlockingIOError:
                pass
            except (BrokenPipeError, OSError, ValueError):
                return "closed"
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._poll_out.poll(remaining * 1000):
                return "timeout"
        return None

    def _readline(self, deadline: float) -> bytes | None:
        """One line from the adapter's stdout; None on timeout, b'' (or a partial line) at end
        of file.  A long line is gathered in chunks and joined once."""
        assert self.proc is not None and self.proc.stdout is not None
        nl = self._buf.find(b"\n")
        if nl >= 0:
            line, self._buf = self._buf[: nl + 1], self._buf[nl + 1:]
            return line
        fd = self.proc.stdout.fileno()
        parts, size = [self._buf], len(self._buf)
        self._buf = b""
        self._spinner.wait(self._poll_in)  # the answer usually comes within a short spin (when it pays)
        want = READ_FIRST
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._poll_in.poll(remaining * 1000):
                self._buf = b"".join(parts)
                return None
            try:
                chunk = os.read(fd, want)
                want = READ_CHUNK
            except OSError:
                chunk = b""
            if not chunk:
                return b"".join(parts)
            nl = chunk.find(b"\n")
            if nl >= 0:
                self._buf = chunk[nl + 1:]
                return b"".join(parts) + chunk[: nl + 1]
            parts.append(chunk)
            size += len(chunk)
            if size > self.max_line:
                return b"\x00overlong"

    def _request(self, op: str, args: dict[str, Any], timeout: float) -> Outcome:
        if self.broken is not None:
            return Outcome.error("adapter_crashed", f"{op}: adapter is unusable after an earlier failure: {self.broken}", definite=False)
        proc = self.proc
        if proc is None or proc.stdin is None or proc.stdin.closed:
            return Outcome.error("adapter_crashed", f"{op}: the client is closed", definite=False)
        rid = self._next_id
        self._next_id += 1
        try:
            line = dumps({"id": rid, "op": op, "args": args})
        except (TypeError, ValueError) as exc:
            return Outcome.error("invalid_argument", f"{op}: arguments are not JSON: {exc}")
        deadline = time.monotonic() + timeout
        if self.tap is not None:
            self.tap(">", line)
        failed = self._write(line, deadline)
        if failed == "timeout":
            return self._fail("timeout", f"{op}: the adapter did not read its input within {timeout:g}s")
        if failed:
            return self._fail("adapter_crashed", f"{op}: adapter closed its input (exit status {proc.poll()})")
        return self._answer(op, rid, deadline, timeout)

    def _call_many(self, calls: list[tuple[str, dict[str, Any]]]) -> list[Outcome]:
        """Pipelined when the adapter declared ``capabilities.pipeline`` (and the requests fit in
        a pipe's buffer, so writing them never waits on the adapter's answers): every request is
        written at once, then the answers are read in order, each within the per-call timeout
        of the one before.  After a failure the client is broken, so the later calls fail too."""
        if len(calls) < 2 or not self.pipelining or self.broken is not None:
            return [self._call(op, args) for op, args in calls]
        proc = self.proc
        if proc is None or proc.stdin is None or proc.stdin.closed:
            return [self._call(op, args) for op, args in calls]
        lines, rids = [], []
        for op, args in calls:
            try:
                lines.append(dumps({"id": self._next_id, "op": op, "args": {k: v for k, v in args.items() if v is not None}}))
            except (TypeError, ValueError):
                return [self._call(op, args) for op, args in calls]
            rids.append(self._next_id)
            self._next_id += 1
        data = b"".join(lines)
        if len(data) > PIPELINE_BYTES:
            self._next_id -= len(calls)
            return [self._call(op, args) for op, args in calls]
        started = time.perf_counter()
        timeout = self.timeout
        deadline = time.monotonic() + timeout
        if self.tap is not None:
            for line in lines:
                self.tap(">", line)
        failed = self._write(data, deadline)
        ops = [op for op, _ in calls]
        if failed == "timeout":
            outs = [self._fail("timeout", f"{ops[0]}: the adapter did not read its input within {timeout:g}s")]
        elif failed:
            outs = [self._fail("adapter_crashed", f"{ops[0]}: adapter closed its input (exit status {proc.poll()})")]
        else:
            outs = []
            for op, rid in zip(ops, rids, strict=True):
                if self.broken is not None:
                    break
                outs.append(self._answer(op, rid, time.monotonic() + timeout, timeout))
        while len(outs) < len(calls):
            op = ops[len(outs)]
            outs.append(Outcome.error("adapter_crashed", f"{op}: adapter is unusable after an earlier failure: {self.broken}", definite=False))
        costs.add_round_trips(len(calls), time.perf_counter() - started)
        return outs

    @property
    def pipelining(self) -> bool:
        return (self.handshake.get("capabilities") or {}).get("pipeline") is True

    def _answer(self, op: str, rid: int, deadline: float, timeout: float) -> Outcome:
        """Read the answer to request ``rid`` (notifications on the way are handled)."""
        proc = self.proc
        assert proc is not None
        notifications = 0
        while True:
            raw = self._readline(deadline)
            if raw is None:
                seen = f" (only notifications: {notifications})" if notifications else ""
                return self._fail("timeout", f"{op}: no answer within {timeout:g}s{seen}")
            if raw == b"" or not raw.endswith(b"\n") and raw != b"\x00overlong":
                try:
                    code = proc.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    code = None
                state = "still running" if code is None else f"exit status {code}"
                return self._fail("adapter_crashed", f"{op}: adapter closed its output ({state})")
            if raw == b"\x00overlong":
                return self._fail("protocol_error", f"{op}: answer longer than {self.max_line:,} bytes")
            if self.tap is not None:
                self.tap("<", raw)
            try:
                msg = loads(raw)
            except LOAD_ERRORS:
                shown = raw[:120].decode("utf-8", "replace").strip()
                return self._fail("protocol_error", f"{op}: adapter printed a line that is not JSON: {shown!r}")
            if isinstance(msg, dict) and "event" in msg and "id" not in msg:
                stopped = self._notified(msg)
                if stopped is not None:
                    return stopped
                notifications += 1
                if time.monotonic() > deadline:
                    return self._fail("timeout", f"{op}: no answer within {timeout:g}s (only notifications: {notifications})")
                continue
            if not isinstance(msg, dict) or not isinstance(msg.get("ok"), bool) or "id" not in msg:
                return self._fail("protocol_error", f"{op}: answer is not a response object: {_one_line(raw[:120].decode('utf-8', 'replace'))!r}")
            if msg["id"] != rid or isinstance(msg["id"], bool):
                return self._fail("protocol_error", f"{op}: answered id {msg['id']!r} to request {rid}")
            if msg["ok"]:
                if "result" not in msg:
                    return self._fail("protocol_error", f"{op}: ok response without a result")
                return Outcome.success(msg["result"])
            err = msg.get("error")
            if not isinstance(err, dict) or not isinstance(err.get("code"), str):
                return self._fail("protocol_error", f"{op}: error response without an error code: {_one_line(raw[:120].decode('utf-8', 'replace'))!r}")
            code = err["code"]
            text = err.get("message")
            text = text if isinstance(text, str) and text else code
            definite = err.get("definite")
            if not isinstance(definite, bool):
                definite = is_definite(code)
            return Outcome.error(code, text, definite)

    def _notified(self, msg: dict[str, Any]) -> Outcome | None:
        """Handle a notification; a crash point stops the pending call."""
        try:
            if self.on_notification is not None:
                self.on_notification(msg)
        except BaseException:
            self.broken = "the notification handler failed"
            self.kill()
            raise
        if msg.get("event") != "crash_point":
            return None
        self.last_crash_point = msg
        return self._fail("adapter_crashed", f"killed at crash point {msg.get('point')!r} (occurrence {msg.get('occurrence')})")

    def _call(self, op: str, args: dict[str, Any]) -> Outcome:
        started = time.perf_counter()
        out = self._request(op, {k: v for k, v in args.items() if v is not None}, self.timeout)
        costs.add_round_trips(1, time.perf_counter() - started)
        return out

    def arm(self, point: str, occurrence: int = 1) -> Outcome:
        """Ask the adapter to stop at its own crash point: the ``occurrence``-th time it passes
        ``point`` after this request it announces it and blocks until SIGKILL."""
        out = self._request("arm", {"point": point, "occurrence": occurrence}, self.timeout)
        if out.ok and out.value is not None:
            return Outcome.error("protocol_error", f"arm returned {out.value!r:.60}, expected null", definite=False)
        return out


def connect(address: str, spec: Spec | None = None, *, timeout: float = 10.0, startup_timeout: float = 30.0,
            check_results: bool = True, env: Mapping[str, str] | None = None,
            on_notification: Callable[[dict[str, Any]], None] | None = None, cwd: str | None = None,
            tap: Tap | None = None) -> Client:
    """Open a client for an adapter address (see the module docstring)."""
    kind, target = parse_address(address)
    if kind == "exec":
        try:
            argv = shlex.split(target)
        except ValueError as exc:
            raise AdapterError(f"adapter address {address!r}: {exc}") from None
        if not argv:
            raise AdapterError(f"adapter address {address!r} has no command")
        return WireClient(argv, address, spec, timeout=timeout, startup_timeout=startup_timeout, env=env, cwd=cwd,
                          check_results=check_results, on_notification=on_notification, tap=tap)
    return InProcessClient(load_inprocess(kind, target), address, spec, check_results)
