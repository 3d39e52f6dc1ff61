"""Arguments for the stateful machine, drawn from the contract's own ``args``.

Every operation's arguments are described in the contract (name, type, required or not; see
spec/args.py for what each type means).  ``ArgDraws.call(op, ...)`` turns that description into
a hypothesis strategy for the arguments a rule does not take from the machine's state (work ids,
tokens, effect keys, message ids): each optional argument is drawn both present and absent,
strings come from small faker-made pools together with their edges (another case, leading and
trailing whitespace, the other Unicode normalization form, an astral character, empty where the
type allows it), and numbers at their bounds (the last valid value and the first invalid one).
Nothing here is written per operation: a new operation or argument in the contract is drawn
the same way.

Every argument is one hypothesis choice: an index into the list of its values, in which an
optional argument's absence takes half the places and a string's edges half of the rest (weights
by repetition, see ``weighted``).  Absence comes first and a pool's first value next, so a
failing program shrinks to the arguments left out, then to plain values.  A choice less a step
is engine work less a step: hypothesis replays, mutates and simulates every choice of every
example, and its optimiser walks them all again.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Collection, Sequence
from typing import Any

from faker import Faker
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy
from ledgercheck.spec import Spec
from ledgercheck.transport.clock import QUANTUM

ASTRAL = "\U0001d11e"  # MUSICAL SYMBOL G CLEF: outside the basic multilingual plane (a UTF-16 surrogate pair)


class _Absent:
    """An optional argument left out of a call (never sent: ``ArgDraws.call`` drops it)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


