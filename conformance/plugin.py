"""The ledgercheck pytest plugin: the conformance suite against any adapter.

Loaded by conformance/entry.py (the ``pytest11`` entry point, which declares the ``--ledger-*``
options) only in a run that gives one of those options; ``--ledger-adapter ADDRESS`` says what to
test, and another ``--ledger-*`` option without it is a usage error.  Tests are
generated from the contract, not collected from files: one item per clause case
(``ledgercheck::<profile>::<clause>[<param>]``) plus the stateful model-based tests
(``ledgercheck::stateful::<name>``).  Each item carries its clause id as a marker, in its node
id and in its report's user properties, so CI output names the broken clause.

Capability handling: clauses of profiles the adapter does not claim are skipped as "not
claimed" (never passed, never failed); a clause test that meets an operation the
implementation does not offer (it answered ``unsupported``) is skipped as "not offered", naming
the operation (never passed, never failed; its profile is not certified); a clause the adapter
declares as a known bug becomes a strict expected failure; an adapter failure (timeout, crash, garbage) is an error; a clause
with no test is an error.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.reports.text import shown_line, terminal
from ledgercheck.spec import Spec, SpecError, load_spec
from ledgercheck.transport import costs
from ledgercheck.transport.client import AdapterError, Client, connect
from ledgercheck.transport.clock import plain, scaled_document, scaled_spec

from .clauses import ClauseCase, NoCheck, all_cases
from .harness import (
    AdapterFailure,
    ClauseFailure,
    DriveBlocked,
    Harness,
    NotApplicable,
    NotOffered,
    find_exception,
    wall_tolerance,
)
from .items import EXAMPLE_STORE, INCOMPLETE, REPORTS, SESSION, STOP, LedgerItem, _opt, blamed, state


class LedgerSession:
    """Per-process state: the contract, the adapter connection and the harness."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.address: str = _opt(config, "ledger_adapter")
        spec_files = _opt(config, "ledger_spec")
        try:
            base = load_spec(spec_files or None)
        except SpecError as exc:
            raise pytest.UsageError(f"ledgercheck: the contract does not validate:\n{exc}") from None
        self.spec_files = spec_files
        self.timeout_scale = float(_opt(config, "ledger_timeout_scale"))
        self.wall_scale = float(_opt(config, "ledger_wall_scale"))
        self.base_spec = base
        self.client: Client | None = None
        try:
            self.client = connect(self.address, base, timeout=_opt(config, "ledger_timeout") * self.timeout_scale,
                                  startup_timeout=30.0 * self.timeout_scale)
        except AdapterError as exc:
            raise pytest.UsageError(f"ledgercheck: {exc}") from None
        self.wall = self.client.clock == "wall"
        self.spec: Spec = scaled_spec(base, self.wall_scale) if self.wall else base
        self.contract_doc = scaled_document(plain(base.document), self.wall_scale) if self.wall else plain(base.document)
        self.claimed = [p for p in self.client.profiles if p in self.spec.profiles]
        req = _opt(config, "ledger_profile")
        if req:
            names, unknown = self.spec.expand_profiles(p.strip() for p in req.split(",") if p.strip())
            if unknown:
                sets = "".join(f"; profile set {n} names {', '.join(s.profiles)}" for n, s in self.spec.profile_sets.items())
                raise pytest.UsageError(f"ledgercheck: unknown profile(s) {terminal(', '.join(unknown))[:200]}; the contract has "
                                        f"{', '.join(self.spec.profiles)}{sets}")
            self.requested = list(self.spec.profile_closure(names))
        else:
            self.requested = list(self.spec.profile_closure(self.claimed)) if self.claimed else []
        self.artifacts = Path(_opt(config, "ledger_artifacts"))
        self._harness: Harness | None = None
        self._crash_pool: Any = None
        self.started = time.time()

    def crash_pool(self, lanes: int) -> Any:
        """The crash-window workers of this session, shared by every crash point: a worker left
        clean by one point's last window serves the next point's first, so a point neither starts
        a first adapter process of its own nor leaves its spares unused (a new pool after one was
        stopped or failed to start a worker)."""
        from ledgercheck.chaos.crash.pool import WorkerPool

        pool = self._crash_pool
        if pool is None or pool.failed is not None:
            if pool is not None:
                pool.close()
            pool = self._crash_pool = WorkerPool(self.address, self.base_spec, spare=lanes + 1)
        return pool

    @property
    def wall_tolerance(self) -> float:
        """How far apart the adapter's and the harness's timestamps may be (wall clocks): the
        default, widened to twice the resolution the adapter declares for its timestamps."""
        return wall_tolerance(self.client.handshake if self.client else {}, self.timeout_scale)

    @property
    def harness(self) -> Harness:
        if self._harness is None:
            assert self.client is not None
            self._harness = Harness(self.client, self.spec, self.claimed, contract_doc=self.contract_doc,
                                    timeout_scale=self.timeout_scale, wall_scale=self.wall_scale,
                                    wall_tolerance=self.wall_tolerance, seed=_opt(self.config, "ledger_seed") or 0)
            # a reopen test starts two adapter processes (its directory's, then the reopened
            # ledger's): both are started ahead, on the harness's first need of one, while the
            # harness works on (closed at the session's end)
            self._harness.start_ahead = START_AHEAD
        return self._harness

    @property
    def slug(self) -> str:
        name = self.client.handshake.get("name", "adapter") if self.client else "adapter"
        digest = hashlib.sha256(self.address.encode()).hexdigest()[:8]
        return re.sub(r"[^A-Za-z0-9_.-]+", "-", name)[:40] + "-" + digest

    def replay_command(self, trace_file: Path) -> str:
        cmd = ["ledgercheck", "replay", str(trace_file), "--adapter", self.address]
        for f in self.spec_files:
            cmd += ["--spec", f]
        return " ".join(shlex.quote(c) for c in cmd)

    def close(self) -> None:
        try:
            if self._harness is not None:
                self._harness.close_ahead()
            if self._crash_pool is not None:
                self._crash_pool.close()
                self._crash_pool = None
        finally:
            if self.client is not None:
                self.client.close()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ledger_clause(id, profile, kind): a ledgercheck conformance test of a contract clause")
    if not _opt(config, "ledger_adapter"):
        from .entry import given_options

        given = given_options(config)
        if given:  # nothing would be tested: never a silent pass
            raise pytest.UsageError(f"ledgercheck: {', '.join(given)} given without --ledger-adapter ADDRESS (the adapter to test)")
        return
    from .options import option_problem

    problem = option_problem(timeout=_opt(config, "ledger_timeout"), timeout_scale=_opt(config, "ledger_timeout_scale"),
                             wall_scale=_opt(config, "ledger_wall_scale"), seed=_opt(config, "ledger_seed"),
                             shard=_opt(config, "ledger_shard"), breaker=_opt(config, "ledger_breaker"), prefix="--ledger-")
    if problem:
        raise pytest.UsageError(f"ledgercheck: {problem}")
    stop = config.stash[STOP] = RunStop(breaker_after=int(_opt(config, "ledger_breaker")))
    stop.install(config)
    config.stash[EXAMPLE_STORE] = _example_store(config)
    config.stash[SESSION] = LedgerSession(config)
    config.stash[REPORTS] = []


