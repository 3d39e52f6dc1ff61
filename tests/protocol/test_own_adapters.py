"""The kit's own adapter names resolve without reading the installed entry points, to the same
factories the packaging registers; a served reference process does not import importlib.metadata."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

from ledgercheck.transport.client import ENTRY_POINT_GROUP, OWN_ADAPTERS, adapter_names, load_inprocess


def test_own_adapters_are_the_registered_entry_points() -> None:
    registered = {ep.name: ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    for name, value in OWN_ADAPTERS.items():
        assert registered.get(name) == value, f"{name}: pyproject.toml registers {registered.get(name)!r}, OWN_ADAPTERS {value!r}"
    assert set(OWN_ADAPTERS) <= set(adapter_names())


def test_reference_loads_by_name_and_an_unknown_name_is_refused() -> None:
    from ledgercheck.reference.adapter import ReferenceAdapter
    from ledgercheck.transport.client import AdapterError

    a = load_inprocess("entry", "reference")
    try:
        assert type(a) is ReferenceAdapter
    finally:
        a.close()
    try:
        load_inprocess("entry", "no-such-adapter")
    except AdapterError as exc:
        assert "unknown adapter 'no-such-adapter'" in str(exc) and "reference" in str(exc)
    else:
        raise AssertionError("an unknown adapter name loaded")


def test_a_served_reference_reads_neither_the_entry_points_nor_yaml() -> None:
    """What a served reference process imports to start (it starts once per crash window over
    the wire): not importlib.metadata, and not PyYAML once the contract's parse is stored."""
    code = ("import sys; from ledgercheck.transport.client import load_inprocess; a = load_inprocess('entry', 'reference'); "
            "a.close(); print('importlib.metadata' in sys.modules, 'yaml' in sys.modules)")
    for _ in range(2):  # the first may parse the contract and store the parse
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"], out.stdout