def weighted(*groups: Sequence[Any]) -> list[Any]:
    """One list drawing each group with the same probability, and each value uniformly within its
    group: every group repeated (a list of a few dozen places, one hypothesis choice, which draws
    an index below 256 uniformly).  The first group's first value comes first (the shrink target)."""
    groups = tuple(g for g in groups if g)
    n = math.lcm(*(len(g) for g in groups))
    return [v for g in groups for v in list(g) * (n // len(g))]


class Pools:
    """Faker-made values, generated once per machine class from a fixed seed."""

    def __init__(self, seed: int = 1234) -> None:
        fk = Faker()
        fk.seed_instance(seed)
        ids = [f"{fk.user_name()}-{fk.random_int(100, 999)}" for _ in range(4)]
        # distinct units whose ids differ only by case, and one beyond ASCII
        self.source_ids = [*ids, ids[0].upper(), f"{ids[1]}-ünï"]
        self.run_ids = [fk.date_this_year().isoformat() for _ in range(3)]
        self.payloads = [{"text": fk.sentence(), "from": fk.email()} for _ in range(2)] + [
            # nulls (top level and nested), a nested object, non-ASCII text: kept as they are
            {"text": fk.sentence(), "reply_to": None, "meta": {"lang": "fr", "thread": None, "tags": []}},
            {"text": "réunion à 10h ✓", "from": fk.email(), "cc": [None]},
        ] + [{"amount": 10}, {"amount": 11}]
        self.owners = [f"worker-{fk.first_name().lower()}" for _ in range(3)]
        self.refs = [f"{fk.uri_path()}#{fk.random_int(1, 99)}" for _ in range(3)]
        self.tools = ["email.send", "calendar.create", "github.comment", "llm.call"]
        name = fk.first_name().lower()
        # three senders: one beyond ASCII and one differing from another only by case
        self.senders = [name, f"{fk.first_name().lower()}-ø", name.capitalize()]
        self.destinations = [f"telegram:{fk.random_int(1000, 9999)}", f"mail:{fk.email()}"]
        self.texts = ["user asked", "operator", "upstream said no", "réessayer à 10h"]
        self.kinds = ["run.started", "tool.called"]
        self.provider_refs = [f"prov-{fk.random_int(1, 99)}" for _ in range(2)]

    def named(self, arg: str) -> list[Any] | None:
        """The pool an argument of this name draws from (None: the type's own values)."""
        return {
            "source_id": self.source_ids, "source_run_id": self.run_ids, "owner": self.owners, "ref": self.refs,
            "tool": self.tools, "sender": self.senders, "destination": self.destinations, "kind": self.kinds,
            "provider_ref": self.provider_refs, "payload": self.payloads, "input": self.payloads, "body": self.payloads,
            "result": [{"ok": 1}, {"provider_id": "p-1", "extra": None}, None, "done", [1, 2]],
        }.get(arg)


def edges(s: str, allow_empty: bool) -> list[str]:
    """``s`` and the strings a careless ledger confuses with it: each is a different value
    (identifiers and keys compare exactly, code point by code point)."""
    out = [s.swapcase(), f" {s}", f"{s} ", unicodedata.normalize("NFD", s), unicodedata.normalize("NFC", s), s + ASTRAL]
    if allow_empty:
        out.append("")
    return [v for v in dict.fromkeys(out) if v != s]


def nfd_variant(s: str) -> str:
    """A value with a precomposed letter, so that NFC and NFD differ."""
    return s if unicodedata.normalize("NFD", s) != s else f"{s}-é"


class ArgDraws:
    """Hypothesis strategies for an operation's arguments, from its description in the contract."""

    ENUMS = {"source_system": "source_systems", "status": "statuses", "terminal_status": "terminal_statuses",
             "waiting_kind": "waiting_statuses", "error_class": "error_classes", "step_class": "step_classes",
             "receipt_state": "receipt_states", "wakeup_kind": "wakeup_kinds"}

    def __init__(self, spec: Spec, pools: Pools, policies: list[Any]) -> None:
        self.spec = spec
        self.pools = pools
        self.policies = policies

    def strings(self, name: str, typ: str) -> list[str]:
        """A pool's values as they are half the time, one of their edges the other half."""
        pool = self.pools.named(name) or self.pools.texts
        pool = [v for v in pool if isinstance(v, str)]
        # empty where the type allows it: the contract says what it means where a record may hold
        # null (an empty run id is none, stored as null; an empty owner is the name '')
        allow_empty = typ == "string"
        first = nfd_variant(pool[0])
        edge = [v for v in edges(first, allow_empty) if typ != "nonempty_string" or v.strip()]
        return weighted(pool, [first, *edge])

    def values(self, name: str, typ: str) -> list[Any]:
        """The values an argument is drawn from, repeated by weight (``value`` draws one)."""
        spec = self.spec
        pool = self.pools.named(name)
        if typ in self.ENUMS:
            valid = list(getattr(spec, self.ENUMS[typ]))
            # and one value of the right kind that this argument does not accept (a leased status
            # for a close-out's terminal one): the refusal gets checked
            wrong = [s for s in spec.statuses if s not in valid][:1] if typ == "terminal_status" else []
            return valid + wrong
        if typ in ("string", "nonempty_string"):
            return self.strings(name, typ)
        if typ == "priority":
            lo, hi = spec.priority_min, spec.priority_max
            return [lo - 1, lo, (lo + hi) // 2, hi, hi + 1]
        if typ == "positive_int":
            return [1, 2, 4, 0]
        if typ == "nonnegative_int":
            return [0, 1, spec.first_seq, 2]
        if typ == "duration":
            return [QUANTUM, 60.0, 600.0]
        if typ == "time":
            return [0.0, 1.0]
        if typ == "boolean":
            return [False, True]
        if typ == "retry_policy":
            return list(self.policies)
        if typ == "effect_key":
            key = spec.input_hash({"unknown": name})
            return [key, key.upper()]  # a key nobody holds, and one that is not lowercase hex
        if typ in ("object", "any"):
            return [v for v in pool or self.pools.payloads if typ == "any" or isinstance(v, dict)]
        raise ValueError(f"the contract's argument {name!r} has a type the stateful machine cannot draw: {typ!r}")

    def value(self, name: str, typ: str) -> SearchStrategy[Any]:
        """One value of the argument, in one choice."""
        return st.sampled_from(self.values(name, typ))

    def plain(self, name: str, typ: str) -> Any:
        """One valid value of the argument, as the pools give it (no edge): what a clause test sends
        for an optional argument it wants present."""
        if typ in self.ENUMS:
            return next(iter(getattr(self.spec, self.ENUMS[typ])))
        pool = self.pools.named(name)
        if typ in ("string", "nonempty_string"):
            return next(v for v in (pool or self.pools.texts) if isinstance(v, str))
        if typ in ("object", "any"):
            return next(v for v in (pool or self.pools.payloads) if typ == "any" or isinstance(v, dict))
        return {"priority": self.spec.priority_default, "positive_int": 1, "nonnegative_int": self.spec.first_seq,
                "duration": 60.0, "time": 0.0, "boolean": True, "retry_policy": {},
                "effect_key": self.spec.input_hash({"unknown": name})}[typ]

    def string_forms(self, name: str, typ: str) -> list[str]:
        """A pool's first value (given a letter whose NFC and NFD differ) and its edges, every one a
        value of its own: the forms a clause test sends to see each stored and returned as given."""
        first = nfd_variant(next(v for v in (self.pools.named(name) or self.pools.texts) if isinstance(v, str)))
        return [first, *(v for v in edges(first, typ == "string") if typ != "nonempty_string" or v.strip())]

    def call(self, op: str, taken: Collection[str] = ()) -> SearchStrategy[dict[str, Any]]:
        """The arguments of ``op`` that a rule does not supply itself (``taken``, and ``now``,
        which the harness sets): required ones always, optional ones present or absent, each
        argument in one choice (an optional one absent half the time)."""
        draws = tuple((name, st.sampled_from(vals if arg.required else weighted([ABSENT], vals)))
                      for name, arg in self.spec.operations[op].args.items() if name not in taken and name != "now"
                      for vals in [self.values(name, arg.type)])

        # a composite, not a mapped tuple: hypothesis prints the arguments as the dict they are (a
        # map prints as a call of its function over the drawn tuple); the default argument gives
        # every operation's draw a label of its own (hypothesis labels a composite by its function)
        @st.composite
        def arguments(draw: Any, _op: str = op) -> dict[str, Any]:
            out = {}
            for name, values in draws:
                v = draw(values)
                if v is not ABSENT:
                    out[name] = v
            return out

        return arguments()
