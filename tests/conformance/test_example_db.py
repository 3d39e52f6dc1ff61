"""A shared example store (--ledger-example-db): a failure one shard found is the first thing
the next shard to run that machine tries.  Against a directory and a real redis-server."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.conformance.example_db import StoreError, check_store, example_database, parse_store
from ledgercheck.services.postgres import free_port
from ledgercheck.services.redis import RedisServer, RedisUnavailable

BROKEN = "python:ledgercheck.fixtures.testkit.broken:NoEventOnClaim"
CLAUSE = "trail.one_per_transition"
MACHINE = "ledgercheck::stateful::lifecycle"


def shard_of(nodeid: str, count: int) -> int:
    """The shard (1-based) --ledger-shard K/count puts a node id in (conformance/plugin.py)."""
    return int(hashlib.sha256(nodeid.encode()).hexdigest(), 16) % count + 1


# ---- a real redis-server ----------------------------------------------------------------------


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A redis-server on loopback, on a free port, in a temporary directory; stopped afterwards."""
    try:
        server = RedisServer().start()
    except RedisUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        url = server.url()
        check_store(parse_store(url))
        yield url
    finally:
        server.stop()


# ---- parsing and checking -------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "words"), [
    ("", "empty"),
    ("http://cache:80/x", "unknown scheme 'http'"),
    ("redis://:6379/0", "no host"),
    ("redis://127.0.0.1:notaport/0", "port is not a number"),
    ("redis://127.0.0.1:6379/cache", "must be a number"),
])
def test_bad_store_is_one_line(value: str, words: str) -> None:
    with pytest.raises(StoreError) as info:
        parse_store(value)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_store_kinds(tmp_path: Path) -> None:
    assert parse_store(str(tmp_path)).kind == "directory"
    assert parse_store("redis://127.0.0.1:6379/2").kind == "redis"
    db = example_database(parse_store(str(tmp_path / "shared")), "adapter-1")
    assert db is not None
    db.save(b"k", b"v")
    assert list((tmp_path / "shared" / "adapter-1").rglob("*")), "the directory store keeps examples under the adapter"
    again = example_database(parse_store(str(tmp_path / "shared")), "adapter-1")
    assert again is not None and list(again.fetch(b"k")) == [b"v"]
    assert example_database(None, "adapter-1") is None


def test_redis_that_does_not_answer_is_one_line(cli, tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(StoreError) as info:
        check_store(parse_store(url))
    assert "does not answer" in str(info.value)
    r = cli("certify", "--adapter", "reference", "--example-db", url, "--no-history", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and f"--ledger-example-db {url}: the Redis server does not answer" in r.stderr


def test_redis_store_round_trip(redis_url: str) -> None:
    a = example_database(parse_store(redis_url), "adapter-1")
    b = example_database(parse_store(redis_url), "adapter-2")
    assert a is not None and b is not None
    a.save(b"key", b"example")
    assert list(a.fetch(b"key")) == [b"example"]
    assert list(b.fetch(b"key")) == [], "adapters do not share examples"


# ---- two shards ----------------------------------------------------------------------------------


def run_shard(cwd: Path, shard: str, seed: int, store: str, artifacts: Path) -> tuple[int, list[dict[str, Any]], dict[str, Any]]:
    """One shard of a stateful campaign against the broken ledger, as its own pytest process; returns
    its exit status, hypothesis' observations of the test cases it ran (in order), and its results.
    The smallest budget: the lifecycle machine finds this bug in its first programs, and the other
    machines of a shard (on a ledger they judge correct) need not explore further for this test."""
    cwd.mkdir(parents=True)
    results = cwd / "results.json"
    env = {**os.environ, "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY_NOCOVER": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(cwd), "--rootdir", str(cwd), "-p", "no:cacheprovider", "-p", "no:xdist",
         "-o", "addopts=", "-o", "testpaths=", "--assert=plain", "-q", "--ledger-adapter", BROKEN, "--ledger-only",
         "--ledger-stateful-only", "--ledger-hypothesis-profile", "smoke", "--ledger-shard", shard, "--ledger-seed", str(seed),
         "--ledger-example-db", store,
         "--ledger-artifacts", str(artifacts), "--ledger-results", str(results)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=570)
    observed = sorted((cwd / ".hypothesis" / "observed").glob("*_testcases.jsonl"))
    cases = [json.loads(line) for f in observed for line in f.read_text().splitlines() if line.strip()]
    doc = json.loads(results.read_text()) if results.exists() else {}
    assert doc, f"shard {shard} wrote no results: {proc.stdout[-1500:]}{proc.stderr[-1500:]}"
    return proc.returncode, [c for c in cases if c.get("type") == "test_case"], doc


@pytest.mark.parametrize("kind", ["directory", "redis"])
def test_a_failure_one_shard_found_is_replayed_first_by_the_next(kind: str, tmp_path: Path, request) -> None:
    store = str(tmp_path / "store") if kind == "directory" else request.getfixturevalue("redis_url")
    # campaign 1, split two ways: the shard that runs the lifecycle machine finds the bug
    first = f"{shard_of(MACHINE, 2)}/2"
    rc1, cases1, doc1 = run_shard(tmp_path / "shard-a", first, 1, store, tmp_path / "art-a")
    assert rc1 == 1, "the broken ledger must fail its stateful run"
    failed1 = [t for t in doc1["tests"] if t["nodeid"] == MACHINE][0]
    assert failed1["outcome"] == "failed" and failed1["clause"] == CLAUSE
    assert cases1 and not cases1[0]["how_generated"].startswith("during reuse"), "an empty store has nothing to replay"
    # campaign 2, split three ways on other machines (another artifacts dir, another seed): the
    # shard that now runs the machine starts with the example shard-a saved, and fails on it
    second = f"{shard_of(MACHINE, 3)}/3"
    rc2, cases2, doc2 = run_shard(tmp_path / "shard-b", second, 2, store, tmp_path / "art-b")
    assert rc2 == 1
    failed2 = [t for t in doc2["tests"] if t["nodeid"] == MACHINE][0]
    assert failed2["outcome"] == "failed" and failed2["clause"] == CLAUSE
    first_case = cases2[0]
    assert first_case["how_generated"] == "during reuse phase" and first_case["status"] == "failed", first_case
    # (this shard runs the messaging machine too: hypothesis marks each machine's run by its start)
    lifecycle = [c for c in cases2 if c["run_start"] == first_case["run_start"]]
    assert not [c for c in lifecycle if c["how_generated"].startswith("during generate")], \
        "the replayed failure made generating new examples unnecessary"
