"""The ledgercheck pytest plugin: the conformance suite against any adapter.

Activated by ``--ledger-adapter ADDRESS``; without it the plugin does nothing.  Tests are
generated from the contract, not collected from files: one item per clause case
(``ledgercheck::<profile>::<clause>[<param>]``) plus the stateful model-based tests
(``ledgercheck::stateful::<name>``).  Each item carries its clause id as a marker, in its node
id and in its report's user properties, so CI output names the broken clause.

Capability handling: clauses of profiles the adapter does not claim are skipped as "not
claimed" (never passed, never failed); a clause the adapter declares as a known bug becomes a
strict expected failure; an adapter failure (timeout, crash, garbage) is an error; a clause
with no test is an error.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.spec import Spec, SpecError, load_spec

from .clauses import ClauseCase, NoCheck, all_cases
from .client import AdapterError, Client, connect
from .clock import plain, scaled_document, scaled_spec
from .harness import AdapterFailure, ClauseFailure, DriveBlocked, Harness, NotApplicable, find_exception


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("ledgercheck", "work-ledger conformance (ledgercheck)")
    g.addoption("--ledger-adapter", metavar="ADDRESS", help="adapter to test: reference, python:MODULE:FACTORY, exec:COMMAND, or an installed name")
    g.addoption("--ledger-spec", metavar="FILE", action="append", default=[], help="contract file (repeat for overlays); default: the shipped contract")
    g.addoption("--ledger-profile", metavar="NAMES", default=None, help="comma-separated profiles to test (default: all the adapter claims)")
    g.addoption("--ledger-only", action="store_true", help="run only the ledger suite, deselect other collected tests")
    g.addoption("--ledger-hypothesis-profile", metavar="NAME", default="ci", choices=["ci", "dev", "thorough"], help="stateful test budget (ci, dev, thorough)")
    g.addoption("--ledger-seed", type=int, default=None, metavar="N", help="seed for the stateful tests (default: random, recorded in the results)")
    g.addoption("--ledger-stateful-only", action="store_true", help="run only the stateful model-based tests")
    g.addoption("--ledger-clauses-only", action="store_true", help="run only the clause tests")
    g.addoption("--ledger-timeout", type=float, default=10.0, metavar="SECONDS", help="per-call timeout for the adapter (before scaling)")
    g.addoption("--ledger-timeout-scale", type=float, default=1.0, metavar="FACTOR", help="multiply every timeout and wait by this factor (slow machines)")
    g.addoption("--ledger-wall-scale", type=float, default=0.01, metavar="FACTOR", help="time scale for wall-clock adapters (contract timings x FACTOR)")
    g.addoption("--ledger-shard", metavar="K/N", default=None, help="run the K-th of N deterministic shards of the suite")
    g.addoption("--ledger-results", metavar="PATH", default=None, help="write the run's results (JSON) to PATH")
    g.addoption("--ledger-artifacts", metavar="DIR", default=".ledgercheck", help="where traces and replay files live")
    g.addoption("--ledger-artifact-file", metavar="FILE", default=None, help="the tested artifact (its SHA-256 goes into the report)")
    g.addoption("--ledger-no-chaos", action="store_true", help="skip the crash-window exploration (the recovery clauses only it decides are then errors: not checked)")
    g.addoption("--ledger-example-db", metavar="DIR|redis://HOST:PORT/DB", default=None,
                help="a hypothesis example database shared by shards and runs (default: none)")
    g.addoption("--ledger-reproduce", metavar="CMD", default=None, help=argparse_suppress())


def argparse_suppress() -> str:
    import argparse

    return argparse.SUPPRESS


def _opt(config: pytest.Config, name: str) -> Any:
    return config.getoption(name)


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
            names = [p.strip() for p in req.split(",") if p.strip()]
            unknown = [p for p in names if p not in self.spec.profiles]
            if unknown:
                raise pytest.UsageError(f"ledgercheck: unknown profile(s) {', '.join(unknown)}; the contract has {', '.join(self.spec.profiles)}")
            self.requested = list(self.spec.profile_closure(names))
        else:
            self.requested = list(self.spec.profile_closure(self.claimed)) if self.claimed else []
        self.artifacts = Path(_opt(config, "ledger_artifacts"))
        self._harness: Harness | None = None
        self.started = time.time()

    @property
    def wall_tolerance(self) -> float:
        """How far apart the adapter's and the harness's timestamps may be (wall clocks): the
        default, widened to twice the resolution the adapter declares for its timestamps."""
        caps = (self.client.handshake.get("capabilities") or {}) if self.client else {}
        res = caps.get("time_resolution")
        base = 0.05 * self.timeout_scale
        return max(base, 2.0 * float(res)) if isinstance(res, int | float) and not isinstance(res, bool) else base

    @property
    def harness(self) -> Harness:
        if self._harness is None:
            assert self.client is not None
            self._harness = Harness(self.client, self.spec, self.claimed, contract_doc=self.contract_doc,
                                    timeout_scale=self.timeout_scale, wall_scale=self.wall_scale,
                                    wall_tolerance=self.wall_tolerance, seed=_opt(self.config, "ledger_seed") or 0)
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
        if self.client is not None:
            self.client.close()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ledger_clause(id, profile, kind): a ledgercheck conformance test of a contract clause")
    if not _opt(config, "ledger_adapter"):
        return
    config._ledger_example_store = _example_store(config)  # type: ignore[attr-defined]
    config._ledger = LedgerSession(config)  # type: ignore[attr-defined]
    config._ledger_reports = []  # type: ignore[attr-defined]


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
    sess = getattr(config, "_ledger", None)
    if sess is not None:
        sess.close()


class LedgerRoot(pytest.Collector):
    def collect(self) -> list[pytest.Item]:  # pragma: no cover - items are created directly
        return []


def _not_claimed(sess: LedgerSession, profile: str) -> str | None:
    if profile not in sess.claimed:
        return f"not claimed: the adapter does not claim profile {profile!r}"
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    sess: LedgerSession | None = getattr(config, "_ledger", None)
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
        from ledgercheck.chaos.leases import SCENARIOS

        for scenario in SCENARIOS:
            new.append(LeaseCampaignItem.from_parent(root, name=f"lease::crash[{scenario}]", scenario=scenario))
    shard = _opt(config, "ledger_shard")
    if shard:
        m = re.fullmatch(r"(\d+)/(\d+)", shard)
        if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
            raise pytest.UsageError(f"ledgercheck: --ledger-shard must be K/N with 1 <= K <= N, not {shard!r}")
        k, n = int(m.group(1)), int(m.group(2))
        new = [it for it in new if int(hashlib.sha256(it.nodeid.encode()).hexdigest(), 16) % n == k - 1]
    known = sess.client.known_bugs if sess.client else {}
    for it in new:
        clause = getattr(it, "clause", None)
        if clause in known:
            it.add_marker(pytest.mark.xfail(reason=f"known bug declared by the adapter: {known[clause]}", strict=True))
    items.extend(new)


# event-trail integrity: seq numbering from first_seq without gaps, earlier events unchanged,
# the snapshot equal to the fold of the implementation's own events
SIDE_FINDING_CLAUSES = frozenset({"core.event.append_only", "eventlog.fold"})


def _run_dir(config: pytest.Config) -> str:
    """The traces folder of this run, ``seed<S>-<run id>``: unique per run, so a later run of
    the same adapter never overwrites a trace an earlier report's replay command names.  Under
    pytest-xdist every worker uses the controller's test run id (one folder for the run)."""
    name = getattr(config, "_ledger_run_dir", None)
    if name is None:
        import uuid

        winput = getattr(config, "workerinput", None) or {}
        uid = str(winput.get("testrunuid") or uuid.uuid4().hex)[:8]
        seed = _opt(config, "ledger_seed")
        name = f"seed{seed if seed is not None else '-random'}-{uid}"
        config._ledger_run_dir = name  # type: ignore[attr-defined]
    return name


