"""docs/protocol.md and docs/protocol.schema.json stay true.

The schema file and the generated reference section must equal what the contract produces
now; every line of the recorded transcript must validate against the schema; and replaying
the transcript's requests against the reference ledger must give the same answers (ids and
lease tokens aside).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from ledgercheck.spec import Spec
from ledgercheck.transport.client import WireClient, connect
from ledgercheck.transport.protocol_docs import reference_markdown
from ledgercheck.transport.server import parse_transcript_block, read_block
from ledgercheck.transport.wire import protocol_schema, schema_text

from ledgercheck.cli import main as cli

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGE = DOCS / "protocol.md"
SCHEMA = DOCS / "protocol.schema.json"
REGENERATE = "regenerate with: ledgercheck protocol docs --transcript && ledgercheck protocol schema -o docs/protocol.schema.json"
OPAQUE = ("work_id", "lease_token")  # values that differ from run to run; mapped, not compared


@pytest.fixture(scope="module")
def page() -> str:
    return PAGE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def schema(spec: Spec) -> dict[str, Any]:
    return json.loads(SCHEMA.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def transcript(page: str) -> list[tuple[str, dict[str, Any]]]:
    return [(d, json.loads(text)) for d, text in parse_transcript_block(read_block(page, "transcript"))]


def test_schema_file_is_current(spec: Spec) -> None:
    assert SCHEMA.read_text(encoding="utf-8") == schema_text(spec), REGENERATE


def test_schema_is_a_valid_json_schema(schema: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)


def test_reference_section_is_current(spec: Spec, page: str) -> None:
    assert read_block(page, "reference") == reference_markdown(spec), REGENERATE


def test_check_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["protocol", "schema", "-o", str(SCHEMA), "--check"]) == 0
    assert cli(["protocol", "docs", str(PAGE), "--check"]) == 0
    stale = tmp_path / "protocol.schema.json"
    stale.write_text(SCHEMA.read_text(encoding="utf-8").replace('"integer"', '"number"', 1), encoding="utf-8")
    assert cli(["protocol", "schema", "-o", str(stale), "--check"]) == 1
    page = tmp_path / "protocol.md"
    page.write_text(PAGE.read_text(encoding="utf-8").replace("| `owner` | string | yes |", "| `owner` | int | yes |", 1), encoding="utf-8")
    assert cli(["protocol", "docs", str(page), "--check"]) == 1
    assert "stale" in capsys.readouterr().err
    assert cli(["protocol", "docs", str(page)]) == 0 and cli(["protocol", "docs", str(page), "--check"]) == 0


def test_the_prose_names_every_error_code_as_the_contract_does(spec: Spec, page: str) -> None:
    errors = page[page.index("## Errors"):page.index("## Crash points")]
    definite = errors[errors.index("* **definite**:"):errors.index("* **indefinite**:")]
    indefinite = errors[errors.index("* **indefinite**:"):]
    for code, is_definite in spec.errors.items():
        assert f"`{code}`" in (definite if is_definite else indefinite), code


def test_the_prose_links_resolve(page: str) -> None:
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", page, flags=re.M):
        anchors.add(re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-"))
    for target in re.findall(r"\]\(#([^)]+)\)", page):
        assert target in anchors, target


def _validator(schema: dict[str, Any], ref: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({"$defs": schema["$defs"], "$ref": f"#/$defs/{ref}"})


def _check_lines(schema: dict[str, Any], lines: list[tuple[str, dict[str, Any]]]) -> None:
    whole = jsonschema.Draft202012Validator(schema)
    pending: dict[int, str] = {}
    for direction, msg in lines:
        whole.validate(msg)
        if direction == ">":
            _validator(schema, f"request_{msg['op']}").validate(msg)
            pending[msg["id"]] = msg["op"]
        elif "event" in msg:
            _validator(schema, "notification").validate(msg)
        else:
            _validator(schema, "response").validate(msg)
            if msg["ok"]:
                _validator(schema, f"result_{pending[msg['id']]}").validate(msg["result"])


def test_every_transcript_line_validates(schema: dict[str, Any], transcript: list[tuple[str, dict[str, Any]]]) -> None:
    assert len(transcript) > 30
    ops = {m["op"] for d, m in transcript if d == ">"}
    assert {"hello", "reset", "create", "claim", "close_out", "cancel", "requeue", "expire", "events", "arm"} <= ops
    codes = {m["error"]["code"] for d, m in transcript if d == "<" and m.get("ok") is False}
    assert {"invalid_argument", "stale_lease", "invalid_transition", "not_found"} <= codes
    assert transcript[-1][1].get("event") == "crash_point"
    _check_lines(schema, transcript)


def test_the_schema_refuses_broken_messages(schema: dict[str, Any]) -> None:
    whole = jsonschema.Draft202012Validator(schema)
    for bad in [{"id": 1, "ok": "yes", "result": None}, {"id": 1, "ok": False, "error": {"code": "kaboom", "message": "x"}},
                {"id": 1, "op": "claim", "args": {"now": 1.0}}, {"event": "crash_point"}, {"id": "1", "op": "get", "args": {"work_id": "w"}}]:
        assert not whole.is_valid(bad), bad
    assert not _validator(schema, "result_get").is_valid({"work_id": 17})


def _same(recorded: Any, live: Any, mapping: dict[str, str], path: str) -> None:
    if isinstance(recorded, dict):
        assert isinstance(live, dict) and set(live) == set(recorded), f"{path}: fields {sorted(live)} != {sorted(recorded)}"
        for k, v in recorded.items():
            where = f"{path}.{k}"
            if k == "message" or where in ("hello.result.version", "hello.result.artifact_sha256"):
                continue
            if k in OPAQUE and isinstance(v, str):
                assert isinstance(live[k], str), where
                assert mapping.setdefault(v, live[k]) == live[k], f"{where}: {live[k]!r} is not the value seen before"
                continue
            _same(v, live[k], mapping, where)
    elif isinstance(recorded, list):
        assert isinstance(live, list) and len(live) == len(recorded), f"{path}: {len(live)} items, the transcript has {len(recorded)}"
        for i, (a, b) in enumerate(zip(recorded, live, strict=True)):
            _same(a, b, mapping, f"{path}[{i}]")
    else:
        assert live == recorded, f"{path}: {live!r}, the transcript has {recorded!r}"


def _substitute(value: Any, mapping: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: _substitute(v, mapping) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, mapping) for v in value]
    return mapping.get(value, value) if isinstance(value, str) else value


def test_replaying_the_transcript_gives_the_same_answers(serve_reference: str, spec: Spec, schema: dict[str, Any],
                                                         transcript: list[tuple[str, dict[str, Any]]]) -> None:
    live: list[tuple[str, dict[str, Any]]] = []
    c = connect(serve_reference, spec, tap=lambda d, line: live.append((d, json.loads(line))))
    assert isinstance(c, WireClient)
    mapping: dict[str, str] = {}
    try:
        _same(transcript[1][1], live[1][1], mapping, "hello")
        requests = [(i, m) for i, (d, m) in enumerate(transcript) if d == ">"]
        for i, req in requests[1:]:
            args = _substitute(req["args"], mapping)
            if req["op"] == "reset":
                c.reset(args["config"])
            elif req["op"] == "arm":
                c.arm(args["point"], args.get("occurrence", 1))
            else:
                c.call(req["op"], **args)
            assert live[i][1] == {**req, "args": args}, f"request {i} was not sent as recorded"
            end = next((j for j, _ in requests if j > i), len(transcript))
            assert len(live) >= end, f"no answer to {req['op']} (line {i}); {REGENERATE}"
            for j in range(i + 1, end):
                _same(transcript[j][1], live[j][1], mapping, f"line {j} ({req['op']})")
        assert len(live) == len(transcript)
        assert c.last_crash_point is not None, "the replay ends at the crash point, as recorded"
    finally:
        c.close()
    _check_lines(schema, live)


def test_protocol_schema_covers_every_operation(spec: Spec) -> None:
    defs = protocol_schema(spec)["$defs"]
    for op in spec.operations:
        assert f"request_{op}" in defs and f"result_{op}" in defs
