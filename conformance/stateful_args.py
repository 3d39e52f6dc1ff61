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
"""

from __future__ import annotations

import unicodedata
from collections.abc import Collection
from typing import Any

from faker import Faker
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy
from ledgercheck.spec import Spec
from ledgercheck.transport.clock import QUANTUM

ASTRAL = "\U0001d11e"  # MUSICAL SYMBOL G CLEF: outside the basic multilingual plane (a UTF-16 surrogate pair)


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

    def __init__(self, spec: Spec, pools: Pools, policies: list[Any], scale: float = 1.0) -> None:
        """``policies``: retry policies in clock seconds; ``scale``: the run's factor from contract
        seconds to clock seconds (``Harness.scale``), applied once to the durations drawn here
        (written in contract seconds), since the harness sends every duration as given."""
        self.spec = spec
        self.pools = pools
        self.policies = policies
        self.scale = scale

    def strings(self, name: str, typ: str) -> SearchStrategy[str]:
        """A pool's values, most often as they are, sometimes at one of their edges."""
        pool = self.pools.named(name) or self.pools.texts
        pool = [v for v in pool if isinstance(v, str)]
        # empty where the type allows it: the contract says what it means where a record may hold
        # null (an empty run id is none, stored as null; an empty owner is the name '')
        allow_empty = typ == "string"
        first = nfd_variant(pool[0])
        edge = [v for v in edges(first, allow_empty) if typ != "nonempty_string" or v.strip()]
        return st.one_of(st.sampled_from(pool), st.sampled_from([first, *edge]))

    def value(self, name: str, typ: str) -> SearchStrategy[Any]:
        spec = self.spec
        pool = self.pools.named(name)
        if typ in self.ENUMS:
            valid = list(getattr(spec, self.ENUMS[typ]))
            # and one value of the right kind that this argument does not accept (a leased status
            # for a close-out's terminal one): the refusal gets checked
            wrong = [s for s in spec.statuses if s not in valid][:1] if typ == "terminal_status" else []
            return st.sampled_from(valid + wrong)
        if typ in ("string", "nonempty_string"):
            return self.strings(name, typ)
        if typ == "priority":
            lo, hi = spec.priority_min, spec.priority_max
            return st.sampled_from([lo - 1, lo, (lo + hi) // 2, hi, hi + 1])
        if typ == "positive_int":
            return st.sampled_from([1, 2, 4, 0])
        if typ == "nonnegative_int":
            return st.sampled_from([0, 1, spec.first_seq, 2])
        if typ == "duration":
            return st.sampled_from([x * self.scale for x in (QUANTUM, 60.0, 600.0)])
        if typ == "time":
            return st.sampled_from([0.0, 1.0])
        if typ == "boolean":
            return st.booleans()
        if typ == "retry_policy":
            return st.sampled_from(self.policies)
        if typ == "effect_key":
            key = spec.input_hash({"unknown": name})
            return st.sampled_from([key, key.upper()])  # a key nobody holds, and one that is not lowercase hex
        if typ in ("object", "any"):
            vals = [v for v in pool or self.pools.payloads if typ == "any" or isinstance(v, dict)]
            return st.sampled_from(vals)
        raise ValueError(f"the contract's argument {name!r} has a type the stateful machine cannot draw: {typ!r}")

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
                "duration": 60.0 * self.scale, "time": 0.0, "boolean": True, "retry_policy": {},
                "effect_key": self.spec.input_hash({"unknown": name})}[typ]

    def string_forms(self, name: str, typ: str) -> list[str]:
        """A pool's first value (given a letter whose NFC and NFD differ) and its edges, every one a
        value of its own: the forms a clause test sends to see each stored and returned as given."""
        first = nfd_variant(next(v for v in (self.pools.named(name) or self.pools.texts) if isinstance(v, str)))
        return [first, *(v for v in edges(first, typ == "string") if typ != "nonempty_string" or v.strip())]

    def call(self, op: str, taken: Collection[str] = ()) -> SearchStrategy[dict[str, Any]]:
        """The arguments of ``op`` that a rule does not supply itself (``taken``, and ``now``,
        which the harness sets): required ones always, optional ones present or absent."""
        required: dict[str, SearchStrategy[Any]] = {}
        optional: dict[str, SearchStrategy[Any]] = {}
        for name, arg in self.spec.operations[op].args.items():
            if name in taken or name == "now":
                continue
            (required if arg.required else optional)[name] = self.value(name, arg.type)
        return st.fixed_dictionaries(required, optional=optional)
