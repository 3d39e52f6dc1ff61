"""Several connections to one durable ledger at once (lease.single_holder)."""

from __future__ import annotations

import tempfile
import threading
from typing import Any

from ..client import connect
from ..harness import AdapterFailure, Harness, NotApplicable
from . import check

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
