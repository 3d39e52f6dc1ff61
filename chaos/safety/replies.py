"""Lost replies and slow links: a seeded TCP relay between the workers and a ledger's server.

A ledger on a database server (the PostgreSQL reference, ``fixtures/testkit/pg_ledger.py``, the libraries
on PostgreSQL) is reached over TCP.  :class:`TcpRelay` listens on a local port and forwards every
connection to the server, and on the way does what a network can do to a request and its answer:

``lose``   after the server answered the ``COMMIT`` of a transaction that wrote (``INSERT``,
           ``UPDATE`` or ``DELETE`` completed in it), the relay withholds that answer and cuts the
           connection (client and server side): the write is committed, the client never hears
           so.  The client sees its connection lost in the middle of the commit: the outcome is
           unknown, and a correct client reports it as such (an indefinite outcome in the history),
           neither as done nor as failed.  Only transactions that wrote lose their answer: a lost
           read is indistinguishable from one never sent, and the campaign's final read must see
           the ledger.  With ``marker=None`` (a protocol the relay does not read) any answer may be
           lost, with the same probability per chunk the server sends.
``delay``  each chunk, in either direction, is held back for a seeded time (``delay_p`` of the
           chunks, by a uniform draw from ``delay``): a slow link.  Order within a connection is
           kept (TCP would keep it), so a delay moves a request later relative to the other
           workers' requests: concurrent requests reach the server reordered.

What TCP does not let through cannot be simulated here: a byte stream is never duplicated or
reordered inside a connection (netem duplicates and reorders packets, and TCP hides both from the
client; :func:`netem` applies them to the hosts' links all the same, for what they do to timing).
Duplicated and reordered *requests* are possible where a client retries: a client that retries a
write whose answer was lost sends it twice, which is what the lost-reply fault provokes.

Each draw comes from ``random.Random(f"replies/{seed}/{connection}/{direction}")`` (connections
numbered in the order they were accepted), so a seed names the same faults for the same traffic.
:attr:`TcpRelay.counts` says what was done (``connections``, ``replies_lost``, ``chunks_delayed``);
:attr:`TcpRelay.events` lists each lost reply (monotonic time, connection number).

:func:`relayed_dsn` rewrites a libpq DSN to reach the server through the relay; pass it as the
campaign's ``reset={"server_dsn": ...}`` (``run_campaign``) and every worker's connection goes
through the relay.
"""

from __future__ import annotations

import random
import re
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ledgercheck.chaos.crash.points import ChaosError

# PostgreSQL's CommandComplete message ('C', int32 length, tag, NUL) for the tags that matter.
_COMMIT = b"C\x00\x00\x00\x0bCOMMIT\x00"
_ROLLBACK = b"C\x00\x00\x00\x0dROLLBACK\x00"
_WROTE = re.compile(rb"C\x00\x00\x00.(?:INSERT \d+ [1-9]\d*|UPDATE [1-9]\d*|DELETE [1-9]\d*)\x00", re.S)
PG_MARKER = "postgres"
CHUNK = 65536


