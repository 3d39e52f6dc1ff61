"""A contract that passed every check is not checked again by the next load of the identical
document (spec/load.py, docs/contract.md "Validation cache"); a changed or invalid one is."""

from __future__ import annotations

from pathlib import Path

import pytest
from ledgercheck.spec import SpecError, load_spec
from ledgercheck.spec import load as load_mod


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LEDGERCHECK_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "valid-contracts"


def _count_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = load_mod.schema_problems

    def counted(doc, pos):  # noqa: ANN001, ANN202
        calls.append(1)
        return real(doc, pos)

    monkeypatch.setattr(load_mod, "schema_problems", counted)
    return calls


def _overlay(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / name
    p.write_text("extends: default\n" + body, encoding="utf-8")
    return p


def test_a_valid_document_is_checked_once(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_checks(monkeypatch)
    good = _overlay(tmp_path, "good.yaml", "lease: {ttl: 1m}\n")
    first = load_spec([good])
    assert len(calls) == 1 and len(list(cache.iterdir())) == 1
    again = load_spec([good])
    assert len(calls) == 1  # the note says it passed: not checked again
    assert again.digest == first.digest
    # the same document sent whole (as the harness sends it in every reset): known valid too
    load_mod._FROM_DOCUMENT.clear()
    load_mod._BY_IDENTITY.clear()
    load_mod.spec_from_document(dict(first.document))
    assert len(calls) == 1


def test_a_changed_document_is_checked_again(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_checks(monkeypatch)
    load_spec([_overlay(tmp_path, "a.yaml", "lease: {ttl: 1m}\n")])
    load_spec([_overlay(tmp_path, "b.yaml", "lease: {ttl: 2m}\n")])
    assert len(calls) == 2 and len(list(cache.iterdir())) == 2


def test_an_invalid_document_gets_no_note_and_is_refused_every_time(cache: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_checks(monkeypatch)
    bad = _overlay(tmp_path, "bad.yaml", "lease: {ttl: -5}\n")
    for n in (1, 2):
        with pytest.raises(SpecError):
            load_spec([bad])
        assert len(calls) == n
    assert not cache.exists() or not list(cache.iterdir())


def test_a_note_made_by_other_checking_code_does_not_count(cache: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_checks(monkeypatch)
    good = _overlay(tmp_path, "good.yaml", "lease: {ttl: 1m}\n")
    load_spec([good])
    monkeypatch.setattr(load_mod, "_checker_digest", lambda: "another checker")
    load_spec([good])
    assert len(calls) == 2


def test_the_cache_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGERCHECK_CACHE", "off")
    calls = _count_checks(monkeypatch)
    good = _overlay(tmp_path, "good.yaml", "lease: {ttl: 1m}\n")
    load_spec([good])
    load_spec([good])
    assert len(calls) == 2
