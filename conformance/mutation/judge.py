"""Judging one mutant with the clause tests (and the stateful machines for what they miss), and
the observing control that records which operator sites the suite exercises."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledgercheck.spec import Spec
from ledgercheck.transport.wire import result_types

from .mutants import PROTOCOL_OWNER, Mutant, _shapes_within
from .server import address

# ---------------------------------------------------------------------------------------------
# Judging a mutant with the clause tests


@dataclass
class Catch:
    test: str  # the clause test (case name) that failed
    clauses: list[str]  # the clauses its failure named (or "adapter:<code>", "harness:<error>")
    message: str


@dataclass
class Verdict:
    mutant: str
    family: str
    benign: bool
    own: list[str]
    what: str
    fired: bool = False
    caught: bool = False
    own_caught: bool = False
    catches: list[Catch] = field(default_factory=list)
    tests_run: int = 0
    seconds: float = 0.0
    exercised: bool = True  # False: the suite never reaches the mutant's site (not run)
    klass: str = ""  # the class of bug (Mutant.klass): rates are reported per class too

    @property
    def first_clauses(self) -> list[str]:
        return self.catches[0].clauses if self.catches else []


def _cases(spec: Spec) -> list[Any]:
    from ..clauses import all_cases

    return list(all_cases(spec, chaos=False))


def _is_slow(case: Any) -> bool:
    return getattr(case.fn, "__module__", "").endswith(".concurrency")


def _near_profiles(spec: Spec, mutant: Mutant) -> set[str]:
    """The profiles of the operations a mutant touches (for a dropped field, those returning
    its shape): their tests run right after the own clauses' (only the order, for speed)."""
    ops = [p for p in mutant.params[:1] if p in spec.operations]
    if mutant.family == "drop_field":
        defs = result_types(spec)
        ops = [o for o, op in spec.operations.items() if o not in ("hello", "reset")
               and any(name == mutant.params[0] for name, _ in _shapes_within(defs[op.returns], defs, op.returns))]
    return {spec.operations[o].profile or "core" for o in ops}


def run_case(h: Any, case: Any) -> Catch | None:
    """Run one clause test as the plugin does; the failure it ended in, if any."""
    from ..clauses import NoCheck
    from ..harness import AdapterFailure, ClauseFailure, DriveBlocked, NotApplicable, NotOffered
    from ..plugin import SIDE_FINDING_CLAUSES

    try:
        h.start_case(case.clause)
        case.fn(h)
    except ClauseFailure as exc:
        return Catch(case.name, exc.clauses, str(exc).splitlines()[-1][:300])
    except AdapterFailure as exc:
        code = exc.outcome.code
        return Catch(case.name, [PROTOCOL_OWNER if code == "protocol_error" else f"adapter:{code}"], str(exc)[:300])
    except DriveBlocked as exc:
        if not h.last_claim_fallback:
            return Catch(case.name, ["harness:drive_blocked"], str(exc)[:300])
    except (NotApplicable, NotOffered, NoCheck):
        pass
    except Exception as exc:  # noqa: BLE001 - a harness crash on a mutated answer is a finding too
        return Catch(case.name, [f"harness:{type(exc).__name__}"], str(exc)[:300])
    finally:
        side = [v for v in h.tolerated if v.clause in SIDE_FINDING_CLAUSES]
        h.tolerated = []
    if side:
        return Catch(case.name, sorted({v.clause for v in side}), str(side[0])[:300])
    return None


def run_stateful(client: Any, spec: Spec, family: str, seed: int = 1) -> Catch | None:
    """One stateful machine family (the ``ci`` budget, a fixed seed, no shrinking) as the
    plugin runs it; the failure it ended in, if any."""
    from hypothesis import Phase

    from ..harness import AdapterFailure, ClauseFailure, Harness, find_exception
    from ..stateful import hypothesis_settings, machine_profiles, make_machine, run_machine

    profiles = machine_profiles(client.profiles, family)
    if not profiles:
        return None
    h = Harness(client, spec, profiles, seed=seed)
    h.note_unoffered = True
    machine = make_machine(h, only=family)
    opts = hypothesis_settings("ci", phases=(Phase.explicit, Phase.generate))
    try:
        run_machine(machine, opts, seed)
    except BaseException as exc:  # noqa: BLE001 - hypothesis wraps failures
        if isinstance(exc, KeyboardInterrupt):
            raise
        found = find_exception(exc, ClauseFailure)
        if found is not None:
            return Catch(f"stateful::{family}", found.clauses, str(found).splitlines()[-1][:300])
        failure = find_exception(exc, AdapterFailure)
        if failure is not None:
            code = failure.outcome.code
            return Catch(f"stateful::{family}", [PROTOCOL_OWNER if code == "protocol_error" else f"adapter:{code}"], str(failure)[:300])
        return Catch(f"stateful::{family}", [f"harness:{type(exc).__name__}"], str(exc)[:300])
    return None


