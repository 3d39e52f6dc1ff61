"""Writing, reading and refusing results files; the JSON Schema; the environment record."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import jsonschema
import pytest
from ledgercheck.reports.integrity import content_sha256
from ledgercheck.reports.results import (
    FORMAT,
    FORMAT_VERSION,
    ResultsError,
    _umask,
    environment_info,
    load_results,
    read_results,
    results_file_sha256,
    schema,
    validate_results,
    write_results,
)


def refused(path: Path) -> str:
    with pytest.raises(ResultsError) as exc:
        load_results(path)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(str(path) + ":"), msg
    return msg


def test_round_trip(realistic, tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    sha = write_results(realistic, path)
    data = path.read_bytes()
    assert sha == hashlib.sha256(data).hexdigest() == results_file_sha256(realistic)
    assert (tmp_path / "results.json.sha256").read_text() == f"{sha}  results.json\n"
    assert path.stat().st_mode & 0o777 == 0o666 & ~_umask()  # readable like any other file, not 0600
    loaded = read_results(path)
    assert loaded.doc == realistic and loaded.sha256 == sha and loaded.sidecar
    assert loaded.doc["integrity"]["sha256"] == content_sha256(loaded.doc)
    head = json.loads(data)
    assert list(head)[:3] == ["format", "format_version", "verdict"]  # readable order on disk
    assert head["format"] == FORMAT and head["format_version"] == FORMAT_VERSION
    write_results(loaded.doc, tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == data  # deterministic bytes


def test_schema_is_draft_2020_12_and_matches(realistic) -> None:
    s = schema()
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(s)
    jsonschema.Draft202012Validator(s).validate(realistic)
    broken = copy.deepcopy(realistic)
    broken["clauses"][0]["outcome"] = "passed"
    assert not jsonschema.Draft202012Validator(s).is_valid(broken)


def test_truncated_file_is_refused(realistic, tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    write_results(realistic, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    msg = refused(path)
    assert "not valid JSON" in msg and "truncated" in msg


def test_hand_edited_outcome_is_refused(realistic, tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    write_results(realistic, path)
    doc = json.loads(path.read_text())
    cid = next(i for i, c in enumerate(doc["clauses"]) if c["outcome"] == "fail")
    doc["clauses"][cid]["outcome"] = "pass"
    path.write_text(json.dumps(doc, indent=2))
    assert "does not match its integrity hash" in refused(path)


def test_edit_with_recomputed_hash_is_still_refused(realistic, tmp_path: Path) -> None:
    """Someone who also recomputes the integrity hash (and drops the sidecar) still cannot turn a
    failure into a pass: the recorded outcome must follow from the tests."""
    path = tmp_path / "results.json"
    doc = copy.deepcopy(realistic)
    failing = next(c for c in doc["clauses"] if c["id"] == "lease.fencing")
    failing["outcome"] = "pass"
    doc["integrity"]["sha256"] = content_sha256(doc)
    path.write_text(json.dumps(doc))
    msg = refused(path)
    assert "clause lease.fencing: recorded outcome 'pass' does not follow from its tests ('fail')" in msg
    doc = copy.deepcopy(realistic)
    doc["verdict"], doc["exit_code"] = "CERTIFIED", 0
    doc["integrity"]["sha256"] = content_sha256(doc)
    path.write_text(json.dumps(doc))
    assert "recorded verdict 'CERTIFIED' does not follow" in refused(path)


def test_sidecar_mismatch_is_refused(realistic, tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    write_results(realistic, path)
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(doc, indent=4))  # same content, other bytes: integrity holds, the checksum not
    assert "does not match results.json.sha256" in refused(path)
    (tmp_path / "results.json.sha256").unlink()
    assert load_results(path) == doc  # without a sidecar, the integrity hash alone decides


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda d: d.update(format_version=2), "format_version 2 is not supported (this ledgercheck reads version 1)"),
    (lambda d: d.update(format="junit"), "not a ledgercheck results document"),
    (lambda d: d.pop("integrity"), "has no integrity hash"),
])
def test_wrong_format_is_refused(realistic, tmp_path: Path, edit, needle: str) -> None:
    path = tmp_path / "results.json"
    doc = copy.deepcopy(realistic)
    edit(doc)
    path.write_text(json.dumps(doc))
    assert needle in refused(path)


@pytest.mark.parametrize(("content", "needle"), [
    (b"", "the file is empty"),
    (b"[1, 2]", "a JSON list, not an object"),
    (b"\xff\xfe{}", "not UTF-8"),
])
def test_garbage_is_refused(tmp_path: Path, content: bytes, needle: str) -> None:
    path = tmp_path / "results.json"
    path.write_bytes(content)
    assert needle in refused(path)


def test_non_json_numbers_are_refused(realistic, factory, tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    write_results(realistic, path)
    (tmp_path / "results.json.sha256").unlink()
    path.write_text(path.read_text().replace('"duration_s": 41.7', '"duration_s": NaN', 1))
    assert "NaN is not a JSON number" in refused(path)
    tests = factory.tests()
    tests[0]["duration_s"] = float("inf")
    with pytest.raises(ResultsError, match="^results: holds a value JSON cannot represent"):
        factory.build(tests=tests)


def test_missing_file_is_refused(tmp_path: Path) -> None:
    assert "cannot read" in refused(tmp_path / "nope.json")


def test_schema_violation_names_the_field(realistic) -> None:
    doc = copy.deepcopy(realistic)
    doc["tests"][3]["duration_s"] = -1
    with pytest.raises(ResultsError, match=r"^results: tests\[3\]\.duration_s: -1 is less than the minimum of 0$"):
        validate_results(doc)


def test_the_inlined_schema_finds_the_errors_the_schema_finds(realistic) -> None:
    """The validator that words the message (reports/results.py ``_inlined``: bare references
    replaced by their definitions, for speed) picks the same error at the same place as the
    shipped schema itself, wherever a document goes wrong."""
    from ledgercheck.reports.results import _inlined, _validators

    full = _validators(None)[1]
    assert "$ref" not in json.dumps({k: v for k, v in full.schema.items() if k != "$defs"})  # every reference inlined
    plain = jsonschema.Draft202012Validator(copy.deepcopy(schema()))
    edits = [(("tests", 3, "outcome"), 5), (("tests", 0, "duration_s"), -1), (("tests", 1), "x"), (("run", "seed"), "1"),
             (("adapter",), []), (("clauses", 0, "outcome"), None), (("verdict",), {}), (("format_version",), 1e308)]
    for path, value in edits:
        doc = copy.deepcopy(realistic)
        holder = doc
        for k in path[:-1]:
            holder = holder[k]
        holder[path[-1]] = value
        want, got = (jsonschema.exceptions.best_match(v.iter_errors(doc)) for v in (plain, full))
        assert want is not None and got is not None, path
        assert (got.message, list(got.absolute_path)) == (want.message, list(want.absolute_path)), path
    # a reference inside its own definition stays a reference (and still resolves through $defs)
    looped = _inlined({"$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
                       "properties": {"head": {"$ref": "#/$defs/node"}}})
    assert looped["properties"]["head"]["properties"]["next"] == {"$ref": "#/$defs/node"}
    bad = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(looped).iter_errors({"head": {"next": {"next": 1}}}))
    assert bad is not None and list(bad.absolute_path) == ["head", "next", "next"]


def test_write_refuses_an_inconsistent_document(realistic, tmp_path: Path) -> None:
    doc = copy.deepcopy(realistic)
    doc["profiles"]["verdicts"]["lease"]["verdict"] = "certified"
    with pytest.raises(ResultsError, match="profile lease: recorded verdict 'certified' does not follow"):
        write_results(doc, tmp_path / "results.json")
    assert not (tmp_path / "results.json").exists()


def test_environment_info(tmp_path: Path) -> None:
    env = environment_info(str(tmp_path))
    for key in ("python", "implementation", "platform", "os", "machine", "cpu_model", "cpu_count", "sqlite",
                "fs_type", "hypothesis", "pytest"):
        assert key in env
    import sqlite3

    assert env["sqlite"] == sqlite3.sqlite_version and env["fs_path"] == str(tmp_path)
    assert env["pytest"] == pytest.__version__
    if Path("/proc/mounts").exists():
        assert env["fs_type"] != "unknown"


def test_filesystem_type_picks_the_longest_mount(tmp_path: Path) -> None:
    from ledgercheck.reports.environment import filesystem_type

    mounts = tmp_path / "mounts"
    mounts.write_text("rootfs / ext4 rw 0 0\ntmpfs /data tmpfs rw 0 0\nfuse /data/my\\040disk fuseblk rw 0 0\n")
    assert filesystem_type("/data/x", mounts) == "tmpfs"
    assert filesystem_type("/data/my disk/f", mounts) == "fuseblk"
    assert filesystem_type("/database", mounts) == "ext4"
    assert filesystem_type("/x", tmp_path / "missing") == "unknown"
