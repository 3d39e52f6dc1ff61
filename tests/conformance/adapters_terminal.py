"""An adapter whose strings carry terminal control bytes (``python:adapters_terminal:ControlBytes``).

Its name, version and error messages hold ESC sequences, NUL, BEL, a C1 CSI and a right-to-left
override, the bytes that would move a terminal's cursor, clear its screen or reorder what a reader
sees if they reached it raw.
"""

from __future__ import annotations

from typing import Any

from ledgercheck.reference.adapter import ReferenceAdapter
from ledgercheck.transport.protocol import Handshake, LedgerError

NASTY = "\x1b[2J\x1b]0;owned\x07\x00\x9b31m\u202eexe.txt\u2066\r"


class ControlBytes(ReferenceAdapter):
    def hello(self, protocol: str = "1.0") -> Handshake:
        hs = super().hello(protocol)
        hs.update(name=f"ctl{NASTY}name", version=f"1.0{NASTY}")
        return hs

    def cancel(self, **kw: Any) -> Any:
        raise LedgerError("not_found", f"cancel refused{NASTY}for {kw.get('work_id')}{NASTY}")


# what a hostile adapter's text can hold: escape sequences, NUL, BEL, C1, bidi overrides, carriage
# returns, lone surrogates (an in-process adapter's strings may hold them), and a line of 200,000
# characters
FLOOD = NASTY + "\ud800\udfff" + "A" * 200_000 + NASTY + "\ud83d"


class Flood(ReferenceAdapter):
    """``python:adapters_terminal:Flood``: its name and version, its refusals of cancel, what it
    prints on stdout and stderr and the warnings it raises all carry FLOOD."""

    def hello(self, protocol: str = "1.0") -> Handshake:
        hs = super().hello(protocol)
        hs.update(name=f"flood{NASTY}" + "N" * 5000, version=f"1.0{FLOOD}")
        return hs

    def cancel(self, **kw: Any) -> Any:
        import sys
        import warnings

        print(f"stdout{FLOOD}")
        print(f"stderr{FLOOD}", file=sys.stderr)
        warnings.warn(f"warning{FLOOD}", stacklevel=1)
        raise LedgerError("not_found", f"cancel refused{FLOOD}")
