"""Safety-campaign histories: the record types, a cheap writer and a bounded reader.

A history is JSON lines (the format is ``ledgercheck-history/1``, described in docs/safety.md):
one ``meta`` record first, then ``invoke``/``complete`` pairs of ledger operations, ``effect``
records from the harness's effect sink, ``nemesis`` records of injected faults, and one
``final`` record with the snapshot read after the faults stopped and recovery had its chance.

Writing from several processes: each process opens its own :class:`HistoryWriter` on its own
file (``history.<process>.jsonl``, see :func:`process_path`) and every record goes to the file
in one ``write`` call as soon as it is made, so a SIGKILL loses nothing that was recorded (no
Python-level buffer to lose) and the cost is one system call per record.  The controller then
joins the files with :func:`merge_histories`, which sorts by ``t`` (CLOCK_MONOTONIC, shared by
every process on the machine) and renumbers operation ids so that they are unique in the
merged history.  A single writer shared by several processes on one file also works (each
record is one ``O_APPEND`` write), provided each process is given its own ``id_offset``.

:func:`load_history` refuses malformed input with one line naming ``file:line`` and the
problem (:class:`HistoryError`): a file or line over the size limits, bad JSON, an unknown
record type, a missing or mistyped field, a second meta or final, an operation id used twice,
a ``complete`` with no ``invoke`` (or a second one), a last line cut off mid-record (the history
ends abruptly).  A history without its final record loads (``History.final`` is None); the
checker calls its verdict INCONCLUSIVE.  It decodes and validates every line in C
with msgspec, into one row struct per record (:data:`Row`); record objects (the dataclasses
below) are built from rows only when asked for.
"""

from __future__ import annotations

import gc
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, NamedTuple

import msgspec
import orjson

FORMAT = "ledgercheck-history/1"
OUTCOMES = ("ok", "refused", "indefinite")
FAULTS = ("kill", "pause", "resume", "reopen", "partition", "heal", "takeover")  # nemesis records (docs/safety.md)
MAX_FILE_BYTES = 1 << 30  # 1 GiB
MAX_LINE_BYTES = 1 << 26  # 64 MiB: the final record holds every item


class HistoryError(Exception):
    """A history file cannot be used; ``str()`` is one line naming file:line and the problem."""

    def __init__(self, path: str, line: int | None, problem: str) -> None:
        self.path = path
        self.line = line
        self.problem = problem
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {problem}")


# ------------------------------------------------------------------------------------ records
@dataclass(slots=True)
class Meta:
    format: str
    adapter: dict[str, Any]
    declared: dict[str, Any]
    timings: dict[str, Any]
    seed: int | None = None
    workers: int | None = None
    items: int | None = None
    nemesis: dict[str, Any] | None = None
    line: int = field(default=0, compare=False)
    type: str = field(default="meta", init=False)

    @property
    def delivery(self) -> str:
        return str(self.declared.get("delivery") or "at-least-once")

    @property
    def reclaim(self) -> str:
        return str(self.declared.get("reclaim") or "lease")

    @property
    def ttl(self) -> float:
        return float(self.timings.get("ttl") or 0.0)

    @property
    def grace(self) -> float:
        return float(self.timings.get("grace") or 0.0)


@dataclass(slots=True)
class Invoke:
    id: int
    process: str
    op: str
    args: dict[str, Any]
    t: float
    now: float | None = None
    line: int = field(default=0, compare=False)
    type: str = field(default="invoke", init=False)


@dataclass(slots=True)
class Complete:
    id: int
    process: str
    op: str
    outcome: str  # ok | refused | indefinite
    t: float
    result: Any = None
    error: Any = None
    line: int = field(default=0, compare=False)
    type: str = field(default="complete", init=False)


@dataclass(slots=True)
class Effect:
    process: str
    work_id: str
    key: str
    applied: bool
    t: float
    count: int | None = None
    line: int = field(default=0, compare=False)
    type: str = field(default="effect", init=False)


@dataclass(slots=True)
class Nemesis:
    fault: str
    t: float
    process: str | None = None
    point: Any = None
    line: int = field(default=0, compare=False)
    type: str = field(default="nemesis", init=False)


