"""`ledgercheck ledger ...`: inspect and operate a reference ledger file.

    list       records with what needs attention (aging queued work, leases at risk or lapsed,
               waits near their deadline, quarantined work)
    show       one record, its flags and its effect receipts
    events     one record's event trail
    close-out  close running work out (as its lease holder)
    waiting    put running work into a waiting status (as its lease holder)
    recover    run the recovery scan
    requeue    return terminal work to queued (how an operator releases quarantined work)
    verify     check the file's integrity and the ledger's invariants

``--db`` is a ledger file, or a PostgreSQL connection string with ``--schema`` naming the
ledger there (the ``reference-pg`` adapter's ``schema`` setting).

Exit status: 0 done; 1 the contract refused the operation (its code and message are printed)
or ``verify`` found problems; 2 bad input (a missing, corrupt or foreign file, an unknown id,
a bad argument).  Time-dependent commands take ``--now SECONDS`` (default: the current time).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ledgercheck.reports.text import terminal
from ledgercheck.spec import Spec, SpecError, default_spec, load_spec
from ledgercheck.spec.load import spec_from_document
from ledgercheck.transport.protocol import LedgerError

from .ledger import Ledger, LedgerOpenError
from .opening import stored_contract
from .pg import PgLedger, is_pg_address, pg_stored_contract
from .triage import assess, duration
from .verify import verify

BAD_INPUT = frozenset({"not_found", "invalid_argument"})
POINTER_NAME = "active-work.json"


class Failed(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("ledger", help="inspect and operate a reference ledger file",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="ledger_cmd", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", required=True, metavar="PATH|DSN",
                        help="the ledger file, or a PostgreSQL connection string (postgresql://... or 'host=... dbname=...')")
    common.add_argument("--schema", default="ledger", metavar="NAME",
                        help="with a PostgreSQL --db: the ledger's schema (default: ledger)")
    common.add_argument("--json", action="store_true", help="print JSON")
    common.add_argument("--contract", action="append", default=[], metavar="FILE",
                        help="contract file (repeat for overlays); default: the contract the ledger was last opened with")
    common.add_argument("--busy-timeout", type=float, default=5.0, metavar="SECONDS",
                        help="how long to wait for other writers (default 5)")
    timed = argparse.ArgumentParser(add_help=False)
    timed.add_argument("--now", type=float, metavar="SECONDS", help="the clock (default: the current time)")
    holder = argparse.ArgumentParser(add_help=False)
    holder.add_argument("--token", help="lease token to present (default: the item's current token)")

    def cmd(name: str, fn: Callable[[argparse.Namespace, Ledger], int], helptext: str,
            parents: list[argparse.ArgumentParser]) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=helptext, description=helptext, parents=[common, *parents])
        sp.set_defaults(func=_runner(name, fn))
        return sp

    sp = cmd("list", cmd_list, "records and what needs attention", [timed])
    sp.add_argument("--status", help="only records in this status")
    sp.add_argument("--quarantined", action="store_true", help="only quarantined records")
    sp.add_argument("--attention", action="store_true", help="only records with a flag")
    cmd("show", cmd_show, "one record, its flags and its effect receipts", [timed]).add_argument("work_id")
    cmd("events", cmd_events, "one record's event trail", []).add_argument("work_id")
    sp = cmd("close-out", cmd_close_out, "close running work out as its lease holder", [timed, holder])
    sp.add_argument("work_id")
    sp.add_argument("--status", required=True, help="terminal status: done, failed, timeout or cancelled")
    sp.add_argument("--result", help="result as JSON")
    sp.add_argument("--reason", help="status reason")
    sp = cmd("waiting", cmd_waiting, "put running work into a waiting status as its lease holder", [timed, holder])
    sp.add_argument("work_id")
    sp.add_argument("--kind", required=True, help="waiting kind (user or external)")
    sp.add_argument("--ref", required=True, help="what it waits on")
    sp.add_argument("--timeout", type=float, metavar="SECONDS", help="wait budget (default: the contract's for the kind)")
    cmd("recover", cmd_recover, "run the recovery scan on stale in-flight work", [timed])
    sp = cmd("requeue", cmd_requeue, "return terminal work to queued (releases quarantined work)", [timed])
    sp.add_argument("work_id")
    sp.add_argument("--reason", help="status reason")
    cmd("verify", cmd_verify, "check integrity and the ledger's invariants", [])


# ---------------------------------------------------------------------- plumbing
def _runner(name: str, fn: Callable[[argparse.Namespace, Ledger], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        prefix = f"ledgercheck ledger {name}"
        try:
            ledger = _open(args)
        except Failed as exc:
            _err(f"{prefix}: {exc.message}")
            return exc.code
        try:
            return fn(args, ledger)
        except Failed as exc:
            _err(f"{prefix}: {exc.message}")
            return exc.code
        except LedgerError as exc:
            if exc.code == "not_found":
                _err(f"{prefix}: {exc.message} in {args.db}")
                return 2
            _err(f"{prefix}: {exc.code}: {exc.message}")
            return 2 if exc.code in BAD_INPUT else 1
        except OSError as exc:
            _err(f"{prefix}: {args.db}: {exc}")
            return 2
        finally:
            ledger.close()

    return run


def _spec(args: argparse.Namespace) -> Spec:
    try:
        if args.contract:
            return load_spec(args.contract)
        doc = (pg_stored_contract(args.db, args.schema) if is_pg_address(args.db)
               else stored_contract(args.db, args.busy_timeout))
        return default_spec() if doc is None else spec_from_document(doc)
    except SpecError as exc:
        where = ", ".join(args.contract) if args.contract else f"the contract stored in {args.db}"
        raise Failed(2, f"{where}: {exc.problems[0] if exc.problems else exc}") from None


def _open(args: argparse.Namespace) -> Ledger:
    if not (args.busy_timeout >= 0 and math.isfinite(args.busy_timeout)):
        raise Failed(2, "--busy-timeout must be a number of seconds >= 0")
    if getattr(args, "now", None) is not None and not math.isfinite(args.now):
        raise Failed(2, "--now must be a finite number of seconds")
    try:
        spec = _spec(args)
        if is_pg_address(args.db):
            return PgLedger(args.db, args.schema, spec, busy_timeout=args.busy_timeout, create=False, actor="operator")
        pointer = Path(args.db).parent / POINTER_NAME
        return Ledger(args.db, spec, busy_timeout=args.busy_timeout, create=False, actor="operator",
                      pointer_file=pointer if pointer.exists() else None)
    except LedgerOpenError as exc:
        raise Failed(2, str(exc)) from None
    except LedgerError as exc:
        raise Failed(1, f"{exc.code}: {exc.message}") from None


def _now(args: argparse.Namespace) -> float:
    return time.time() if args.now is None else args.now


def _emit(args: argparse.Namespace, value: Any, text: str) -> None:
    """JSON (which escapes control characters itself) or text with ids, owners and messages from
    the ledger made terminal-safe: no control byte or bidi override reaches the screen raw."""
    print(json.dumps(value, indent=2, ensure_ascii=False) if args.json else terminal(text))


def _err(text: str) -> None:
    print(terminal(text), file=sys.stderr)


def _flags(ledger: Ledger, w: dict[str, Any], now: float) -> list[Any]:
    since = None if ledger.spec.terminal(w["status"]) else ledger.status_since(w["work_id"])
    return assess(ledger.spec, w, since, now)


def _token(ledger: Ledger, args: argparse.Namespace) -> str:
    if args.token is not None:
        return args.token
    w = ledger.get(work_id=args.work_id)
    if w["lease_token"] is None:
        return ""  # the operation refuses it: the item holds no lease
    _err(f"note: presenting {args.work_id}'s current lease token (owner {w['owner']!r}, lease_version {w['lease_version']}); "
         "pass --token to fence on a specific lease")
    return w["lease_token"]


def _fmt(v: Any) -> str:
    return "-" if v is None else (json.dumps(v, ensure_ascii=False) if isinstance(v, dict | list | bool) else str(v))


# ---------------------------------------------------------------------- commands
def cmd_list(args: argparse.Namespace, ledger: Ledger) -> int:
    if args.status is not None and args.status not in ledger.spec.statuses:
        raise Failed(2, f"--status {args.status!r} is not a status of the contract ({', '.join(ledger.spec.statuses)})")
    now = _now(args)
    rows = []
    for w in ledger.list(status=args.status, quarantined=True if args.quarantined else None):
        flags = _flags(ledger, w, now)
        if args.attention and not flags:
            continue
        rows.append((w, flags))
    if args.json:
        _emit(args, {"now": now, "items": [{"work": w, "attention": [f.as_dict() for f in flags]} for w, flags in rows]}, "")
        return 0
    print(f"{'WORK_ID':<34} {'STATUS':<17} {'PRI':>3} {'ATT':>3} {'OWNER':<12} ATTENTION")
    for w, flags in rows:
        note = "; ".join(f"{f.name}: {f.detail}" for f in flags)
        owner = terminal(_fmt(w["owner"]))[:12]  # escaped before shortening, so no escape is cut into a raw byte
        print(terminal(f"{w['work_id']:<34} {w['status']:<17} {w['priority']:>3} {w['attempt']:>3} ") + f"{owner:<12} {terminal(note)}")
    by_status: dict[str, int] = {}
    for w, _ in rows:
        by_status[w["status"]] = by_status.get(w["status"], 0) + 1
    flagged = sum(1 for _, f in rows if f)
    summary = ", ".join(f"{n} {s}" for s, n in by_status.items()) or "none"
    print(f"{len(rows)} record(s): {summary}; {flagged} need attention (now={now:.3f})")
    return 0


def cmd_show(args: argparse.Namespace, ledger: Ledger) -> int:
    w = ledger.get(work_id=args.work_id)
    now = _now(args)
    flags = _flags(ledger, w, now)
    receipts = ledger.effect_list(work_id=args.work_id)
    lines = [f"{k + ':':<18} {_fmt(v)}" for k, v in w.items()]
    lines += [f"attention:         {f.name}: {f.detail}" for f in flags]
    lines += [f"receipt:           {r['key'][:12]} {r['step_id']}/{r['tool']} {r['step_class']} {r['state']}" for r in receipts]
    _emit(args, {"work": w, "attention": [f.as_dict() for f in flags], "receipts": receipts}, "\n".join(lines))
    return 0


def cmd_events(args: argparse.Namespace, ledger: Ledger) -> int:
    evs = ledger.events(work_id=args.work_id)
    text = "\n".join(f"{e['seq']:>4} {e['at']:>16.3f} {e['type']:<16} {_fmt(e['from_status']):>16} -> {_fmt(e['to_status']):<16} "
                     f"{e['actor'] or '-':<8} {json.dumps(e['data'], ensure_ascii=False)}" for e in evs)
    _emit(args, evs, text)
    return 0


def cmd_close_out(args: argparse.Namespace, ledger: Ledger) -> int:
    result = None
    if args.result is not None:
        from ledgercheck.bounded import InputError, Limits, loads_limited

        try:  # within the bounds of a results file: size, nesting, values, no NaN, digits
            result = loads_limited(args.result.encode("utf-8", "surrogateescape"), "--result",
                                   Limits("result", 1 << 20))
        except InputError as exc:
            raise Failed(2, str(exc)) from None
    w = ledger.close_out(work_id=args.work_id, token=_token(ledger, args), status=args.status, result=result,
                         reason=args.reason, now=_now(args))
    _emit(args, w, f"{w['work_id']}: closed out as {w['status']}")
    return 0


def cmd_waiting(args: argparse.Namespace, ledger: Ledger) -> int:
    w = ledger.set_waiting(work_id=args.work_id, token=_token(ledger, args), kind=args.kind, ref=args.ref,
                           timeout=args.timeout, now=_now(args))
    _emit(args, w, f"{w['work_id']}: {w['status']} on {w['waiting_ref']!r} until {w['waiting_deadline']:.3f}")
    return 0


def cmd_recover(args: argparse.Namespace, ledger: Ledger) -> int:
    victims = ledger.recover(now=_now(args))
    text = "\n".join(f"{v['work_id']}: {v['decision']} ({v['reason']})" for v in victims) or "nothing stale"
    _emit(args, victims, text)
    return 0


def cmd_requeue(args: argparse.Namespace, ledger: Ledger) -> int:
    before = ledger.get(work_id=args.work_id)
    w = ledger.requeue(work_id=args.work_id, reason=args.reason, now=_now(args))
    was = before["status"] + (", quarantined" if before["quarantined"] else "")
    _emit(args, w, f"{w['work_id']}: requeued (was {was}); attempt {w['attempt']}, lease_version {w['lease_version']}")
    return 0


def cmd_verify(args: argparse.Namespace, ledger: Ledger) -> int:
    problems = verify(ledger)
    n = len(ledger.list())
    if args.json:
        _emit(args, {"ok": not problems, "records": n, "problems": problems}, "")
    elif problems:
        for p in problems:
            print(terminal(p))
    else:
        print(f"ok: {args.db}: {n} record(s), integrity and ledger invariants hold")
    return 1 if problems else 0


__all__ = ["add_parser", "duration"]