def _example_store(config: pytest.Config) -> Any:
    """--ledger-example-db, parsed and reachable (conformance/example_db.py), or None."""
    from .example_db import StoreError, check_store, parse_store

    value = _opt(config, "ledger_example_db")
    if not value:
        return None
    try:
        store = parse_store(value)
        check_store(store)
    except StoreError as exc:
        raise pytest.UsageError(f"ledgercheck: {exc}") from None
    return store


def pytest_unconfigure(config: pytest.Config) -> None:
    stop: RunStop | None = state(config, STOP, None)
    try:
        sess = state(config, SESSION, None)
        if sess is not None:
            sess.close()
    finally:
        if stop is not None:
            stop.uninstall()


# ------------------------------------------------------------------------- stopping
BREAKER_CODES = ("timeout", "adapter_crashed")
START_AHEAD = 2  # exec: adapter processes the session's harness keeps started ahead (Harness.start_ahead)


@dataclass
class RunStop:
    """Why and where a run stopped early: an interrupt (SIGINT, SIGTERM) or the breaker.

    The first SIGINT or SIGTERM is recorded, passed on to this run's pytest-xdist workers and
    raised as KeyboardInterrupt; later ones are ignored, so the clean-up
    that follows (adapters closed, workers killed, the report written) is not cut short.  Even
    if something swallowed the KeyboardInterrupt, no further test starts once it was recorded.
    """

    breaker_after: int = 3
    signal: str | None = None
    where: list[str] = field(default_factory=list)
    breaker: str | None = None
    in_a_row: int = 0
    last_failures: list[str] = field(default_factory=list)
    running: dict[str, None] = field(default_factory=dict)
    planned: list[str] | None = None
    chaos_progress: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    session: pytest.Session | None = None
    _previous: dict[int, Any] = field(default_factory=dict)
    _config: pytest.Config | None = None

    @property
    def stopped(self) -> str | None:
        if self.signal:
            return f"interrupted by {self.signal}"
        return self.breaker

    def install(self, config: pytest.Config) -> None:
        self._config = config
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._on_signal)
            except (ValueError, OSError):  # not the main thread of the interpreter
                pass

    def uninstall(self) -> None:
        for sig, old in self._previous.items():
            try:
                signal.signal(sig, old if old is not None else signal.SIG_DFL)
            except (ValueError, OSError, TypeError):
                pass
        self._previous = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.signal is not None:
            return  # once: the run is already stopping
        self.signal = signal.Signals(signum).name
        self.where = list(self.running)
        if self.session is not None:
            self.session.shouldstop = f"ledgercheck: {self.stopped}"
        self._forward(signum)
        exc = KeyboardInterrupt(f"ledgercheck: {self.stopped}")
        exc.__ledger_config__ = self._config  # type: ignore[attr-defined]
        raise exc

    def _forward(self, signum: int) -> None:
        """Pass the signal to this run's pytest-xdist workers (children in our process group),
        whether or not the terminal sent it to them too: each stops and cleans up itself."""
        config = self._config
        if config is None or hasattr(config, "workerinput") or not config.pluginmanager.has_plugin("dsession"):
            return
        import psutil

        try:
            group = os.getpgid(0)
            for child in psutil.Process().children():
                try:
                    if os.getpgid(child.pid) == group:
                        child.send_signal(signum)
                except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
                    pass
        except (psutil.Error, OSError):
            pass

    def note(self, item: pytest.Item, rep: pytest.TestReport, call: pytest.CallInfo[None]) -> None:
        """Count tests that ended in an adapter timeout or crash; trip the breaker at ``breaker_after`` in a row."""
        if rep.when != "call" and not (rep.when == "setup" and rep.failed):
            return
        exc = call.excinfo.value if call.excinfo is not None else None
        if isinstance(exc, AdapterFailure) and exc.outcome.code in BREAKER_CODES:
            self.in_a_row += 1
            self.last_failures = (self.last_failures + [f"{item.name}: {exc.outcome.code}: {exc}"])[-3:]
        elif rep.when == "call" and not rep.skipped:
            self.in_a_row = 0
            self.last_failures = []
        if self.breaker is None and self.breaker_after and self.in_a_row >= self.breaker_after:
            sess = state(item.config, SESSION, None)
            address = sess.address if sess is not None else "the adapter"
            last = " | ".join(_short(m, 160) for m in self.last_failures)
            self.breaker = (f"breaker: adapter {address} timed out or crashed in {self.in_a_row} tests in a row; "
                            f"last: {last}")
            rep.user_properties.append(("ledger_breaker", self.breaker))
            item.session.shouldstop = f"ledgercheck: {self.breaker}"

    def saw(self, rep: pytest.TestReport, props: dict[str, Any]) -> None:
        """The controller learns of a breaker trip on a worker from the tripping test's report."""
        msg = props.get("ledger_breaker")
        if msg and self.breaker is None:
            self.breaker = str(msg)
            if self.session is not None:
                self.session.shouldstop = f"ledgercheck: {self.breaker}"