@dataclass(slots=True)
class Final:
    t: float
    items: dict[str, Any]
    recovery: dict[str, Any] = field(default_factory=dict)
    line: int = field(default=0, compare=False)
    type: str = field(default="final", init=False)


Record = Meta | Invoke | Complete | Effect | Nemesis | Final


# ---------------------------------------------------------------------------- rows (the wire)
# What load_history keeps of each line: a msgspec Struct per record type, decoded and validated in
# C by msgspec (one tagged union on the "type" field).  They hold the same fields with the same
# accepted JSON types as the records above and as _SCHEMA below (int | float keeps an integer an
# integer; bool is neither int nor float to msgspec, as to the checks below); fields the format
# does not name are skipped, as from_dict skips them.  gc=False: a row holds only JSON values, so it
# is never part of a cycle and the collector need not track it.
class MetaRow(msgspec.Struct, tag_field="type", tag="meta", gc=False):
    kind: ClassVar[str] = "meta"
    format: str
    adapter: dict[str, Any]
    declared: dict[str, Any]
    timings: dict[str, Any]
    seed: int | None = None
    workers: int | None = None
    items: int | None = None
    nemesis: dict[str, Any] | None = None


class InvokeRow(msgspec.Struct, tag_field="type", tag="invoke", gc=False):
    kind: ClassVar[str] = "invoke"
    id: int
    process: str
    op: str
    args: dict[str, Any]
    t: int | float
    now: int | float | None = None


class CompleteRow(msgspec.Struct, tag_field="type", tag="complete", gc=False):
    kind: ClassVar[str] = "complete"
    id: int
    process: str
    op: str
    outcome: Literal["ok", "refused", "indefinite"]
    t: int | float
    result: Any = None
    error: Any = None


class EffectRow(msgspec.Struct, tag_field="type", tag="effect", gc=False):
    kind: ClassVar[str] = "effect"
    process: str
    work_id: str
    key: str
    applied: bool
    t: int | float
    count: int | None = None


class NemesisRow(msgspec.Struct, tag_field="type", tag="nemesis", gc=False):
    kind: ClassVar[str] = "nemesis"
    fault: str
    t: int | float
    process: str | None = None
    point: Any = None


class FinalRow(msgspec.Struct, tag_field="type", tag="final", gc=False):
    kind: ClassVar[str] = "final"
    t: int | float
    items: dict[str, Any]
    recovery: dict[str, Any] | None = None


Row = MetaRow | InvokeRow | CompleteRow | EffectRow | NemesisRow | FinalRow
_ROWS: dict[str, type[Row]] = {c.kind: c for c in (MetaRow, InvokeRow, CompleteRow, EffectRow, NemesisRow, FinalRow)}
_DECODE_LINES = msgspec.json.Decoder(Row).decode_lines
_DECODE_ONE = msgspec.json.Decoder(Row).decode

# type -> (class, required fields with their accepted JSON types, optional fields)
_NUM = (int, float)
_SCHEMA: dict[str, tuple[type, dict[str, tuple[type, ...]], dict[str, tuple[type, ...]]]] = {
    "meta": (Meta, {"format": (str,), "adapter": (dict,), "declared": (dict,), "timings": (dict,)},
             {"seed": (int, type(None)), "workers": (int, type(None)), "items": (int, type(None)),
              "nemesis": (dict, type(None))}),
    "invoke": (Invoke, {"id": (int,), "process": (str,), "op": (str,), "args": (dict,), "t": _NUM},
               {"now": (int, float, type(None))}),
    "complete": (Complete, {"id": (int,), "process": (str,), "op": (str,), "outcome": (str,), "t": _NUM},
                 {"result": (object,), "error": (object,)}),
    "effect": (Effect, {"process": (str,), "work_id": (str,), "key": (str,), "applied": (bool,), "t": _NUM},
               {"count": (int, type(None))}),
    "nemesis": (Nemesis, {"fault": (str,), "t": _NUM}, {"process": (str, type(None)), "point": (object,)}),
    "final": (Final, {"t": _NUM, "items": (dict,)}, {"recovery": (dict, type(None))}),
}


