"""What the input fuzzers share: the budget, running the real CLI under a time bound, the outcome
every input must have, and valid seed documents of each kind to mutate.

An input either loads (and the command does its job) or is refused: exit 2 with one line on
stderr naming the file (contracts: exit 1 with one ``file:line:col: message`` line per problem,
the ``spec validate`` convention).  Never a traceback, never more CPU time than the bound, never
a file written outside the output folder.

The bound counts the CPU time this process spends on the command (``ITIMER_PROF``), not the time
on the clock: a busy machine stretches wall time by whatever its other processes take, but the
work a reader does for one input costs about the same CPU time on an idle machine and a loaded
one, so an input is judged the same way on both.  A wall-clock limit of minutes stays behind it
only as a safety net for a command that waits without working (a hang), where no CPU time passes.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from ledgercheck.chaos.crash.replays import window_doc
from ledgercheck.chaos.safety.workload import default_workload
from ledgercheck.conformance.harness import Harness
from ledgercheck.conformance.trace import dump_trace
from ledgercheck.reports.integrity import file_bytes, with_integrity
from ledgercheck.reports.results import build_results
from ledgercheck.spec import Spec, default_spec
from ledgercheck.transport.client import connect

from ledgercheck.cli import main

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
THOROUGH = os.environ.get("LEDGERCHECK_FUZZ", "") == "thorough"
# examples per fuzz test: small in the default run, large behind LEDGERCHECK_FUZZ=thorough
EXAMPLES = int(os.environ.get("LEDGERCHECK_FUZZ_EXAMPLES", "2000" if THOROUGH else "30"))
# the CPU-time bound of one command on one input, in CPU seconds of this process; every bounded
# reader answers in well under a tenth of that (the contract bombs' refusal included),
# so a command that has worked this long is a reader without its bound.  The margin (10x and more)
# covers what a loaded machine adds to the CPU time of the same work (caches shared with other
# processes: well under 2x), never the waiting, which the bound does not count.
TIME_BOUND = float(os.environ.get("LEDGERCHECK_FUZZ_TIME_BOUND", "10"))
# the wall-clock safety net: a command still running after this long waits for something that will
# not come (no CPU time passes while it waits, so the CPU bound alone would never ring)
HANG_LIMIT = float(os.environ.get("LEDGERCHECK_FUZZ_HANG_LIMIT", "600"))

FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not THOROUGH, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
                phases=[Phase.explicit, Phase.generate, Phase.shrink] if THOROUGH else [Phase.explicit, Phase.generate])

LOCATED = re.compile(r".+?:\d+:\d+: \S.*")


class OverTime(Exception):
    """A command used more CPU time than the bound (or hung past the wall-clock safety net)."""


@contextlib.contextmanager
def time_bound(seconds: float, hang_limit: float | None = None) -> Iterator[None]:
    """Raise OverTime in the code running once it has used ``seconds`` of CPU time (this process's
    user and system time, ``ITIMER_PROF``), and again every 0.2 CPU seconds until the block is
    left; and once ``hang_limit`` seconds (default HANG_LIMIT) have passed on the clock, the
    safety net for a block that waits without working.

    An exception raised in a finalizer or a callback (the garbage collector, the import system's
    weak references) is dropped there, so one alarm alone could be lost: hence the repeats.  The
    dropped ones are the bound doing its work, not a fault of the code under test: they are kept
    from the unraisable-exception hook (pytest turns them into failures of their own, and the
    next alarm could land inside that hook), and no alarm is raised while the hook runs."""
    hang = HANG_LIMIT if hang_limit is None else hang_limit
    state = {"done": False, "hook": False}
    previous = sys.unraisablehook

    def ring(signum: int, frame: Any) -> None:
        if not state["done"] and not state["hook"]:
            if signum == signal.SIGPROF:
                raise OverTime(f"used more than {seconds:g}s of CPU time")
            raise OverTime(f"still running after {hang:g}s on the clock (a hang: it waits without working)")

    def dropped(unraisable: Any) -> None:
        state["hook"] = True
        try:
            if not isinstance(unraisable.exc_value, OverTime):
                previous(unraisable)
        finally:
            state["hook"] = False

    old_prof = signal.signal(signal.SIGPROF, ring)
    old_alrm = signal.signal(signal.SIGALRM, ring)
    sys.unraisablehook = dropped
    signal.setitimer(signal.ITIMER_PROF, seconds, 0.2)
    signal.setitimer(signal.ITIMER_REAL, hang, 0.2)
    try:
        yield
    finally:
        state["done"] = True
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGPROF, old_prof)
        signal.signal(signal.SIGALRM, old_alrm)
        sys.unraisablehook = previous


@dataclass
class Ran:
    rc: int
    out: str
    err: str
    seconds: float  # CPU time


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def cli(argv: list[str], cwd: Path, bound: float = TIME_BOUND) -> Ran:
    """``ledgercheck ARGV`` in this process, from ``cwd``, within ``bound`` seconds of CPU time
    (time_bound); ``seconds`` of the result is the CPU time it used.

    Exceptions (a traceback) and OverTime propagate: they are what the fuzzers look for.
    """
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    start = time.process_time()
    try:
        with time_bound(bound), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    except OverTime as exc:
        # raised again from here: the alarm's own traceback may hold frames pytest cannot show
        raise OverTime(f"ledgercheck {' '.join(argv)}: {exc}") from None
    finally:
        os.chdir(here)
    if os.environ.get("LEDGERCHECK_FUZZ_LOG"):  # how far inputs get: one line per run (command, exit status)
        with open(os.environ["LEDGERCHECK_FUZZ_LOG"], "a", encoding="utf-8") as log:
            why = " ".join(err.getvalue().split(": ")[2:3]).split("\n")[0][:50] if rc == 2 else ""
            log.write(f"{os.environ.get('PYTEST_CURRENT_TEST', '?').split(' ')[0]} {rc} {why}\n")
    return Ran(rc, out.getvalue(), err.getvalue(), time.process_time() - start)


def assert_refused_or_done(ran: Ran, prefix: str, ok: tuple[int, ...] = (0, 1)) -> None:
    """Exit 2 with exactly one stderr line starting with ``prefix``, or a normal exit (``ok``)."""
    assert "Traceback" not in ran.err, ran.err
    if ran.rc == 2:
        lines = ran.err.splitlines()
        assert len(lines) == 1, f"a refusal must be one line, got {len(lines)}:\n{ran.err[:2000]}"
        assert lines[0].startswith(prefix), lines[0]
        return
    assert ran.rc in ok, f"exit {ran.rc}: {ran.err[:2000]}"


def assert_contract_outcome(ran: Ran) -> None:
    """``spec validate``: exit 0, or exit 1 with one ``file:line:col: message`` line per problem."""
    assert "Traceback" not in ran.err, ran.err
    assert ran.rc in (0, 1), f"exit {ran.rc}: {ran.err[:2000]}"
    if ran.rc == 1:
        lines = ran.err.splitlines()
        assert lines, "refused without saying why"
        bad = [ln for ln in lines if not LOCATED.fullmatch(ln)]
        assert not bad, f"problem lines without file:line:col: {bad[:3]}"
    else:
        assert ran.err == "", ran.err


def assert_nothing_written(before: set[str], root: Path, allowed: str | None = None) -> None:
    new = {p for p in files_under(root) - before if not (allowed and (p == allowed or p.startswith(allowed + os.sep)))}
    assert not new, f"files written outside the output folder: {sorted(new)[:5]}"


# ---- valid seed documents ---------------------------------------------------------------------------


def spec() -> Spec:
    return default_spec()


def trace_doc(tmp: Path) -> dict[str, Any]:
    """A real trace: a short program against the reference, recorded by the harness."""
    s = spec()
    client = connect("reference", s)
    h = Harness(client, s, ["core", "lease", "retry", "waiting", "idempotency"], seed=7)
    try:
        h.fresh()
        wid = h.create()
        tok = h.claim(wid)
        h.do("renew", work_id=wid, token=tok)
        retryable = next(c for c, r in s.error_classes.items() if r)
        h.do("fail", work_id=wid, token=tok, error_class=retryable)
        h.advance_to(h.item(wid)["next_retry_at"])
        h.do("promote_due")
        tok2 = h.claim(wid)
        h.do("get", work_id=wid)
        h.do("close_out", work_id=wid, token=tok2, status=next(iter(s.terminal_statuses)))
        path = dump_trace(h, tmp / "seed-trace.json", [], "reference")
    finally:
        client.close()
    return json.loads(path.read_text(encoding="utf-8"))


def window_replay_doc() -> dict[str, Any]:
    s = spec()
    return window_doc(spec=s, address="reference", seed=3, workload=default_workload(s), point="after_claim",
                      occurrence=1, mode="kill", worker=None, recorded={"verdict": "fail", "clauses": [], "message": "x"})


def storm_replay_doc() -> dict[str, Any]:
    doc = window_replay_doc()
    for k in ("point", "occurrence", "mode"):
        del doc[k]
    doc.update(kind="storm", workload=None, schedule=[{"n": 1, "at": 0.1, "slot": 0, "pid": 4242, "pids": [4242]}],
               storm={"seed": 3, "workers": 3, "kills": 30, "items": 200, "max_steps": 3, "wait_ratio": 0.15,
                      "gap_min": 0.002, "gap_max": 0.03, "latency": 0.003, "time_limit": 600.0})
    return doc


def results_facts() -> dict[str, Any]:
    """What the plugin hands :func:`build_results`, taken from a real results document (the
    reference's certification shipped in docs/libraries): one test in twelve and one crash window
    in twenty (a small document renders fast), and a failing test with a counterexample (so every
    part of a report is drawn)."""
    real = json.loads((ROOT / "docs" / "libraries" / "reference" / "results.json").read_text(encoding="utf-8"))
    tests = copy.deepcopy(real["tests"][::12])
    tests[1].update(outcome="failed", message="lease.fencing: a stale token was accepted",
                    counterexample="state = LedgerMachine()\nstate.teardown()",
                    replay="ledgercheck replay .ledgercheck/traces/t.json --adapter reference")
    return {"run": real["run"], "adapter": real["adapter"], "environment": real["environment"], "tests": tests,
            "crash_windows": real["crash_windows"][::20]}


def results_doc(facts: dict[str, Any] | None = None) -> dict[str, Any]:
    """A results document built the way the plugin builds one (so it is consistent)."""
    return build_results(spec=spec(), **(facts or results_facts()))


def sealed_bytes(doc: dict[str, Any]) -> bytes:
    """A results document as ledgercheck writes it, integrity hash recomputed, so a mutated
    document gets past the hash check to the schema, the rules and the renderers."""
    try:
        return file_bytes(with_integrity(doc))
    except (TypeError, ValueError):
        return json.dumps(doc, default=str).encode()


# ---- structure-aware mutation of JSON documents -------------------------------------------------------


def paths(value: Any, prefix: tuple[Any, ...] = (), limit: int = 4000) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    stack = [(value, prefix)]
    while stack and len(out) < limit:
        v, p = stack.pop()
        if p:
            out.append(p)
        if isinstance(v, dict):
            stack += [(x, p + (k,)) for k, x in v.items()]
        elif isinstance(v, list):
            stack += [(x, p + (i,)) for i, x in enumerate(v)]
    return sorted(out, key=repr)


def scalars(value: Any, limit: int = 400) -> list[Any]:
    seen: dict[str, Any] = {}
    stack = [value]
    while stack and len(seen) < limit:
        v = stack.pop()
        if isinstance(v, dict):
            stack += list(v.values())
            for k in v:
                seen.setdefault(repr(k), k)
        elif isinstance(v, list):
            stack += v
        else:
            seen.setdefault(repr(v), v)
    return [seen[k] for k in sorted(seen)]


DEEP = "__nested_5000_levels__"  # a marker the fuzzers' dumps() replaces by DEEP_JSON
DEEP_JSON = b"[" * 5000 + b"]" * 5000
HOSTILE_VALUES: list[Any] = [DEEP,
    None, True, False, 0, -1, 1, 2**31, 2**63, -(2**63), 10**30, 1e308, -1e308, 0.5, "", " ", "x" * 300,
    "hello", "reset", "exec:sh -c 'touch PWNED'", "python:os:system", "../../etc/passwd", "\u0000", "\u202e",
    "$item", [], {}, [1, 2], {"$item": -1}, {"$item": "0"}, {"$item": 10**9}, {"$token": [0]}, {"$token": [0, -1]},
    {"$token": "x"}, {"$key": [0, 1, 2]}, {"$key": "k"}, {"$t": "soon"}, {"$t": 1e300}, {"$t": 1, "$at": "x"},
    {"$t": -5}, [[[[[[[[[[]]]]]]]]]], {"a": {"b": {"c": {"d": {}}}}}, "0" * 64, "Z" * 64,
]


def values(doc_values: list[Any]) -> st.SearchStrategy[Any]:
    """Half the time a value the document itself holds, else a hostile one; one time in twenty
    the thousands of nested arrays no reader may follow."""
    return st.integers(0, 19).flatmap(
        lambda i: st.just(DEEP) if i == 0 else st.sampled_from(doc_values if i <= 10 else HOSTILE_VALUES))


def apply(doc: Any, path: tuple[Any, ...], action: str, new: Any) -> Any:
    """``doc`` with one change at ``path``: set, delete, rename a key, add a sibling key, duplicate
    a list item, or wrap the value in a list; returns the (possibly new) document."""
    if not path:
        return copy.deepcopy(new)
    *parents, last = path
    holder = doc
    for p in parents:
        holder = holder[p]
    if action == "delete":
        del holder[last]
    elif action == "rename" and isinstance(holder, dict) and isinstance(new, str):
        holder[new] = holder.pop(last)
    elif action == "add" and isinstance(holder, dict) and isinstance(new, str):
        holder[new] = copy.deepcopy(holder[last])  # a sibling under another name
    elif action == "duplicate" and isinstance(holder, list):
        holder.insert(last, copy.deepcopy(holder[last]))
    elif action == "wrap":
        holder[last] = [holder[last]]
    else:
        holder[last] = copy.deepcopy(new)
    return doc


def mutate(doc: Any, mutations: list[tuple[tuple[Any, ...], str, Any]]) -> Any:
    doc = copy.deepcopy(doc)
    for path, action, new in mutations:
        try:
            doc = apply(doc, path, action, new)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change removed or retyped the path
    return doc


def byte_mutate(data: bytes, edits: list[tuple[int, str, bytes]]) -> bytes:
    """Raw edits of a file's bytes: overwrite, insert, delete a run, or cut the file there."""
    buf = bytearray(data)
    for at, what, chunk in edits:
        i = at % (len(buf) + 1)
        if what == "insert":
            buf[i:i] = chunk
        elif what == "overwrite":
            buf[i:i + len(chunk)] = chunk
        elif what == "delete":
            del buf[i:i + max(1, len(chunk))]
        else:
            del buf[i:]
    return bytes(buf)


def write(path: Path, data: bytes | str) -> Path:
    if isinstance(data, str):
        data = data.encode("utf-8", errors="surrogatepass")
    path.write_bytes(data)
    return path
