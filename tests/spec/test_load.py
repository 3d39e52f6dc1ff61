"""Loading, merging and positions: the shipped contract, overlays, chains of files, YAML edge cases."""

from __future__ import annotations

import copy
import datetime
import hashlib
import re
import textwrap
from pathlib import Path

import pytest
import yaml
from ledgercheck.spec import DEFAULT_MANIFEST, SpecError, default_spec, load_spec, parse_duration, yamlpos
from ledgercheck.spec.load import _schema_errors, _schema_validator, merged_document, spec_from_document
from ledgercheck.spec.yamlpos import MAX_DEPTH, YamlLoadError, load_yaml, loads_yaml

CONTRACT = DEFAULT_MANIFEST.parent


def write(tmp_path: Path, text: str, name: str = "overlay.yaml") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def line_of(path: Path, needle: str) -> int:
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if needle in line:
            return n
    raise AssertionError(f"{needle!r} not in {path}")


def problems(paths: list[Path]) -> list:
    with pytest.raises(SpecError) as info:
        load_spec(paths)
    return info.value.problems


def the_problem(paths: list[Path], text: str):
    found = [p for p in problems(paths) if text in p.message]
    assert len(found) == 1, [str(p) for p in problems(paths)]
    return found[0]


def same_file(shown: str, path: Path) -> bool:
    return Path(shown).resolve() == path.resolve()


# ---- the shipped contract -------------------------------------------------------------------


def test_shipped_contract_loads_with_every_clause_file() -> None:
    spec = load_spec()
    assert spec.name == "ledgercheck-work-ledger"
    assert re.fullmatch(r"\d+\.\d+\.\d+", spec.version)
    written_ids = []
    for f in sorted((CONTRACT / "clauses").glob("*.yaml")):
        written_ids += re.findall(r"^\s*- id: (\S+)", f.read_text(encoding="utf-8"), flags=re.M)
    assert sorted(c.id for c in spec.clauses) == sorted(written_ids)
    assert len(set(written_ids)) == len(written_ids)
    assert spec.initial_status == "queued"
    assert set(spec.terminal_statuses) == {"done", "failed", "timeout", "cancelled"}


def test_shipped_files_are_listed_with_their_hashes() -> None:
    spec = load_spec()
    on_disk = {"ledgercheck:spec/" + p.relative_to(CONTRACT.parent).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
               for p in CONTRACT.rglob("*.yaml")}
    assert dict(spec.files) == on_disk


def test_default_spec_is_loaded_once_and_equals_a_fresh_load() -> None:
    assert default_spec() is default_spec()
    assert default_spec().digest == load_spec().digest == load_spec([DEFAULT_MANIFEST]).digest


def test_document_round_trip_through_spec_from_document() -> None:
    spec = default_spec()
    again = spec_from_document(dict(spec.document))
    assert again.digest == spec.digest
    assert again.transitions == spec.transitions


def test_spec_from_document_reports_problems_without_positions() -> None:
    doc = dict(default_spec().document)
    doc["lease"] = {**doc["lease"], "renew_interval": "2m"}
    with pytest.raises(SpecError) as info:
        spec_from_document(doc)
    assert [str(p) for p in info.value.problems] == ["<spec>: renew_interval (120s) must be shorter than ttl (45s)"]


# ---- overlays --------------------------------------------------------------------------------