class LedgerItem(pytest.Item):
    kind = "clause"
    clause: str | None = None
    profile: str | None = None

    @property
    def sess(self) -> LedgerSession:
        return self.config._ledger  # type: ignore[attr-defined]

    def reportinfo(self) -> tuple[str, int | None, str]:
        return ("ledgercheck", 0, self.name)

    def _fail_report(self, failure: ClauseFailure) -> None:
        h = self.sess.harness
        from .trace import dump_trace

        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.name)[:120]
        path = self.sess.artifacts / "traces" / self.sess.slug / _run_dir(self.config) / f"{slug}.json"
        dump_trace(h, path, failure.violations, self.sess.address)
        replay = self.sess.replay_command(path)
        self.user_properties.append(("ledger_replay", replay))
        self.user_properties.append(("ledger_blamed", failure.clauses))
        self._replay = replay

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:  # type: ignore[override]
        exc = excinfo.value
        replay = getattr(self, "_replay", None)
        tail = f"\nreplay: {replay}" if replay else ""
        if isinstance(exc, ClauseFailure):
            notes = "\n".join(getattr(exc, "__notes__", []) or [])
            return f"clause violated: {', '.join(exc.clauses)}\n{exc}{tail}" + (f"\n{notes}" if notes else "")
        if isinstance(exc, AdapterFailure):
            return f"ADAPTER ERROR: {exc}"
        if isinstance(exc, NoCheck):
            return f"ERROR: {exc}"
        return super().repr_failure(excinfo)


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
            h.fresh()
            h.focus = self.case.clause
            self.case.fn(h)
        except NotApplicable as exc:
            h.tolerated = []  # a scenario that does not apply vouches for nothing

            self.user_properties.append(("ledger_not_claimed", True))
            pytest.skip(f"not claimed: {exc}")
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
        machine = make_machine(h, only=self.machine)
        machine.__name__ = machine.__qualname__ = f"Ledger_{self.machine}"
        db = example_database(getattr(self.config, "_ledger_example_store", None), sess.slug)
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
                self.user_properties.append(("ledger_clause", exc.clauses[0]))
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