def to_dict(rec: Record) -> dict[str, Any]:
    """The JSON object of a record, as written to a history file."""
    kind = rec.type
    _cls, required, optional = _SCHEMA[kind]
    out: dict[str, Any] = {"type": kind}
    for name in (*required, *optional):
        out[name] = getattr(rec, name)
    return out


def from_dict(obj: Mapping[str, Any], line: int = 0, path: str = "<history>") -> Record:
    """Build a record from its JSON object; raises HistoryError naming what is wrong."""
    kind = obj.get("type")
    spec = _SCHEMA.get(kind) if isinstance(kind, str) else None
    if spec is None:
        raise HistoryError(path, line, f"unknown record type {kind!r} (expected one of {', '.join(_SCHEMA)})")
    cls, required, optional = spec
    kwargs: dict[str, Any] = {}
    for name, types in required.items():
        if name not in obj:
            raise HistoryError(path, line, f"{kind} record lacks the field {name!r}")
        value = obj[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise HistoryError(path, line, f"{kind} field {name!r} has the wrong type ({type(value).__name__})")
        kwargs[name] = value
    for name, types in optional.items():
        if name in obj:
            value = obj[name]
            if object not in types and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
                raise HistoryError(path, line, f"{kind} field {name!r} has the wrong type ({type(value).__name__})")
            kwargs[name] = value
    if kind == "final" and kwargs.get("recovery") is None:
        kwargs["recovery"] = {}
    if kind == "complete" and kwargs["outcome"] not in OUTCOMES:
        raise HistoryError(path, line, f"complete outcome {kwargs['outcome']!r} is not one of {', '.join(OUTCOMES)}")
    if kind == "meta" and kwargs["format"] != FORMAT:
        raise HistoryError(path, line, f"unsupported history format {kwargs['format']!r} (this reader reads {FORMAT})")
    return cls(line=line, **kwargs)


_FIELDS = {kind: (cls, (*required, *optional)) for kind, (cls, required, optional) in _SCHEMA.items()}


def _build(row: Row, line: int) -> Record:
    """The record of a row (already validated, as every row of a History is): what from_dict
    builds, without checking again."""
    cls, names = _FIELDS[row.kind]
    kwargs = {name: getattr(row, name) for name in names}
    if cls is Final and kwargs["recovery"] is None:
        kwargs["recovery"] = {}
    return cls(line=line, **kwargs)


def _row(rec: Record) -> Row:
    """The row of a record (what load_history would keep of its line)."""
    return _ROWS[rec.type](**{name: getattr(rec, name) for name in _FIELDS[rec.type][1]})


# ------------------------------------------------------------------------------------ history
class OpRows(NamedTuple):
    invokes: list[int]  # the row of every invoke, in order
    completes: dict[int, int]  # operation id -> the row of its completion
    others: list[int]  # the rows of effect and nemesis records, in order


class History:
    """A whole history: the meta record, every record in file order, the final record.

    ``rows`` holds each record's row (a :data:`Row` struct, validated), in file order.  Record objects are built
    from them when asked for (:meth:`record`, :attr:`records`), once each, so the same row always
    gives the same object: the checker reads the rows and builds records only for the excerpts
    it reports.
    """

    __slots__ = ("meta", "final", "path", "rows", "_lines", "_built", "_ops")

    def __init__(self, meta: Meta, rows: list[Row], final: Final | None, path: str = "<history>",
                 lines: list[int] | None = None, built: dict[int, Record] | None = None,
                 ops: OpRows | None = None) -> None:
        self.meta = meta
        self.final = final
        self.path = path
        self.rows = rows
        self._lines = lines  # the file line of each row; None: row i is line i + 1
        self._built: dict[int, Record] = built if built is not None else {}
        self._ops = ops

    def op_rows(self) -> OpRows:
        """Where the operations are: the invoke rows in order, the completion row of each
        operation id, and the rows of every other record (effects, nemesis) in order."""
        if self._ops is None:
            invokes: list[int] = []
            completes: dict[int, int] = {}
            others: list[int] = []
            for i, obj in enumerate(self.rows):
                kind = obj.kind
                if kind == "invoke":
                    invokes.append(i)
                elif kind == "complete":
                    completes[obj.id] = i  # type: ignore[union-attr]
                elif kind == "effect" or kind == "nemesis":
                    others.append(i)
            self._ops = OpRows(invokes, completes, others)
        return self._ops

    def line(self, i: int) -> int:
        """The file line of row `i`."""
        return i + 1 if self._lines is None else self._lines[i]

    def record(self, i: int) -> Record:
        """The record of row `i` (built on first use, the same object after that)."""
        rec = self._built.get(i)
        if rec is None:
            rec = self._built[i] = _build(self.rows[i], self.line(i))
        return rec

    @property
    def records(self) -> list[Record]:
        """Every record, in file order."""
        return [self.record(i) for i in range(len(self.rows))]

    @classmethod
    def of(cls, records: Iterable[Record | Mapping[str, Any]], path: str = "<history>") -> History:
        """A history from records or their JSON objects, validated like a file."""
        recs = [r if not isinstance(r, Mapping) else from_dict(r, i + 1, path) for i, r in enumerate(records)]
        meta, final = _validate(recs, path)
        return cls(meta, [_row(r) for r in recs], final, path, [r.line or i + 1 for i, r in enumerate(recs)],
                   dict(enumerate(recs)))


def _validate(records: list[Record], path: str) -> tuple[Meta, Final | None]:
    meta: Meta | None = None
    final: Final | None = None
    invokes: set[int] = set()
    completed: set[int] = set()
    for i, rec in enumerate(records):
        line = rec.line or i + 1
        kind = rec.type
        if kind == "meta":
            if meta is not None:
                raise HistoryError(path, line, "a second meta record (a history has exactly one, first)")
            if i != 0:
                raise HistoryError(path, line, "the meta record must come first")
            meta = rec  # type: ignore[assignment]
        elif meta is None:
            raise HistoryError(path, line, "the history does not start with a meta record")
        elif final is not None:
            raise HistoryError(path, line, f"a {kind} record after the final record")
        elif kind == "invoke":
            if rec.id in invokes:  # type: ignore[union-attr]
                raise HistoryError(path, line, f"operation id {rec.id} is invoked twice")  # type: ignore[union-attr]
            invokes.add(rec.id)  # type: ignore[union-attr]
        elif kind == "complete":
            if rec.id not in invokes:  # type: ignore[union-attr]
                raise HistoryError(path, line, f"complete of operation id {rec.id} has no earlier invoke")  # type: ignore[union-attr]
            if rec.id in completed:  # type: ignore[union-attr]
                raise HistoryError(path, line, f"operation id {rec.id} is completed twice")  # type: ignore[union-attr]
            completed.add(rec.id)  # type: ignore[union-attr]
        elif kind == "final":
            final = rec  # type: ignore[assignment]
    if meta is None:
        raise HistoryError(path, None, "empty history (no meta record)")
    return meta, final


def load_history(path: str | os.PathLike[str], *, max_bytes: int = MAX_FILE_BYTES,
                 max_line: int = MAX_LINE_BYTES) -> History:
    """Read and validate a history file; raises HistoryError (one line: file:line: problem)."""
    name = str(path)
    try:
        size = os.path.getsize(name)
        if size > max_bytes:
            raise HistoryError(name, None, f"file is {size} bytes, over the limit of {max_bytes}")
        with open(name, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise HistoryError(name, None, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > max_bytes:  # grew after the size was taken
        raise HistoryError(name, None, f"file is over the limit of {max_bytes} bytes")
    if len(data) > max_line:  # no line is longer than the file
        lines = data.split(b"\n")
        if max(map(len, lines)) > max_line:
            n = next(i for i, raw in enumerate(lines, start=1) if len(raw) > max_line)
            raise HistoryError(name, n, f"line is {len(lines[n - 1])} bytes, over the limit of {max_line}")
    with no_gc():
        return _read(data, name)


def _read(data: bytes, name: str) -> History:
    """Parse and validate every record in one C-level pass (msgspec decodes each line into its
    row struct, checking every field's presence and type and the record type), then check the
    history's shape: a meta record first (of this format), an operation id invoked once and
    completed at most once after its invoke, nothing after the final record.  Whatever msgspec
    refuses is named by :func:`_diagnose`, the reader's record-by-record check, so a bad file gets
    the same one-line message, naming its line, as ever."""
    try:
        rows = _DECODE_LINES(data)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):  # ValidationError is a DecodeError too
        lines = data.split(b"\n")
        try:
            _diagnose(lines, name)  # raises, naming the line and the problem
        except HistoryError as exc:
            if exc.line == len(lines) and exc.problem.startswith("not JSON") and not data.endswith(b"\n"):
                raise HistoryError(name, exc.line, "the last line is cut off mid-record: the history ends abruptly "
                                                   "(an interrupted campaign's, or copied while it was written)") from None
            raise
        raise _refusal(data, name) from None  # what only msgspec refuses
    numbers = None  # row i is line i + 1, unless msgspec skipped blank lines
    if len(rows) != data.count(b"\n") + (not data.endswith(b"\n")):
        numbers = [n for n, raw in enumerate(data.split(b"\n"), start=1) if raw.strip()]

    def line(idx: int) -> int:
        return idx + 1 if numbers is None else numbers[idx]

    if not rows:
        raise HistoryError(name, None, "empty history (no meta record)")
    meta_row = rows[0]
    if type(meta_row) is not MetaRow:
        raise HistoryError(name, line(0), "the history does not start with a meta record")
    if meta_row.format != FORMAT:
        raise HistoryError(name, line(0), f"unsupported history format {meta_row.format!r} (this reader reads {FORMAT})")
    meta: Meta = _build(meta_row, line(0))  # type: ignore[assignment]
    built: dict[int, Record] = {0: meta}
    ops = _op_rows(rows, name, line)
    final: Final | None = None
    if type(rows[-1]) is FinalRow:
        final = built[len(rows) - 1] = _build(rows[-1], line(len(rows) - 1))  # type: ignore[assignment]
    return History(meta, rows, final, name, numbers, built, ops)


def _op_rows(rows: list[Row], name: str, line: Callable[[int], int]) -> OpRows:
    """Where the operations are, checking the history's shape after its meta record (no second
    meta record, nothing after the final record, every operation id invoked once and completed at
    most once after its invoke): raises HistoryError naming the first line where it is wrong."""
    invoked: dict[int, int] = {}  # operation id -> the row of its invoke
    completes: dict[int, int] = {}  # operation id -> the row of its completion
    others: list[int] = []
    for idx, row in enumerate(rows):
        cls = type(row)
        if cls is InvokeRow:
            i = row.id
            if i in invoked:
                raise HistoryError(name, line(idx), f"operation id {i} is invoked twice")
            invoked[i] = idx
        elif cls is CompleteRow:
            i = row.id
            if i not in invoked:
                raise HistoryError(name, line(idx), f"complete of operation id {i} has no earlier invoke")
            if i in completes:
                raise HistoryError(name, line(idx), f"operation id {i} is completed twice")
            completes[i] = idx
        elif cls is MetaRow:
            if idx:
                raise HistoryError(name, line(idx), "a second meta record (a history has exactly one, first)")
        elif cls is FinalRow:
            if idx + 1 < len(rows):  # anything after it
                raise HistoryError(name, line(idx + 1), f"a {rows[idx + 1].kind} record after the final record")
        else:
            others.append(idx)
    return OpRows(list(invoked.values()), completes, others)


def _refusal(data: bytes, name: str) -> HistoryError:
    """What msgspec refuses and the record-by-record check lets through (a field given twice, the
    first time with the wrong type; nesting deeper than Python's recursion limit), as a
    HistoryError naming the line (found by decoding line by line) and the field."""
    decode = _DECODE_ONE
    for n, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            decode(raw)
        except UnicodeDecodeError:  # msgspec checks the UTF-8 of strings as it reads them
            return HistoryError(name, n, "not UTF-8 text (inside a string)")
        except (msgspec.DecodeError, RecursionError) as exc:
            text = str(exc)
            m = re.search(r" - at `\$\.?([^`]*)`$", text)
            if m is None:
                return HistoryError(name, n, f"not JSON ({text})")
            return HistoryError(name, n, f"{text[:m.start()]}" + (f" (field {m.group(1)!r})" if m.group(1) else ""))
    return HistoryError(name, None, "the decoder refuses the file, though no line of it alone")


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many objects that all stay alive (every
    record of a history): otherwise each of its passes walks everything built so far, and the
    time grows with the square of the history.  Reference counting still frees what dies.

    On the way out, what was built moves straight to the oldest generation (``gc.freeze()`` then
    ``gc.unfreeze()``, unless the process keeps objects frozen on purpose): the young
    generations' next passes would otherwise walk all of it, a few tenths of a second for a
    100,000-operation history, to find no cycle (parsed JSON has none)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            if not gc.get_freeze_count():
                gc.freeze()
                gc.unfreeze()
            gc.enable()


_NUMS = (int, float)


def _parse(lines: list[bytes], name: str) -> tuple[list[Any], list[int] | None]:
    """Every line's JSON value, and each one's line number (None: value i is line i + 1).

    All lines are parsed in one C-level pass; only when that fails (a blank line inside the
    file, or a line that is not JSON) are they parsed one by one, to skip the blank lines and
    name the bad one."""
    if lines and not lines[-1]:
        lines = lines[:-1]  # the newline ending the last line
    loads = orjson.loads
    try:
        return list(map(loads, lines)), None
    except orjson.JSONDecodeError:
        pass
    values: list[Any] = []
    numbers: list[int] = []
    for n, raw in enumerate(lines, start=1):
        try:
            values.append(loads(raw))
        except orjson.JSONDecodeError as exc:
            if not raw.strip():
                continue
            raise HistoryError(name, n, f"not JSON ({exc})") from None
        numbers.append(n)
    return values, numbers


def _diagnose(lines: list[bytes], name: str) -> None:
    """Name what is wrong with a history msgspec refused, record by record in file order (the
    reader's checks written out in Python: the same checks as the row structs and _read make, with
    a message for each): raises HistoryError naming the first bad line.  Invokes, completes,
    effects and nemesis records take a fast path with the same checks from_dict makes; anything
    else, or anything odd, goes through from_dict, which names the problem."""
    rows, numbers = _parse(lines, name)

    def line(idx: int) -> int:
        return idx + 1 if numbers is None else numbers[idx]

    if rows and type(rows[0]) is dict and rows[0].get("type") in _FAST:  # as the loop would find it
        from_dict(rows[0], line(0), name)  # names what is wrong with it, if anything
        raise HistoryError(name, line(0), "the history does not start with a meta record")
    built: dict[int, Record] = {}
    invoked: dict[int, int] = {}  # operation id -> the row of its invoke
    completes: dict[int, int] = {}  # operation id -> the row of its completion
    others: list[int] = []
    meta: Meta | None = None
    nums = _NUMS
    outcomes = OUTCOMES
    for idx, obj in enumerate(rows):
        try:
            kind = obj["type"]
        except TypeError:  # of the JSON values, only an object is indexed by a string
            raise HistoryError(name, line(idx), f"a record must be a JSON object, not {type(obj).__name__}") from None
        except KeyError:
            kind = None
        if kind == "invoke":
            try:
                i = obj["id"]
                good = (type(i) is int and type(obj["process"]) is str and type(obj["op"]) is str
                        and type(obj["args"]) is dict and type(obj["t"]) in nums
                        and ((now := obj.get("now")) is None or type(now) in nums))
            except KeyError:
                i, good = None, False
            if not good:
                built[idx] = from_dict(obj, line(idx), name)  # names what is wrong
            if i in invoked:
                raise HistoryError(name, line(idx), f"operation id {i} is invoked twice")
            invoked[i] = idx  # type: ignore[index]
        elif kind == "complete":
            try:
                i = obj["id"]
                good = (type(i) is int and type(obj["process"]) is str and type(obj["op"]) is str
                        and obj["outcome"] in outcomes and type(obj["t"]) in nums)
            except KeyError:
                i, good = None, False
            if not good:
                built[idx] = from_dict(obj, line(idx), name)
            if i not in invoked:
                raise HistoryError(name, line(idx), f"complete of operation id {i} has no earlier invoke")
            if i in completes:
                raise HistoryError(name, line(idx), f"operation id {i} is completed twice")
            completes[i] = idx  # type: ignore[index]
        elif kind == "effect":
            try:
                good = (type(obj["process"]) is str and type(obj["work_id"]) is str and type(obj["key"]) is str
                        and type(obj["applied"]) is bool and type(obj["t"]) in nums
                        and ((c := obj.get("count")) is None or type(c) is int))
            except KeyError:
                good = False
            if not good:
                built[idx] = from_dict(obj, line(idx), name)
            others.append(idx)
        elif kind == "nemesis":
            try:
                good = (type(obj["fault"]) is str and type(obj["t"]) in nums
                        and ((p := obj.get("process")) is None or type(p) is str))
            except KeyError:
                good = False
            if not good:
                built[idx] = from_dict(obj, line(idx), name)
            others.append(idx)
        else:
            rec = built[idx] = from_dict(obj, line(idx), name)
            if kind == "meta":
                if meta is not None:
                    raise HistoryError(name, line(idx), "a second meta record (a history has exactly one, first)")
                meta = rec  # type: ignore[assignment]
            elif meta is None:
                raise HistoryError(name, line(idx), "the history does not start with a meta record")
            elif kind == "final":
                if idx + 1 < len(rows):  # anything after it
                    nxt = rows[idx + 1]
                    if type(nxt) is not dict:
                        raise HistoryError(name, line(idx + 1),
                                           f"a record must be a JSON object, not {type(nxt).__name__}")
                    raise HistoryError(name, line(idx + 1), f"a {nxt.get('type')} record after the final record")
    if meta is None:
        raise HistoryError(name, None, "empty history (no meta record)")


_FAST = ("invoke", "complete", "effect", "nemesis")  # the record types _read checks on its fast path


# ------------------------------------------------------------------------------------- writer
def process_path(directory: str | os.PathLike[str], process: str) -> Path:
    """Where one process's history goes: ``<directory>/history.<process>.jsonl``."""
    return Path(directory) / f"history.{process}.jsonl"


class HistoryWriter:
    """Appends records to one history file, one ``write`` call per record.

    ``t0`` is the campaign's start on CLOCK_MONOTONIC (``time.monotonic()`` in the controller,
    handed to every worker), so ``t`` agrees across processes.  ``buffered=True`` keeps records
    in memory until :meth:`flush` (for a controller that flushes at safe points); the default
    writes each record at once, so a SIGKILL of the process loses none.
    """

    def __init__(self, path: str | os.PathLike[str], process: str, *, t0: float = 0.0,
                 id_offset: int = 0, buffered: bool = False) -> None:
        self.path = str(path)
        self.process = process
        self.t0 = t0
        self._next_id = id_offset
        self._buffered = buffered
        self._buf: list[bytes] = []
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    # -- low level
    def t(self) -> float:
        return round(time.monotonic() - self.t0, 6)

    def write(self, obj: Mapping[str, Any] | Record) -> None:
        if not isinstance(obj, Mapping):
            obj = to_dict(obj)
        try:
            line = orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS)
        except TypeError:  # what orjson cannot encode (ints over 64 bits, odd types): the slow way
            import json

            from ledgercheck.reports.text import recordable

            # a lone surrogate in an adapter's string is kept as the text \udXXX, which any JSON
            # reader reads back (an escaped lone surrogate is refused by the history's reader)
            line = (json.dumps(recordable(obj, None), default=str, separators=(",", ":")) + "\n").encode()
        if self._buffered:
            self._buf.append(line)
        else:
            os.write(self._fd, line)

    def flush(self) -> None:
        if self._buf:
            os.write(self._fd, b"".join(self._buf))
            self._buf.clear()

    def close(self) -> None:
        if self._fd >= 0:
            self.flush()
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- records
    def meta(self, *, adapter: Mapping[str, Any], declared: Mapping[str, Any], timings: Mapping[str, Any],
             seed: int | None = None, workers: int | None = None, items: int | None = None,
             nemesis: Mapping[str, Any] | None = None) -> None:
        self.write({"type": "meta", "format": FORMAT, "adapter": dict(adapter), "declared": dict(declared),
                    "timings": dict(timings), "seed": seed, "workers": workers, "items": items,
                    "nemesis": dict(nemesis) if nemesis is not None else None})

    def invoke(self, op: str, args: Mapping[str, Any], now: float | None = None) -> int:
        """Record the start of an operation; returns its id for :meth:`complete`."""
        op_id = self._next_id
        self._next_id += 1
        self.write({"type": "invoke", "id": op_id, "process": self.process, "op": op,
                    "args": args, "t": self.t(), "now": now if now is not None else args.get("now")})
        return op_id

    def complete(self, op_id: int, op: str, outcome: str, result: Any = None, error: Any = None) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, not {outcome!r}")
        self.write({"type": "complete", "id": op_id, "process": self.process, "op": op, "outcome": outcome,
                    "result": result, "error": error, "t": self.t()})

    def effect(self, work_id: str, key: str, applied: bool, count: int | None = None) -> None:
        self.write({"type": "effect", "process": self.process, "work_id": work_id, "key": key,
                    "applied": bool(applied), "count": count, "t": self.t()})

    def nemesis(self, fault: str, process: str | None = None, point: Any = None) -> None:
        self.write({"type": "nemesis", "fault": fault, "process": process, "point": point, "t": self.t()})

    def final(self, items: Mapping[str, Any], recovery: Mapping[str, Any] | None = None) -> None:
        self.write({"type": "final", "t": self.t(), "items": dict(items), "recovery": dict(recovery or {})})


# -------------------------------------------------------------------------------------- merge
_RANK = {"meta": 0, "final": 2}


def merge_histories(paths: Iterable[str | os.PathLike[str]], out: str | os.PathLike[str]) -> int:
    """Join per-process history files into one, sorted by ``t``; returns the records written.

    Exactly one input holds the meta record (the controller's) and at most one the final record;
    meta goes first, final last, everything else in ``t`` order (ties keep file order).  Ids are
    renumbered in merged order, so each process may number its operations from 0.  A process
    killed mid-write may leave a partial last line: that line is dropped (its record was never
    complete); any other bad line is refused with HistoryError.
    """
    rows: list[tuple[int, float, int, dict[str, Any], int]] = []  # rank, t, seq, obj, source
    seq = 0
    for src, p in enumerate(paths):
        name = str(p)
        try:
            data = Path(name).read_bytes()
        except OSError as exc:
            raise HistoryError(name, None, f"cannot read: {exc.strerror or exc}") from None
        lines = data.split(b"\n")
        for n, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                if n == len(lines):  # torn last line of a killed writer (no newline after it)
                    continue
                raise HistoryError(name, n, f"not JSON ({exc})") from None
            if not isinstance(obj, dict):
                raise HistoryError(name, n, "a record must be a JSON object")
            t = obj.get("t", 0.0)
            rows.append((_RANK.get(obj.get("type"), 1), float(t) if isinstance(t, (int, float)) else 0.0, seq, obj, src))
            seq += 1
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    ids: dict[tuple[int, Any], int] = {}
    next_id = 0
    with open(out, "wb") as fh:
        for _rank, _t, _seq, obj, src in rows:
            kind = obj.get("type")
            if kind in ("invoke", "complete") and "id" in obj:
                key = (src, obj["id"])
                if kind == "invoke" or key not in ids:  # a restarted process numbering from 0 again
                    ids[key] = next_id
                    next_id += 1
                obj = {**obj, "id": ids[key]}
            fh.write(orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS))
    return len(rows)


def _register() -> None:
    """Let the reports draw timelines from history files (reports import nothing of chaos)."""
    from ledgercheck.reports.timeline import register_history_loader

    register_history_loader(load_history)


_register()
