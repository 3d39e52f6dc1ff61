"""Reading JSON files that come from elsewhere (traces, crash replay files, results files) within bounds.

Such a file is data someone handed over, so before it is parsed its size, its nesting depth and
the number of values it holds are checked against the limits of its kind.  The nesting is
measured by scanning the text without recursion, so a file of a million ``[`` is refused in one
line instead of exhausting the parser's stack, and the size and value caps bound the memory and
time parsing and checking it can take.  The limits count bytes and values, not seconds, so a
file is refused the same way on every machine (docs/inputs.md lists them).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Limits:
    """The bounds of one kind of input file."""

    what: str  # "trace", "crash replay file", ...: named in the messages
    max_bytes: int
    max_depth: int = 64
    max_values: int = 1_000_000  # objects, arrays and strings (keys included)


TRACE = Limits("trace", 64 << 20)
REPLAY = Limits("crash replay file", 64 << 20)
RESULTS = Limits("results file", 64 << 20)
WORKLOAD = Limits("workload file", 64 << 20)  # crash explore --workload


class InputError(ValueError):
    """An input file breaks a bound or cannot be read; the message is one line naming the file."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


def read_limited(path: str | os.PathLike[str], limits: Limits) -> bytes:
    """The bytes of ``path``; InputError when it cannot be read or is longer than the limit."""
    name = os.fspath(path)
    try:
        # a file named on the command line may be a pipe (``<(...)``): the size bound still holds
        with open(path, "rb") as f:
            data = f.read(limits.max_bytes + 1)
    except FileNotFoundError:
        raise InputError(f"{name}: cannot read: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{name}: cannot read: a directory, not a file") from None
    except OSError as exc:
        raise InputError(f"{name}: cannot read: {exc.strerror or exc}") from None
    if len(data) > limits.max_bytes:
        raise InputError(f"{name}: larger than {limits.max_bytes:,} bytes, the limit for a {limits.what}")
    return data


# A JSON string (escapes included) or one bracket.  Outside strings, brackets are the structure.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def shape_problem(text: str, limits: Limits) -> str | None:
    """Why ``text`` nests deeper or holds more values than ``limits`` allow (None when it does not).

    Exact for valid JSON; for text that is not JSON it may name a bound the parser would have
    refused anyway, which is still a refusal.
    """
    depth = values = 0
    for m in _TOKEN.finditer(text):
        c = text[m.start()]
        if c == "]" or c == "}":
            depth -= 1
            continue
        values += 1
        if values > limits.max_values:
            return f"holds more than {limits.max_values:,} values, the limit for a {limits.what}"
        if c != '"':
            depth += 1
            if depth > limits.max_depth:
                line = text.count("\n", 0, m.start()) + 1
                return f"nests deeper than {limits.max_depth} levels at line {line}, the limit for a {limits.what}"
    return None


def more_values_than(value: Any, limit: int) -> bool:
    """Whether ``value`` (parsed JSON) holds more than ``limit`` values, counting every one."""
    count, stack = 0, [value]
    while stack:
        v = stack.pop()
        count += 1
        if count > limit:
            return True
        if isinstance(v, dict):
            stack += v.values()
        elif isinstance(v, list):
            stack += v
    return False


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads_limited(data: bytes, name: str, limits: Limits) -> Any:
    """Parse ``data`` (UTF-8 JSON) within ``limits``; InputError (naming ``name``) otherwise."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{name}: not UTF-8 text (byte {exc.start})") from None
    problem = shape_problem(text, limits)
    if problem:
        raise InputError(f"{name}: {problem}")
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InputError(f"{name}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:  # NaN/Infinity, an integer of too many digits
        raise InputError(f"{name}: not valid JSON: {exc}") from None


def load_limited(path: str | os.PathLike[str], limits: Limits) -> Any:
    """Read and parse a JSON file within ``limits``; InputError naming the file otherwise."""
    return loads_limited(read_limited(path, limits), os.fspath(path), limits)


def adapter_to_run(recorded: Any, given: str | None, source: str) -> str:
    """The adapter a replay runs against: the one named on the command line (``given``), else the
    one the file records when that is an installed adapter's name.  A file is data: an address
    that starts a command (``exec:``) or imports a module (``python:``) runs only when the user
    names it."""
    if given:
        return given
    if not isinstance(recorded, str) or not recorded.strip():
        raise InputError(f"{source}: no adapter recorded; pass --adapter")
    if recorded.startswith(("exec:", "python:")):
        kind = "starts a command" if recorded.startswith("exec:") else "imports a module"
        shown = " ".join(recorded.split())
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise InputError(f"{source}: records adapter {shown!r}, which {kind}; a replay file does not choose code "
                         f"to run: name the adapter with --adapter to replay against it")
    return recorded