def _short(text: str, limit: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """No test starts once the run is stopping (even if an interrupt's exception was swallowed)."""
    stop: RunStop | None = state(item.config, STOP, None)
    if stop is not None and isinstance(item, LedgerItem) and stop.stopped:
        item.session.shouldstop = f"ledgercheck: {stop.stopped}"
        return True
    if isinstance(item, LedgerItem):  # what the test costs is counted from here (_note_cost)
        h = getattr(item.sess, "_harness", None)
        item._ledger_cost0 = (costs.snapshot(), h.directories if h is not None else 0)  # type: ignore[attr-defined]
    return None


def _note_cost(item: LedgerItem) -> None:
    """The test's ``cost`` (docs/results.md): its phase, the adapter processes it started and the
    round trips it made (transport/costs.py), recorded with the report the results keep (its
    call's, or its setup's when that skipped or failed)."""
    before = getattr(item, "_ledger_cost0", None)
    if before is None:
        return
    snap, dirs = before
    phase = item.phase
    h = getattr(item.sess, "_harness", None)
    if phase == "clause" and h is not None and h.directories > dirs:
        phase = "reopen"
    item.user_properties.append(("ledger_cost", {"phase": phase, **costs.since(snap)}))


def pytest_collection_finish(session: pytest.Session) -> None:
    """The plan: every ledger test this process collected and did not deselect."""
    stop: RunStop | None = state(session.config, STOP, None)
    if stop is not None:
        stop.planned = [it.nodeid for it in session.items if isinstance(it, LedgerItem)]


@pytest.hookimpl(tryfirst=True)
def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    """An interrupt the run asked for needs no traceback: keep only its last frame, so pytest does
    not spend a second formatting a deep stack (hypothesis, the harness) before the run can stop."""
    config = getattr(excinfo.value, "__ledger_config__", None)
    stop: RunStop | None = state(config, STOP, None)
    if stop is not None and stop.signal and len(excinfo.traceback) > 1 and not config.option.fulltrace:
        excinfo.traceback = excinfo.traceback[-1:]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """Under pytest-xdist the controller collects nothing: the plan is a worker's collection."""
    stop: RunStop | None = state(node.config, STOP, None)
    if stop is not None and stop.planned is None:
        stop.planned = [i for i in ids if i.startswith("ledgercheck::")]


class LedgerRoot(pytest.Collector):
    def collect(self) -> list[pytest.Item]:  # pragma: no cover - items are created directly
        return []


def _not_claimed(sess: LedgerSession, profile: str) -> str | None:
    if profile not in sess.claimed:
        return f"not claimed: the adapter does not claim profile {profile!r}"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    sess: LedgerSession | None = state(config, SESSION, None)
    if sess is None:
        return
    if _opt(config, "ledger_only"):
        items.clear()
    root = LedgerRoot.from_parent(session, name="ledgercheck", nodeid="ledgercheck")
    new: list[pytest.Item] = []
    profiles_of = {c.id: c.profile for c in sess.spec.clauses}
    chaos = not _opt(config, "ledger_no_chaos")
    if not _opt(config, "ledger_stateful_only"):
        for cs in all_cases(sess.spec, chaos=chaos):
            prof = profiles_of[cs.clause]
            if prof not in sess.requested:
                continue
            new.append(ClauseItem.from_parent(root, name=f"{prof}::{cs.name}", case=cs, profile=prof))
    if not _opt(config, "ledger_clauses_only"):
        from .stateful import FAMILIES

        for name in FAMILIES:
            new.append(StatefulItem.from_parent(root, name=f"stateful::{name}", machine=name))
    explore_ok = "recovery" in sess.claimed and not sess.wall
    if chaos and not _opt(config, "ledger_stateful_only") and not _opt(config, "ledger_clauses_only") and "recovery" in sess.requested:
        points = list(sess.spec.crash_points) + [p for p in (sess.client.crash_points if sess.client else []) if p not in sess.spec.crash_points]
        for point in points:
            new.append(ChaosItem.from_parent(root, name=f"recovery::chaos[{point}]", point=point))
    if chaos and not explore_ok and not _opt(config, "ledger_stateful_only") and not _opt(config, "ledger_clauses_only") \
            and ({"core", "lease"} & set(sess.requested)):
        from ledgercheck.chaos.crash.leases import SCENARIOS

        for scenario in SCENARIOS:
            new.append(LeaseCampaignItem.from_parent(root, name=f"lease::crash[{scenario}]", scenario=scenario))
    if chaos and not _opt(config, "ledger_stateful_only") and not _opt(config, "ledger_clauses_only"):
        from .safety_item import SafetyItem  # the safety campaign, whatever the adapter declares

        new.append(SafetyItem.from_parent(root, name="safety::campaign"))
    shard = _opt(config, "ledger_shard")
    if shard:
        from .options import shard_of

        k, n = shard_of(shard) or (1, 1)  # checked at configure time
        new = [it for it in new if int(hashlib.sha256(it.nodeid.encode()).hexdigest(), 16) % n == k - 1]
    known = sess.client.known_bugs if sess.client else {}
    for it in new:
        clause = getattr(it, "clause", None)
        if clause in known:
            it.add_marker(pytest.mark.xfail(reason=f"known bug declared by the adapter: {known[clause]}", strict=True))
    if _opt(config, "ledger_order") != "generated":
        from .order import order_items  # fail fast: one case of every clause first (docs/architecture.md)

        new = order_items(new)
    items.extend(new)


# event-trail integrity: seq numbering from first_seq without gaps, earlier events unchanged,
# the snapshot equal to the fold of the implementation's own events
SIDE_FINDING_CLAUSES = frozenset({"trail.append_only", "eventlog.fold"})


class ClauseItem(LedgerItem):
    def __init__(self, *, case: ClauseCase, profile: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.case = case
        self.clause = case.clause
        self.profile = profile
        self.add_marker(pytest.mark.ledger_clause(case.clause, profile, "clause"))
        self.user_properties += [("ledger_clause", case.clause), ("ledger_kind", "clause"), ("ledger_profile", profile)]
        reason = _not_claimed(self.sess, profile)
        if reason:
            self.user_properties.append(("ledger_not_claimed", True))
            self.add_marker(pytest.mark.skip(reason=reason))

    def runtest(self) -> None:
        h = self.sess.harness
        try:
            h.start_case(self.case.clause)
            self.case.fn(h)
        except NotApplicable as exc:
            h.tolerated = []  # a scenario that does not apply vouches for nothing
            if h.unoffered_here:  # it met an operation not offered before it found it did not apply
                self._not_offered(h.unoffered_here, str(exc))
            self.user_properties.append(("ledger_not_claimed", True))
            pytest.skip(f"not claimed: {exc}")
        except NotOffered as exc:
            # the implementation answered unsupported for an operation this check needs: the clause
            # is not offered (never passed, never failed); its profile is not certified for it
            h.tolerated = []
            self._not_offered([*h.unoffered_here, exc.what], exc.message)
        except DriveBlocked as exc:
            if not h.last_claim_fallback:
                self.user_properties.append(("ledger_error", f"harness could not set the scenario up: {exc}"))
                raise
            self.user_properties.append(("ledger_not_claimed", True))
            pytest.skip(f"not claimed: {exc}")
        except ClauseFailure as exc:
            self._fail_report(exc)
            raise
        except (AdapterFailure, NoCheck) as exc:
            self.user_properties.append(("ledger_error", str(exc)))
            raise
        except Exception as exc:
            self.user_properties.append(("ledger_error", f"harness failure: {type(exc).__name__}: {exc}"))
            raise
        finally:
            self._note_side_findings(h)
            self.user_properties.append(("ledger_coverage", h.take_exercised()))  # the run's coverage
        if h.unoffered_here:  # refusals answered unsupported: judged as far as they could be, no further
            self._not_offered(h.unoffered_here, "")

    def _not_offered(self, ops: list[str], message: str) -> None:
        ops = list(dict.fromkeys(ops))
        self.user_properties.append(("ledger_not_offered", ops))
        pytest.skip(terminal(f"not offered: {', '.join(ops)}" + (f" ({_short(message, 200)})" if message else "")))

    def _note_side_findings(self, h: Harness) -> None:
        """Violations of the event trail's integrity that this test saw and set aside (so it
        could judge its own clause) are findings all the same: each becomes a failure of its own
        clause in the results and fails the run, unless the adapter declared it as a known bug.
        Only clauses judged the same way in any scenario count (SIDE_FINDING_CLAUSES); a
        snapshot field that differs is blamed by the field's owner, which in another clause's
        scenario may not be the clause the contract states it in, so it stays with its own tests
        and the stateful machines.  Clauses of profiles not claimed or not requested never fail."""
        found, h.tolerated = h.tolerated, []
        sess = self.sess
        known = sess.client.known_bugs if sess.client else {}
        by: dict[str, list[str]] = {}
        profile_of = {c.id: c.profile for c in sess.spec.clauses}
        for v in found:
            prof = profile_of.get(v.clause)
            if v.clause in SIDE_FINDING_CLAUSES and prof in sess.claimed and prof in sess.requested:
                by.setdefault(v.clause, []).append(str(v))
        if by:
            self.user_properties.append(("ledger_side_findings", [
                {"clause": c, "messages": msgs[:5], "known_bug": known.get(c)} for c, msgs in sorted(by.items())]))


class StatefulItem(LedgerItem):
    kind = "stateful"
    phase = "stateful"

    def _note_advisories(self, h: Harness) -> None:
        """SHOULD-level violations the exploration went on past: each a warning of its clause."""
        sess = self.sess
        known = sess.client.known_bugs if sess.client else {}
        by: dict[str, list[str]] = {}
        for v in h.advisories:
            by.setdefault(v.clause, []).append(str(v))
        h.advisories = []
        if by:
            self.user_properties.append(("ledger_side_findings", [
                {"clause": c, "messages": msgs[:5], "known_bug": known.get(c)} for c, msgs in sorted(by.items())]))

    def __init__(self, *, machine: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.machine = machine
        self.clause = None
        self.profile = None
        self.add_marker(pytest.mark.ledger_clause(None, None, "stateful"))
        self.user_properties += [("ledger_kind", "stateful")]
        from .stateful import machine_profiles

        self.profiles = machine_profiles([p for p in self.sess.claimed if p in self.sess.requested], machine)
        if not self.profiles:
            self.user_properties.append(("ledger_not_claimed", True))
            self.add_marker(pytest.mark.skip(reason=f"not claimed: the adapter claims no profile the {machine} machine checks"))

    def runtest(self) -> None:
        import random

        from .example_db import example_database
        from .stateful import hypothesis_settings, make_machine, run_machine

        sess = self.sess
        base = sess.harness
        h = Harness(base.client, sess.spec, self.profiles, contract_doc=sess.contract_doc, timeout_scale=sess.timeout_scale,
                    wall_scale=sess.wall_scale, wall_tolerance=sess.wall_tolerance)
        # an operation the implementation does not offer is noted and not asked again; the machine
        # explores what it does offer (each clause's own tests say what is not offered)
        h.note_unoffered = True
        machine = make_machine(h, only=self.machine)
        machine.__name__ = machine.__qualname__ = f"Ledger_{self.machine}"
        db = example_database(state(self.config, EXAMPLE_STORE, None), sess.slug)
        opts = hypothesis_settings(self.config.getoption("ledger_hypothesis_profile"), database=db)
        seed = self.config.getoption("ledger_seed")
        if seed is None:
            seed = random.SystemRandom().randrange(2**32)
        self.user_properties.append(("ledger_seed", seed))
        h.seed = seed  # every reset of the machine sends reset_seed(seed) (docs/protocol.md)
        try:
            try:
                try:
                    run_machine(machine, opts, seed)
                except ClauseFailure:
                    raise
                except AdapterFailure:
                    raise
                except BaseException as exc:  # hypothesis wraps failures (exception groups, Flaky*)
                    found = find_exception(exc, ClauseFailure) or find_exception(exc, AdapterFailure)
                    if found is None:
                        raise
                    if found is not exc:
                        found.add_note(f"(hypothesis reported {type(exc).__name__}: the implementation did not behave the "
                                       f"same way when the example was replayed)")
                    raise found from None
            except ClauseFailure as exc:
                self.user_properties.append(("ledger_clause", exc.violations[0].clause))  # the first found: the cause
                self.user_properties.append(("ledger_counterexample", "\n".join(getattr(exc, "__notes__", []) or []) or str(exc)))
                sess._harness, keep = h, sess._harness
                try:
                    self._fail_report(exc)
                finally:
                    sess._harness = keep
                raise
            except AdapterFailure as exc:
                self.user_properties.append(("ledger_error", str(exc)))
                raise
        finally:
            self._note_advisories(h)
            self.user_properties.append(("ledger_coverage", h.take_exercised()))  # the run's coverage
            if h.not_offered:
                self.user_properties.append(("ledger_not_offered", sorted(h.not_offered)))


class ChaosItem(LedgerItem):
    """Every crash window at one crash point: real worker processes, real SIGKILL, recovery,
    and the recovery checker (see ledgercheck.chaos)."""

    kind = "chaos"
    phase = "crash_windows"

    def __init__(self, *, point: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.point = point
        self.clause = None
        self.profile = "recovery"
        self.add_marker(pytest.mark.ledger_clause(None, "recovery", "chaos"))
        self.user_properties += [("ledger_kind", "chaos"), ("ledger_profile", "recovery")]
        reason = _not_claimed(self.sess, "recovery")
        if reason:
            self.user_properties.append(("ledger_not_claimed", True))
            self.add_marker(pytest.mark.skip(reason=reason))

    def runtest(self) -> None:
        from ledgercheck.chaos import ChaosError, explore


        sess = self.sess
        caps = (sess.client.handshake.get("capabilities") or {}) if sess.client else {}
        if sess.wall or not caps.get("durable"):
            why = "needs an adapter whose state survives a process kill (capability durable) and takes an injected clock"
            self.user_properties.append(("ledger_error", f"crash windows at {self.point} could not be explored: {why}"))
            raise NoCheck(f"crash windows at {self.point} could not be explored: {why}")
        seed = self.config.getoption("ledger_seed") or 0
        try:
            # two lanes of workers, under xdist too: a window spends much of its time waiting on
            # its worker process (start, kill, reap), so a second lane fills the gaps (measured:
            # certify -n 2 on 2 cores 24-25 s with two lanes, 27-32 s with one); scenario files
            # in RAM where there is some
            lanes = min(2, os.cpu_count() or 1)
            shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
            stop: RunStop | None = state(self.config, STOP, None)

            def progress(done: int, total: int | None, _window: dict[str, Any]) -> None:
                if stop is not None:  # how far this point got, should the run stop inside it
                    stop.chaos_progress[self.nodeid] = (done, total)
                progress_line(f"window {self.nodeid} {done}/{'?' if total is None else total}")

            windows = explore(sess.address, sess.base_spec, seed=seed, points=[self.point],
                              replay_dir=str(sess.artifacts / "replays" / sess.slug),
                              timeout=60.0 * sess.timeout_scale, jobs=lanes, tmp_root=shm, progress=progress,
                              pool=sess.crash_pool(lanes))
            if stop is not None:
                stop.chaos_progress.pop(self.nodeid, None)
        except ChaosError as exc:
            self.user_properties.append(("ledger_error", f"chaos: {exc}"))
            raise NoCheck(f"chaos exploration at {self.point} failed: {exc}") from None
        self.user_properties.append(("ledger_crash_windows", windows))
        errors = [w for w in windows if w["verdict"] == "error"]
        bad = [w for w in windows if w["verdict"] == "fail"]
        if errors and not bad:
            msg = "; ".join(f"{w['point']}#{w['occurrence']}: {w['message']}" for w in errors[:3])
            self.user_properties.append(("ledger_error", f"crash windows could not be evaluated: {msg}"))
            raise NoCheck(f"{len(errors)} crash window(s) could not be evaluated: {msg}")
        if bad:
            found = [blamed(sess.spec, c, f"{w['point']} #{w['occurrence']} ({w.get('step_class')}): {w['message']}"
                            + (f" -- replay: {w['replay']}" if w.get("replay") else ""))
                     for w in bad for c in (w["clauses"] or ["recovery.no_loss"])]
            self.user_properties.append(("ledger_clause", found[0].clause))
            if bad[0].get("replay"):
                self.user_properties.append(("ledger_replay", bad[0]["replay"]))
                self._replay = bad[0]["replay"]
            raise ClauseFailure(found, f"{len(bad)} of {len(windows)} crash windows at {self.point} broke the contract")


class LeaseCampaignItem(LedgerItem):
    """A worker process killed (or paused) while it holds a lease, for adapters the full
    crash-window exploration cannot drive (no recovery scan, or a wall clock)."""

    kind = "chaos"
    phase = "lease_campaign"

    def __init__(self, *, scenario: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.scenario = scenario
        self.clause = None
        self.profile = "lease"
        self.add_marker(pytest.mark.ledger_clause(None, "lease", "chaos"))
        self.user_properties += [("ledger_kind", "chaos"), ("ledger_profile", "lease")]
        caps = (self.sess.client.handshake.get("capabilities") or {}) if self.sess.client else {}
        why = None
        if not caps.get("durable"):
            why = "the adapter's state does not survive a process (capability durable)"
        elif scenario == "stale_worker_after_takeover" and not caps.get("concurrent"):
            why = "two processes cannot share the adapter's ledger (capability concurrent)"
        if why:
            self.user_properties.append(("ledger_not_claimed", True))
            self.add_marker(pytest.mark.skip(reason=f"not claimed: {why}"))

    def runtest(self) -> None:
        from ledgercheck.chaos import ChaosError
        from ledgercheck.chaos.crash.leases import run_campaign


        sess = self.sess
        skipped: list[tuple[str, str]] = []
        try:
            windows = run_campaign(sess.address, sess.base_spec, profiles=sess.claimed, wall_scale=sess.wall_scale,
                                   timeout=30.0 * sess.timeout_scale, scenarios=[self.scenario], factor=sess.timeout_scale,
                                   not_applicable=skipped)
        except ChaosError as exc:
            self.user_properties.append(("ledger_error", f"lease campaign: {exc}"))
            raise NoCheck(f"lease campaign {self.scenario} could not run: {exc}") from None
        if skipped and not windows:
            self.user_properties.append(("ledger_not_claimed", True))
            pytest.skip(f"not claimed: {skipped[0][1]}")
        self.user_properties.append(("ledger_crash_windows", windows))
        for w in windows:
            if w["verdict"] == "error":
                self.user_properties.append(("ledger_error", w["message"]))
                raise NoCheck(w["message"])
            if w["verdict"] == "fail":
                self.user_properties.append(("ledger_clause", w["clauses"][0]))
                raise ClauseFailure([blamed(self.sess.spec, c, w["message"]) for c in w["clauses"]], f"lease campaign: {self.scenario}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    if isinstance(item, LedgerItem):
        rep = outcome.get_result()
        if call.when == "call" or (call.when == "setup" and not rep.passed):  # the report the results keep
            _note_cost(item)
        rep.user_properties = list(item.user_properties)
        _terminal_safe(rep)
        stop: RunStop | None = state(item.config, STOP, None)
        if stop is not None:
            stop.note(item, rep, call)


def _terminal_safe(rep: pytest.TestReport) -> None:
    """What a ledger test's report shows carries adapter text (error messages, captured output of
    an in-process adapter, skip and known-bug reasons): escaped and cut (reports/text.py, ``shown``)
    before pytest prints it, here and, under pytest-xdist, before the report leaves the worker."""
    from ledgercheck.reports.text import recordable, shown, shown_line

    # the properties travel to the results (and, under pytest-xdist, through execnet, which
    # cannot carry a lone surrogate): each text fit for UTF-8 and cut (reports/text.py)
    rep.user_properties = [(k, recordable(v)) for k, v in rep.user_properties]
    lr = rep.longrepr
    if isinstance(lr, tuple) and len(lr) == 3:  # a skip: (file, line, reason)
        rep.longrepr = (lr[0], lr[1], shown_line(lr[2]))
    elif lr is not None:
        rep.longrepr = shown(str(lr))
    rep.sections = [(title, shown(content)) for title, content in rep.sections]
    if isinstance(getattr(rep, "wasxfail", None), str):
        rep.wasxfail = shown_line(rep.wasxfail)


@pytest.hookimpl(tryfirst=True)
def pytest_warning_recorded(warning_message: Any, when: str, nodeid: str, location: Any) -> None:
    """A warning raised while a ledger test ran (an in-process adapter's, a library's) is shown
    escaped and cut in pytest's warnings summary, like the rest of the adapter's text."""
    from ledgercheck.reports.text import LINE_LIMIT, shown

    if not nodeid.startswith("ledgercheck::"):
        return
    msg = warning_message.message
    text = str(msg)
    safe = shown(text, limit=LINE_LIMIT // 2, max_lines=20)  # pytest prefixes a line with where it was raised
    if safe != text:
        try:
            warning_message.message = type(msg)(safe) if isinstance(msg, Warning) else safe
        except Exception:  # noqa: BLE001 - a warning class that does not take one string
            warning_message.message = UserWarning(safe)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    sess: LedgerSession | None = state(config, SESSION, None)
    if sess is None or sess.client is None:
        return None
    hs = sess.client.handshake
    return [
        terminal(f"ledgercheck: adapter {sess.address} = {_short(str(hs.get('name')), 80)} {_short(str(hs.get('version')), 40)} "
                 f"({sess.client.kind}, clock {sess.client.clock})"),
        f"ledgercheck: contract {sess.spec.name} {sess.spec.version} sha256 {sess.spec.digest[:16]}; "
        f"claimed {', '.join(sess.claimed) or 'nothing'}; testing {', '.join(sess.requested) or 'nothing'}",
    ]


# ------------------------------------------------------------------------- results
def _collect_report(config: pytest.Config, report: pytest.TestReport) -> None:
    store = state(config, REPORTS, None)
    if store is None:
        return
    props = dict(report.user_properties or [])
    if "ledger_kind" not in props:
        return
    stop: RunStop | None = state(config, STOP, None)
    if stop is not None:
        stop.saw(report, props)
    if report.when == "call" or (report.when == "setup" and (report.skipped or report.failed)) or (report.when == "teardown" and report.failed):
        store.append((report, props))


def side_findings(config: pytest.Config) -> list[tuple[str, dict[str, Any]]]:
    """(test node id, finding) for every violation a clause test saw of another clause."""
    return [(rep.nodeid, f) for rep, props in state(config, REPORTS, [])
            for f in props.get("ledger_side_findings") or []]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    found = side_findings(config)
    if not found:
        return
    terminalreporter.section("ledgercheck: violations seen while testing other clauses")
    for nodeid, f in found:
        tag = f"known bug ({f['known_bug']})" if f.get("known_bug") else "FAILED"
        terminalreporter.write_line(shown_line(f"{tag} {f['clause']} (seen in {nodeid}): {f['messages'][0]}"))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    sess: LedgerSession | None = state(config, SESSION, None)
    if sess is None or hasattr(config, "workerinput"):
        return
    if session.exitstatus == pytest.ExitCode.OK and any(not f.get("known_bug") for _, f in side_findings(config)):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    config.stash[INCOMPLETE] = incomplete = incompleteness(config, session)
    stop: RunStop | None = state(config, STOP, None)
    if stop is not None and not stop.stopped and stopped_after_failures(config) \
            and session.exitstatus == pytest.ExitCode.INTERRUPTED:
        # -x/--maxfail stopped the run (pytest-xdist reports that as an interruption): the run
        # found a failure, which is exit status 1; 2 is for usage and adapter errors
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if incomplete is not None and incomplete["reason"] == "stopped_after_failure":
        print(shown_line(f"ledgercheck: NOT CERTIFIED: {incomplete['message']}"), file=sys.stderr, flush=True)
    elif incomplete is not None:
        print(shown_line(f"ledgercheck: INCOMPLETE: {incomplete['message']}"), file=sys.stderr, flush=True)
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            session.exitstatus = pytest.ExitCode.INTERRUPTED
    path = _opt(config, "ledger_results")
    if not path:
        return
    from ledgercheck.reports.results import ResultsError

    from .results_bridge import write_run_results

    try:
        write_run_results(config, sess, Path(path))
    except (ResultsError, OSError) as exc:
        # one line, and the run fails: a report that cannot be written is never a pass
        msg = f"ledgercheck: {exc}" if isinstance(exc, ResultsError) else f"ledgercheck: cannot write {path}: {exc}"
        print(msg, file=sys.stderr, flush=True)
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR


PROGRESS_FILE = "LEDGERCHECK_PROGRESS_FILE"


def progress_line(line: str) -> None:
    """Append one line to the file named by $LEDGERCHECK_PROGRESS_FILE, if set: ``start NODEID``
    as each test starts, ``window NODEID N/TOTAL`` as each crash window of a point ends.  Lets a
    script (or a test) see which phase a run is in without parsing the terminal output."""
    path = os.environ.get(PROGRESS_FILE)
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except OSError:
        pass


def stopped_after_failures(config: pytest.Config) -> int:
    """The number of failed ledger tests when -x/--maxfail asked the run to stop after that many
    and it reached them (0 otherwise); counted as pytest and pytest-xdist count them."""
    maxfail = int(getattr(config.option, "maxfail", 0) or 0)
    if maxfail <= 0:
        return 0
    failed = sum(1 for rep, _ in state(config, REPORTS, []) if rep.failed)
    return failed if failed >= maxfail else 0


MAX_UNFINISHED = 200  # node ids of unfinished tests the results list by name


def incompleteness(config: pytest.Config, session: pytest.Session) -> dict[str, Any] | None:
    """What the run planned and did not finish, and why; None when every planned test has an
    outcome and nothing stopped the run (docs/results.md, ``run.incomplete``)."""
    stop: RunStop | None = state(config, STOP, None)
    if stop is None or (config.option.collectonly and not stop.stopped):
        return None  # --collect-only plans the run and runs nothing
    reports = state(config, REPORTS, [])
    finished = {rep.nodeid for rep, _ in reports}
    planned = list(stop.planned or [])
    planned_set = set(planned)
    unfinished = [n for n in planned if n not in finished]
    done = len(planned_set & finished)
    status = session.exitstatus
    if stop.signal:
        reason = "interrupted"
        where = f" while running {', '.join(stop.where[:3])}" if stop.where else ""
        message = f"interrupted by {stop.signal}{where}"
    elif stop.breaker:
        reason, message = "breaker", stop.breaker
    elif status == pytest.ExitCode.INTERNAL_ERROR:
        reason, message = "harness_error", "the harness failed (pytest internal error) before the run finished"
    elif stopped_after_failures(config) and unfinished:
        n = stopped_after_failures(config)
        reason = "stopped_after_failure"
        message = (f"stopped after {n} failed test{'s' if n != 1 else ''} (-x/--maxfail); "
                   f"{len(unfinished)} planned test{'s' if len(unfinished) != 1 else ''} not run")
    elif status == pytest.ExitCode.INTERRUPTED:
        reason, message = "interrupted", f"the run was stopped ({session.shouldstop or 'interrupted'})"
    elif unfinished:
        reason, message = "unfinished", f"{len(unfinished)} planned test(s) ended without an outcome"
    else:
        return None
    points = [n for n in planned if "::chaos[" in n]
    windows_done = sum(len(props.get("ledger_crash_windows") or []) for rep, props in reports
                       if rep.nodeid in planned_set and "::chaos[" in rep.nodeid)
    totals: list[int | None] = [len(props.get("ledger_crash_windows") or []) for rep, props in reports
                                if "::chaos[" in rep.nodeid and rep.when == "call"]
    partial_done = sum(d for d, _ in stop.chaos_progress.values())
    # a point's announced total counts its kill windows; scan kills may come on top (then unknown)
    totals += [t if t is not None and t >= d else None for d, t in stop.chaos_progress.values()]
    points_done = len({n for n in points if n in finished})
    unknown = len(points) - points_done - len(stop.chaos_progress)
    return {
        "reason": reason,
        "message": message,
        "signal": stop.signal,
        "tests": {"planned": len(planned), "finished": done, "unfinished": unfinished[:MAX_UNFINISHED]},
        "crash_windows": {"points_planned": len(points), "points_finished": points_done,
                          "finished": windows_done + partial_done,
                          "planned": None if unknown > 0 or None in totals else sum(t for t in totals if t is not None)},
    }


class _Collector:
    """Registered as a plugin object so it sees reports from xdist workers too."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        _collect_report(self.config, report)

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        stop: RunStop | None = state(self.config, STOP, None)
        if stop is not None:
            stop.running[nodeid] = None
        progress_line(f"start {nodeid}")

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        stop: RunStop | None = state(self.config, STOP, None)
        if stop is not None:
            stop.running.pop(nodeid, None)


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    stop: RunStop | None = state(config, STOP, None)
    if stop is not None:
        stop.session = session
    if state(config, SESSION, None) is not None and not config.pluginmanager.has_plugin("ledgercheck-collector"):
        config.pluginmanager.register(_Collector(config), "ledgercheck-collector")
