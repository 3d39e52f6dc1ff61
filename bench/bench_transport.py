"""Operations per second through each adapter transport, against the reference ledger.

The same operation mix runs through the in-process client (``reference``) and the subprocess
client (``exec:ledgercheck serve reference``), both with result checking on, in one run; direct
adapter calls (no client, no checks) are shown for scale.  Each transport has its own ledger.
Work is timed in batches of a few hundred operations, and the batches of the three transports
run back to back in rotating order, so every subprocess batch has an in-process batch measured
under the same machine load a moment before or after it.  Rates are medians over batches; the
cost ratio is the median of the side-by-side batch ratios.

A fourth lane, ``pipe-echo``, sends the same simple requests to a process that answers each
with ``null`` and does nothing else: the price of a pipe round trip between two Python
processes on this machine right now.  When the machine is busy, that price (not the ledger or
the protocol code) is what moves the subprocess figures.

Floors: the subprocess transport sustains >= 2,000 simple operations/s, and costs no more than
3x the in-process path on the same operations (simple ones, and the whole mix).  The exit
status is 1 when a floor is missed.

    python bench/bench_transport.py            # about 15 s on an idle machine
    python bench/bench_transport.py --ops 6000 --rounds 4 --json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ledgercheck.spec import default_spec
from ledgercheck.transport.client import Client, InProcessClient, connect
from ledgercheck.transport.protocol import Outcome
from ledgercheck.transport.wire import Spinner

T0 = 1_000_000.0
ITEMS = 40
SIMPLE_BATCH = 300  # a multiple of the 3-op cycle of the simple mix
WRITE_BATCH = 120  # a multiple of the 4-op cycle of the write mix
SIMPLE_FLOOR = 2000.0
RATIO_CEILING = 3.0
ECHO = r"""
import json, sys
out = sys.stdout.buffer
hello = {"name": "echo", "version": "0", "protocol": "1.0", "profiles": []}
for line in sys.stdin.buffer:
    req = json.loads(line)
    res = hello if req["op"] == "hello" else None
    out.write(json.dumps({"id": req["id"], "ok": True, "result": res}).encode() + b"\n")
    out.flush()
"""


def serve_command() -> str:
    exe = Path(sys.executable).with_name("ledgercheck")
    found = str(exe) if exe.exists() else shutil.which("ledgercheck")
    if not found:
        raise SystemExit("bench_transport: the ledgercheck command is not installed next to this Python")
    return f"exec:{shlex.quote(found)} serve reference"


class Direct:
    """Calls the adapter's methods with no client in between (scale only)."""

    def __init__(self, client: InProcessClient) -> None:
        self.adapter = client.adapter

    def call(self, op: str, **args: Any) -> Outcome:
        return Outcome.success(getattr(self.adapter, op)(**{k: v for k, v in args.items() if v is not None}))


def _ok(out: Outcome, what: str) -> Any:
    if not out.ok:
        raise SystemExit(f"bench_transport: {what} failed: {out.code}: {out.message}")
    return out.value


