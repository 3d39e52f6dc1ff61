"""Contract files parsed and merged once are read back by the next process (spec/load.py,
docs/contract.md "Validation cache"): the same document and positions as a fresh parse, and a
file whose text changed (one the merge reached through extends: too) is read again."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from ledgercheck.spec import SpecError, load_spec
from ledgercheck.spec import load as load_mod
from ledgercheck.spec.yamlpos import loads_yaml


def _new_process() -> None:
    """Forget what this process remembers, as a process started next would not know it."""
    load_mod._parse.cache_clear()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LEDGERCHECK_CACHE", str(tmp_path / "cache"))
    _new_process()
    yield tmp_path / "cache" / "parsed-contracts"
    _new_process()


def _count_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    def counted(text: str, file: str):  # noqa: ANN202
        calls.append(file)
        return loads_yaml(text, file)

    monkeypatch.setattr(load_mod, "loads_yaml", counted)
    return calls


def test_a_stored_parse_is_the_fresh_parse(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_parses(monkeypatch)
    files = sorted((load_mod.HERE / "contract").glob("*.yaml"))
    fresh = {f: loads_yaml(f.read_text(encoding="utf-8"), f.name) for f in files}
    for f in files:
        load_mod._parse(f.read_text(encoding="utf-8"), f.name)
    assert len(calls) == len(files)
    _new_process()
    for f in files:
        assert load_mod._parse(f.read_text(encoding="utf-8"), f.name) == fresh[f]
    assert len(calls) == len(files)  # none parsed again


def test_the_shipped_contract_is_read_back_whole(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = load_spec(None)
    calls = _count_parses(monkeypatch)
    _new_process()
    again = load_spec(None)
    assert calls == [] and again.digest == first.digest and again.document == first.document
    assert (cache.parent / "parsed-contracts").is_dir()


def test_a_changed_file_is_read_again_even_one_reached_through_extends(cache: Path, tmp_path: Path) -> None:
    mid = tmp_path / "mid.yaml"
    top = tmp_path / "top.yaml"
    mid.write_text("extends: default\nlease: {ttl: 1m}\n", encoding="utf-8")
    top.write_text("extends: mid.yaml\nlease: {grace: 5s}\n", encoding="utf-8")
    assert load_spec([top]).lease_default.ttl == 60
    _new_process()
    assert load_spec([top]).lease_default.ttl == 60
    mid.write_text("extends: default\nlease: {ttl: 2m}\n", encoding="utf-8")
    _new_process()
    assert load_spec([top]).lease_default.ttl == 120
    top.write_text("extends: mid.yaml\nlease: {ttl: 3m}\n", encoding="utf-8")
    _new_process()
    assert load_spec([top]).lease_default.ttl == 180


def test_positions_read_back_still_name_the_line(cache: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("extends: default\n\nlease:\n  ttl: -5\n", encoding="utf-8")
    messages = []
    for _ in range(2):
        _new_process()
        with pytest.raises(SpecError) as exc:
            load_spec([bad])
        messages.append(str(exc.value))
    assert messages[0] == messages[1] and "bad.yaml:4:" in messages[0]


def test_unreadable_entries_are_parsed_again(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = load_spec(None)
    for f in cache.iterdir():
        f.write_bytes(b"\x00not marshal")
    calls = _count_parses(monkeypatch)
    _new_process()
    assert load_spec(None).digest == first.digest
    assert calls  # parsed again, not trusted


def test_a_value_marshal_cannot_hold_is_parsed_every_time(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_parses(monkeypatch)
    for _ in range(2):
        _new_process()
        value, _pos = load_mod._parse("when: 2026-01-01\n", "dated.yaml")
        assert value == {"when": datetime.date(2026, 1, 1)}
    assert len(calls) == 2


def test_the_cache_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGERCHECK_CACHE", "off")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    calls = _count_parses(monkeypatch)
    _new_process()
    load_spec(None)
    n = len(calls)
    _new_process()
    load_spec(None)
    assert len(calls) == 2 * n and not (tmp_path / ".cache").exists()
    _new_process()


def test_a_stored_parse_is_keyed_by_pyyamls_files(tmp_path, monkeypatch) -> None:
    """The parse's key reads PyYAML's version and C parser from its files (a process that finds
    the parse stored does not import PyYAML): a changed __init__.py or a C parser added changes it."""
    import importlib.machinery
    import importlib.util

    from ledgercheck.spec import load

    pkg = tmp_path / "yaml"
    pkg.mkdir()
    init = pkg / "__init__.py"
    init.write_text("__version__ = '6.0.1'\n")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: importlib.machinery.ModuleSpec(name, None, origin=str(init)))
    digests = []
    for change in (lambda: None, lambda: init.write_text("__version__ = '6.0.2'\n"),
                   lambda: (pkg / "_yaml.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")):
        change()
        load._parser_digest.cache_clear()
        digests.append(load._parser_digest())
    load._parser_digest.cache_clear()
    assert len(set(digests)) == 3