def test_overlay_changes_timings_and_adds_clauses(tmp_path: Path) -> None:
    path = write(tmp_path, """
        extends: default
        lease:
          ttl: 2m
          renew_interval: 20s
          by_source:
            scheduler: {ttl: 10m}
        clauses:
          - id: lease.vendor.extra
            level: SHOULD
            impact: behaviour
            headline: breaks a vendor-specific promise
            profile: lease
            source: 002_737d00eb65282c59.txt
            statement: A vendor-specific promise.
        """)
    base, spec = default_spec(), load_spec([path])
    assert spec.lease_for(None).ttl == 120 and spec.lease_for(None).renew_interval == 20
    assert spec.lease_for(None).grace == base.lease_for(None).grace
    assert spec.lease_for("scheduler").ttl == 600
    assert spec.lease_for("scheduler").renew_interval == 20  # inherited from the overlay's default
    assert spec.lease_for("control") == base.lease_for("control")  # untouched override stays
    assert len(spec.clauses) == len(base.clauses) + 1
    assert spec.clauses[-1].id == "lease.vendor.extra" and spec.clause("lease.vendor.extra").level == "SHOULD"
    assert spec.clauses[: len(base.clauses)] == base.clauses
    assert spec.digest != base.digest
    assert any(not k.startswith("ledgercheck:") and k.endswith("overlay.yaml") for k in spec.files)


def test_lists_other_than_clauses_replace(tmp_path: Path) -> None:
    path = write(tmp_path, """
        extends: default
        forbidden_examples:
          - {from: done, to: running}
        """)
    assert load_spec([path]).forbidden_examples == (("done", "running"),)


def test_overlay_of_an_overlay(tmp_path: Path) -> None:
    write(tmp_path, "extends: default\nlease: {ttl: 90s}\n", "team.yaml")
    vendor = write(tmp_path, "extends: team.yaml\nlease: {grace: 5s}\n", "vendor.yaml")
    spec = load_spec([vendor])
    assert (spec.lease_default.ttl, spec.lease_default.grace) == (90, 5)


def test_further_files_apply_in_order(tmp_path: Path) -> None:
    a = write(tmp_path, "extends: default\nlease: {ttl: 90s}\n", "a.yaml")
    b = write(tmp_path, "extends: default\nlease: {ttl: 60s, grace: 1s}\n", "b.yaml")
    assert load_spec([a, b]).lease_default.ttl == 60
    assert load_spec([b, a]).lease_default.ttl == 90
    assert load_spec([b, a]).lease_default.grace == 1


def test_further_file_must_be_an_overlay_of_what_is_loaded(tmp_path: Path) -> None:
    a = write(tmp_path, "extends: default\nlease: {ttl: 90s}\n", "a.yaml")
    other = write(tmp_path, "extends: elsewhere.yaml\nlease: {ttl: 60s}\n", "other.yaml")
    p = the_problem([a, other], "not among the files loaded before it")
    assert same_file(p.pos.file, other) and p.pos.line == 1
    manifest = write(tmp_path, "include: [x.yaml]\n", "manifest.yaml")
    p = the_problem([a, manifest], "only the first file may be a manifest")
    assert same_file(p.pos.file, manifest) and p.pos.line == 1


def test_extends_cycle_is_reported(tmp_path: Path) -> None:
    write(tmp_path, "extends: two.yaml\n", "one.yaml")
    two = write(tmp_path, "extends: one.yaml\n", "two.yaml")
    p = the_problem([two], "makes a cycle")
    assert same_file(p.pos.file, tmp_path / "one.yaml") and (p.pos.line, p.pos.col) == (1, 1)


def test_included_file_cannot_redefine_a_section(tmp_path: Path) -> None:
    write(tmp_path, "lease: {ttl: 1s, renew_interval: 1s, grace: 1s, by_source: {}}\n", "extra.yaml")
    manifest = write(tmp_path, f"""
        spec: x
        version: "1.0.0"
        include:
          - {CONTRACT / "policy.yaml"}
          - extra.yaml
        """, "m.yaml")
    p = the_problem([manifest], "key 'lease' is already defined at")
    assert same_file(p.pos.file, tmp_path / "extra.yaml") and p.pos.line == 1
    assert "policy.yaml:" in p.message