class ChaosItem(LedgerItem):
    """Every crash window at one crash point: real worker processes, real SIGKILL, recovery,
    and the recovery checker (see ledgercheck.chaos)."""

    kind = "chaos"

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

        from .model import Violation

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
            windows = explore(sess.address, sess.base_spec, seed=seed, points=[self.point],
                              replay_dir=str(sess.artifacts / "replays" / sess.slug),
                              timeout=60.0 * sess.timeout_scale, jobs=lanes, tmp_root=shm)
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
            found = [Violation(c, f"{w['point']} #{w['occurrence']} ({w.get('step_class')}): {w['message']}"
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
        from ledgercheck.chaos.leases import run_campaign

        from .model import Violation

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
                raise ClauseFailure([Violation(c, w["message"]) for c in w["clauses"]], f"lease campaign: {self.scenario}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    if isinstance(item, LedgerItem):
        rep = outcome.get_result()
        rep.user_properties = list(item.user_properties)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    sess: LedgerSession | None = getattr(config, "_ledger", None)
    if sess is None or sess.client is None:
        return None
    hs = sess.client.handshake
    return [
        f"ledgercheck: adapter {sess.address} = {hs.get('name')} {hs.get('version')} ({sess.client.kind}, clock {sess.client.clock})",
        f"ledgercheck: contract {sess.spec.name} {sess.spec.version} sha256 {sess.spec.digest[:16]}; "
        f"claimed {', '.join(sess.claimed) or 'nothing'}; testing {', '.join(sess.requested) or 'nothing'}",
    ]


# ------------------------------------------------------------------------- results
def _collect_report(config: pytest.Config, report: pytest.TestReport) -> None:
    store = getattr(config, "_ledger_reports", None)
    if store is None:
        return
    props = dict(report.user_properties or [])
    if "ledger_kind" not in props:
        return
    if report.when == "call" or (report.when == "setup" and (report.skipped or report.failed)) or (report.when == "teardown" and report.failed):
        store.append((report, props))


def side_findings(config: pytest.Config) -> list[tuple[str, dict[str, Any]]]:
    """(test node id, finding) for every violation a clause test saw of another clause."""
    return [(rep.nodeid, f) for rep, props in getattr(config, "_ledger_reports", [])
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
        terminalreporter.write_line(f"{tag} {f['clause']} (seen in {nodeid}): {f['messages'][0]}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    sess: LedgerSession | None = getattr(config, "_ledger", None)
    if sess is None or hasattr(config, "workerinput"):
        return
    if session.exitstatus == pytest.ExitCode.OK and any(not f.get("known_bug") for _, f in side_findings(config)):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
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


class _Collector:
    """Registered as a plugin object so it sees reports from xdist workers too."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        _collect_report(self.config, report)


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if getattr(config, "_ledger", None) is not None and not config.pluginmanager.has_plugin("ledgercheck-collector"):
        config.pluginmanager.register(_Collector(config), "ledgercheck-collector")


def artifact_sha256(path: str | None) -> str | None:
    if not path:
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
