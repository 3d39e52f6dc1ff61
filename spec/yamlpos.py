"""YAML loading that remembers where every value came from.

PyYAML's constructors drop source positions, but error messages must name ``file:line:col``.
This module composes the node graph and builds plain Python values from it, recording the
position of every mapping key and sequence item under its path (a tuple of keys and indexes).

It is stricter than ``yaml.safe_load`` where silence would hide a mistake in a contract:

* duplicate mapping keys (PyYAML keeps the last one) are errors;
* mapping keys must be strings, so ``404:`` or ``yes:`` do not quietly become numbers or booleans;
* collection tags other than plain maps and sequences (``!!set``, ``!!omap``, ``!custom``) are errors;
* a file is at most ``MAX_BYTES`` long, nesting is limited to ``MAX_DEPTH`` levels, and building
  the document may take at most ``MAX_VALUES`` steps, where a step is a value built or a key taken
  from a merged mapping (``<<``), so aliases and merge keys share one budget; an alias inside the
  node it names is an error.  A hostile file cannot exhaust the stack, memory or time: the limits
  are on work, not on seconds, so the same file is refused the same way on every machine.

Merge keys (``<<: *base``) work as in YAML 1.1: keys written in the mapping win over merged ones,
and among merged mappings the first listed wins.

Parsing uses libyaml when PyYAML was built with it and falls back to the pure-Python parser for
the error message (its messages and positions are the more precise of the two).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class _Yaml:
    """PyYAML, imported on first use: a process that reads a stored parse (load.py) never parses
    YAML, and importing PyYAML is a sixth of a served adapter process's start."""

    def __getattr__(self, name: str) -> Any:
        import yaml as real

        globals()["yaml"] = real
        return getattr(real, name)


yaml: Any = _Yaml()

MAX_BYTES = 4 << 20  # 4 MiB; the shipped contract is about 50 KB
MAX_DEPTH = 64
MAX_VALUES = 50_000

# No integer in a contract has more decimal digits than this (Python's own default limit on
# converting integers to and from text, which messages and JSON need); a hexadecimal or binary
# integer past it is refused as well.
MAX_INT_DIGITS = 4300
_INT_CEILING = 10**MAX_INT_DIGITS
_INT_TEXT = 4 * MAX_INT_DIGITS + 2  # the longest integer text worth converting (binary digits, a prefix)
_INT_TAG = "tag:yaml.org,2002:int"
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _fast_loader() -> type[yaml.SafeLoader] | None:
    return getattr(yaml, "CSafeLoader", None) if yaml.__with_libyaml__ else None


@dataclass(frozen=True)
class Pos:
    file: str
    line: int  # 1-based
    col: int  # 1-based

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class YamlLoadError(Exception):
    """A file could not be read or parsed; ``str()`` is a one-line ``file:line:col: message``."""

    def __init__(self, pos: Pos | None, message: str, file: str = "") -> None:
        self.pos = pos
        self.message = one_line(message)
        self.file = pos.file if pos else file
        where = str(pos) if pos else self.file
        super().__init__(f"{where}: {self.message}")


Path_ = tuple[Any, ...]


def _short(text: str, limit: int) -> str:
    flat = one_line(text)
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def one_line(text: str) -> str:
    """``text`` with line breaks and runs of blanks collapsed, so a message stays on one line."""
    return " ".join(str(text).split())


def _pos_at(file: str, text: str, index: int) -> Pos:
    """Position of character ``index`` of ``text``."""
    index = max(0, min(index, len(text)))
    line = text.count("\n", 0, index) + 1
    start = text.rfind("\n", 0, index) + 1
    return Pos(file, line, index - start + 1)


def _mark(file: str, node: yaml.Node) -> Pos:
    m = node.start_mark
    return Pos(file, m.line + 1, m.column + 1)


def read_text(path: str | Path, display: str | None = None, regular_only: bool = False) -> str:
    """The UTF-8 text of a file; errors name the file (and the line of an undecodable byte).

    ``regular_only`` (for files another file names) refuses devices, pipes and sockets, which
    could block the reader; a file named on the command line may be a pipe (``<(...)``).
    """
    shown = display or str(path)
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError
        if regular_only and not stat.S_ISREG(mode):
            raise YamlLoadError(None, "not a regular file (a device, a pipe or a socket)", file=shown)
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise YamlLoadError(None, "file not found", file=shown) from None
    except IsADirectoryError:
        raise YamlLoadError(None, "is a directory, not a file", file=shown) from None
    except OSError as exc:
        raise YamlLoadError(None, f"cannot read: {exc.strerror or exc}", file=shown) from None
    if len(data) > MAX_BYTES:
        raise YamlLoadError(None, f"larger than {MAX_BYTES:,} bytes, the limit for a contract file", file=shown)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        good = data[: exc.start].decode("utf-8")
        pos = _pos_at(shown, good, len(good))
        raise YamlLoadError(pos, f"not UTF-8 text: byte 0x{data[exc.start]:02x} {exc.reason}", file=shown) from None