def test_included_file_cannot_include(tmp_path: Path) -> None:
    write(tmp_path, "include: [other.yaml]\n", "sub.yaml")
    manifest = write(tmp_path, "spec: x\ninclude:\n  - sub.yaml\n", "m.yaml")
    p = the_problem([manifest], "an included file cannot use include:")
    assert same_file(p.pos.file, tmp_path / "sub.yaml")
    assert "m.yaml:3:5" in p.message


# ---- positions --------------------------------------------------------------------------------


def test_problem_points_at_the_overlay_when_the_overlay_wrote_the_value(tmp_path: Path) -> None:
    path = write(tmp_path, """
        extends: default
        # the shipped renew_interval is 15s
        lease:
          ttl: 10s
        """)
    p = the_problem([path], "must be shorter than ttl")
    assert same_file(p.pos.file, path) and (p.pos.line, p.pos.col) == (line_of(path, "ttl:"), 3)


def test_problem_points_at_the_shipped_file_when_the_shipped_value_is_at_fault(tmp_path: Path) -> None:
    # The overlay makes 'done' non-terminal; the shipped requeue edge out of 'done' is now wrong.
    path = write(tmp_path, """
        extends: default
        statuses:
          done: {terminal: false}
        """)
    p = the_problem([path], "requeue edges must leave a terminal status, not 'done'")
    shipped = CONTRACT / "lifecycle.yaml"
    assert same_file(p.pos.file, shipped)
    assert p.pos.line == line_of(shipped, "{from: done, to: queued")


def test_replaced_list_takes_the_overlay_positions(tmp_path: Path) -> None:
    path = write(tmp_path, """
        extends: default
        forbidden_examples:
          - {from: done, to: running}
          - {from: queued, to: nowhere}
        """)
    p = the_problem([path], "unknown status 'nowhere'")
    assert same_file(p.pos.file, path) and p.pos.line == line_of(path, "nowhere")


def test_schema_problems_come_in_file_order_one_per_unknown_key(tmp_path: Path) -> None:
    path = write(tmp_path, """
        extends: default
        lease:
          tll: 45s
          grace: 30s
          renw: 15s
        """)
    found = problems([path])
    assert [(p.pos.line, p.message.split(":")[0]) for p in found] == [(3, "lease.tll"), (5, "lease.renw")]
    assert all("unknown key" in p.message and "renew_interval" in p.message for p in found)


def test_crlf_line_endings_keep_positions(tmp_path: Path) -> None:
    path = tmp_path / "crlf.yaml"
    path.write_bytes(b"extends: default\r\n# note\r\nlease:\r\n  renew_interval: 2m\r\n")
    p = the_problem([path], "must be shorter than ttl")
    assert (p.pos.line, p.pos.col) == (4, 3)


# ---- durations --------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "seconds"), [
    ("45s", 45), ("5m", 300), ("2h", 7200), ("7d", 604800), ("250ms", 0.25), ("1.5h", 5400),
    ("0s", 0), (0, 0), (12, 12), (2.5, 2.5),
])
def test_durations_parse(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["5", "5 s", "5min", "-5s", "1e3s", ".5s", "5S", "nans", "infs", "1_0s", "5s\n", "",
                                 True, None, -1, float("inf"), float("nan"), [5]])
def test_bad_durations_are_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


@pytest.mark.parametrize(("field", "value", "seconds"), [
    ("ttl", "2h", 7200), ("ttl", "90", 90), ("grace", "250ms", 0.25), ("grace", "12.5", 12.5), ("ttl", "7d", 604800),
])
def test_durations_in_an_overlay(tmp_path: Path, field: str, value: str, seconds: float) -> None:
    # a lease lapses within the execution budget, which is at most 2000 renew intervals: long
    # leases come with a longer budget (and longer renewals)
    longer = {"2h": "phases:\n  execution: {timeout: 3h}\n",
              "7d": "  renew_interval: 1h\n  by_source:\n    control: {ttl: 2h, renew_interval: 1h}\n"
                    "phases:\n  execution: {timeout: 8d}\n"}.get(value, "")
    path = write(tmp_path, f"extends: default\nlease:\n  {field}: {value}\n{longer}")
    assert getattr(load_spec([path]).lease_default, field) == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["5 m", "5min", "-5s", "1e3s", "-1", "true", "[5s]", "'45'", ".inf"])
