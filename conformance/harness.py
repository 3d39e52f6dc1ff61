"""The harness: one adapter, the model, a clock, and the bookkeeping clause tests share.

Every operation a test performs goes through :meth:`Harness.do`: the model says what the
contract expects, the adapter answers, the model checks the answer and every item the
operation touched is read back (snapshot, events, and the fold when the adapter claims the
event-log profile) and compared.  Any divergence raises :class:`ClauseFailure` naming the
clause; an adapter that misbehaves at the protocol level (timeout, crash, garbage, an
indefinite error) raises :class:`AdapterFailure`, which the plugin reports as an error, never
as a pass or a clause failure.

Each call is also recorded as a step of a language-neutral trace (see ``trace.py``), with work
ids, lease tokens and effect keys replaced by symbolic references, so any failure can be
replayed against any adapter without hypothesis.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from ledgercheck.spec import Spec, rules
from ledgercheck.spec.args import type_problem
from ledgercheck.transport.client import Client
from ledgercheck.transport.clock import (
    QUANTUM,
    VIRTUAL_EPOCH,
    InjectedClock,
    WallClock,
    plain,
    scaled_document,
    scaled_spec,
    wall_tolerance,
)

from .model import Accept, Model, Outcome, Refuse, Violation

OWNER = "worker-1"


class ClauseFailure(AssertionError):
    """The implementation broke one or more clauses."""

    def __init__(self, violations: Iterable[Violation], context: str = "") -> None:
        self.violations = list(violations)
        self.context = context
        lines = [str(v) for v in self.violations]
        super().__init__((context + "\n" if context else "") + "\n".join(lines))

    @property
    def clauses(self) -> list[str]:
        return sorted({v.clause for v in self.violations})


class AdapterFailure(Exception):
    """The adapter failed at the protocol level (indefinite error): an error, not a verdict."""

    def __init__(self, op: str, outcome: Outcome) -> None:
        self.op = op
        self.outcome = outcome
        super().__init__(f"adapter error during {op}: {outcome.code}: {outcome.message}")


class NotApplicable(Exception):
    """The scenario needs an operation of a profile the adapter does not claim."""


class NotOffered(Exception):
    """The implementation does not offer an operation a check needs: it answered ``unsupported``.

    ``what`` names the operation, with the argument that selects its variant when there is one
    (``close_out as timeout``).  A clause test that meets it stops as *not offered*: never a
    pass, never a failure of any clause (docs/results.md, "Not offered")."""

    def __init__(self, what: str, message: str = "") -> None:
        self.what = what
        self.message = message
        super().__init__(f"not offered: {what}" + (f" ({message})" if message else ""))


# Argument types whose value selects a variant of an operation (close_out as done or as timeout):
# an implementation may offer one variant and not another.
SELECTOR_TYPES = frozenset({"status", "terminal_status", "waiting_kind", "error_class", "step_class", "source_system"})


class DriveBlocked(Exception):
    """The harness could not take an item along an edge right now (e.g. its lease lapsed);
    the model agreed with the adapter, so this is a fact of the scenario, not a violation."""


def find_exception(exc: BaseException, kind: type[BaseException]) -> Any:
    """The first exception of ``kind`` inside an exception, its groups, causes and contexts
    (hypothesis wraps failures in exception groups and Flaky* errors)."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, kind):
            return e
        todo += list(getattr(e, "exceptions", ()) or ())
        todo += [x for x in (e.__cause__, e.__context__) if x is not None]
    return None


class _StartedAhead:
    """A new connection to an ``exec:`` adapter started on a thread of its own, before a test needs
    it: the process starts and answers its ``hello`` while the harness works on, and :meth:`take`
    hands it over (waiting for it if it is not ready yet).  It is a process that has done nothing
    but greet, exactly what a start at the moment of need gives; only the wait is saved.  Its costs
    (transport/costs.py) count when it is taken, in the test that uses it."""

    def __init__(self, address: str, spec: Spec, timeouts: Mapping[str, Any]) -> None:
        import threading

        self.client: Client | None = None
        self.error: Exception | None = None
        self.cost: dict[str, float] = {}
        self._thread = threading.Thread(target=self._start, args=(address, spec, dict(timeouts)),
                                        name="ledgercheck-start-ahead", daemon=True)
        self._thread.start()

    def _start(self, address: str, spec: Spec, timeouts: dict[str, Any]) -> None:
        from ledgercheck.transport import costs
        from ledgercheck.transport.client import connect

        with costs.set_aside() as self.cost:
            try:
                self.client = connect(address, spec, **timeouts)
            except Exception as exc:  # noqa: BLE001 - raised again by take(), on the harness's thread
                self.error = exc

    def take(self) -> Client:
        from ledgercheck.transport import costs

        self._thread.join()
        costs.add(self.cost)
        if self.error is not None:
            raise self.error
        assert self.client is not None
        return self.client

    def discard(self) -> None:
        self._thread.join()
        if self.client is not None:
            self.client.close()


