"""Where a contract problem is (positions in the merged files) and how it is reported.

Shared by the loader (``load.py``) and the semantic checks (``checks.py``), which both report
problems; kept apart so that neither imports the other's module for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .yamlpos import Pos, one_line


@dataclass(frozen=True)
class Problem:
    """One finding: where (``pos``, or ``file`` when there is no line) and what."""

    pos: Pos | None
    message: str
    file: str = ""
    check: str = field(default="", compare=False)  # the semantic check that found it, if any

    def __str__(self) -> str:
        where = str(self.pos) if self.pos else (self.file or "<spec>")
        return f"{where}: {one_line(self.message)}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.pos.file if self.pos else (self.file or None),
            "line": self.pos.line if self.pos else None,
            "col": self.pos.col if self.pos else None,
            "message": one_line(self.message),
        }


class SpecError(Exception):
    """The contract could not be loaded; ``problems`` holds one entry per finding."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class Positions:
    """Source positions of a merged document, by path."""

    def __init__(self) -> None:
        self.by_path: dict[tuple[Any, ...], Pos] = {}
        self.file_of_root: dict[Any, str] = {}
        self.last_write: dict[tuple[Any, ...], Pos] = {}  # mapping path -> key position in the last file that changed it
        self.file_order: dict[str, int] = {}  # display name -> order in which the file was read

    def at(self, path: Sequence[Any]) -> Pos | None:
        """Where ``path`` was written, or else its nearest enclosing value."""
        p = tuple(path)
        while True:
            if p in self.by_path:
                return self.by_path[p]
            if not p:
                return None
            p = p[:-1]

    def newest(self, paths: Sequence[Sequence[Any]]) -> tuple[Any, ...]:
        """Of several paths that together make a problem, the one written by the file read last
        (the first of them on a tie): an overlay's change is blamed before the base it changed."""
        def rank(item: tuple[int, Sequence[Any]]) -> tuple[int, int]:
            where = self.at(item[1])
            return (self.file_order.get(where.file, -1) if where else -1, -item[0])

        return tuple(max(enumerate(paths), key=rank)[1])

    def latest(self, path: Sequence[Any]) -> Pos | None:
        """Where the last file that changed the mapping at ``path`` wrote it; for problems about
        the mapping as a whole (a missing entry, a property of all entries together)."""
        return self.last_write.get(tuple(path)) or self.at(path)