def test_bad_duration_in_an_overlay_names_its_line(tmp_path: Path, value: str) -> None:
    path = write(tmp_path, f"extends: default\n# grace\nlease:\n  grace: {value}\n")
    found = problems([path])
    assert len(found) == 1
    p = found[0]
    assert same_file(p.pos.file, path) and (p.pos.line, p.pos.col) == (4, 3)
    assert "duration" in p.message or "finite" in p.message


# ---- YAML edge cases ---------------------------------------------------------------------------


def test_anchors_aliases_and_merge_keys(tmp_path: Path) -> None:
    path = write(tmp_path, """
        extends: default
        lease:
          by_source:
            control: &short {ttl: 20s, renew_interval: 5s, grace: 5s}
            scheduler:
              <<: *short
              ttl: 40s
            manual: *short
        """)
    spec = load_spec([path])
    assert (spec.lease_for("scheduler").ttl, spec.lease_for("scheduler").renew_interval) == (40, 5)
    assert spec.lease_for("manual") == spec.lease_for("control")


def test_merge_key_precedence() -> None:
    value, pos = loads_yaml("a: &a {k: 1, j: 1}\nb: &b {k: 2, i: 2}\nc:\n  <<: [*a, *b]\n  j: 3\n", "f.yaml")
    assert value["c"] == {"k": 1, "j": 3, "i": 2}
    assert (pos[("c", "j")].line, pos[("c", "k")].line) == (5, 1)


@pytest.mark.parametrize(("text", "line", "col", "message"), [
    ("a:\n\tb: 1\n", 2, 1, "tabs"),
    ("a: 1\n---\nb: 2\n", 2, 1, "single YAML document"),
    ("a: [1\n", 2, 1, "flow sequence"),
    ("a: 1\nb: 2\na: 3\n", 3, 1, "duplicate key 'a' (first at line 1)"),
    ("a: *nope\n", 1, 4, "undefined alias"),
    ("a: &x 1\nb: &x 2\n", 2, 4, "duplicate anchor"),
    ("a:\n  b: x\x07y\n", 2, 7, "U+0007"),
    ("a:\n  yes: 1\n", 2, 3, "read as bool"),
    ("a:\n  ~: 1\n", 2, 3, "read as NoneType"),
    ("a:\n  [x]: 1\n", 2, 3, "not collections"),
    ("a: !!set {x}\n", 1, 4, "unsupported tag"),
    ("a: !!omap [b: 1]\n", 1, 4, "unsupported tag"),
    ("a: !!python/object:os.system x\n", 1, 4, "bad value"),
    ("a: &a [1, *a]\n", 1, 4, "contains it"),
    ("a: {<<: 3}\n", 1, 9, "merge key"),
])
def test_yaml_problems_have_positions(text: str, line: int, col: int, message: str) -> None:
    with pytest.raises(YamlLoadError) as info:
        loads_yaml(text, "f.yaml")
    err = info.value
    assert (err.pos.line, err.pos.col) == (line, col), str(err)
    assert message in err.message
    assert "\n" not in str(err) and str(err).startswith(f"f.yaml:{line}:{col}: ")


