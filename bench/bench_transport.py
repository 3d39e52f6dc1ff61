"""Operations per second through each adapter transport, against the reference ledger.

The same operation mix runs through the in-process client (``reference``) and the subprocess
client (``exec:ledgercheck serve reference``), both with result checking on, in one run.
Transports alternate round by round and each phase keeps its best round, so a burst of load
from elsewhere on the machine hurts both sides alike.  Direct adapter calls (no client, no
checks) are shown for scale.

Floors: the subprocess transport sustains >= 2,000 simple operations/s, and costs no more than
3x the in-process path on the same operations (simple ones, and the whole mix).

    python bench/bench_transport.py            # about 15 s
    python bench/bench_transport.py --ops 4000 --rounds 5 --json
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ledgercheck.conformance.client import Client, InProcessClient, connect
from ledgercheck.conformance.model import Outcome
from ledgercheck.spec import default_spec

T0 = 1_000_000.0
ITEMS = 40
SIMPLE_FLOOR = 2000.0
RATIO_CEILING = 3.0


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
    _ok(client.reset({"dir": root}), "reset")
    ids = [_ok(client.call("create", source_system="manual", source_id=f"item-{i}", priority=i % 10, now=T0), "create")["work"]["work_id"]
           for i in range(ITEMS)]
    held = []
    for i in range(ITEMS // 2):
        w = _ok(client.call("claim", owner="bench", work_id=ids[i], now=T0 + 0.5), "claim")
        held.append((w["work_id"], w["lease_token"]))
    return ids, held


def simple_phase(call: Callable[..., Outcome], ids: list[str], held: list[tuple[str, str]], n: int) -> None:
    """get, renew and events in turn: reads and a lease renewal (one small write)."""
    idle = ids[ITEMS // 2:]
    for i in range(n):
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


def write_phase(call: Callable[..., Outcome], n: int, tag: str) -> None:
    """create, claim, close_out, requeue in turn: every call is a transaction with its event."""
    wid = tok = ""
    for i in range(n):
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


def measure(client: Client, direct: bool, n_simple: int, n_write: int, tag: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-transport-") as root:
        ids, held = setup(client, root)
        call = Direct(client).call if direct else client.call  # type: ignore[arg-type]
        t = time.perf_counter()
        simple_phase(call, ids, held, n_simple)
        simple = time.perf_counter() - t
        t = time.perf_counter()
        write_phase(call, n_write, tag)
        write = time.perf_counter() - t
    return {"simple": simple, "write": write}


def run(n_simple: int, n_write: int, rounds: int) -> dict[str, Any]:
    spec = default_spec()
    inproc = connect("reference", spec)
    wire = connect(serve_command(), spec)
    assert isinstance(inproc, InProcessClient)
    best: dict[str, dict[str, float]] = {}
    try:
        for r in range(rounds):
            for name, client, direct in (("direct", inproc, True), ("in-process", inproc, False), ("subprocess", wire, False)):
                got = measure(client, direct, n_simple, n_write, f"{name}-{r}")
                cur = best.setdefault(name, dict(got))
                for phase, secs in got.items():
                    cur[phase] = min(cur[phase], secs)
    finally:
        inproc.close()
        wire.close()
    rows = {}
    for name, t in best.items():
        rows[name] = {
            "simple_ops_per_s": n_simple / t["simple"],
            "write_ops_per_s": n_write / t["write"],
            "mix_ops_per_s": (n_simple + n_write) / (t["simple"] + t["write"]),
            "seconds": t,
        }
    w, p = best["subprocess"], best["in-process"]
    ratios = {"simple": w["simple"] / p["simple"], "write": w["write"] / p["write"],
              "mix": (w["simple"] + w["write"]) / (p["simple"] + p["write"])}
    floors = {
        "subprocess simple ops/s >= 2000": rows["subprocess"]["simple_ops_per_s"] >= SIMPLE_FLOOR,
        "wire/in-process on simple ops <= 3x": ratios["simple"] <= RATIO_CEILING,
        "wire/in-process on the whole mix <= 3x": ratios["mix"] <= RATIO_CEILING,
    }
    return {"ops": {"simple": n_simple, "write": n_write}, "rounds": rounds, "transports": rows, "ratios": ratios, "floors": floors}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=3000, help="simple operations per round (default 3000)")
    ap.add_argument("--writes", type=int, default=1200, help="write operations per round (default 1200)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per transport; the best is kept (default 3)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    a = ap.parse_args(argv)
    res = run(a.ops, a.writes, a.rounds)
    if a.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"reference ledger, {a.ops} simple (get/renew/events) + {a.writes} write (create/claim/close_out/requeue) ops, "
              f"best of {a.rounds} rounds")
        print(f"{'transport':<12} {'simple ops/s':>13} {'write ops/s':>12} {'mix ops/s':>10}")
        for name, row in res["transports"].items():
            print(f"{name:<12} {row['simple_ops_per_s']:>13,.0f} {row['write_ops_per_s']:>12,.0f} {row['mix_ops_per_s']:>10,.0f}")
        r = res["ratios"]
        print(f"wire / in-process cost: simple {r['simple']:.2f}x, write {r['write']:.2f}x, mix {r['mix']:.2f}x")
        for name, ok in res["floors"].items():
            print(f"  {'ok    ' if ok else 'MISSED'} {name}")
    return 0 if all(res["floors"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