class Harness:
    def __init__(self, client: Client, spec: Spec, profiles: Iterable[str], *, contract_doc: dict[str, Any] | None = None,
                 timeout_scale: float = 1.0, wall_scale: float = 0.01, wall_tolerance: float = 0.05,
                 record: bool = True, seed: int = 0) -> None:
        self.client = client
        self.home = client  # the connection the harness was made with (see fresh(directory=...))
        self.directory: str | None = None  # the ledger's dir when it lives in one of its own
        self.spec = spec
        # (a frozenset: what the harness works out from the claimed profiles once, per operation
        # or per pair of statuses, stays right for the harness's life)
        self.profiles = frozenset(profiles)
        self.contract_doc = contract_doc if contract_doc is not None else plain(spec.document)
        self.timeout_scale = timeout_scale
        self.wall = client.clock == "wall"
        self.wall_scale = wall_scale
        self.wall_tolerance = wall_tolerance
        self.record = record
        self.seed = seed  # the run's seed (--ledger-seed); each reset sends reset_seed(seed)
        self.sent_seed = reset_seed(seed)  # what the last reset sent (traces record it for replay)
        self.model = Model(spec, self.profiles, tolerance=wall_tolerance if self.wall else 0.0)
        self.clock: InjectedClock | WallClock = WallClock(wall_scale, wall_tolerance) if self.wall else InjectedClock()
        self.trace: list[dict[str, Any]] = []
        # tokens the ledger handed out in answers that are not a work item's lease (a run's or a
        # lane's hand-out), in the order they first appeared: a trace names them {"$handout": k}
        self.handouts: list[str] = []
        self.epoch = self.clock.now()
        # the last calls, as (operation, arguments), rendered only when a failure names them
        self.recent: deque[tuple[str, dict[str, Any] | None]] = deque(maxlen=12)
        self.failed = False  # set once a check failed; later checks of the same run are moot
        self.rule_steps = 0  # stateful rule steps run through this harness (for benchmarks)
        self.operations = 0  # operations checked against the model (Harness.do), for benchmarks
        self.claim_by_id: bool | None = None  # False once the adapter answered claim(work_id) unsupported
        self.focus: str | None = None  # the clause a clause test judges (divergences of others are tolerated)
        self.tolerated: list[Violation] = []
        # SHOULD-level violations a stateful run noted and went on past (reported as warnings;
        # stopping there would leave the rest of the exploration, MUST clauses included, undone)
        self.advisories: list[Violation] = []
        self._should = frozenset(c.id for c in spec.clauses if c.level == "SHOULD")
        self.last_claim_fallback = False  # the last claim asked for a given item and got "the next" instead
        self.events_missing: str | None = None  # why the adapter has no event trail, once known
        # operation variants the implementation answered with anything but unsupported, on this ledger
        self.offered: set[tuple[str, frozenset[tuple[str, Any]]]] = set()
        self.not_offered: dict[str, str] = {}  # variant label -> the implementation's message, for the run
        # stateful runs: an unsupported answer is noted and returned (the rule goes on), and the
        # variant is not asked again; clause tests raise NotOffered instead
        self.note_unoffered = False
        # variants a clause test found not offered where the contract demanded a refusal (the
        # test went on; it can no longer pass).  The plugin empties it before each test
        self.unoffered_here: list[str] = []
        self.coverage: set[tuple[str, str | None, bool]] = set()  # (operation, item status before, accepted)
        # what the current test exercised, for the run's coverage (docs/results.md, "Coverage"), kept
        # across the fresh ledgers of one test and handed to the plugin by take_exercised(): the
        # transitions the implementation and the model agreed on, the transitions a call would have
        # made that the implementation answered unsupported, each (status before, operation, accepted)
        self.moved: set[tuple[str, str, str]] = set()
        self.moves_unoffered: set[tuple[str, str, str]] = set()
        self.calls: set[tuple[str | None, str, bool]] = set()
        self._moves_by: dict[str, tuple[tuple[str, str, str], ...]] = {}  # operation -> its (from, op, to)
        self._selector_args: dict[str, tuple[tuple[str, str], ...]] = {}
        self._claimed: dict[str, bool] = {}  # operation -> claims(op), worked out once
        self._takes_now: dict[str, bool] = {}  # operation -> whether it takes a ``now`` argument
        self._valid_selector: dict[tuple[str, str], bool] = {}  # (type, value) -> type_problem is None
        self._paths: dict[tuple[str, str], list[tuple[str, str, str]] | str] = {}  # path_to's answers
        self.directories = 0  # ledgers opened in a directory of their own (fresh(directory=...))
        # adapter processes kept started ahead for fresh(directory=...) and reopen() (0: none;
        # the plugin's session sets it for an exec: adapter and closes them, close_ahead())
        self.start_ahead = 0
        self._ahead: deque[_StartedAhead] = deque()

    # ------------------------------------------------------------------ lifecycle
    def start_case(self, clause: str, seed: int | None = None) -> None:
        """Get ready for one clause test, as the plugin runs it: a fresh ledger, the clause it
        judges in focus, no operation found not offered yet, nothing exercised yet."""
        self.unoffered_here = []
        self.take_exercised()
        self.fresh(seed=seed)
        self.focus = clause

    def fresh(self, seed: int | None = None, directory: str | None = None) -> None:
        """A fresh, isolated ledger, a fresh model and a fresh clock.

        ``seed`` is the reset config's seed to send (a replayed trace passes the one its run
        sent); by default :func:`reset_seed` of the run's seed (``self.seed``).  With
        ``directory`` (a new, empty one) the ledger lives there, opened by a new connection (a
        new process for an ``exec:`` adapter), so that :meth:`reopen` can open it again from
        another; without one the reset names no ``dir`` (docs/protocol.md, "reset")."""
        # the same seed for every fresh ledger of a run: an implementation that draws random
        # numbers (retry jitter) may seed from it, so a replayed example (hypothesis's shrinking,
        # or ``ledgercheck replay`` of a trace, which records it) makes the same choices
        self.sent_seed = reset_seed(self.seed) if seed is None else int(seed)
        self.leave_directory()
        if directory is not None:
            self.directories += 1  # (the plugin's timings: a test that opened one is a reopen test)
            self._connect_anew()
            self.directory = directory
        out = self.client.reset(self._reset_config())
        if not out.ok:
            raise AdapterFailure("reset", out)
        self.model = Model(self.spec, self.profiles, tolerance=self.wall_tolerance if self.wall else 0.0)
        self.clock = WallClock(self.wall_scale, self.wall_tolerance) if self.wall else InjectedClock(VIRTUAL_EPOCH)
        self.epoch = self.clock.now()
        self.trace = []
        self.handouts = []
        self.recent.clear()
        self.failed = False
        self.coverage.clear()
        self.tolerated = []
        self.offered = set()

    def _reset_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"contract": self.contract_doc, "seed": self.sent_seed}
        if self.wall:
            config["timeout_scale"] = self.wall_scale
        if self.directory is not None:
            config["dir"] = self.directory
        return config

    def _connect_anew(self) -> None:
        """Talk to the ledger through a new connection from now on: a new process for an
        ``exec:`` adapter, a new adapter object (``FACTORY()`` again) for an in-process one.
        The connection the harness was made with stays open, idle, for the next fresh ledger."""
        from ledgercheck.transport.client import AdapterError, connect

        home = self.home
        timeouts = {k: getattr(home, k) for k in ("timeout", "startup_timeout") if isinstance(getattr(home, k, None), float | int)}
        try:
            if self._ahead:
                new = self._ahead.popleft().take()
            else:
                new = connect(home.address, self.spec, **timeouts)
        except AdapterError as exc:
            why = Outcome.error("adapter_crashed", f"a new connection could not start: {exc}", definite=False)
            raise AdapterFailure("reset", why) from None
        finally:
            if getattr(home, "kind", None) == "wire":  # (an in-process adapter object costs nothing to make)
                while len(self._ahead) < self.start_ahead:
                    self._ahead.append(_StartedAhead(home.address, self.spec, timeouts))
        if self.client is not self.home:
            self.client.close()
        self.client = new

    def close_ahead(self) -> None:
        """End the adapter processes started ahead and not used (the session's end)."""
        while self._ahead:
            self._ahead.popleft().discard()

    def reopen(self) -> None:
        """Close the ledger and open it again from its directory in a new process: the old
        connection is closed (its process ends), a new one is started and reset with the same
        ``dir`` (docs/protocol.md: a new process reset with the same ``dir`` sees what the old one
        committed).  The model and the clock go on; the trace records a ``reopen`` step."""
        if self.directory is None:
            raise RuntimeError("reopen needs a ledger in a directory of its own (fresh(directory=...))")
        self._connect_anew()
        out = self.client.reset(self._reset_config())
        if self.record:
            self.trace.append({"op": "reopen", "args": {}, "outcome": outcome_summary(out)})
        self.recent.append(("reopen", None))
        if not out.ok:
            raise AdapterFailure("reset", out)

    def reopen_here(self) -> None:
        """Open the ledger again in the process that holds it: the same connection is reset a
        second time with the same ``dir`` (docs/protocol.md: the reset sees what was committed
        there "whether the reset comes to a new process or to this one").  The model and the
        clock go on; the trace records a ``reopen_here`` step.  An adapter that answers the reset
        ``unsupported`` or ``invalid_argument`` (it cannot honour the configuration) does not
        offer it."""
        if self.directory is None:
            raise RuntimeError("reopen_here needs a ledger in a directory of its own (fresh(directory=...))")
        out = self.client.reset(self._reset_config())
        if self.record:
            self.trace.append({"op": "reopen_here", "args": {}, "outcome": outcome_summary(out)})
        self.recent.append(("reopen_here", None))
        if not out.ok and out.definite and out.code in ("unsupported", "invalid_argument"):
            raise NotOffered("reset naming the open dir again in the same process", f"{out.code}: {out.message}")
        if not out.ok:
            raise AdapterFailure("reset", out)

    def leave_directory(self) -> None:
        """Back to the connection the harness was made with (its last ledger names no ``dir``);
        the connection that held the directory is closed, so the directory can be removed."""
        if self.client is not self.home:
            self.client.close()
            self.client = self.home
        self.directory = None

    def claims(self, op: str) -> bool:
        got = self._claimed.get(op)
        if got is None:
            prof = self.spec.operations[op].profile
            got = self._claimed[op] = prof is None or prof in self.profiles
        return got

    def need(self, *ops: str) -> None:
        for op in ops:
            if not (self._claimed.get(op) or self.claims(op)):
                raise NotApplicable(f"needs {op}, an operation of profile {self.spec.operations[op].profile!r}, which the adapter does not claim")

    # ------------------------------------------------------------------ time
    def now(self) -> float:
        return self.clock.now()

    def advance(self, seconds: float) -> float:
        """Move time by ``seconds`` of the run's clock (a wall clock sleeps exactly that long).

        The unit is the one of ``self.spec`` and the model: for a wall-clock adapter the contract's
        timings arrive here already multiplied by ``wall_scale`` (plugin, replay), so a duration
        read from ``h.spec`` is passed as it is.  A duration written in the contract's own seconds
        (a literal such as "a minute later") goes through :meth:`contract_seconds` first."""
        return self.clock.advance(seconds)

    @property
    def scale(self) -> float:
        """Factor from contract seconds to clock seconds: 1 under an injected clock."""
        return self.wall_scale if self.wall else 1.0

    def contract_seconds(self, seconds: float) -> float:
        """A duration written in the contract's seconds, in the run's clock seconds (the unit of
        ``self.spec``, :meth:`advance` and every duration argument of :meth:`do`)."""
        return seconds * self.scale

    def lapse_step(self) -> float:
        """A step after which a lease of the default timings, acquired or renewed now, has surely
        lapsed: ttl + grace and the contract's second more (clock seconds, like :meth:`advance`)."""
        lt = self.spec.lease_default
        return lt.ttl + lt.grace + self.contract_seconds(1.0)

    def contract_policy(self, policy: dict[str, Any]) -> dict[str, Any]:
        """A retry policy written in the contract's seconds (its backoffs), in clock seconds."""
        return {k: (self.contract_seconds(x) if k in ("initial_backoff", "max_backoff") and isinstance(x, int | float)
                    and not isinstance(x, bool) else x) for k, x in policy.items()}

    def advance_to(self, t: float) -> float:
        if t > self.clock.now():
            self.clock.set(t)
        return self.clock.now()

    # ------------------------------------------------------------------ calls
    def raw(self, op: str, **args: Any) -> Outcome:
        """Call the adapter without the model (for reads the model need not see)."""
        out = self.client.call(op, **args)
        if not out.ok and not out.definite:
            raise AdapterFailure(op, out)
        return out

    def do(self, op: str, /, _expected: Any = None, **args: Any) -> Outcome:
        """Perform an operation, check it against the model, read back what it touched.

        Durations among ``args`` (a ``duration`` argument, a retry policy's backoffs) are in the
        run's clock seconds, sent as given: see :meth:`contract_seconds` for literals.

        ``_expected``: what the model expects of exactly this call (these arguments, at this
        instant), which the caller has just asked it (``expected``); it is not asked again."""
        if not self._claimed.get(op):
            self.need(op)
        self.operations += 1
        takes_now = self._takes_now.get(op)
        if takes_now is None:
            takes_now = self._takes_now[op] = "now" in self.spec.operations[op].args
        if takes_now and args.get("now") is None:
            args["now"] = self.clock.now()
        elif _expected is not None:
            _expected = None  # asked with a ``now`` this call does not take: ask again
        self.last_claim_fallback = False
        # (only a well-formed work_id: a malformed one is sent as is, for the adapter to refuse)
        if op == "claim" and isinstance(args.get("work_id"), str) and self.claim_by_id is False:
            args = {k: v for k, v in args.items() if k != "work_id"}
            self.last_claim_fallback = True
        wid0 = args.get("work_id")
        before = self.model.items[wid0]["status"] if isinstance(wid0, str) and wid0 in self.model.items else None
        exp = _expected if _expected is not None and not self.wall and not self.last_claim_fallback \
            else self.model.expect(op, args)
        form = self.variant(op, args)
        if self.note_unoffered and self.not_offered and variant_label(form) in self.not_offered:
            if isinstance(exp, Accept):
                self._note_unoffered_moves(op, before, form)
            return Outcome.error("unsupported", self.not_offered[variant_label(form)])  # asked before: not again
        out = self.client.call(op, **args)
        if op == "claim" and isinstance(args.get("work_id"), str) and not out.ok and out.code == "unsupported":
            # the implementation only hands out the next queued item (a queue's dequeue): claim
            # that way from now on; scenarios that need a given item check what they got
            self.claim_by_id = False
            self.last_claim_fallback = True
            args = {k: v for k, v in args.items() if k != "work_id"}
            exp = self.model.expect(op, args)
            out = self.client.call(op, **args)
        if self.record:
            self.trace.append({"op": op, "args": self.symbolize(args), "outcome": outcome_summary(out)})
        if out.ok and isinstance(out.value, dict):
            tok = out.value.get("token")
            if isinstance(tok, str) and tok not in self.handouts and self.model.token_ref(tok) is None:
                self.handouts.append(tok)
        self.recent.append((op, args))
        self.coverage.add((op, before, out.ok))
        self.calls.add((before, op, out.ok))
        if not out.ok and not out.definite:
            raise AdapterFailure(op, out)
        if not out.ok and out.code == "unsupported" and not (isinstance(exp, Refuse) and "unsupported" in exp.codes):
            return self._unsupported(op, args, exp, form, out, before)
        self.offered.add(form)
        self.model.slack = max(0.0, self.clock.now() - args["now"]) if self.wall and type(args.get("now")) in (int, float) else 0.0
        found = self.model.settle(op, exp, out)
        self.model.slack = 0.0
        if out.ok and self.model.touched:
            self._note_moves(op, agreed=not found)
        if found and self.focus is None and all(v.clause in self._should for v in found):
            self.advisories += found  # the model has applied the answer; the run goes on
            found = []
        if found:
            ids = sorted(self.model.touched) or ([wid0] if isinstance(wid0, str) and wid0 in self.model.items else [])
            if op != "create" and isinstance(exp, Accept) and out.ok and self._tolerate(found, ids):
                return out
            self.fail(found)
        if isinstance(exp, Refuse) or not out.ok:
            # refused: nothing may have changed
            wid = args.get("work_id")
            if isinstance(wid, str) and wid in self.model.items:
                self.verify(wid, blame=exp.clause)
        else:
            self.verify(*sorted(self.model.touched))
        if self.model.unresolved:
            self._resolve_receipts()
        return out

    def _note_moves(self, op: str, agreed: bool) -> None:
        """The transitions ``op`` just made, as the model applied the implementation's answer: each
        status change in the new events of the items it touched (a recovery that times work out
        and requeues it makes two).  Where the model found the answer wrong (``agreed`` false: a
        field, an event, the status itself), an item's moves count only when the implementation
        holds it in the status they end in (read back once): the transition was made, and what is
        wrong about it is its clauses' business."""
        events, before = self.model.events, self.model._events_before
        for wid in self.model.touched:
            trail = events.get(wid)
            if not trail:
                continue
            made = [(e.get("from_status"), op, e.get("to_status")) for e in trail[before.get(wid, len(trail)):]]
            made = [m for m in made if m[0] is not None and m[2] is not None and m[0] != m[2]]
            if not made:
                continue
            if not agreed:
                try:
                    got = self.raw("get", work_id=wid)
                except AdapterFailure:
                    continue
                if not got.ok or not isinstance(got.value, dict) or got.value.get("status") != made[-1][2]:
                    continue
            self.moved.update(made)

    def _note_unoffered_moves(self, op: str, before: str | None, form: tuple[str, frozenset[tuple[str, Any]]]) -> None:
        """A call the contract expected to succeed was answered ``unsupported``: the transitions it
        could have made (from the item's status, through ``op``; those whose target the variant
        names, when it names one) are not offered."""
        moves = self._moves_by.get(op)
        if moves is None:
            moves = self._moves_by[op] = tuple(m for m in rules.moves(self.spec) if m[1] == op)
        cands = [m for m in moves if before is None or m[0] == before]
        named = {v for _k, v in form[1]}
        narrowed = [m for m in cands if m[2] in named or self.spec.statuses[m[2]].waiting_kind in named]
        self.moves_unoffered.update(narrowed or cands)

    def take_exercised(self) -> dict[str, list[str]]:
        """What the harness exercised since the last call (the plugin's ``ledger_coverage``), and
        start counting afresh: transitions as ``"from operation to"``, calls as ``"status
        operation accepted|refused"`` (``-`` for a call that names no item)."""
        out = {"transitions": [" ".join(m) for m in sorted(self.moved)],
               "not_offered": [" ".join(m) for m in sorted(self.moves_unoffered - self.moved)],
               "calls": sorted(f"{s or '-'} {op} {'accepted' if ok else 'refused'}" for s, op, ok in self.calls)}
        self.moved, self.moves_unoffered, self.calls = set(), set(), set()
        return out

    def expected(self, op: str, args: Mapping[str, Any]) -> Any:
        """What the model expects of ``op`` with ``args`` now (nothing is sent); hand it to
        :meth:`do` as ``_expected`` to send that very call."""
        return self.model.expect(op, dict(args, now=self.clock.now()))

    def variant(self, op: str, args: dict[str, Any]) -> tuple[str, frozenset[tuple[str, Any]]]:
        """The operation and the valid values of its selecting arguments (``close_out`` with
        ``status=timeout``): what an ``unsupported`` answer says is not offered."""
        sel = []
        valid = self._valid_selector
        for name, typ in self._selectors(op):
            v = args.get(name)
            if isinstance(v, str):
                ok = valid.get((typ, v))
                if ok is None:
                    if len(valid) >= 4096:
                        valid.clear()
                    ok = valid[(typ, v)] = type_problem(self.spec, typ, v) is None
                if ok:
                    sel.append((name, v))
        return op, frozenset(sel)

    def _selectors(self, op: str) -> tuple[tuple[str, str], ...]:
        """The operation's selecting arguments and their types (worked out once per operation)."""
        got = self._selector_args.get(op)
        if got is None:
            got = self._selector_args[op] = tuple((name, arg.type) for name, arg in self.spec.operations[op].args.items()
                                                  if arg.type in SELECTOR_TYPES)
        return got

    def _offers(self, form: tuple[str, frozenset[tuple[str, Any]]]) -> bool:
        """Whether this ledger answered the same variant (or a narrower one) with anything but unsupported."""
        op, sel = form
        return any(o == op and sel <= s for o, s in self.offered)

    def _unsupported(self, op: str, args: dict[str, Any], exp: Any, form: tuple[str, frozenset[tuple[str, Any]]],
                     out: Outcome, before: str | None = None) -> Outcome:
        """An ``unsupported`` answer (docs/results.md, "Not offered"): the variant is not offered.

        * Where the contract demands a refusal of a variant this ledger has already answered
          otherwise, ``unsupported`` is a wrong refusal like any other: the clause fails (an
          implementation that offers an operation must refuse a call of it with the code the
          contract names).
        * Either way nothing may have changed: the item the call named is read back.
        * Where the contract demands a refusal, the call was refused and changed nothing, so the
          scenario is intact: a clause test goes on (a bug further on still fails it) as if
          refused with the code the contract names, and the variant is noted in
          ``unoffered_here`` (the test can then no longer pass: it ends as not offered).
        * Where the contract expects the call to succeed, the scenario cannot go on:
          :class:`NotOffered`.
        * A stateful run (``note_unoffered``) notes the variant and goes on with the answer."""
        label = variant_label(form)
        if isinstance(exp, Accept):
            self._note_unoffered_moves(op, before, form)
        if isinstance(exp, Refuse) and "unsupported" not in exp.codes and self._offers(form):
            found = self.model.keep([Violation(exp.clause, f"refused with 'unsupported' but the contract says "
                                               f"{'/'.join(sorted(exp.codes))} ({exp.why}); the implementation offers "
                                               f"{label}: it answered it earlier on this ledger", op)])
            if found:
                self.fail(found)
        wid = args.get("work_id")
        if isinstance(wid, str) and wid in self.model.items:
            self.verify(wid, blame=exp.clause)
        self.not_offered.setdefault(label, out.message)
        if self.note_unoffered:
            return out
        if isinstance(exp, Refuse):
            if label not in self.unoffered_here:
                self.unoffered_here.append(label)
            return Outcome.error(sorted(exp.codes)[0], f"(not offered: {out.message})")
        raise NotOffered(label, out.message)

    def _resolve_receipts(self) -> None:
        """Recovery marked receipts the contract also lets stay pending: look at what the
        implementation did (the model takes its choice, or reports the marking wrong)."""
        todo = sorted(self.model.unresolved)
        self.model.unresolved.clear()  # (the reads below are operations too)
        for wid in todo:
            if self.claims("effect_list"):
                self.do("effect_list", work_id=wid)
            elif self.claims("effect_lookup"):
                for k in [k for k in self.model.receipt_order if self.model.receipts[k].get("may_be")
                          and self.model.receipts[k]["work_id"] == wid]:
                    self.do("effect_lookup", key=k)
            # with neither read, the next answer that shows the receipt (effect_begin) settles it

    def context(self) -> str:
        return "after: " + " -> ".join(f"{op}({_short(args) if args else ''})" for op, args in self.recent)

    def verify(self, *wids: str, blame: str | None = None, known: Mapping[str, Any] | None = None) -> None:
        """Read each item back and compare snapshot, events (trail) and fold (eventlog) with the
        model.  Without the trail profile the events are not read: nothing is judged on them.
        ``known``: snapshots the caller has just read and had the model compare (a listing's),
        whose items are not read again; their events are, and the fold is judged on them."""
        found: list[Violation] = []
        with_events = self.claims("events")
        # the reads are independent: asked all at once (pipelined where the adapter allows it,
        # docs/protocol.md), then judged in order exactly as if asked one by one
        reads = [(op, {"work_id": wid}) for wid in wids
                 for op in (() if known is not None and known.get(wid) is not None else ("get",)) + (("events",) if with_events else ())]
        answers = iter(self.client.call_many(reads) if len(reads) > 1 else [self.client.call(op, **a) for op, a in reads])

        def raw(op: str) -> Outcome:
            out = next(answers)
            if not out.ok and not out.definite:
                raise AdapterFailure(op, out)
            return out

        for wid in wids:
            snap = known.get(wid) if known is not None else None
            if snap is not None:
                got = Outcome.success(snap)
            else:
                got = raw("get")
                if not got.ok:
                    found.append(Violation("core.not_found", f"get({wid}) failed with {got.code}: {got.message}"))
                    if with_events:
                        next(answers)  # its events were asked for too; unread one by one, unjudged here
                    continue
                found += self.model.check_work(got.value, wid, blame)
            if not with_events:
                continue
            ev = raw("events")
            if not ev.ok and ev.code == "unsupported":
                # no event trail at all: the clauses about events are not offered (their tests
                # read events through events_of); everything else is still judged on the snapshots
                self.events_missing = ev.message
                self.not_offered.setdefault("events", ev.message)
                continue
            if not ev.ok:
                found.append(Violation("trail.append_only", f"events({wid}) failed with {ev.code}: {ev.message}"))
                continue
            found += self.model.check_trail(wid, ev.value, got.value if "eventlog" in self.profiles else None)
        if found and not self._tolerate(found, list(wids)):
            self.fail(found)

    def _tolerate(self, found: list[Violation], wids: list[str]) -> bool:
        """In a clause test, a field-level divergence blamed on *another* clause is noted and
        the model takes the implementation's state, so the test can still judge its own clause
        (that other clause fails in its own tests).  Never in stateful runs (no focus)."""
        if self.focus is None or any(v.clause == self.focus for v in found):
            return False
        snaps = {}
        for wid in wids:
            got = self.raw("get", work_id=wid)
            if not got.ok or not isinstance(got.value, dict):
                return False
            if got.value.get("status") != self.model.items.get(wid, {}).get("status"):
                return False  # the work went elsewhere: the scenario cannot go on, report it
            snaps[wid] = got.value
        self.tolerated += found
        for wid, snap in snaps.items():
            ev = self.raw("events", work_id=wid) if self.claims("events") else None
            self.model.adopt(wid, snap, ev.value if ev is not None and ev.ok and isinstance(ev.value, list)
                             else self.model.events.get(wid, []))
        return True

    def trail_of(self, wid: str, clause: str) -> list[dict[str, Any]] | None:
        """An item's events for a check whose clause belongs to another profile than the trail:
        None when the adapter does not claim the trail profile (that part of the check is
        skipped, never failed), else :meth:`events_of`."""
        return self.events_of(wid, clause) if self.claims("events") else None

    def events_of(self, wid: str, clause: str) -> list[dict[str, Any]]:
        """An item's events, for a check of ``clause`` that needs them: an event trail that is not
        offered (``unsupported``) is :class:`NotOffered`; another refusal fails ``clause``."""
        out = self.raw("events", work_id=wid)
        if not out.ok and out.code == "unsupported":
            self.not_offered.setdefault("events", out.message)
            raise NotOffered("events", out.message)
        if not out.ok:
            self.fail([Violation(clause, f"the implementation offers no event trail ({out.code}: {out.message})")])
        return out.value

    def fail(self, found: list[Violation]) -> None:
        """Every check raises from here, so hypothesis sees one kind of failure, not several.  A
        clause id the contract lacks raises UnknownClause instead: a bug in the check."""
        for v in found:
            self.spec.clause(v.clause)
        self.failed = True
        raise ClauseFailure(found, self.context())

    def verify_all(self) -> None:
        """Compare everything the claimed profiles can read with the model."""
        if self.claims("list"):
            noted = len(self.advisories)
            out = self.do("list")
            # the listing's snapshots were each compared with the model, as a read-back would
            # compare them: an item's record is not read again, only its events (unless the
            # listing was only noted, or judged in a clause test, which tolerates other clauses)
            listed = {x["work_id"]: x for x in out.value if isinstance(x, dict) and isinstance(x.get("work_id"), str)} \
                if out.ok and isinstance(out.value, list) and self.focus is None and len(self.advisories) == noted else {}
            self.verify(*self.model.items, known=listed)
        if self.claims("active") and self.model.items:
            self.do("active")
        if self.claims("effect_list"):
            for wid in {r["work_id"] for r in self.model.receipts.values()}:
                self.do("effect_list", work_id=wid)
        if self.claims("effect_lookup") and self.model.receipt_order:
            self.do("effect_lookup", key=self.model.receipt_order[-1])
        if self.claims("outbox_pending") and self.model.outbox:
            self.do("outbox_pending", max=max(1, len(self.model.outbox)))
        if self.claims("inbox_dead"):
            for recipient in self.model.inbox:
                self.do("inbox_dead", recipient=recipient)
        if self.claims("log_read"):
            for stream in self.model.logs:
                self.do("log_read", stream=stream)

    # ------------------------------------------------------------------ symbolic trace
    def time_ref(self, t: float) -> dict[str, float]:
        """An instant as a trace stores it: ``{"$t": d}``, d = t - epoch, stored exactly (no
        rounding: an adapter's real-valued jitter makes instants like 0.8344163008 s after the
        epoch, and a promotion exactly at next_retry_at must happen again on replay).

        While t is within a factor 2 of the epoch (Sterbenz: epoch/2 <= t <= 2 epoch) the
        subtraction is exact, and so epoch + d gives back t exactly.  The epoch is
        VIRTUAL_EPOCH (1e6 s) for an injected clock and the wall time at the reset for a wall
        clock, so that holds for any run under 1e6 virtual seconds (11.5 days) and any wall run;
        beyond it (a long retention jump) the exact instant is stored too, as ``"$at"``, which
        a replay uses when its epoch is the recorded one."""
        d = t - self.epoch
        return {"$t": d} if self.epoch + d == t else {"$t": d, "$at": t}

    def symbolize(self, args: dict[str, Any]) -> dict[str, Any]:
        m = self.model
        index = m.order  # item -> creation sequence (read only)
        out: dict[str, Any] = {}
        for k, v in args.items():
            if k == "now" and isinstance(v, (int, float)) and not isinstance(v, bool):  # (a tuple: no union built per call)
                out[k] = self.time_ref(float(v))
            elif k in ("work_id", "parent_id") and isinstance(v, str) and v in index:
                out[k] = {"$item": index[v]}
            elif k == "token" and isinstance(v, str):
                held = m.token_ref(v)  # (the first item holding it, as a scan of m.tokens finds it)
                if held is not None:
                    out[k] = {"$token": [index[held[0]], held[1]]}
                elif v in self.handouts:
                    out[k] = {"$handout": self.handouts.index(v)}
                else:
                    out[k] = v
            elif k == "key" and isinstance(v, str) and v in m.receipts:
                r = m.receipts[v]
                out[k] = {"$key": [index.get(r["work_id"], -1), r["step_id"], r["tool"]]}
            else:
                out[k] = v
        return out

    # ------------------------------------------------------------------ conveniences
    def item(self, wid: str) -> dict[str, Any]:
        return self.model.items[wid]

    def create(self, source_system: str = "manual", source_id: str | None = None, **kw: Any) -> str:
        n = len(self.model.items)
        if source_system in self.spec.run_id_required_for and "source_run_id" not in kw:
            kw["source_run_id"] = f"run-{n}"
        out = self.do("create", source_system=source_system, source_id=source_id or f"unit-{n}", **kw)
        return out.value["work"]["work_id"]

    def token(self, wid: str) -> str | None:
        return self.model.items[wid]["lease_token"]

    def need_claim_by_id(self) -> None:
        if self.claim_by_id is False:
            raise NotApplicable("the implementation cannot claim a given item (only the next queued one)")

    def claim(self, wid: str, owner: str = OWNER) -> str:
        out = self.do("claim", owner=owner, work_id=wid)
        if self.last_claim_fallback and (out.value is None or out.value.get("work_id") != wid):
            raise NotApplicable(f"the implementation claims only the next queued item, which was not {wid}")
        if out.value is None or out.value.get("work_id") != wid:
            self.fail([Violation("core.transition.allowed", f"claim of {wid} returned {out.value!r:.80}")])
        return out.value["lease_token"]

    # ------------------------------------------------------------------ driving items along the table
    def path_to(self, src: str, dst: str) -> list[tuple[str, str, str]]:
        """Shortest path of (from, to, op) edges using operations of claimed profiles (worked out
        once per pair: the table and the claimed profiles do not change; a new list each time)."""
        got = self._paths.get((src, dst))
        if got is None:
            try:
                got = self._path(src, dst)
            except NotApplicable as exc:
                got = str(exc)
            self._paths[(src, dst)] = got
        if type(got) is str:
            raise NotApplicable(got)
        return list(got)

    def _path(self, src: str, dst: str) -> list[tuple[str, str, str]]:
        if src == dst:
            return []
        frontier = [(src, [])]
        seen = {src}
        while frontier:
            nxt = []
            for status, path in frontier:
                for t in self.spec.transitions:
                    if t.src != status or t.dst in seen:
                        continue
                    op = next((o for o in t.ops if self.claims(o) and o in DRIVERS and not (t.guard and not self.claims("cancel"))), None)
                    if op is None:
                        continue
                    p = path + [(t.src, t.dst, op)]
                    if t.dst == dst:
                        return p
                    seen.add(t.dst)
                    nxt.append((t.dst, p))
            frontier = nxt
        raise NotApplicable(f"no way from {src} to {dst} with the operations of the claimed profiles")

    def drive(self, wid: str, status: str) -> None:
        for src, dst, op in self.path_to(self.item(wid)["status"], status):
            self.perform(wid, src, dst, op)

    def perform(self, wid: str, src: str, dst: str, op: str) -> Outcome:
        """Move ``wid`` along the edge src -> dst with ``op`` (preparing guards and time)."""
        it = self.item(wid)
        if it["status"] != src:
            raise RuntimeError(f"{wid} is {it['status']}, not {src}")
        out = DRIVERS[op](self, wid, src, dst)
        if self.item(wid)["status"] != dst:
            raise DriveBlocked(f"{op} could not move {wid} {src} -> {dst} now ({out.code or 'it went to ' + self.item(wid)['status']})")
        return out

    def lapse_time(self, wid: str) -> float:
        it = self.item(wid)
        return it["lease_expires_at"] + self.spec.lease_for(it["source_system"]).grace + QUANTUM