def setup(client: Client, root: str) -> tuple[list[str], list[tuple[str, str]]]:
    """A fresh ledger with ITEMS queued items, half of them claimed."""
    _ok(client.reset({"dir": root}), "reset")
    ids = [_ok(client.call("create", source_system="manual", source_id=f"item-{i}", priority=i % 10, now=T0), "create")["work"]["work_id"]
           for i in range(ITEMS)]
    held = []
    for i in range(ITEMS // 2):
        w = _ok(client.call("claim", owner="bench", work_id=ids[i], now=T0 + 0.5), "claim")
        held.append((w["work_id"], w["lease_token"]))
    return ids, held


def simple_ops(call: Callable[..., Outcome], ids: list[str], held: list[tuple[str, str]], start: int, n: int) -> None:
    """get, renew and events in turn: reads and a lease renewal (one small write)."""
    idle = ids[ITEMS // 2:]  # never renewed, so their event lists stay short
    for i in range(start, start + n):
        k = i % 3
        if k == 0:
            out = call("get", work_id=ids[i % ITEMS])
        elif k == 1:
            wid, tok = held[i % len(held)]
            out = call("renew", work_id=wid, token=tok, now=T0 + 1 + i * 0.0005)
        else:
            out = call("events", work_id=idle[i % len(idle)])
        if not out.ok:
            raise SystemExit(f"bench_transport: simple op {i} failed: {out.code}: {out.message}")


def write_ops(call: Callable[..., Outcome], start: int, n: int, tag: str) -> None:
    """create, claim, close_out, requeue in turn: every call is a transaction with its event."""
    wid = tok = ""
    for i in range(start, start + n):
        k = i % 4
        now = T0 + 10 + i * 0.0005
        if k == 0:
            out = call("create", source_system="manual", source_id=f"{tag}-{i}", now=now)
            wid = out.value["work"]["work_id"] if out.ok else ""
        elif k == 1:
            out = call("claim", owner="bench", work_id=wid, now=now)
            tok = out.value["lease_token"] if out.ok else ""
        elif k == 2:
            out = call("close_out", work_id=wid, token=tok, status="done", result={"i": i}, now=now)
        else:
            out = call("requeue", work_id=wid, now=now)
        if not out.ok:
            raise SystemExit(f"bench_transport: write op {i} failed: {out.code}: {out.message}")


class Lane:
    """One transport with its own ledger, timed batch by batch."""

    def __init__(self, name: str, client: Client, root: str) -> None:
        self.name = name
        self.ids, self.held = setup(client, root) if name != "pipe-echo" else (["w"] * ITEMS, [("w", "t")])
        self.call = Direct(client).call if name == "direct" else client.call  # type: ignore[arg-type]
        self.cost: dict[str, list[float]] = {"simple": [], "write": []}  # seconds per op, one entry per batch

    def batch(self, phase: str, start: int, n: int) -> None:
        if phase == "write" and self.name == "pipe-echo":
            return
        t = time.perf_counter()
        if phase == "simple":
            simple_ops(self.call, self.ids, self.held, start, n)
        else:
            write_ops(self.call, start, n, self.name)
        self.cost[phase].append((time.perf_counter() - t) / n)


def run(n_simple: int, n_write: int, rounds: int) -> dict[str, Any]:
    spec = default_spec()
    names = ("direct", "in-process", "subprocess", "fixed-spin", "pipe-echo")
    load_before = os.getloadavg()[0]
    fixed = connect(serve_command(), spec, env={**os.environ, "LEDGERCHECK_WIRE_SPIN_POLICY": "always"})
    fixed._spinner = Spinner(policy="always")  # type: ignore[attr-defined]  # both ends spin before every wait
    clients = {"direct": connect("reference", spec), "in-process": connect("reference", spec),
               "subprocess": connect(serve_command(), spec), "fixed-spin": fixed,
               "pipe-echo": connect(f"exec:{shlex.quote(sys.executable)} -c {shlex.quote(ECHO)}", spec, check_results=False)}
    with tempfile.TemporaryDirectory(prefix="bench-transport-") as root:
        try:
            lanes = [Lane(name, clients[name], os.path.join(root, name)) for name in names]
            turn = 0
            for r in range(rounds):
                for phase, total, size in (("simple", n_simple, SIMPLE_BATCH), ("write", n_write, WRITE_BATCH)):
                    for start in range(0, total, size):
                        n = min(size, total - start)
                        for k in range(len(lanes)):
                            lanes[(k + turn) % len(lanes)].batch(phase, r * total + start, n)
                        turn += 1
        finally:
            for c in clients.values():
                c.close()
    share = n_simple / (n_simple + n_write)

    def mix(simple: float, write: float) -> float:
        return share * simple + (1 - share) * write

    by = {lane.name: lane.cost for lane in lanes}
    med = {name: {ph: statistics.median(v) for ph, v in cost.items() if v} for name, cost in by.items()}
    rows = {name: {"simple_ops_per_s": 1 / m["simple"], "write_ops_per_s": 1 / m["write"],
                   "mix_ops_per_s": 1 / mix(m["simple"], m["write"])} for name, m in med.items() if name != "pipe-echo"}
    w, p = by["subprocess"], by["in-process"]
    side_by_side = {ph: statistics.median(a / b for a, b in zip(w[ph], p[ph], strict=True)) for ph in ("simple", "write")}
    ratios = {**side_by_side, "mix": mix(med["subprocess"]["simple"], med["subprocess"]["write"])
              / mix(med["in-process"]["simple"], med["in-process"]["write"])}
    f = by["fixed-spin"]
    adaptive_vs_fixed = {ph: statistics.median(a / b for a, b in zip(w[ph], f[ph], strict=True)) for ph in ("simple", "write")}
    pipe_us = med["pipe-echo"]["simple"] * 1e6
    extra_us = (med["subprocess"]["simple"] - med["in-process"]["simple"]) * 1e6
    floors = {
        "subprocess simple ops/s >= 2000": rows["subprocess"]["simple_ops_per_s"] >= SIMPLE_FLOOR,
        "wire/in-process on simple ops <= 3x": ratios["simple"] <= RATIO_CEILING,
        "wire/in-process on the whole mix <= 3x": ratios["mix"] <= RATIO_CEILING,
    }
    return {"ops_per_round": {"simple": n_simple, "write": n_write}, "rounds": rounds,
            "batches": {ph: len(v) for ph, v in w.items()}, "load_average": os.getloadavg()[0],
            "load_average_before": load_before, "cores": os.cpu_count(),
            "transports": rows, "ratios": ratios, "adaptive_vs_fixed_spin": adaptive_vs_fixed,
            "pipe_round_trip_us": pipe_us, "wire_extra_us_per_simple_op": extra_us,
            "wire_extra_in_pipe_round_trips": extra_us / pipe_us, "floors": floors}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=3000, help="simple operations per round and transport (default 3000)")
    ap.add_argument("--writes", type=int, default=1200, help="write operations per round and transport (default 1200)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    a = ap.parse_args(argv)
    res = run(a.ops, a.writes, a.rounds)
    if a.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"reference ledger; per round and transport {a.ops} simple ops (get/renew/events) and {a.writes} writes "
              f"(create/claim/close_out/requeue); {a.rounds} rounds; load average {res['load_average_before']:.1f} before, "
              f"{res['load_average']:.1f} after, {res['cores']} cores")
        print(f"{'transport':<12} {'simple ops/s':>13} {'write ops/s':>12} {'mix ops/s':>10}")
        for name, row in res["transports"].items():
            print(f"{name:<12} {row['simple_ops_per_s']:>13,.0f} {row['write_ops_per_s']:>12,.0f} {row['mix_ops_per_s']:>10,.0f}")
        r = res["ratios"]
        print(f"wire / in-process cost: simple {r['simple']:.2f}x, write {r['write']:.2f}x, mix {r['mix']:.2f}x")
        print(f"pipe round trip (echo process, no ledger): {res['pipe_round_trip_us']:.0f} us; the wire adds "
              f"{res['wire_extra_us_per_simple_op']:.0f} us per simple op = {res['wire_extra_in_pipe_round_trips']:.1f} round trips")
        af = res["adaptive_vs_fixed_spin"]
        print(f"adaptive wait / fixed spin (same run, same load): simple {af['simple']:.2f}x, write {af['write']:.2f}x "
              f"(below 1: the adaptive wait is faster)")
        busy = max(res["load_average"], res["load_average_before"]) >= (res["cores"] or 1)
        for name, ok in res["floors"].items():
            note = f" (measured at load {res['load_average']:.1f} on {res['cores']} cores: the floor is a quiet machine's)" if not ok and busy else ""
            print(f"  {'ok    ' if ok else 'MISSED'} {name}{note}")
    return 0 if all(res["floors"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
