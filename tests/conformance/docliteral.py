"""A ledger that follows every sentence of docs/protocol.md about ``reset`` and ``dir`` literally.

It is the reference ledger with the session handled to the letter of the documents:

* nothing this process holds survives a ``reset`` (a new ledger object each time): "nothing
  created before the reset may be visible after it" is kept for everything but what the
  documents except;
* the exception: a reset naming a ``dir`` that holds a ledger opens that ledger, in this process
  or another (capability ``durable``); a new, empty ``dir`` starts a fresh ledger there;
* a reset naming no ``dir`` starts a fresh ledger wherever this adapter likes (the documents:
  isolated tests may be given no ``dir``).

It keeps nothing in memory that the documents do not let it keep, so a harness that only
"reopened" by resetting the same process would not see a cache of the ledger, and one that
reopens from a new process (a new adapter object in-process) certifies it all the same.
"""

from __future__ import annotations

from typing import Any

from ledgercheck.reference.adapter import ReferenceAdapter


class DocLiteralLedger:
    def __init__(self) -> None:
        self._inner = ReferenceAdapter()
        self._resets = 0

    def hello(self, protocol: str = "1.0") -> dict[str, Any]:
        hs = self._inner.hello(protocol)
        hs["name"] = "doc-literal"
        return hs

    def reset(self, config: dict[str, Any] | None = None) -> None:
        self._resets += 1
        self._inner.close()
        self._inner = ReferenceAdapter()  # nothing this process held survives a reset
        self._inner.reset(dict(config or {}))  # a dir that holds a ledger: opened; none or empty: a fresh one

    def close(self) -> None:
        self._inner.close()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._inner, name)