def test_deep_nesting_is_refused_at_its_position() -> None:
    for depth in (MAX_DEPTH + 1, 200_000):
        with pytest.raises(YamlLoadError) as info:
            loads_yaml("a: " + "[" * depth + "]" * depth + "\n", "f.yaml")
        assert (info.value.pos.line, info.value.pos.col) == (1, 3 + MAX_DEPTH)
        assert "nesting deeper than" in info.value.message
    value, _ = loads_yaml("a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1), "f.yaml")
    assert isinstance(value["a"], list)


def test_deep_nesting_through_aliases_is_refused() -> None:
    text = "a: &a " + "[" * 40 + "]" * 40 + "\nb: &b " + "[" * 30 + "*a" + "]" * 30 + "\n"
    with pytest.raises(YamlLoadError, match="counting aliases"):
        loads_yaml(text, "f.yaml")


def test_alias_expansion_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yamlpos, "MAX_VALUES", 5000)  # the real limit works the same, only slower to reach
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 7):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]")
    with pytest.raises(YamlLoadError, match="expands to more than 5000 values"):
        loads_yaml("\n".join(lines) + "\n", "f.yaml")
    value, _ = loads_yaml("\n".join(lines[:3]) + "\n", "f.yaml")  # 1110 values: fine
    assert len(value["l2"]) == 10


def test_shipped_contract_is_far_below_the_value_limit() -> None:
    _, positions, _ = merged_document()
    assert len(positions.by_path) * 10 < yamlpos.MAX_VALUES


def test_loader_agrees_with_pyyaml_on_the_shipped_files() -> None:
    for f in CONTRACT.rglob("*.yaml"):
        value, positions = load_yaml(f, "x.yaml")
        assert value == yaml.load(f.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        assert all(p.line >= 1 and p.col >= 1 for p in positions.values())


@pytest.mark.parametrize(("content", "message"), [
    (b"", "not empty"),
    (b"# just a comment\n", "not empty"),
    (b"\xef\xbb\xbf- a\n", "not a list"),
    (b"just text\n", "not a string"),
    (b"42\n", "not int"),
])
def test_top_level_must_be_a_mapping(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(content)
    p = the_problem([path], message)
    assert same_file(p.pos.file, path) and p.pos.line == 1


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbfextends: default\nlease: {ttl: 50s}\n")
    assert load_spec([path]).lease_default.ttl == 50


def test_undecodable_byte_position(tmp_path: Path) -> None:
    path = tmp_path / "latin.yaml"
    path.write_bytes("extends: default\ntitle: \"Zoë\"\n".encode() + b"# caf\xe9\n")
    p = the_problem([path], "not UTF-8")
    assert (p.pos.line, p.pos.col) == (3, 6)


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    p = the_problem([missing], "file not found")
    assert p.pos is None and "nope.yaml" in str(p) and "\n" not in str(p)
    p = the_problem([tmp_path], "directory")
    assert p.pos is None


def test_merged_document_keeps_the_base_positions() -> None:
    doc, pos, _ = merged_document()
    where = pos.at(("lease", "ttl"))
    policy = CONTRACT / "policy.yaml"
    assert same_file(where.file, policy) and where.line == line_of(policy, "ttl: 45s")
    assert pos.at(("lease", "ttl", "no", "such", "path")) == where
    last = len(doc["clauses"]) - 1
    # the last clause comes from the last clause file the manifest includes
    last_file = CONTRACT / [f for f in doc["include"] if f.startswith("clauses/")][-1]
    assert same_file(pos.at(("clauses", last, "id")).file, last_file)


def test_sectioned_schema_validation_equals_whole_document_validation() -> None:
    doc = copy.deepcopy(dict(default_spec().document))
    doc["lease"]["ttl"] = "x"
    doc["bogus"] = 1
    del doc["inbox"]
    doc["statuses"]["Bad"] = {"terminal": 1}
    doc["retry"]["policy"]["multiplier"] = float("nan")
    doc["seeds"]["when"] = datetime.date(2024, 1, 1)
    doc["clauses"].append({"id": "x", "level": "MAY"})
    for d in (doc, {}, [], {"spec": ""}):
        whole = sorted((list(e.absolute_path), e.message) for e in _schema_validator().iter_errors(d))
        sectioned = sorted((p + list(e.absolute_path), e.message) for p, e in _schema_errors(d))
        assert whole == sectioned
    assert len(_schema_errors(doc)) >= 7
