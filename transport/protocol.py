"""The adapter protocol: how the harness talks to a ledger implementation.

An adapter is any object with the methods of :class:`LedgerAdapter`.  Every contract operation
is one method taking keyword arguments named as in the contract (``spec/contract/lifecycle.yaml``,
``operations:``) and returning JSON-compatible values shaped like the TypedDicts below.  The
same shapes travel over the wire protocol (``docs/protocol.md``), so an in-process adapter and
a subprocess adapter are interchangeable.

Failures are reported by raising :class:`LedgerError` with one of the contract's error codes.
An adapter that does not offer an operation may omit the method or raise ``unsupported``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypedDict, runtime_checkable

from ledgercheck import PROTOCOL_VERSION

Time = float  # seconds; under an injected clock, exactly the `now` the harness passed

def is_definite(code: str) -> bool:
    """Whether error ``code`` is definite: the operation certainly did not take effect (the
    contract's errors.yaml, ``definite``)."""
    from ledgercheck.spec import default_spec
    from ledgercheck.spec.rules import definite_errors

    return code in definite_errors(default_spec())


# Safety declarations of the handshake (docs/protocol.md, "Safety declarations"): the values of
# capabilities.delivery and capabilities.reclaim.  Absent, delivery is at-least-once and reclaim
# is lease for an adapter claiming profile lease, else operator.
DELIVERY = ("at-most-once", "at-least-once", "effectively-once")
RECLAIM = ("lease", "operator", "never")


class LedgerError(Exception):
    """An operation failed with a typed error code from the contract."""

    def __init__(self, code: str, message: str = "", *, definite: bool | None = None) -> None:
        self.code = code
        self.message = message or code
        self.definite = is_definite(code) if definite is None else definite
        super().__init__(f"{code}: {self.message}")

    def to_wire(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "definite": self.definite}


class Work(TypedDict):
    work_id: str
    source_system: str
    source_id: str
    source_run_id: str | None
    status: str
    status_reason: str | None
    priority: int
    attempt: int
    owner: str | None
    lease_token: str | None
    lease_version: int
    lease_expires_at: Time | None
    waiting_kind: str | None
    waiting_ref: str | None
    waiting_deadline: Time | None
    next_retry_at: Time | None
    error_class: str | None
    cancel_requested: bool
    quarantined: bool
    result: Any
    created_at: Time
    started_at: Time | None
    finished_at: Time | None


class Event(TypedDict):
    work_id: str
    seq: int
    type: str
    from_status: str | None
    to_status: str | None
    at: Time
    data: dict[str, Any]


class CreateResult(TypedDict):
    work: Work
    created: bool


class Move(TypedDict):
    work_id: str
    from_status: str
    to_status: str
    reason: str | None


class Receipt(TypedDict):
    key: str
    work_id: str
    step_id: str
    tool: str
    step_class: str
    input_hash: str
    state: str
    result: Any


class BeginResult(TypedDict):
    receipt: Receipt
    created: bool


class InboxMessage(TypedDict):
    message_id: str
    sender: str
    body: Any
    nacks: int


class DeliverResult(TypedDict):
    delivered: bool


class NackResult(TypedDict):
    dead: bool
    nacks: int


class OutboxMessage(TypedDict):
    key: str
    destination: str
    payload: Any
    work_id: str | None
    state: Literal["pending", "sent"]
    provider_ref: str | None


class EnqueueResult(TypedDict):
    message: OutboxMessage
    created: bool


class LogEntry(TypedDict):
    stream: str
    seq: int
    kind: str
    payload: dict[str, Any]
    at: Time


class AppendResult(TypedDict):
    seq: int


class LaneLease(TypedDict):
    session_key: str
    lane: str
    owner: str
    token: str
    version: int
    expires_at: Time


class PushResult(TypedDict):
    queued: bool


class LaneTask(TypedDict):
    task_id: str
    body: Any
    state: Literal["queued", "handed"]


class WakeRun(TypedDict):
    run_id: str
    state: Literal["suspended", "pending", "running"]
    cycle: int
    wakeups: list[str]
    timer_at: Time | None


class WakeHandout(TypedDict):
    run_id: str
    worker: str
    cycle: int
    woken_by: list[str]
    token: str
    expires_at: Time
    attempt: int
class AskResult(TypedDict):
    outcome: str  # replied, timed_out, target_failed or target_cancelled (the contract's `ask`)
    result: Any


class SeqResult(TypedDict):
    seq: int


class Victim(TypedDict):
    work_id: str
    decision: str
    reason: str


class Capabilities(TypedDict, total=False):
    clock: Literal["injected", "wall"]
    durable: bool  # state survives a process restart when reset gives the same `dir`
    concurrent: bool  # several processes may open the same `dir` at once
    time_resolution: float  # wall clocks: the granularity of the adapter's timestamps, in seconds
    delivery: Literal["at-most-once", "at-least-once", "effectively-once"]  # an item's effect; default at-least-once
    reclaim: Literal["lease", "operator", "never"]  # how a dead worker's item comes back; default by profile lease


class Handshake(TypedDict, total=False):
    name: str
    version: str
    protocol: str
    profiles: list[str]
    capabilities: Capabilities
    crash_points: list[str]
    known_bugs: dict[str, str]  # clause id -> why; those clause tests become strict expected failures
    artifact_sha256: str | None


@runtime_checkable
class LedgerAdapter(Protocol):
    """One method per contract operation.  Times are seconds; `now` is the harness's clock."""

    # session
    def hello(self, protocol: str = PROTOCOL_VERSION) -> Handshake: ...
    def reset(self, config: dict[str, Any] | None = None) -> None: ...
    def close(self) -> None: ...

    # core
    def create(self, *, source_system: str, source_id: str, now: Time, source_run_id: str | None = None,
               priority: int | None = None, payload: dict[str, Any] | None = None,
               retry_policy: dict[str, Any] | None = None) -> CreateResult: ...
    def get(self, *, work_id: str) -> Work: ...
    def list(self, *, status: str | None = None, quarantined: bool | None = None) -> list[Work]: ...
    def events(self, *, work_id: str) -> list[Event]: ...
    def claim(self, *, owner: str, now: Time, work_id: str | None = None) -> Work | None: ...
    def close_out(self, *, work_id: str, token: str, status: str, now: Time, result: Any = None,
                  reason: str | None = None) -> Work: ...
    def cancel(self, *, work_id: str, now: Time, reason: str | None = None) -> Work: ...
    def requeue(self, *, work_id: str, now: Time, reason: str | None = None) -> Work: ...
    def expire(self, *, now: Time) -> list[Move]: ...

    # lease
    def renew(self, *, work_id: str, token: str, now: Time) -> Work: ...
    def active(self, *, now: Time) -> list[str]: ...

    # waiting
    def set_waiting(self, *, work_id: str, token: str, kind: str, ref: str, now: Time,
                    timeout: float | None = None) -> Work: ...
    def resume(self, *, work_id: str, owner: str, now: Time) -> Work: ...

    # retry
    def fail(self, *, work_id: str, token: str, error_class: str, now: Time, message: str | None = None) -> Work: ...
    def promote_due(self, *, now: Time) -> list[Move]: ...

    # idempotency
    def effect_begin(self, *, work_id: str, step_id: str, tool: str, input: Any, step_class: str, now: Time,
                     token: str | None = None) -> BeginResult: ...
    def effect_lookup(self, *, key: str) -> Receipt | None: ...
    def effect_record(self, *, key: str, input_hash: str, result: Any, now: Time, token: str | None = None) -> Receipt: ...
    def effect_mark(self, *, key: str, state: str, now: Time) -> Receipt: ...
    def effect_list(self, *, work_id: str) -> list[Receipt]: ...

    # inbox
    def inbox_deliver(self, *, recipient: str, message_id: str, sender: str, now: Time, body: Any = None) -> DeliverResult: ...
    def inbox_drain(self, *, recipient: str, now: Time, max: int | None = None) -> list[InboxMessage]: ...
    def inbox_ack(self, *, recipient: str, message_id: str, now: Time) -> None: ...
    def inbox_nack(self, *, recipient: str, message_id: str, now: Time, error: str | None = None) -> NackResult: ...
    def inbox_dead(self, *, recipient: str) -> list[InboxMessage]: ...

    # outbox
    def outbox_enqueue(self, *, key: str, destination: str, payload: Any, now: Time,
                       work_id: str | None = None) -> EnqueueResult: ...
    def outbox_pending(self, *, max: int | None = None) -> list[OutboxMessage]: ...
    def outbox_mark_sent(self, *, key: str, provider_ref: str, now: Time) -> OutboxMessage: ...

    # event log
    def log_append(self, *, stream: str, expected_seq: int, kind: str, now: Time,
                   payload: dict[str, Any] | None = None) -> AppendResult: ...
    def log_read(self, *, stream: str, from_seq: int | None = None) -> list[LogEntry]: ...

    # recovery
    def recover(self, *, now: Time) -> list[Victim]: ...

    # lanes
    def lane_acquire(self, *, session_key: str, lane: str, owner: str, now: Time) -> LaneLease | None: ...
    def lane_renew(self, *, session_key: str, lane: str, token: str, now: Time) -> LaneLease: ...
    def lane_release(self, *, session_key: str, lane: str, token: str, now: Time) -> None: ...
    def lane_push(self, *, session_key: str, lane: str, task_id: str, now: Time, body: Any = None) -> PushResult: ...
    def lane_next(self, *, session_key: str, lane: str, token: str, now: Time) -> LaneTask | None: ...
    def lane_done(self, *, session_key: str, lane: str, token: str, task_id: str, now: Time) -> None: ...
    def lane_tasks(self, *, session_key: str, lane: str) -> list[LaneTask]: ...

    # wakeups
    def wake_suspend(self, *, run_id: str, now: Time, timer_at: Time | None = None, token: str | None = None) -> WakeRun: ...
    def wake_renew(self, *, run_id: str, token: str, now: Time) -> WakeHandout: ...
    def wake_fire(self, *, run_id: str, kind: str, now: Time) -> WakeRun: ...
    def wake_take(self, *, worker: str, now: Time) -> WakeHandout | None: ...
    def wake_get(self, *, run_id: str) -> WakeRun: ...
    # spawn, join, cancel cascade
    def spawn(self, *, parent_id: str, key: str, now: Time, payload: dict[str, Any] | None = None) -> CreateResult: ...
    def children(self, *, work_id: str) -> list[Work]: ...
    def cancel_tree(self, *, work_id: str, now: Time, reason: str | None = None) -> list[Work]: ...

    # ask outcomes
    def ask_outcome(self, *, work_id: str) -> AskResult: ...

    # event-log reads
    def log_last_seq(self, *, stream: str) -> SeqResult: ...
    def log_tail(self, *, stream: str, from_seq: int, max: int) -> list[LogEntry]: ...


SESSION_OPS = ("hello", "reset", "close")


@dataclass(frozen=True)
class Outcome:
    """What an implementation answered: a value, or an error code."""

    ok: bool
    value: Any = None
    code: str = ""
    message: str = ""
    definite: bool = True

    def __init__(self, ok: bool, value: Any = None, code: str = "", message: str = "", definite: bool = True) -> None:
        # the fields go straight into the instance dict: a frozen dataclass's own __init__ sets
        # each through object.__setattr__, which made building an Outcome (several per adapter
        # call) cost more than the call's own bookkeeping.  Assignment stays refused (frozen).
        d = self.__dict__
        d["ok"] = ok
        d["value"] = value
        d["code"] = code
        d["message"] = message
        d["definite"] = definite

    @classmethod
    def success(cls, value: Any) -> Outcome:
        return cls(True, value)

    @classmethod
    def error(cls, code: str, message: str = "", definite: bool = True) -> Outcome:
        return cls(False, None, code, message, definite)
