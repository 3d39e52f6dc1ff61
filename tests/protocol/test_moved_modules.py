"""Adapters addressed by the module paths published before fixtures/ was split still load."""

from __future__ import annotations

import importlib.util

import pytest
from ledgercheck.transport.client import MOVED_MODULES, load_inprocess


def _exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # its package is gone too
        return False


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_an_old_module_name_is_gone_and_its_new_one_imports(old: str) -> None:
    assert not _exists(old), f"{old} exists again: take it off MOVED_MODULES"
    assert _exists(MOVED_MODULES[old])


def test_a_published_python_address_still_loads() -> None:
    old = "ledgercheck.fixtures.broken"
    assert old in MOVED_MODULES
    ledger = load_inprocess("python", f"{old}:OutcomeOnlyOnSuccess")
    assert type(ledger).__module__ == MOVED_MODULES[old]


def test_an_unknown_module_is_still_refused() -> None:
    from ledgercheck.transport.client import AdapterError

    with pytest.raises(AdapterError, match="cannot import"):
        load_inprocess("python", "ledgercheck.fixtures.nothing_here:X")