def run_harness(client: Client, contract: Spec, profiles: Iterable[str], *, wall_scale: float = 0.01,
                **kw: Any) -> Harness:
    """A harness checking ``client`` against ``contract`` (timings in the contract's own seconds)
    the way a run does: for a wall-clock adapter the contract's timings multiplied by
    ``wall_scale``, in the spec the harness and its model use and in the document the adapter is
    sent (docs/protocol.md, ``timeout_scale``), and the wall tolerance its handshake asks for;
    ``kw``: the rest of :class:`Harness`'s options."""
    if client.clock != "wall":
        return Harness(client, contract, profiles, **kw)
    kw.setdefault("wall_tolerance", wall_tolerance(client.handshake, kw.get("timeout_scale", 1.0)))
    return Harness(client, scaled_spec(contract, wall_scale), profiles, wall_scale=wall_scale,
                   contract_doc=scaled_document(plain(contract.document), wall_scale), **kw)


def reset_seed(run_seed: int | None) -> int:
    """The ``seed`` every reset of a run sends (docs/protocol.md): the run's seed (``certify
    --seed`` / ``--ledger-seed``) reduced modulo 2**32, so it fits any 32-bit generator and a
    JSON number any language reads exactly; 0 when the run has no seed."""
    return int(run_seed or 0) % (1 << 32)