def judge(spec: Spec, mutant: Mutant, *, exhaustive: bool = False, only: Callable[[Any], bool] | None = None,
          timeout: float = 10.0, stateful: bool = True) -> Verdict:
    """Run the clause tests against ``mutant``: its own clauses' tests first; then, unless one
    of them already named an own clause, the others until one fails (all of them when
    ``exhaustive`` or when the mutant is benign, which must pass every test).  When no clause
    test noticed a non-benign mutant, and for ``benign:all``, the stateful machines run too
    (``stateful``; they judge each answer before any read-back, with no clause in focus)."""
    from ledgercheck.transport.client import connect

    from ..harness import Harness

    v = Verdict(mutant.name, mutant.family, mutant.benign, list(mutant.own), mutant.what, klass=mutant.klass)
    cases = [c for c in _cases(spec) if only is None or only(c)]
    own = set(mutant.own)
    near = _near_profiles(spec, mutant)
    profile_of = {c.id: c.profile for c in spec.clauses}
    rest = [c for c in cases if c.clause not in own]
    ordered = [c for c in cases if c.clause in own] + [c for c in rest if profile_of[c.clause] in near and not _is_slow(c)] \
        + [c for c in rest if profile_of[c.clause] not in near and not _is_slow(c)] + [c for c in rest if _is_slow(c)]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ledgercheck-mutant-") as tmp:
        log = os.path.join(tmp, "fired.log")
        client = connect(address(mutant.name, log), spec, timeout=timeout)
        try:
            h = Harness(client, spec, client.profiles)
            n_own = sum(1 for c in ordered if c.clause in own)
            for i, case in enumerate(ordered):
                got = run_case(h, case)
                v.tests_run += 1
                if got is not None:
                    v.catches.append(got)
                    v.caught = True
                    v.own_caught = v.own_caught or bool(own & set(got.clauses))
                if exhaustive or mutant.benign:
                    continue
                if v.own_caught or (v.caught and i >= n_own - 1):
                    break
            if stateful and only is None and (mutant.name == "benign:all" or (not v.caught and not mutant.benign)):
                from ..stateful import FAMILIES

                for family in FAMILIES:
                    got = run_stateful(client, spec, family)
                    v.tests_run += 1
                    if got is not None:
                        v.catches.append(got)
                        v.caught = True
                        v.own_caught = v.own_caught or bool(own & set(got.clauses))
                        if not mutant.benign:
                            break
        finally:
            client.close()
        v.fired = os.path.exists(log) and "fired" in Path(log).read_text().split()
    v.seconds = round(time.monotonic() - t0, 2)
    return v


def observe(spec: Spec, timeout: float = 10.0) -> tuple[set[tuple[str, ...]], list[Catch]]:
    """The control: every clause test through the observing proxy (it must pass them all);
    the sites the suite exercised."""
    from ledgercheck.transport.client import connect

    from ..harness import Harness

    with tempfile.TemporaryDirectory(prefix="ledgercheck-observe-") as tmp:
        log = os.path.join(tmp, "sites.log")
        client = connect(address("observe", log), spec, timeout=timeout)
        flagged = []
        try:
            h = Harness(client, spec, client.profiles)
            for case in _cases(spec):
                got = run_case(h, case)
                if got is not None:
                    flagged.append(got)
        finally:
            client.close()
        sites = {tuple(json.loads(line)) for line in Path(log).read_text().splitlines() if line.startswith("[")} \
            if os.path.exists(log) else set()
    return sites, flagged
