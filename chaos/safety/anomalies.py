"""The safety checker: anomalies in a recorded history, each with the few records that prove it.

:func:`check` is pure and offline: it reads a :class:`~ledgercheck.chaos.safety.history.History` and
returns a :class:`Verdict`.  It never trusts what an implementation declares beyond what the
declaration permits (duplicates under at-least-once, operator reclaim under reclaim=operator),
and it never raises an alarm from an operation that may not have happened:

* an ``ok`` completion happened; a ``refused`` one did not; an ``indefinite`` one (or an invoke
  with no completion: the process was killed) may or may not have happened.  An indefinite
  operation counts as happened only when a later observation shows it (its lease token in a
  later snapshot, its close-out's status, result and time in a later snapshot).
* order between processes is real time: an operation whose completion ``t`` is before another's
  invoke ``t`` happened before it.  Ownership intervals are ledger time: a grant owns an item
  from its start until ``lease_expires_at + grace`` (extended by renewals), or until a release.

Anomaly classes (docs/safety.md shows each with a real excerpt): ``lost_work``,
``duplicate_effect``, ``split_ownership``, ``stale_write_accepted``, ``terminal_changed``,
``stuck_work``, ``refused_but_applied`` (a definite refusal whose effect a later read shows).
Every anomaly carries an ``excerpt``: the minimal records that prove it (the meta record is
implied) plus its ``cause`` (the fault that lost an item, when the history has one), and
``context``: records that help a reader but are not needed.  The end state is judged: work the
final read leaves neither finished nor proven lost or stuck is named in ``missing``.

The verdict also says what the history exercised (``coverage``: claims and close-outs ok, items
finished, kills by named point, pauses, reopens, live holders displaced by time, operator or
reopen, late writes after a takeover, effects then killed, the final read) and what it did not
reach of what a verdict needs (``missing``); ``verdict`` is "anomalies", "inconclusive" or "no
anomaly".  Statuses and operation names come from the contract (:class:`Rules`).

The checker indexes the history by item in one pass and then looks at each item alone, so it
runs in time linear in the history (sorting each item's few grants aside); the coverage passes
find what happened around each grant, pause and kill by bisection over lists sorted by time.

The checker is split along its data (this module holds :func:`check` and the order of the passes):

* ``anomaly_model.py`` - anomaly classes, :class:`Verdict`, and the records the history is
  indexed into (``Op``, ``Grant``, ``Snap``, the per-item ``_Item``, ``_Timeline``);
* ``anomaly_index.py`` - the checker's state and its first pass (``index``: operations paired,
  effects and faults by process, everything filed by item);
* ``anomaly_ownership.py`` - grants and holders: split_ownership, stale_write_accepted,
  terminal_changed, duplicate_effect;
* ``anomaly_loss.py`` - the end state: lost_work, stuck_work, refused_but_applied;
* ``anomaly_coverage.py`` - what the history reached (coverage), observations, what it left.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from ledgercheck.spec import Spec

from .anomaly_coverage import _Coverage
from .anomaly_index import _Index
from .anomaly_loss import _Loss
from .anomaly_model import (  # re-exported: callers import these from here
    CLASSES,
    INF,
    OPERATOR,
    SITUATIONS,
    Anomaly,
    Grant,
    Op,
    Rules,
    Snap,
    Verdict,
    _first_t,
    fmt_num,
    rules_of,
)
from .anomaly_ownership import _Ownership
from .history import History, HistoryError, no_gc, to_dict
from .replies import duplicate_items

__all__ = ["CLASSES", "INF", "OPERATOR", "SITUATIONS", "Anomaly", "Grant", "Op", "Rules", "Snap", "Verdict", "fmt_num", "rules_of", "check", "excerpt_history"]


class _Checker(_Ownership, _Loss, _Coverage, _Index):
    """The checker: its state and index (anomaly_index), its rules (anomaly_ownership,
    anomaly_loss) and what it reports as reached (anomaly_coverage)."""

    # -- everything
    def run(self) -> Verdict:
        self.index()
        permitted: Counter[int] = Counter()
        reclaimed: Counter[str] = Counter()
        item_grants: dict[str, list[Grant]] = {}
        for it in self.items.values():
            grants = self.grants(it)
            if len(grants) > 1:  # these need a second grant
                self.split(it, grants)
                self.stale(it, grants)
                self.displaced(it, grants)
            if grants:
                item_grants[it.work_id] = grants
            self.terminal(it)
            if it.effects:
                self.duplicates(it, permitted)
            if it.refused_closes or (it.creates and it.creates[0].outcome == "refused"):
                self.refused_applied(it)
            self.lost(it, grants, reclaimed)
        if not self.cov["late_write_after_takeover"] and not self.cov["holder_displaced"]:
            self.refused_takeovers(item_grants)  # only then does it matter (see coverage())
        self.effects_then_kill()
        duplicate_items(self)  # one source's work made into two items (chaos/safety/replies.py)
        self.anomalies.sort(key=lambda a: (CLASSES.index(a.kind), _first_t(a), a.work_id))
        self.observe(permitted, reclaimed)
        coverage, missing = self.coverage()
        return Verdict(self.anomalies, self.observations, dict(sorted(self.counts.items())), coverage, missing)


def check(history: History, spec: Spec | None = None) -> Verdict:
    """Every anomaly of the history, with the minimal excerpt proving each, observations, what the
    history reached (coverage) and what it did not (missing).  `spec`: the contract the campaign ran
    under (the shipped one by default), which names the statuses and operations."""
    rules = rules_of(spec)
    try:
        with no_gc():
            return _Checker(history, rules).run()
    except TypeError:
        bad = _unhashable_identifier(history)
        if bad is None:
            raise
        raise HistoryError(history.path, *bad) from None


_IDENTIFIERS = ("work_id", "token", "lease_token", "owner", "status", "step_id", "key")


def _unhashable_identifier(history: History) -> tuple[int | None, str] | None:
    """The first record whose identifier (a work id, token, owner, status, key) is a list or an
    object, which no ledger hands out: ``(line, problem)``.  Only looked for when the checker met
    such a value (the fast path stays as it is)."""
    def find(v: Any, path: str) -> str | None:
        if isinstance(v, Mapping):
            for k, x in v.items():
                if k in _IDENTIFIERS and isinstance(x, list | dict):
                    return f"{path}{k} is {'a list' if isinstance(x, list) else 'an object'}"
                if isinstance(x, list | dict):
                    got = find(x, f"{path}{k}.")
                    if got:
                        return got
        elif isinstance(v, list):
            for x in v:
                got = find(x, path)
                if got:
                    return got
        return None

    for rec in history.records:
        got = find(to_dict(rec), "")
        if got:
            return rec.line, f"{got}; identifiers in a history are strings, numbers or null"
    return None


def excerpt_history(history: History, anomaly: Anomaly) -> History:
    """The meta record plus an anomaly's excerpt, as a history of its own (to re-check it)."""
    return History.of([history.meta, *anomaly.excerpt], path=f"{history.path} (excerpt)")
