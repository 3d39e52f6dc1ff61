"""The abstract model of the contract: a pure, in-memory state machine built from a Spec.

:class:`Model` is this package's facade.  It joins the shared base (``base.py``: state,
dispatch, comparisons) with one module per contract profile, each holding that profile's
operations; which module answers an operation comes from the profile the contract gives it.
See ``base.py`` for how the model judges an answer.
"""

from __future__ import annotations

from ledgercheck.spec.rules import fold
from ledgercheck.transport.protocol import Outcome

from .ask import AskOps
from .base import (
    ANY,
    TOLERANCE,
    Accept,
    Expectation,
    Indefinite,
    ModelBase,
    Refuse,
    UnknownClause,
    Violation,
    dispatch_table,
    same_json,
)
from .cancel import CancelOps
from .core import CoreOps
from .eventlog import EventlogOps
from .idempotency import IdempotencyOps
from .inbox import InboxOps
from .lanes import LanesOps
from .lease import LeaseOps
from .logread import LogreadOps
from .outbox import OutboxOps
from .recovery import RecoveryOps
from .retry import RetryOps
from .spawn import SpawnOps
from .trail import TrailOps
from .waiting import WaitingOps
from .wakeups import WakeupsOps


class Model(CoreOps, TrailOps, CancelOps, LeaseOps, WaitingOps, RetryOps, IdempotencyOps, InboxOps, OutboxOps,
            EventlogOps, RecoveryOps, LanesOps, WakeupsOps, SpawnOps, AskOps, LogreadOps):
    """The contract as a state machine.  ``profiles`` limits which clauses may be reported."""


# one class per profile of the contract, in the contract's order
PROFILE_OPS: tuple[type[ModelBase], ...] = Model.__bases__


__all__ = [
    "ANY", "PROFILE_OPS", "TOLERANCE", "Accept", "Expectation", "Indefinite", "Model", "ModelBase",
    "Outcome", "Refuse", "UnknownClause", "Violation", "dispatch_table", "fold", "same_json",
]
