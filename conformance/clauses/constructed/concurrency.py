"""Several connections to one durable ledger at once.

``concurrent_claims`` (lease.single_holder): workers claim from one ledger at the same time.
The races below send the *same* idempotent request from several connections at the same
instant, round after round: a ledger that checks for an existing record outside the
transaction that writes it hands out two "created" answers (or two records) for one key.
They apply to adapters that declare durable, concurrent access to one ledger.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ledgercheck.conformance.clauses import case, check
from ledgercheck.conformance.harness import AdapterFailure, Harness, NotApplicable
from ledgercheck.conformance.model import Outcome
from ledgercheck.transport.client import Client, connect

ITEMS = 40
WORKERS = 3


def concurrent_claims(h: Harness) -> None:
    caps = h.client.handshake.get("capabilities") or {}
    if not (caps.get("durable") and caps.get("concurrent")):
        raise NotApplicable("the adapter does not declare durable, concurrent access to one ledger")
    with tempfile.TemporaryDirectory(prefix="ledgercheck-conc-") as tmp:
        config: dict[str, Any] = {"contract": h.contract_doc, "dir": tmp}
        clients = [h.client] + [connect(h.client.address, h.spec) for _ in range(WORKERS - 1)]
        try:
            for c in clients:
                out = c.reset(config)
                if not out.ok:
                    raise AdapterFailure("reset", out)
            now = h.now()
            for i in range(ITEMS):
                out = clients[0].call("create", source_system="manual", source_id=f"conc-{i}", now=now)
                if not out.ok:
                    raise AdapterFailure("create", out)
            claimed: list[tuple[int, str, int]] = []
            errors: list[str] = []
            lock = threading.Lock()
            start = threading.Barrier(len(clients))

            def run(n: int) -> None:
                c = clients[n]
                start.wait()
                while True:
                    out = c.call("claim", owner=f"worker-{n}", now=now)
                    if not out.ok:
                        if out.code == "busy":
                            continue
                        with lock:
                            errors.append(f"worker-{n}: {out.code}: {out.message}")
                        return
                    if out.value is None:
                        return
                    with lock:
                        claimed.append((n, out.value["work_id"], out.value["lease_version"]))

            threads = [threading.Thread(target=run, args=(n,)) for n in range(len(clients))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
            check(not errors, "lease.single_holder", f"concurrent claims failed: {errors[:3]}", h)
            ids = [w for _, w, _ in claimed]
            dup = sorted({w for w in ids if ids.count(w) > 1})
            check(not dup, "lease.single_holder", f"{len(dup)} item(s) were claimed by two workers at once, e.g. {dup[:3]}", h)
            check(len(set(ids)) == ITEMS, "lease.single_holder", f"{ITEMS} items created, {len(set(ids))} claimed", h)
            owners = {}
            for w in clients[0].call("list").value or []:
                owners[w["work_id"]] = (w["owner"], w["lease_version"])
            for n, w, v in claimed:
                check(owners.get(w) == (f"worker-{n}", v), "lease.single_holder",
                      f"{w} was handed to worker-{n} (version {v}) but the ledger records {owners.get(w)}", h)
        finally:
            for c in clients[1:]:
                c.close()


# ----------------------------------------------------------------------------- idempotent races
RACE_ROUNDS = 8
BUSY_RETRIES = 200


@contextmanager
def _racers(h: Harness) -> Iterator[list[Client]]:
    """WORKERS connections to one fresh durable ledger (the harness's own client first)."""
    caps = h.client.handshake.get("capabilities") or {}
    if not (caps.get("durable") and caps.get("concurrent")):
        raise NotApplicable("the adapter does not declare durable, concurrent access to one ledger")
    with tempfile.TemporaryDirectory(prefix="ledgercheck-race-") as tmp:
        clients = [h.client]
        try:
            clients += [connect(h.client.address, h.spec) for _ in range(WORKERS - 1)]
            for c in clients:
                out = c.reset({"contract": h.contract_doc, "dir": tmp})
                if not out.ok:
                    raise AdapterFailure("reset", out)
            yield clients
        finally:
            for c in clients[1:]:
                c.close()


def _call(c: Client, op: str, args: dict[str, Any]) -> Outcome:
    out = c.call(op, **args)
    for _ in range(BUSY_RETRIES):
        if out.ok or out.code != "busy":
            break
        out = c.call(op, **args)
    return out


def _race(clients: list[Client], op: str, args: dict[str, Any]) -> list[Outcome]:
    """Every client sends ``op(args)`` at once; their answers, in client order."""
    outs: list[Outcome | None] = [None] * len(clients)
    start = threading.Barrier(len(clients))

    def run(n: int) -> None:
        start.wait()
        outs[n] = _call(clients[n], op, args)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return [o if o is not None else Outcome.error("timeout", f"{op} did not answer within 120 s", False) for o in outs]


def _one_winner(h: Harness, clause: str, op: str, outs: list[Outcome], flag: str, what: str) -> None:
    bad = [f"{o.code}: {o.message}" for o in outs if not o.ok]
    check(not bad, clause, f"{len(outs)} connections sent the same {op} at once; some failed: {bad[:2]}", h)
    wins = sum(1 for o in outs if isinstance(o.value, dict) and o.value.get(flag) is True)
    check(wins == 1, clause, f"{len(outs)} connections sent the same {op} at once for {what}: {wins} answers said "
          f"{flag}=true, exactly one may", h)


@case("core.create.unique_unit", "concurrent-creates")
def _race_create(h: Harness) -> None:
    h.need("create")
    with _racers(h) as clients:
        src = next(iter(h.spec.source_systems))
        ids = set()
        for r in range(RACE_ROUNDS):
            args: dict[str, Any] = {"source_system": src, "source_id": f"race-{r}", "now": h.now()}
            if src in h.spec.run_id_required_for:
                args["source_run_id"] = "race-run"
            outs = _race(clients, "create", args)
            _one_winner(h, "core.create.unique_unit", "create", outs, "created", f"unit race-{r}")
            got = {o.value["work"].get("work_id") for o in outs}
            check(len(got) == 1, "core.create.unique_unit", f"one unit, raced: answers name {len(got)} different items {sorted(map(str, got))[:3]}", h)
            wid = got.pop()
            ids.add(wid)
            ev = clients[0].call("events", work_id=wid) if h.claims("events") else None
            if ev is not None and ev.ok:
                check(len(ev.value) == 1, "core.create.unique_unit", f"unit race-{r} created by racing calls has {len(ev.value)} events, one may", h)
        listed = clients[0].call("list")
        if listed.ok:
            mine = [w for w in listed.value if str(w.get("source_id", "")).startswith("race-")]
            check(len(mine) == RACE_ROUNDS, "core.create.unique_unit", f"{RACE_ROUNDS} units raced, the ledger lists {len(mine)} items", h)


@case("idem.begin", "concurrent-begins")
def _race_begin(h: Harness) -> None:
    h.need("effect_begin")
    h.need("claim")
    with _racers(h) as clients:
        now = h.now()
        made = clients[0].call("create", source_system="manual", source_id="race-effects", now=now)
        if not made.ok:
            raise AdapterFailure("create", made)
        wid = made.value["work"]["work_id"]
        got = clients[0].call("claim", owner="worker-0", work_id=wid, now=now)
        if not got.ok or not got.value:
            raise NotApplicable("the item to race effects on could not be claimed by id")
        tok = got.value["lease_token"]
        cls = next(iter(h.spec.step_classes))
        keys = set()
        for r in range(RACE_ROUNDS):
            args = {"work_id": wid, "step_id": f"step-{r}", "tool": "email.send", "input": {"to": "ops", "n": r},
                    "step_class": cls, "token": tok, "now": now}
            outs = _race(clients, "effect_begin", args)
            _one_winner(h, "idem.begin", "effect_begin", outs, "created", f"step-{r}")
            ks = {(o.value.get("receipt") or {}).get("key") for o in outs}
            check(len(ks) == 1, "idem.begin", f"step-{r} begun by racing calls got {len(ks)} different receipts", h)
            keys |= ks
        if h.claims("effect_list"):
            listed = clients[0].call("effect_list", work_id=wid)
            if listed.ok:
                check(len(listed.value) == RACE_ROUNDS, "idem.begin",
                      f"{RACE_ROUNDS} steps begun by racing calls, the journal holds {len(listed.value)} receipts", h)


@case("inbox.deliver.idempotent", "concurrent-deliveries")
def _race_deliver(h: Harness) -> None:
    h.need("inbox_deliver")
    h.need("inbox_drain")
    with _racers(h) as clients:
        now = h.now()
        for r in range(RACE_ROUNDS):
            args = {"recipient": "agent", "message_id": f"race-{r}", "sender": "alice", "body": {"n": r}, "now": now}
            outs = _race(clients, "inbox_deliver", args)
            _one_winner(h, "inbox.deliver.idempotent", "inbox_deliver", outs, "delivered", f"message race-{r}")
        drained = clients[0].call("inbox_drain", recipient="agent", now=now)
        if not drained.ok:
            raise AdapterFailure("inbox_drain", drained)
        ids = [m.get("message_id") for m in drained.value]
        check(sorted(ids) == sorted(f"race-{r}" for r in range(RACE_ROUNDS)), "inbox.deliver.idempotent",
              f"{RACE_ROUNDS} messages each delivered by racing calls; the drain handed out {ids[:12]}", h)


@case("outbox.dedupe", "concurrent-enqueues")
def _race_enqueue(h: Harness) -> None:
    h.need("outbox_enqueue")
    h.need("outbox_pending")
    with _racers(h) as clients:
        now = h.now()
        for r in range(RACE_ROUNDS):
            args = {"key": f"race-{r}", "destination": "mail:ops@example.org", "payload": {"n": r}, "now": now}
            outs = _race(clients, "outbox_enqueue", args)
            _one_winner(h, "outbox.dedupe", "outbox_enqueue", outs, "created", f"key race-{r}")
        pending = clients[0].call("outbox_pending")
        if not pending.ok:
            raise AdapterFailure("outbox_pending", pending)
        keys = [m.get("key") for m in pending.value]
        check(sorted(keys) == sorted(f"race-{r}" for r in range(RACE_ROUNDS)), "outbox.dedupe",
              f"{RACE_ROUNDS} keys each enqueued by racing calls; pending holds {keys[:12]}", h)


@case("eventlog.append.conflict", "concurrent-appends")
def _race_append(h: Harness) -> None:
    h.need("log_append")
    with _racers(h) as clients:
        now = h.now()
        for r in range(RACE_ROUNDS):
            args = {"stream": "race", "expected_seq": h.spec.first_seq - 1 + r, "kind": "tool.called",
                    "payload": {"n": r}, "now": now}
            outs = _race(clients, "log_append", args)
            ok = [o for o in outs if o.ok]
            refused = [o for o in outs if not o.ok]
            check(len(ok) == 1, "eventlog.append.conflict", f"{len(outs)} connections appended with expected_seq "
                  f"{args['expected_seq']} at once: {len(ok)} succeeded, exactly one may", h)
            codes = sorted({o.code for o in refused} - {"concurrent_append"})
            check(not codes, "eventlog.append.conflict", f"racing appends that lost were refused with {codes}, "
                  f"the contract says concurrent_append", h)
        if h.claims("log_read"):
            read = clients[0].call("log_read", stream="race")
            if read.ok:
                check(len(read.value) == RACE_ROUNDS, "eventlog.append.conflict",
                      f"{RACE_ROUNDS} rounds of racing appends stored {len(read.value)} entries", h)
