"""Lost replies and slow links (chaos/replies.py): the relay itself, correct ledgers clean under it,
and the broken clients of fixtures/broken_replies.py caught by it and missed without it."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from ledgercheck.chaos.points import ChaosError
from ledgercheck.chaos.replies import LinkFaults, TcpRelay, dsn_target, lossy_link, relayed_dsn
from ledgercheck.chaos.safety import run_campaign

ITEMS = 20
LOSE = LinkFaults(seed=1, lose=0.2)


def _tag(tag: bytes) -> bytes:  # a PostgreSQL CommandComplete message
    body = tag + b"\x00"
    return b"C" + (4 + len(body)).to_bytes(4, "big") + body


class _Server:
    """Answers each line it is sent: ``w`` -> an UPDATE and a COMMIT completed, ``r`` -> a SELECT and a
    COMMIT completed (a read), ``x`` -> a COMMIT completed after an UPDATE of no row."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.handled = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c: socket.socket) -> None:
        f = c.makefile("rb")
        for line in f:
            kind = line.strip()
            self.handled += 1
            first = {b"w": b"UPDATE 1", b"r": b"SELECT 1", b"x": b"UPDATE 0"}[kind]
            try:
                c.sendall(_tag(first) + _tag(b"COMMIT"))
            except OSError:
                return
        c.close()


def _ask(port: int, kinds: list[bytes]) -> list[bool]:
    """Send each request on one connection (a new one after a loss); True for each answered."""
    answered = []
    c = socket.create_connection(("127.0.0.1", port))
    for k in kinds:
        try:
            c.sendall(k + b"\n")
            data = c.recv(4096)
        except OSError:
            data = b""
        answered.append(bool(data))
        if not data:
            c.close()
            c = socket.create_connection(("127.0.0.1", port))
    c.close()
    return answered


def test_the_relay_loses_answers_to_committed_writes_only_and_the_server_did_the_work() -> None:
    server = _Server()
    with TcpRelay(("127.0.0.1", server.port), LinkFaults(seed=3, lose=0.5)) as relay:
        writes = _ask(relay.port, [b"w"] * 40)
        reads = _ask(relay.port, [b"r", b"x"] * 20)
    assert 5 <= writes.count(False) <= 35, writes  # about half of the committed writes lost their answer
    assert all(reads), reads  # a read, or a transaction that changed nothing, is never lost
    assert relay.counts["replies_lost"] == writes.count(False)
    assert server.handled == 80  # every request reached the server: the answers were lost, not the work
    assert [n for _, n in relay.events] == sorted(n for _, n in relay.events)
    # the same seed loses the same answers
    with TcpRelay(("127.0.0.1", server.port), LinkFaults(seed=3, lose=0.5)) as again:
        assert _ask(again.port, [b"w"] * 40) == writes
    with TcpRelay(("127.0.0.1", server.port), LinkFaults(seed=3)) as calm:
        assert all(_ask(calm.port, [b"w"] * 10)) and calm.counts["replies_lost"] == 0


def test_link_faults_and_dsns_are_checked_and_rewritten() -> None:
    with pytest.raises(ChaosError, match="lose must be between 0 and 1"):
        LinkFaults(lose=1.5)
    with pytest.raises(ChaosError, match="delay must be"):
        LinkFaults(delay=(0.2, 0.1))
    dsn = "host=10.0.0.1 port=6543 user=me dbname=postgres"
    assert dsn_target(dsn) == ("10.0.0.1", 6543)
    relay = TcpRelay(("10.0.0.1", 6543))
    relay.port = 4444
    assert relayed_dsn(dsn, relay) == "host=127.0.0.1 port=4444 user=me dbname=postgres"
    with pytest.raises(ChaosError, match="TCP server address"):
        dsn_target("host=/var/run/postgresql dbname=x")


# ------------------------------------------------------------------------------ campaigns
@pytest.fixture(scope="module")
def pg() -> Iterator[Any]:
    from ledgercheck.transport.pgserver import PostgresServer

    with PostgresServer() as server:
        yield server


def _campaign(server: Any, address: str, seed: int, faults: LinkFaults, tmp: Any, key: str = "server_dsn") -> tuple[Any, TcpRelay]:
    with lossy_link(server.dsn(), faults) as (relay, dsn):
        relay.calm()  # the processes open the ledger first; the link turns bad when the nemesis starts
        r = run_campaign(address, workers=4, items=ITEMS, seed=seed, faults="kill,pause", reset={key: dsn},
                         latency=(0.05, 0.3), out_dir=str(tmp / f"{address.rsplit(':', 1)[-1]}-{seed}-{faults.lose}"),
                         time_limit=90.0, progress=lambda *_: relay.calm(False))
    return r, relay


def _indefinite(r: Any) -> int:
    import orjson

    with open(r.history, "rb") as f:
        return sum(1 for line in f if b'"indefinite"' in line and orjson.loads(line).get("outcome") == "indefinite")


@pytest.mark.thorough
@pytest.mark.parametrize("cls", ["ReplayedWrite", "RetriedAsNew"])
def test_a_client_that_retries_a_lost_reply_is_caught_only_when_replies_are_lost(pg: Any, cls: str, tmp_path: Any) -> None:
    address = f"python:ledgercheck.fixtures.broken_replies:{cls}"
    clean, relay = _campaign(pg, address, 1, LinkFaults(seed=1), tmp_path)
    assert clean.anomalies == [] and relay.counts["replies_lost"] == 0, clean.anomalies[:1]
    found, relay = _campaign(pg, address, 1, LOSE, tmp_path)
    assert relay.counts["replies_lost"] > 0
    classes = {a["class"] for a in found.anomalies}
    assert classes == {"refused_but_applied"}, found.anomalies[:1]
    a = found.anomalies[0]
    refused = [x for x in a["excerpt"] if x.get("type") == "complete" and x.get("outcome") == "refused"]
    assert refused and refused[0]["op"] == "close_out", a["excerpt"]
    assert any(x.get("type") == "final" and x["items"].get(a["work_id"], {}).get("status") == "done" for x in a["excerpt"])


def _seeds() -> range:
    return range(1, 1 + int(os.environ.get("LEDGERCHECK_REPLY_SEEDS", "10")))


@pytest.mark.thorough
@pytest.mark.parametrize("address,key", [("python:ledgercheck.fixtures.pg_ledger:PgLedger", "server_dsn"),
                                         ("python:ledgercheck.fixtures.pg_ledger:PgTimeFenced", "server_dsn"),
                                         ("reference-pg", "dsn")], ids=["PgLedger", "PgTimeFenced", "reference-pg"])
def test_correct_ledgers_are_clean_under_lost_replies_and_slow_links(pg: Any, address: str, key: str, tmp_path: Any) -> None:
    lost = indefinite = 0
    for seed in _seeds():
        faults = LinkFaults(seed=seed, lose=0.2, delay_p=0.1, delay=(0.0, 0.02))
        r, relay = _campaign(pg, address, seed, faults, tmp_path, key)
        assert r.anomalies == [], (seed, r.anomalies[:1])
        assert set(r.final) <= {"done", "quarantined"} and sum(r.final.values()) == ITEMS, (seed, r.final)
        lost += relay.counts["replies_lost"]
        indefinite += _indefinite(r)
    assert lost > 0 and indefinite > 0  # replies were lost, and the history says the outcome was unknown
