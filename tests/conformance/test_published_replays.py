"""Every replay command the library page publishes reproduces the failure of its line.

docs/libraries/README.md (written by ``python -m ledgercheck.fixtures.libraries.publish``) lists, per library,
one line per clause it breaks with the command that replays it.  This test runs the in-process
equivalent of each command (the same trace, the same adapter, the same replay as
``ledgercheck replay``: one connection per library, reset before each replay) against the real
library, PostgreSQL included, and checks that

* the trace was saved by a test of the clause the line is listed under;
* the replay fails again with a clause the recorded failure named; the line says which clause
  that was when it is not the line's own;
* every library here keeps its own (wall) clock, so each replay says it is inexact, and the page
  says so too.  An inexact replay may miss a failure that hung on the run's instants (a retry due
  a little later than the contract allows); it then says what it found instead, or where it
  stopped, and never claims the failure.  At least nine in ten of each library's replays must
  reproduce (they do all but one or two).

Only replays run (no certification), so the whole takes well under a minute.  A replay whose
recorded run lasted longer than ``LONG`` seconds of real time runs in the long tier
(LEDGERCHECK_THOROUGH=1): rq's execution-timeout line, which waits the whole scaled timeout.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from ledgercheck.conformance.trace import load_trace, replay_harness, run_replay
from ledgercheck.fixtures.libraries import PROGRAMS, program_address
from ledgercheck.spec import Spec
from ledgercheck.transport.client import connect

LIBRARIES = ["persist-queue", "dbos", "pgqueuer", "procrastinate", "rq", "bullmq", "pg-boss", "sidekiq", "graphile-worker",
             "celery", "celery-acks-late", "celery-visibility"]
# a program adapter is published by its exec: address from the repository's root
BY_ADDRESS = {program_address(name, relative=True): name for name in PROGRAMS}

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "libraries" / "README.md"
LINE = re.compile(r"^- `(?P<clause>[a-z_.]+)` \((?P<level>[A-Z]+), (?P<outcome>[a-z]+)\): (?P<text>.*)$")
REPLAY = re.compile(r"^  replay: `(?P<cmd>[^`]+)`(?P<tail>.*)$")


@dataclass(frozen=True)
class Finding:
    library: str
    clause: str
    text: str
    command: str
    tail: str


def published() -> list[Finding]:
    out: list[Finding] = []
    lines = PAGE.read_text(encoding="utf-8").split("## Findings", 1)[1].splitlines()
    for line, nxt in zip(lines, lines[1:] + [""], strict=True):
        m, r = LINE.match(line), REPLAY.match(nxt)
        if m and r:
            argv = shlex.split(r["cmd"])
            adapter = argv[argv.index("--adapter") + 1]
            out.append(Finding(BY_ADDRESS.get(adapter, adapter), m["clause"], m["text"], r["cmd"], r["tail"]))
    return out


def test_the_page_publishes_replays_for_every_library() -> None:
    found = published()
    assert {f.library for f in found} == set(LIBRARIES)
    assert len(found) >= 40
    for f in found:
        argv = shlex.split(f.command)
        assert argv[:2] == ["ledgercheck", "replay"] and (ROOT / argv[2]).is_file(), f.command


@pytest.fixture(scope="module")
def postgres():
    from ledgercheck.services.postgres import PostgresServer
    from ledgercheck.services.redis import RedisServer

    # the environment the publish step certified in: one PostgreSQL server and one redis-server
    # named to every adapter process (so the Redis program adapters declare a durable ledger too)
    with PostgresServer() as pg, RedisServer() as rs:
        env = {"LEDGERCHECK_PG_DSN": pg.dsn(), "LEDGERCHECK_REDIS_URL": rs.url()}
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            yield pg
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


LONG = 10.0  # seconds: a recorded run longer than this (of a wall-clock ledger) replays in the long tier


def recorded_seconds(doc: dict) -> float:
    """How long the trace's run lasted: its last step's instant (0 when no step has one)."""
    nows = [s["args"].get("now") for s in doc["steps"] if isinstance(s.get("args"), dict)]
    return max([t["$t"] for t in nows if isinstance(t, dict) and isinstance(t.get("$t"), int | float)], default=0.0)


def _lines(library: str, long: bool) -> list[tuple[Finding, Path, dict]]:
    """The library's published lines with their traces: those whose recorded run was longer than
    ``LONG`` (``long``) or the others."""
    out = []
    for f in published():
        if f.library == library:
            path = ROOT / shlex.split(f.command)[2]
            doc = load_trace(path)
            if (recorded_seconds(doc) > LONG) == long:
                out.append((f, path, doc))
    return out


def _replay(library: str, lines: list[tuple[Finding, Path, dict]], spec: Spec) -> tuple[list[str], list[str]]:
    """Replay the lines on one connection: (problems, lines not reproduced)."""
    client = connect(program_address(library) if library in PROGRAMS else library, spec)
    problems, missed = [], []
    try:
        for f, path, doc in lines:
            done = run_replay(replay_harness(client, spec, doc), doc, str(path))
            headline = done.headline(str(path), library)
            # a stateful machine's trace is listed under no one clause: it judges every clause it meets
            if done.listed != f.clause and not (done.listed is None and path.name.startswith("stateful_")):
                problems.append(f"{f.clause}: the replayed trace is of a test of {done.listed}")
            if not done.reproduced:
                missed.append(f"{f.clause}: {headline}")
                if not (done.inexact and headline.split(": ", 1)[1].startswith("did not reproduce")):
                    problems.append(f"{f.clause}: not reproduced, and the replay does not say it is inexact: {headline}")
            elif f.clause not in done.again and "found as" not in f.text:
                problems.append(f"{f.clause}: reproduced as {done.again}, which the line does not say")
            if client.clock == "wall" and not (done.inexact and "inexact" in f.tail):
                problems.append(f"{f.clause}: a wall-clock replay that does not say it is inexact")
    finally:
        client.close()
    return problems, missed


# pg-boss's and DBOS's catalogues (13-14 s each) are the long tier's: the default run keeps the others
@pytest.mark.parametrize("library", [pytest.param(n, marks=[pytest.mark.thorough] if n in ("pg-boss", "dbos") else [])
                                     for n in LIBRARIES])
def test_every_published_replay_reproduces_its_line(library: str, spec: Spec, postgres) -> None:
    lines = _lines(library, long=False)
    assert lines
    problems, missed = _replay(library, lines, spec)
    assert not problems, "\n".join(problems)
    assert len(missed) * 10 <= len(lines), "\n".join(missed)


# rq's core.expire.timeout_reason[execution] renews for the whole execution timeout (3600 s x the wall
# scale 0.01: 36 s of real time), longer than all the other replays together.  The default still
# replays every other published line, of rq (wall clock, lease profile included) and of the others.
@pytest.mark.thorough
def test_every_long_published_replay_reproduces_its_line(spec: Spec, postgres) -> None:
    long = {lib: lines for lib in LIBRARIES if (lines := _lines(lib, long=True))}
    assert long  # else this test has nothing left to replay: LONG is too high
    for library, lines in long.items():
        problems, missed = _replay(library, lines, spec)
        assert not problems, "\n".join(problems)
        assert len(missed) * 10 <= len(lines), "\n".join(missed)


def test_a_line_shows_the_test_whose_own_violation_names_its_clause() -> None:
    from ledgercheck.fixtures.libraries.publish import _findings, blamed_clauses, clearest

    def t(nodeid: str, blamed: str, text: str) -> dict:
        return {"clause": "core.status.terminal", "nodeid": nodeid, "outcome": "failed", "replay": f"ledgercheck replay {nodeid}",
                "message": f"clause violated: {blamed}\n[{blamed.split(',')[0]}] {text}"}

    tests = [t("a", "core.transition.corruption", "claim accepted"),
             t("b", "core.status.terminal, trail.types", "two things"),
             t("c", "core.status.terminal", "requeue of done left it done")]
    assert blamed_clauses(tests[1]) == ["core.status.terminal", "trail.types"]
    assert clearest(tests, "core.status.terminal")["nodeid"] == "c"
    assert clearest(tests[:1], "core.status.terminal")["nodeid"] == "a"
    doc = {"adapter": {"capabilities": {"clock": "wall"}}, "findings": [], "tests": tests[:1],
           "clauses": [{"id": "core.status.terminal", "level": "MUST", "outcome": "fail"}]}
    (line,) = _findings(doc)
    assert "(found as `core.transition.corruption`)" in line and "replay: `ledgercheck replay a` (inexact:" in line