def outcome_summary(out: Outcome) -> dict[str, Any]:
    """What a trace records of an answer, so a replay can tell where it diverged from the run:
    refused (with the code) or accepted, and the result's shape (null, an object, n items)."""
    if not out.ok:
        return {"ok": False, "code": out.code}
    v = out.value
    shape = "null" if v is None else "object" if isinstance(v, dict) else f"list of {len(v)}" if isinstance(v, list) \
        else type(v).__name__
    return {"ok": True, "result": shape}


def variant_label(form: tuple[str, frozenset[tuple[str, Any]]]) -> str:
    """``close_out``, ``close_out as timeout``, ``op (a=x, b=y)``: how results name a variant."""
    op, sel = form
    if not sel:
        return op
    if len(sel) == 1:
        return f"{op} as {next(iter(sel))[1]}"
    return f"{op} ({', '.join(f'{k}={v}' for k, v in sorted(sel))})"


def _short(args: dict[str, Any]) -> str:
    parts = []
    for k, v in args.items():
        if k == "now":
            continue
        s = repr(v)
        parts.append(f"{k}={s if len(s) <= 14 else s[:11] + '...'}")
    return ", ".join(parts)


# ---------------------------------------------------------------------- edge drivers
def _claim(h: Harness, wid: str, src: str, dst: str) -> Outcome:
    out = h.do("claim", owner=OWNER, work_id=wid)
    if h.last_claim_fallback and (not out.ok or not out.value or out.value.get("work_id") != wid):
        raise DriveBlocked(f"the implementation claims only the next queued item, which was not {wid}")
    return out