@dataclass(frozen=True)
class LinkFaults:
    """What the relay does: ``lose`` is the chance that the answer to a committed write is lost
    (the connection cut after the commit); ``delay_p`` the chance that a chunk is held back by a
    uniform draw from ``delay`` seconds."""

    seed: int = 0
    lose: float = 0.0
    delay_p: float = 0.0
    delay: tuple[float, float] = (0.0, 0.0)

    def __post_init__(self) -> None:
        for name in ("lose", "delay_p"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ChaosError(f"link faults: {name} must be between 0 and 1, not {v!r}")
        lo, hi = self.delay
        if lo < 0 or hi < lo:
            raise ChaosError(f"link faults: delay must be (low, high) seconds with 0 <= low <= high, not {self.delay!r}")


@dataclass
class TcpRelay:
    """A relay from ``127.0.0.1:<port>`` (or ``listen``) to ``target``; see the module docstring."""

    target: tuple[str, int]
    faults: LinkFaults = field(default_factory=LinkFaults)
    listen: str = "127.0.0.1"
    marker: str | None = PG_MARKER
    counts: dict[str, int] = field(default_factory=lambda: {"connections": 0, "replies_lost": 0, "chunks_delayed": 0})
    events: list[tuple[float, int]] = field(default_factory=list)
    port: int = 0
    _sock: socket.socket | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _open: set[socket.socket] = field(default_factory=set)
    _closed: bool = False
    _calm: bool = False

    def start(self) -> TcpRelay:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((self.listen, 0))
        s.listen(128)
        self._sock, self.port = s, s.getsockname()[1]
        threading.Thread(target=self._accept, name="relay-accept", daemon=True).start()
        return self

    def __enter__(self) -> TcpRelay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def calm(self, calm: bool = True) -> None:
        """Stop (or restart) doing faults; connections go on being relayed."""
        self._calm = calm

    def close(self) -> None:
        self._closed = True
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        with self._lock:
            socks = list(self._open)
            self._open.clear()
        for s in socks:
            _shut(s)

    # -- relaying
    def _accept(self) -> None:
        assert self._sock is not None
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
                server.settimeout(None)
            except OSError:
                _shut(client)
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                n = self.counts["connections"]
                self.counts["connections"] = n + 1
                self._open.update((client, server))
            seed = self.faults.seed
            pair = _Pair(client, server)
            threading.Thread(target=self._pump, args=(pair, client, server, random.Random(f"replies/{seed}/{n}/up"), n, False),
                             name=f"relay-{n}-up", daemon=True).start()
            threading.Thread(target=self._pump, args=(pair, server, client, random.Random(f"replies/{seed}/{n}/down"), n, True),
                             name=f"relay-{n}-down", daemon=True).start()

    def _pump(self, pair: _Pair, src: socket.socket, dst: socket.socket, rng: random.Random, n: int,
              answers: bool) -> None:
        f = self.faults
        wrote = False
        due = 0.0  # when the last chunk went out: a delay never lets a later chunk overtake it
        try:
            while not pair.cut:
                try:
                    data = src.recv(CHUNK)
                except OSError:
                    break
                if not data:
                    break
                if f.delay_p and not self._calm and rng.random() < f.delay_p:
                    due = max(due, time.monotonic() + rng.uniform(*f.delay))
                    with self._lock:
                        self.counts["chunks_delayed"] += 1
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if answers and f.lose and not self._calm:
                    if self.marker == PG_MARKER:
                        wrote = wrote or _WROTE.search(data) is not None
                        ends = _COMMIT in data
                        lost = ends and wrote and rng.random() < f.lose
                        if ends or _ROLLBACK in data:
                            wrote = False
                    else:
                        lost = rng.random() < f.lose
                    if lost:
                        with self._lock:
                            self.counts["replies_lost"] += 1
                            self.events.append((time.monotonic(), n))
                        break
                try:
                    dst.sendall(data)
                except OSError:
                    break
        finally:
            pair.cut = True
            for s in (src, dst):
                _shut(s)
                with self._lock:
                    self._open.discard(s)


class _Pair:
    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client, self.server, self.cut = client, server, False


def _shut(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass


_KV = re.compile(r"(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|\S+)")


def dsn_target(dsn: str) -> tuple[str, int]:
    """(host, port) of a key=value libpq DSN (host 127.0.0.1 and port 5432 when not given)."""
    kv = dict(_KV.findall(dsn))
    host = kv.get("host", "127.0.0.1").strip("'")
    if host.startswith("/"):
        raise ChaosError(f"the relay needs a TCP server address, not a socket directory ({host})")
    return host, int(kv.get("port", "5432").strip("'"))


def relayed_dsn(dsn: str, relay: TcpRelay) -> str:
    """``dsn`` with its host and port replaced by the relay's."""
    rest = " ".join(f"{k}={v}" for k, v in _KV.findall(dsn) if k not in ("host", "hostaddr", "port"))
    return f"host={relay.listen} port={relay.port} {rest}".strip()


@contextmanager
def lossy_link(server_dsn: str, faults: LinkFaults, marker: str | None = PG_MARKER) -> Iterator[tuple[TcpRelay, str]]:
    """A relay in front of the server of ``server_dsn``; yields it and the DSN that reaches the
    server through it."""
    relay = TcpRelay(dsn_target(server_dsn), faults, marker=marker).start()
    try:
        yield relay, relayed_dsn(server_dsn, relay)
    finally:
        relay.close()


# ------------------------------------------------------------------------------ netem on hosts
def netem(host: Any, *, delay_ms: float = 0.0, jitter_ms: float = 0.0, loss: float = 0.0, duplicate: float = 0.0,
          reorder: float = 0.0) -> list[str]:
    """Put a netem qdisc on a host's end of its link (``chaos/safety/hosts.py``'s :class:`Host`): every
    packet the host sends is delayed by ``delay_ms`` (+- ``jitter_ms``), and lost, duplicated or
    sent ahead of its turn with the given percentages.  TCP retransmits what is lost and drops
    what is duplicated: the client sees a slow link, never a changed byte stream.  Returns the tc
    command's arguments; raises ChaosError (one line) when tc refuses."""
    args = ["qdisc", "replace", "dev", host.link, "root", "netem"]
    if delay_ms or jitter_ms:
        args += ["delay", f"{delay_ms:g}ms", f"{jitter_ms:g}ms"]
    if loss:
        args += ["loss", f"{loss:g}%"]
    if duplicate:
        args += ["duplicate", f"{duplicate:g}%"]
    if reorder:
        if not delay_ms:
            raise ChaosError("netem: reorder needs a delay (packets sent ahead of their turn skip it)")
        args += ["reorder", f"{reorder:g}%"]
    _tc(host, args)
    return args


def clear_netem(host: Any) -> None:
    """Remove the host's netem qdisc (nothing when it has none)."""
    subprocess.run(["ip", "netns", "exec", host.netns, "tc", "qdisc", "del", "dev", host.link, "root"],
                   capture_output=True, text=True, timeout=30)


def _tc(host: Any, args: list[str]) -> None:
    try:
        proc = subprocess.run(["ip", "netns", "exec", host.netns, "tc", *args], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise ChaosError("netem needs the 'ip' and 'tc' tools (iproute2)") from None
    if proc.returncode != 0:
        why = (proc.stderr or proc.stdout).strip()
        if "qdisc kind is unknown" in why:
            raise NetemUnavailable(f"netem: this kernel has no netem qdisc (sch_netem): tc {' '.join(args[:6])} failed: {why}")
        raise ChaosError(f"tc {' '.join(args)} failed: {why}")


class NetemUnavailable(ChaosError):
    """The kernel has no netem queueing discipline; the message says so in one line."""


# ------------------------------------------------------------------ the wire protocol's relay
@dataclass(frozen=True)
class WireFaults:
    """What the wire relay does to one adapter's JSON lines (docs/safety.md, "Lost replies"):
    ``lose`` the chance that the answer to a write is lost after the adapter gave it (the harness
    is told ``internal``, indefinite: what a transport that saw its connection go says);
    ``delay_p``/``delay`` requests and answers held back; ``duplicate`` the chance that a
    token-fenced write (the contract's ``requires_lease`` operations) is delivered twice, and
    ``reorder`` the chance that the second copy comes late, after the next request."""

    seed: int = 0
    lose: float = 0.0
    delay_p: float = 0.0
    delay: tuple[float, float] = (0.0, 0.0)
    duplicate: float = 0.0
    reorder: float = 0.0

    def __post_init__(self) -> None:
        for name in ("lose", "delay_p", "duplicate", "reorder"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ChaosError(f"wire faults: {name} must be between 0 and 1, not {v!r}")
        lo, hi = self.delay
        if lo < 0 or hi < lo:
            raise ChaosError(f"wire faults: delay must be (low, high) seconds with 0 <= low <= high, not {self.delay!r}")

    def args(self) -> list[str]:
        """The relay's command-line options for these faults."""
        return ["--seed", str(self.seed), "--lose", f"{self.lose:g}", "--delay-p", f"{self.delay_p:g}",
                "--delay", f"{self.delay[0]:g},{self.delay[1]:g}", "--duplicate", f"{self.duplicate:g}",
                "--reorder", f"{self.reorder:g}"]


LOST_MESSAGE = "the answer was lost on the way: the adapter answered, the reply relay dropped it (chaos/safety/replies.py)"


def wire_address(adapter_command: str, faults: WireFaults) -> str:
    """An ``exec:`` address that runs ``adapter_command`` behind the wire relay."""
    import shlex
    import sys

    return "exec:" + shlex.join([sys.executable, "-m", "ledgercheck.chaos.safety.replies", *faults.args(), "--"]) + " " + adapter_command


class WireRelay:
    """Between the harness (this process's stdin/stdout) and the adapter (a child process)."""

    def __init__(self, argv: list[str], faults: WireFaults, spec: Any = None) -> None:
        import os

        from ledgercheck.spec import default_spec

        spec = spec or default_spec()
        ops = spec.operations
        self.writes = frozenset(n for n, o in ops.items() if o.kind not in ("read", "session"))
        self.fenced = frozenset(n for n, o in ops.items() if o.requires_lease)
        self.faults = faults
        self.rng = random.Random(f"replies/{faults.seed}/wire")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.lost: set[Any] = set()
        self.lock = threading.Lock()
        self.out = os.fdopen(os.dup(1), "wb", buffering=0)
        self.counts = {"replies_lost": 0, "delayed": 0, "duplicated": 0, "reordered": 0}

    def _hold(self) -> None:
        f = self.faults
        if f.delay_p and self.rng.random() < f.delay_p:
            self.counts["delayed"] += 1
            time.sleep(self.rng.uniform(*f.delay))

    def up(self, stdin: Any) -> None:
        import orjson

        f = self.faults
        assert self.proc.stdin is not None
        held: bytes | None = None  # a second copy that arrives after the next request
        dup_id = 0
        for line in stdin:
            try:
                msg = orjson.loads(line)
            except orjson.JSONDecodeError:
                msg = None
            op = msg.get("op") if isinstance(msg, dict) else None
            copy = late = None
            with self.lock:
                self._hold()
                if op in self.writes and f.lose and self.rng.random() < f.lose:
                    self.lost.add(msg.get("id"))
                if op in self.fenced and f.duplicate and self.rng.random() < f.duplicate:
                    dup_id -= 1
                    copy = orjson.dumps({**msg, "id": dup_id}) + b"\n"
                    self.counts["duplicated"] += 1
                    if f.reorder and self.rng.random() < f.reorder:
                        copy, late = None, copy
                        self.counts["reordered"] += 1
            try:
                self.proc.stdin.write(line)
                if held is not None:
                    self.proc.stdin.write(held)
                if copy is not None:
                    self.proc.stdin.write(copy)
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                break
            held = late
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def down(self) -> None:
        import orjson

        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                msg = orjson.loads(line)
            except orjson.JSONDecodeError:
                msg = None
            if isinstance(msg, dict) and "id" in msg:
                rid = msg.get("id")
                if isinstance(rid, int) and rid < 0:
                    continue  # the answer to a duplicate: nobody asked for it
                with self.lock:
                    self._hold()
                    lost = rid in self.lost
                    self.lost.discard(rid)
                    if lost:
                        self.counts["replies_lost"] += 1
                if lost:
                    line = orjson.dumps({"id": rid, "ok": False, "error": {"code": "internal", "message": LOST_MESSAGE,
                                                                         "definite": False}}) + b"\n"
            try:
                self.out.write(line)
            except (BrokenPipeError, OSError):
                break

    def run(self) -> int:
        import sys

        t = threading.Thread(target=self.down, daemon=True)
        t.start()
        self.up(sys.stdin.buffer)
        code = self.proc.wait()
        t.join(5)
        c = self.counts
        print(f"replies: {c['replies_lost']} answers lost, {c['delayed']} lines delayed, {c['duplicated']} writes "
              f"delivered twice ({c['reordered']} of them late)", file=sys.stderr)
        return code


def main(argv: list[str] | None = None) -> int:
    """``python -m ledgercheck.chaos.safety.replies [options] -- ADAPTER COMMAND...``: run the adapter
    behind the wire relay (see :class:`WireFaults` for the options)."""
    import argparse
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        print("replies: usage: python -m ledgercheck.chaos.safety.replies [options] -- ADAPTER COMMAND...", file=sys.stderr)
        return 2
    cut = argv.index("--")
    p = argparse.ArgumentParser(prog="python -m ledgercheck.chaos.safety.replies")
    p.add_argument("--seed", type=int, default=0)
    for name in ("lose", "delay-p", "duplicate", "reorder"):
        p.add_argument(f"--{name}", type=float, default=0.0)
    p.add_argument("--delay", default="0,0")
    a = p.parse_args(argv[:cut])
    try:
        lo, hi = (float(x) for x in a.delay.split(","))
        faults = WireFaults(a.seed, a.lose, a.delay_p, (lo, hi), a.duplicate, a.reorder)
    except (ValueError, ChaosError) as exc:
        print(f"replies: {exc}", file=sys.stderr)
        return 2
    try:
        relay = WireRelay(argv[cut + 1:], faults)
    except OSError as exc:
        print(f"replies: cannot start {argv[cut + 1]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return relay.run()


if __name__ == "__main__":
    raise SystemExit(main())


# ------------------------------------------------------------------ what a lost create answer shows
def duplicate_items(ck: Any) -> None:
    """One unit of work made into two items that both ran: creates that asked for one source
    identity (``source_system``, ``source_id``, no ``source_run_id``) and two items of that identity,
    each with its effect applied.  The contract makes a create idempotent on its identity, so a
    correct ledger hands a repeated create (the producer repeats one whose answer was lost) the same
    item; a ledger, or a client, that makes a new one (a retry under a fresh idempotency key) runs
    the work twice.  Reported as ``duplicate_effect`` whatever the declared delivery: at-least-once
    allows one item's effect to run again, not a second item for the same work.  ``ck`` is the
    checker of chaos/safety/anomalies.py (its items, operations and final read)."""
    if ck.final is None:
        return
    asked: dict[tuple[Any, Any], list[Any]] = {}
    for it in ck.items.values():
        for op in it.creates:
            if op.maybe and not op.args.get("source_run_id"):
                asked.setdefault((op.args.get("source_system"), op.args.get("source_id")), []).append(op)
    for ops in ck.pending_creates.values():  # indefinite creates no item was found for
        for op in ops:
            if op.work_id is None and op.maybe and not op.args.get("source_run_id"):
                asked.setdefault((op.args.get("source_system"), op.args.get("source_id")), []).append(op)
    if not asked:
        return
    made: dict[tuple[Any, Any], list[str]] = {}
    for wid, w in ck.final.items.items():
        if isinstance(w, dict):
            src = (w.get("source_system"), w.get("source_id"))
            if src in asked:
                made.setdefault(src, []).append(str(wid))
    for src, wids in made.items():
        ran = [w for w in dict.fromkeys(wids) if ck.items.get(w) is not None and ck.items[w].effects]
        if len(ran) < 2:
            continue
        first, second = ran[0], ran[1]
        fin = ck.final_excerpt(first)
        fin.items[second] = ck.final.items[second]
        effects = [ck.h.record(next(iter(ck.items[w].effects.values()))[0]) for w in (first, second)]
        ops = sorted(asked[src], key=lambda o: o.t0)
        why = (f"{src[0]}/{src[1]} was created as two items, {first} and {second}, and the work of both ran: "
               f"{len(ops)} create{'s' if len(ops) != 1 else ''} asked for that one source identity (a create "
               f"repeated after its answer was lost must get the same item back)")
        ck.add("duplicate_effect", second, why, [*ops, *effects, fin])