def load_yaml(path: str | Path, display: str | None = None) -> tuple[Any, dict[Path_, Pos]]:
    """Load one YAML document; return (value, positions by path)."""
    shown = display or str(path)
    return loads_yaml(read_text(path, shown), shown)


def loads_yaml(text: str, file: str) -> tuple[Any, dict[Path_, Pos]]:
    """Parse one YAML document from ``text``; positions name ``file``."""
    node = _compose(text, file)
    positions: dict[Path_, Pos] = {}
    if node is None:
        return None, positions
    positions[()] = _mark(file, node)
    value = _Builder(file, positions).build(node, (), frozenset())
    return value, positions


def _compose(text: str, file: str) -> yaml.Node | None:
    fast = _fast_loader()
    if fast is not None:
        try:
            return _compose_with(fast, text, file)
        except yaml.YAMLError as fast_exc:
            try:
                _compose_with(yaml.SafeLoader, text, file)
            except yaml.YAMLError as exc:
                raise _yaml_error(exc, text, file) from None
            raise _yaml_error(fast_exc, text, file) from None
    try:
        return _compose_with(yaml.SafeLoader, text, file)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, text, file) from None


def _compose_with(loader_cls: type[yaml.SafeLoader], text: str, file: str) -> yaml.Node | None:
    # The event stream is produced without recursion, so nesting is measured there before the
    # (recursive) composer runs.
    depth = 0
    for event in yaml.parse(text, Loader=loader_cls):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                m = event.start_mark
                raise YamlLoadError(Pos(file, m.line + 1, m.column + 1), f"nesting deeper than {MAX_DEPTH} levels")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    loader = loader_cls(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def _yaml_error(exc: yaml.YAMLError, text: str, file: str) -> YamlLoadError:
    if isinstance(exc, yaml.reader.ReaderError):
        ch = exc.character if isinstance(exc.character, int) else ord(exc.character)
        return YamlLoadError(_pos_at(file, text, exc.position), f"character U+{ch:04X} is not allowed in YAML text", file)
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        pos = Pos(file, mark.line + 1, mark.column + 1) if mark else None
        return YamlLoadError(pos, f"YAML syntax error: {_yaml_message(exc)}", file)
    return YamlLoadError(None, f"YAML error: {exc}", file)


def _yaml_message(exc: yaml.MarkedYAMLError) -> str:
    context, problem = exc.context or "", exc.problem or ""
    cm, pm = exc.context_mark, exc.problem_mark
    if context.startswith("expected a single document"):
        return "a contract file holds a single YAML document, but a second one starts here"
    if context.startswith("found duplicate anchor") and cm is not None:
        return f"{context.split(';')[0]} (first defined at line {cm.line + 1})"
    hint = "; YAML does not allow tabs for indentation" if "\\t" in problem or "\t" in problem else ""
    if context and problem:
        at = f" at line {cm.line + 1}" if cm is not None and pm is not None and cm.line != pm.line else ""
        return f"{problem} ({context}{at}{hint})"
    return (problem or context or "invalid YAML") + hint


class _Builder:
    """Turns a composed node graph into plain values, recording positions."""

    def __init__(self, file: str, positions: dict[Path_, Pos]) -> None:
        self.file = file
        self.positions = positions
        self.count = 0
        self.constructor = yaml.SafeLoader("")

    def fail(self, node: yaml.Node, message: str) -> YamlLoadError:
        return YamlLoadError(_mark(self.file, node), message, self.file)

    def step(self, node: yaml.Node) -> None:
        """Count one step of building (a value, or a key taken from a merged mapping)."""
        self.count += 1
        if self.count > MAX_VALUES:
            raise self.fail(node, f"the document expands to more than {MAX_VALUES} values (check its aliases and merge keys)")

    def build(self, node: yaml.Node, path: Path_, active: frozenset[int]) -> Any:
        """The value of ``node`` at ``path``; ``active`` holds the collections being built around it."""
        self.step(node)
        if len(path) > MAX_DEPTH:
            raise self.fail(node, f"nesting deeper than {MAX_DEPTH} levels (counting aliases)")
        if id(node) in active:
            # An alias has no node of its own; name the key or item that uses it.
            where = self.positions.get(path) or _mark(self.file, node)
            raise YamlLoadError(where, "an alias refers to a node that contains it", self.file)
        if isinstance(node, yaml.MappingNode):
            if node.tag != _MAP_TAG:
                raise self.fail(node, f"unsupported tag {node.tag!r} on a mapping")
            return self._mapping(node, path, active | {id(node)})
        if isinstance(node, yaml.SequenceNode):
            if node.tag != _SEQ_TAG:
                raise self.fail(node, f"unsupported tag {node.tag!r} on a sequence")
            items = []
            inner = active | {id(node)}
            for i, item in enumerate(node.value):
                sub = path + (i,)
                self.positions[sub] = _mark(self.file, item)
                items.append(self.build(item, sub, inner))
            return items
        return self._scalar(node)

    def _scalar(self, node: yaml.Node) -> Any:
        if node.tag == _INT_TAG and len(str(node.value).replace("_", "")) > _INT_TEXT:
            # refused before it is converted: Python would refuse the digits, and a sexagesimal
            # integer (1:2:3...) of that length takes quadratic time to build
            raise self.fail(node, f"bad value: an integer of more than {MAX_INT_DIGITS:,} digits")
        try:
            value = self.constructor.construct_object(node, deep=True)
        except yaml.MarkedYAMLError as exc:
            raise self.fail(node, f"bad value: {exc.problem}") from None
        except (ValueError, TypeError, OverflowError) as exc:
            # a timestamp out of range (2001-13-45), !!int "abc", too many digits for Python
            if "integer string conversion" in str(exc):
                raise self.fail(node, f"bad value: an integer of more than {MAX_INT_DIGITS:,} digits") from None
            raise self.fail(node, f"bad value: {_short(str(exc), 120)}") from None
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _INT_CEILING:
            raise self.fail(node, f"bad value: an integer of more than {MAX_INT_DIGITS:,} digits")
        return value

    def _key(self, node: yaml.Node) -> str:
        if not isinstance(node, yaml.ScalarNode):
            raise self.fail(node, "mapping keys must be plain strings, not collections")
        key = self._scalar(node)
        if not isinstance(key, str):
            raise self.fail(node, f"mapping key {node.value!r} is read as {type(key).__name__}, not a string (quote it)")
        return key

    def _merge_sources(self, node: yaml.Node, active: frozenset[int]) -> list[yaml.MappingNode]:
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        for s in sources:
            if not isinstance(s, yaml.MappingNode):
                raise self.fail(s, "a merge key (<<) takes a mapping or a list of mappings")
            if id(s) in active:
                raise self.fail(s, "an alias refers to a node that contains it")
        return list(sources)

    def _entries(self, node: yaml.MappingNode, active: frozenset[int],
                 merges: int = 0) -> list[tuple[str, yaml.Node, yaml.Node, bool]]:
        """(key, key node, value node, written here) in document order, merges expanded in place;
        ``merges`` counts the merged mappings this one is inside."""
        out: list[tuple[str, yaml.Node, yaml.Node, bool]] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                if merges >= MAX_DEPTH:
                    raise self.fail(key_node, f"merge keys (<<) nested deeper than {MAX_DEPTH} levels")
                for src in self._merge_sources(value_node, active):
                    for key, kn, vn, _ in self._entries(src, active | {id(src)}, merges + 1):
                        self.step(kn)  # a merge copies keys: it costs like the values it stands for
                        out.append((key, kn, vn, False))
            else:
                out.append((self._key(key_node), key_node, value_node, True))
        return out

    def _mapping(self, node: yaml.MappingNode, path: Path_, active: frozenset[int]) -> dict[str, Any]:
        entries = self._entries(node, active)
        own: dict[str, yaml.Node] = {}
        for key, key_node, _, written in entries:
            if not written:
                continue
            if key in own:
                first = _mark(self.file, own[key])
                raise self.fail(key_node, f"duplicate key {key!r} (first at line {first.line})")
            own[key] = key_node
        out: dict[str, Any] = {}
        for key, key_node, value_node, written in entries:
            if key in out or (not written and key in own):
                continue  # a written key beats a merged one; the first merged source wins
            sub = path + (key,)
            self.positions[sub] = _mark(self.file, key_node)
            out[key] = self.build(value_node, sub, active)
        return out
