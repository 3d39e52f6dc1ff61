"""Small adapters for testing how the plugin treats claims, known bugs and misbehaviour.

Importable as ``python:adapters:<Name>`` when tests/conformance is on PYTHONPATH (the test
helpers put it there for subprocess runs).
"""

from __future__ import annotations

from typing import Any

from ledgercheck.conformance.protocol import Handshake
from ledgercheck.fixtures.broken import ClaimIgnoresPriority
from ledgercheck.reference.adapter import ReferenceAdapter


class CoreOnly(ReferenceAdapter):
    def hello(self, protocol: str = "1.0") -> Handshake:
        hs = super().hello(protocol)
        hs.update(name="core-only", profiles=["core"])
        return hs


class DeclaresClaimOrderBug(ClaimIgnoresPriority):
    """Really has the bug and says so: the clause becomes a strict expected failure."""

    def hello(self, protocol: str = "1.0") -> Handshake:
        hs = super().hello(protocol)
        hs["known_bugs"] = {"core.claim.order": "claims newest first; fix scheduled"}
        return hs


class DeclaresBugItDoesNotHave(ReferenceAdapter):
    """Declares a known bug but conforms: the strict expected failure passes unexpectedly."""

    def hello(self, protocol: str = "1.0") -> Handshake:
        hs = super().hello(protocol)
        hs["known_bugs"] = {"core.claim.order": "we thought so"}
        return hs


class CancelExplodes(ReferenceAdapter):
    """An adapter that crashes inside one operation: its tests are errors, never passes."""

    def cancel(self, **kw: Any) -> Any:
        raise RuntimeError("segfault in the cancel path (simulated)")


class HostileStrings(ReferenceAdapter):
    """Adapter-supplied strings that try to break reports."""

    def hello(self, protocol: str = "1.0") -> Handshake:
        hs = super().hello(protocol)
        hs.update(name="<script>alert('x')</script>|`md`", version="1.0</pre><img src=x onerror=alert(1)>")
        return hs

    def cancel(self, **kw: Any) -> Any:
        from ledgercheck.conformance.protocol import LedgerError

        raise LedgerError("not_found", "<b>boom</b> | `x` \n## heading")
