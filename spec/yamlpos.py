"""YAML loading that remembers where every value came from.

PyYAML's constructors drop source positions, but error messages must name ``file:line:col``.
This module composes the node graph and builds plain Python values from it, recording the
position of every mapping key and sequence item under its path (a tuple of keys and indexes).
Duplicate mapping keys, which PyYAML silently overwrites, are reported as errors here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


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
        self.message = message
        where = str(pos) if pos else file
        super().__init__(f"{where}: {message}")


Path_ = tuple[Any, ...]


def _mark(file: str, node: yaml.Node) -> Pos:
    m = node.start_mark
    return Pos(file, m.line + 1, m.column + 1)


def load_yaml(path: str | Path, display: str | None = None) -> tuple[Any, dict[Path_, Pos]]:
    """Load one YAML document; return (value, positions by path)."""
    shown = display or str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise YamlLoadError(None, "file not found", file=shown) from None
    except UnicodeDecodeError as exc:
        raise YamlLoadError(None, f"not UTF-8 text ({exc.reason} at byte {exc.start})", file=shown) from None
    except OSError as exc:
        raise YamlLoadError(None, f"cannot read: {exc.strerror}", file=shown) from None
    return loads_yaml(text, shown)


def loads_yaml(text: str, file: str) -> tuple[Any, dict[Path_, Pos]]:
    loader = yaml.SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            problem = exc.problem or exc.context or "invalid YAML"
            pos = Pos(file, mark.line + 1, mark.column + 1) if mark else None
            raise YamlLoadError(pos, f"YAML syntax error: {problem}", file=file) from None
        except yaml.YAMLError as exc:
            raise YamlLoadError(None, f"YAML error: {exc}", file=file) from None
        positions: dict[Path_, Pos] = {}
        if node is None:
            return None, positions
        positions[()] = _mark(file, node)
        value = _build(loader, node, (), file, positions)
        return value, positions
    finally:
        loader.dispose()


def _build(loader: yaml.SafeLoader, node: yaml.Node, path: Path_, file: str, positions: dict[Path_, Pos]) -> Any:
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            try:
                key = loader.construct_object(key_node, deep=True)
            except yaml.MarkedYAMLError as exc:
                raise YamlLoadError(_mark(file, key_node), f"bad key: {exc.problem}", file=file) from None
            if not isinstance(key, str | int | float | bool) and key is not None:
                raise YamlLoadError(_mark(file, key_node), "mapping keys must be scalars", file=file)
            if key in out:
                raise YamlLoadError(_mark(file, key_node), f"duplicate key {key!r}", file=file)
            sub = path + (key,)
            positions[sub] = _mark(file, key_node)
            out[key] = _build(loader, value_node, sub, file, positions)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for i, item in enumerate(node.value):
            sub = path + (i,)
            positions[sub] = _mark(file, item)
            items.append(_build(loader, item, sub, file, positions))
        return items
    try:
        return loader.construct_object(node, deep=True)
    except yaml.MarkedYAMLError as exc:
        raise YamlLoadError(_mark(file, node), f"bad value: {exc.problem}", file=file) from None