def _resume(h: Harness, wid: str, src: str, dst: str) -> Outcome:
    return h.do("resume", work_id=wid, owner=OWNER)


def _set_waiting(h: Harness, wid: str, src: str, dst: str) -> Outcome:
    kind = h.spec.statuses[dst].waiting_kind
    return h.do("set_waiting", work_id=wid, token=h.token(wid), kind=kind, ref=f"ref-{kind}-{h.model.order[wid]}")


def _close_out(h: Harness, wid: str, src: str, dst: str) -> Outcome:
    edge = h.spec.edge(src, dst)
    if edge is not None and edge.guard == "cancel_requested" and not h.item(wid)["cancel_requested"]:
        h.do("cancel", work_id=wid)
    return h.do("close_out", work_id=wid, token=h.token(wid), status=dst, result={"closed_as": dst})


def _fail(h: Harness, wid: str, src: str, dst: str) -> Outcome:
    retry = not h.spec.terminal(dst)
    cls = next(c for c, r in h.spec.error_classes.items() if r == retry)
    return h.do("fail", work_id=wid, token=h.token(wid), error_class=cls)


def _expire(h: Harness, wid: str, src: str, dst: str) -> Outcome:
    it = h.item(wid)
    if h.spec.statuses[src].leased:
        h.advance_to(h.lapse_time(wid))
    elif it["waiting_deadline"] is not None:
        h.advance_to(it["waiting_deadline"] + QUANTUM)
    return h.do("expire")


def _promote(h: Harness, wid: str, src: str, dst: str) -> Outcome:
    h.advance_to(h.item(wid)["next_retry_at"])
    return h.do("promote_due")


def _recover(h: Harness, wid: str, src: str, dst: str) -> Outcome:
    if h.spec.statuses[src].leased:
        h.advance_to(h.lapse_time(wid))
    return h.do("recover")


def _cancel(h: Harness, wid: str, src: str, dst: str) -> Outcome:
    return h.do("cancel", work_id=wid)


def _requeue(h: Harness, wid: str, src: str, dst: str) -> Outcome:
    return h.do("requeue", work_id=wid)


DRIVERS = {
    "claim": _claim, "resume": _resume, "set_waiting": _set_waiting, "close_out": _close_out, "fail": _fail,
    "expire": _expire, "promote_due": _promote, "recover": _recover, "cancel": _cancel, "requeue": _requeue,
}
