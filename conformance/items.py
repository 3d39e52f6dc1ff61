"""What the plugin's test items and the results share: the base item, the run's folder, the
adapter artifact's hash.

The plugin builds the items; the safety item (``safety_item.py``) and the results bridge
(``results_bridge.py``) build on these too, and import this module, not the plugin.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Protocol

import pytest
from ledgercheck.reports.text import terminal
from ledgercheck.spec import Spec

from .clauses import NoCheck
from .harness import AdapterFailure, ClauseFailure
from .model import Violation


class LedgerSessionView(Protocol):
    """What the items, the safety item and the results bridge read of the plugin's session
    (plugin.LedgerSession): a Protocol, so that this module need not import the plugin."""

    config: pytest.Config
    harness: Any
    client: Any
    spec: Spec
    base_spec: Spec
    artifacts: Path
    slug: str
    address: str
    claimed: Any
    requested: Any
    started: float
    wall_scale: float
    timeout_scale: float

    def replay_command(self, path: Path) -> str: ...


# The plugin's state on pytest's config (``config.stash``), read by the plugin, the items and the
# results bridge: the session, the run stop (interrupts and the breaker), the example store, the
# reports seen, what the run left out, the results document written, the run's traces folder.
SESSION = pytest.StashKey[LedgerSessionView]()
STOP = pytest.StashKey[Any]()
EXAMPLE_STORE = pytest.StashKey[Any]()
REPORTS = pytest.StashKey[list[Any]]()
INCOMPLETE = pytest.StashKey[Any]()
RESULTS_DOC = pytest.StashKey[dict[str, Any]]()
RUN_DIR = pytest.StashKey[str]()


def state(config: Any, key: pytest.StashKey[Any], default: Any = None) -> Any:
    """The plugin's state under ``key`` on a config's stash; ``default`` where there is none (a
    config the plugin never configured, an item or a node without one, a stand-in object)."""
    stash = getattr(config, "stash", None)
    return default if stash is None else stash.get(key, default)


def _opt(config: pytest.Config, name: str) -> Any:
    return config.getoption(name)


def _run_dir(config: pytest.Config) -> str:
    """The traces folder of this run, ``seed<S>-<run id>``: unique per run, so a later run of
    the same adapter never overwrites a trace an earlier report's replay command names.  Under
    pytest-xdist every worker uses the controller's test run id (one folder for the run)."""
    name = state(config, RUN_DIR, None)
    if name is None:
        import uuid

        winput = getattr(config, "workerinput", None) or {}
        uid = str(winput.get("testrunuid") or uuid.uuid4().hex)[:8]
        seed = _opt(config, "ledger_seed")
        name = f"seed{seed if seed is not None else '-random'}-{uid}"
        if getattr(config, "stash", None) is None:  # a stand-in config (tests): given one
            config.stash = pytest.Stash()
        config.stash[RUN_DIR] = name
    return name


class LedgerItem(pytest.Item):
    kind = "clause"
    phase = "clause"  # where the results' timings count it (a clause test that reopens: "reopen")
    clause: str | None = None
    profile: str | None = None

    @property
    def sess(self) -> LedgerSessionView:
        return self.config.stash[SESSION]

    def reportinfo(self) -> tuple[str, int | None, str]:
        return ("ledgercheck", 0, self.name)

    def _fail_report(self, failure: ClauseFailure) -> None:
        h = self.sess.harness
        from .trace import dump_trace

        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.name)[:120]
        path = self.sess.artifacts / "traces" / self.sess.slug / _run_dir(self.config) / f"{slug}.json"
        case = getattr(self, "case", None)
        dump_trace(h, path, failure.violations, self.sess.address, case=case.name if case is not None else None,
                   judged_by="check" if getattr(failure, "by_check", False) else "model")
        replay = self.sess.replay_command(path)
        self.user_properties.append(("ledger_replay", replay))
        self.user_properties.append(("ledger_blamed", failure.clauses))
        self._replay = replay

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:  # type: ignore[override]
        exc = excinfo.value
        replay = getattr(self, "_replay", None)
        tail = f"\nreplay: {replay}" if replay else ""
        # adapter text reaches the terminal here: control characters are shown, never sent raw
        if isinstance(exc, ClauseFailure):
            notes = "\n".join(getattr(exc, "__notes__", []) or [])
            return terminal(f"clause violated: {', '.join(exc.clauses)}\n{exc}{tail}" + (f"\n{notes}" if notes else ""))
        if isinstance(exc, AdapterFailure):
            return terminal(f"ADAPTER ERROR: {exc}")
        if isinstance(exc, NoCheck):
            return terminal(f"ERROR: {exc}")
        return terminal(str(super().repr_failure(excinfo)))


def artifact_sha256(path: str | None) -> str | None:
    if not path:
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def blamed(spec: Spec, clause: str, message: str) -> Violation:
    """A violation a chaos run, a lease campaign or a safety campaign reports, as the plugin
    files it; an id the contract lacks raises UnknownClause (a bug in the checker)."""
    return Violation(spec.clause(clause).id, message)
