"""A profile set stands for its members: in a handshake's ``profiles`` and in ``--ledger-profile``.
``full`` is the whole contract; a name that is neither a profile nor a set is refused in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ledgercheck.reports.results import load_results
from ledgercheck.transport.client import AdapterError, InProcessClient


class Claims:
    """An adapter that only greets, claiming what it is given."""

    def __init__(self, profiles: list[Any]) -> None:
        self.profiles = profiles

    def hello(self, protocol: str = "1.0") -> dict[str, Any]:
        return {"name": "claims", "version": "0", "protocol": "1.0", "profiles": self.profiles}


def _greet(spec, profiles: list[Any]) -> InProcessClient:
    return InProcessClient(Claims(profiles), "python:test_profile_sets:Claims", spec)


def test_a_handshake_naming_the_whole_set_claims_every_profile(spec) -> None:
    assert _greet(spec, ["full"]).profiles == list(spec.profiles)
    assert _greet(spec, ["core", "full"]).handshake["profiles"] == list(spec.profiles)
    assert _greet(spec, ["core", "cancel"]).profiles == ["core", "cancel"]  # plain names stay as claimed


@pytest.mark.parametrize("claims", [["fulll"], ["core", "queue"]])
def test_a_handshake_naming_an_unknown_set_is_refused(spec, claims: list[str]) -> None:
    with pytest.raises(AdapterError, match=f"claims unknown profile\\(s\\) {claims[-1]}$"):
        _greet(spec, claims)


def test_the_profile_option_takes_a_set(tmp_path: Path, suite, spec) -> None:
    out = tmp_path / "results.json"
    proc = suite(tmp_path, "--ledger-adapter", "reference", "--ledger-profile", "full", "--ledger-clauses-only",
                 "-k", "core.claim.empty", "--ledger-results", str(out))
    assert out.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = load_results(str(out))
    assert doc["profiles"]["requested"] == list(spec.profiles)
    assert doc["profiles"]["sets"] == {"full": list(spec.profiles)}


def test_the_profile_option_refuses_an_unknown_name_and_lists_the_sets(tmp_path: Path, suite) -> None:
    proc = suite(tmp_path, "--ledger-adapter", "reference", "--ledger-profile", "core,whole", "--ledger-clauses-only")
    assert proc.returncode != 0
    assert "unknown profile(s) whole" in proc.stderr and "profile set full names core, trail, cancel" in proc.stderr, \
        proc.stderr[-2000:]
