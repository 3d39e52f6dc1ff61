"""The reference ledger with a handshake whose artifact_sha256 is not a SHA-256."""

from __future__ import annotations

from typing import Any

from ledgercheck.reference.adapter import ReferenceAdapter


class BadArtifactHash(ReferenceAdapter):
    def hello(self, protocol: str = "1.0") -> Any:
        hs = dict(super().hello(protocol))
        hs["artifact_sha256"] = "not-a-sha"
        return hs
