"""Fuzzing every file reader through the real CLI: each input loads or is refused in one line.

One structure-aware fuzzer per kind of input (contract overlays as YAML text, traces, crash replay
files, results files) mutates valid documents of that kind, and one raw-bytes fuzzer per reader
edits a valid file's bytes.  The budget is small here (LEDGERCHECK_FUZZ=thorough raises it; see
fuzz_support.py).  The last tests switch a reader's bound off and show the fuzzers catch it.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from fuzz_support import (
    DEEP,
    DEEP_JSON,
    FUZZ,
    OverTime,
    Ran,
    assert_contract_outcome,
    assert_nothing_written,
    assert_refused_or_done,
    byte_mutate,
    cli,
    files_under,
    mutate,
    paths,
    results_doc,
    results_facts,
    scalars,
    sealed_bytes,
    spec,
    storm_replay_doc,
    trace_doc,
    values,
    window_replay_doc,
    write,
)
from hypothesis import given
from hypothesis import strategies as st
from ledgercheck.spec import yamlpos

BROKEN = Path(__file__).resolve().parents[1] / "spec" / "broken"


def _fresh() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="ledgercheck-fuzz-")


# ---- contract overlays (YAML) ---------------------------------------------------------------------

VALID_OVERLAYS = [
    "extends: default\n",
    "extends: default\nlease:\n  ttl: 90s\n  renew_interval: 20s\n",
    "extends: default\nlease:\n  by_source:\n    control: &short {ttl: 20s, renew_interval: 5s, grace: 5s}\n"
    "    scheduler:\n      <<: *short\n      ttl: 40s\n    manual: *short\n",
    "extends: default\nretry:\n  policy:\n    max_attempts: 7\n    initial_backoff: 2s\n",
    "extends: default\npriority:\n  default: 0\n  min: -10\n  max: 10\n",
]
SEED_TEXTS = VALID_OVERLAYS + [p.read_text(encoding="utf-8", errors="replace") for p in sorted(BROKEN.glob("*.yaml"))]
DOC = {k: v for k, v in spec().document.items()}
DOC_VALUES = [v for v in scalars(DOC) if v != DEEP]
YAML_TOKENS = ["*a", "&a", "<<: *a", "<<: [*a, *a]", "!!python/object:os.system x", "!!set {x}", ".nan", "-.inf",
               "~", "yes", "0x1F", "1e400", "[", "]", "{", "}", ": ", "- ", "\t", "'", '"', "---", "...", "%YAML 1.1",
               "? ", "|", ">", "#", "\u00e9", "\ufeff", "\x00", "extends: default", "include: [x.yaml]",
               "extends: ../../../../etc/passwd", "extends: /dev/zero", "extends: .", "1" * 5000]


@st.composite
def line_mutants(draw: st.DrawFn) -> str:
    lines = draw(st.sampled_from(SEED_TEXTS)).split("\n")
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, max(0, len(lines) - 1)))
        op = draw(st.sampled_from(["token", "dup", "drop", "indent", "swap"]))
        if op == "token":
            line = lines[i] if lines else ""
            at = draw(st.integers(0, len(line)))
            lines[i:i + 1] = [line[:at] + draw(st.sampled_from(YAML_TOKENS)) + line[at:]]
        elif op == "dup" and lines:
            lines.insert(i, lines[i])
        elif op == "drop" and lines:
            del lines[i]
        elif op == "indent" and lines:
            lines[i] = draw(st.sampled_from(["  ", "    ", "\t", " "])) + lines[i]
        elif op == "swap" and len(lines) > 1:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


@st.composite
def section_overlays(draw: st.DrawFn) -> str:
    """An overlay changing one section of the shipped contract, values drawn from the contract."""
    key = draw(st.sampled_from(sorted(DOC)))
    section = DOC[key]
    ps = paths(section)
    muts = draw(st.lists(st.tuples(st.sampled_from(ps or [()]), st.sampled_from(["set", "delete", "rename", "wrap"]),
                                   values(DOC_VALUES)), min_size=1, max_size=3))
    body = mutate(section, muts)
    return "extends: default\n" + yaml.safe_dump({key: body}, sort_keys=False, allow_unicode=True)


@st.composite
def expansion_bombs(draw: st.DrawFn) -> str:
    """Anchors used many times over (aliases, merge keys, or both), under a key of an overlay."""
    fan = draw(st.integers(1, 12))
    depth = draw(st.integers(1, 12))
    style = draw(st.sampled_from(["alias", "merge", "mixed"]))
    key = draw(st.sampled_from(["x", "lease", "seeds", "scanner"]))
    lines = ["extends: default", f"{key}:", "  m0: &m0 {a: 1, b: [1, 2]}"]
    for i in range(1, depth + 1):
        kind = style if style != "mixed" else draw(st.sampled_from(["alias", "merge"]))
        refs = ", ".join([f"*m{i - 1}"] * fan)
        lines.append(f"  m{i}: &m{i} [{refs}]" if kind == "alias" else f"  m{i}: &m{i}\n    k{i}: {i}\n    <<: [{refs}]")
    return "\n".join(lines) + "\n"


OVERLAYS = st.one_of(line_mutants(), section_overlays(), expansion_bombs())


def check_overlay(text: str | bytes) -> Ran:
    with _fresh() as d:
        root = Path(d)
        path = write(root / "overlay.yaml", text)
        before = files_under(root)
        ran = cli(["spec", "validate", str(path)], root)
        assert_contract_outcome(ran)
        assert_nothing_written(before, root)
        return ran


@FUZZ
@given(OVERLAYS)
def test_contract_overlays_load_or_are_refused_at_a_line(text: str) -> None:
    check_overlay(text)


@FUZZ
@given(st.sampled_from(SEED_TEXTS), st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(
    ["insert", "overwrite", "delete", "cut"]), st.binary(min_size=1, max_size=8)), min_size=1, max_size=4))
def test_contract_bytes(seed: str, edits: list[tuple[int, str, bytes]]) -> None:
    check_overlay(byte_mutate(seed.encode("utf-8"), edits))


# ---- traces (ledgercheck replay) ------------------------------------------------------------------

TRACE = trace_doc(Path(tempfile.mkdtemp(prefix="ledgercheck-fuzz-seed-")))
TRACE_PATHS = paths(TRACE)
# names a step's arguments could take: the contract's, and the harness's own parameters
ARG_NAMES = sorted({a for op in spec().operations.values() for a in op.args} | {"op", "self", "args", "$t", "$item"})
TRACE_POOL = scalars(TRACE) + ARG_NAMES + ["hello", "reset", "create", "claim", "no_such_op"]
ACTIONS = ["set", "set", "delete", "rename", "add", "duplicate", "wrap"]


def json_mutations(doc_paths: list[tuple[Any, ...]], pool: list[Any]) -> st.SearchStrategy[list[Any]]:
    return st.lists(st.tuples(st.sampled_from(doc_paths), st.sampled_from(ACTIONS), values(pool)),
                    min_size=1, max_size=4)


def dumps(doc: Any) -> bytes:
    """``doc`` as JSON, the DEEP marker replaced by thousands of nested arrays (which json.dumps
    itself could not write)."""
    return json.dumps(doc).replace(json.dumps(DEEP), DEEP_JSON.decode()).encode()


def one_error_line(ran: Ran) -> Ran:
    """Warnings may precede; the refusal itself is one line."""
    lines = [ln for ln in ran.err.splitlines() if ": warning: " not in ln]
    return Ran(ran.rc, ran.out, "\n".join(lines) + ("\n" if lines else ""), ran.seconds)


def check_trace(data: bytes, name_adapter: bool) -> None:
    with _fresh() as d:
        root = Path(d)
        path = write(root / "trace.json", data)
        before = files_under(root)
        ran = cli(["replay", str(path), *(["--adapter", "reference"] if name_adapter else [])], root)
        assert_refused_or_done(one_error_line(ran), "ledgercheck replay: ")
        assert "PWNED" not in {p.name for p in root.rglob("*")}
        assert_nothing_written(before, root)


@FUZZ
@given(json_mutations(TRACE_PATHS, TRACE_POOL), st.booleans())
def test_traces_replay_or_are_refused_in_one_line(muts: list[Any], name_adapter: bool) -> None:
    check_trace(dumps(mutate(TRACE, muts)), name_adapter)


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(["insert", "overwrite", "delete", "cut"]),
                          st.binary(min_size=1, max_size=8)), min_size=1, max_size=4))
def test_trace_bytes(edits: list[tuple[int, str, bytes]]) -> None:
    check_trace(byte_mutate(json.dumps(TRACE, indent=1).encode(), edits), True)


# ---- crash replay files (ledgercheck crash replay) --------------------------------------------------

WINDOW, STORM = window_replay_doc(), storm_replay_doc()
REPLAY_POOL = scalars(WINDOW) + scalars(STORM) + [
    "window", "storm", "pause", "python:tests.evil:Worker", "exec:sh -c 'touch PWNED'", 10**7, 0.0, -0.5, 1e9]


def _run_one(address: str, spec: Any, point: str, occurrence: int, **kw: Any) -> dict[str, Any]:
    """Stands in for the crash window: what a replay starts is recorded, nothing runs."""
    _run_one.calls.append((address, kw.get("worker")))  # type: ignore[attr-defined]
    return {"point": point, "occurrence": occurrence, "verdict": "pass", "address": address}


def _storm(doc: Any, spec: Any, path: str, *, address: str | None = None, **_: Any) -> dict[str, Any]:
    _run_one.calls.append((address, doc.get("worker")))  # type: ignore[attr-defined]
    return {"verdict": "pass", "adapter": address}


def check_replay(data: bytes, adapter: str | None) -> None:
    """Everything a replay file says is checked before a window (or storm) would start; what
    would start is never an exec:/python: address or a worker variant the file chose."""
    _run_one.calls = []  # type: ignore[attr-defined]
    with _fresh() as d, mock.patch("ledgercheck.chaos.crash.rerun.run_one", _run_one), \
            mock.patch("ledgercheck.chaos.crash.rerun.storm_from_replay", _storm):
        root = Path(d)
        path = write(root / "replay.json", data)
        before = files_under(root)
        ran = cli(["crash", "replay", str(path), "--json", *(["--adapter", adapter] if adapter else [])], root)
        assert "Traceback" not in ran.err
        if ran.rc == 2:
            assert_refused_or_done(ran, "ledgercheck crash replay: ")
            assert not _run_one.calls, "refused after the run started"  # type: ignore[attr-defined]
        else:
            assert ran.rc == 0, ran.err
            (address, worker), = _run_one.calls  # type: ignore[attr-defined]
            if adapter is None:
                assert not str(address).startswith(("exec:", "python:")), address
            else:
                assert address == adapter
            assert worker is None, f"the file chose worker variant {worker!r}"
        assert_nothing_written(before, root)


@FUZZ
@given(st.sampled_from([WINDOW, STORM]).flatmap(
    lambda doc: st.tuples(st.just(doc), json_mutations(paths(doc), REPLAY_POOL))),
    st.sampled_from([None, None, "reference"]))
def test_crash_replay_files_run_or_are_refused_before_anything_starts(seeded: tuple[Any, list[Any]],
                                                                      adapter: str | None) -> None:
    doc, muts = seeded
    check_replay(dumps(mutate(doc, muts)), adapter)


@FUZZ
@given(st.sampled_from([WINDOW, STORM]), st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(
    ["insert", "overwrite", "delete", "cut"]), st.binary(min_size=1, max_size=8)), min_size=1, max_size=4))
def test_crash_replay_bytes(doc: dict[str, Any], edits: list[tuple[int, str, bytes]]) -> None:
    check_replay(byte_mutate(json.dumps(doc, indent=1).encode(), edits), None)


# ---- results files (ledgercheck report show|render|merge) -------------------------------------------

FACTS = results_facts()
FACTS_PATHS = paths(FACTS)
RESULTS = results_doc(FACTS)
RESULTS_PATHS = paths(RESULTS)
RESULTS_POOL = scalars(RESULTS) + ["<script>alert(1)</script>", "../../x", "NOT CERTIFIED"]
REPORT_CMDS = ["show", "show-json", "render", "merge"]


def check_results(data: bytes, command: str) -> None:
    with _fresh() as d:
        root = Path(d)
        path = write(root / "results.json", data)
        before = files_under(root)
        out = root / "out"
        argv = {"show": ["report", "show", str(path)], "show-json": ["report", "show", str(path), "--json"],
                "render": ["report", "render", str(path), "--out", str(out)],
                "merge": ["report", "merge", str(path), str(path), "-o", str(out / "merged.json")]}[command]
        ran = cli(argv, root)
        assert_refused_or_done(ran, "ledgercheck report: ", ok=(0,))
        assert_nothing_written(before, root, allowed="out")


def rebuilt(muts: list[Any]) -> dict[str, Any] | None:
    """The results document built from mutated facts (consistent, so it reaches the renderers with
    hostile names and messages), or None when the builder refuses them."""
    try:
        return results_doc(mutate(FACTS, muts))
    except Exception:  # noqa: BLE001 - the builder takes the plugin's facts, not files: any refusal will do
        return None


@FUZZ
@given(st.one_of(json_mutations(RESULTS_PATHS, RESULTS_POOL).map(lambda m: ("document", m)),
                 json_mutations(FACTS_PATHS, RESULTS_POOL).map(lambda m: ("facts", m))),
       st.sampled_from(REPORT_CMDS), st.booleans())
def test_results_files_load_or_are_refused_in_one_line(how: tuple[str, list[Any]], command: str, seal: bool) -> None:
    kind, muts = how
    doc = (rebuilt(muts) if kind == "facts" else None) or mutate(RESULTS, muts if kind == "document" else [])
    check_results(sealed_bytes(doc).replace(b'"' + DEEP.encode() + b'"', DEEP_JSON) if seal else dumps(doc), command)


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(["insert", "overwrite", "delete", "cut"]),
                          st.binary(min_size=1, max_size=8)), min_size=1, max_size=4), st.sampled_from(REPORT_CMDS))
def test_results_bytes(edits: list[tuple[int, str, bytes]], command: str) -> None:
    check_results(byte_mutate(sealed_bytes(RESULTS), edits), command)


# ---- the fuzzers catch a reader without its bound ----------------------------------------------------


def _fails(test: Any) -> BaseException:
    with pytest.raises(BaseException) as info:  # noqa: PT011 - any failure the fuzzer reports
        test()
    return info.value


# the alarm may ring inside hypothesis's garbage-collector callback, which drops it (it rings again)
@pytest.mark.thorough  # the fuzzer run to a catch (a minute of overlays): the long tier
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_overlay_fuzzer_catches_a_loader_whose_merge_budget_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of the YAML loader that counts values but not keys copied by merges (the bug the
    merge-key bomb exposed): the fuzzer finds an overlay that runs past the time bound."""
    monkeypatch.setattr("fuzz_support.TIME_BOUND", 3.0)
    original = yamlpos._Builder._entries

    def entries_without_budget(self: Any, node: Any, active: Any, merges: int = 0) -> Any:
        step = self.step
        self.step = lambda node: None  # the keys a merge copies cost nothing: the bound is off
        try:
            return original(self, node, active, merges)
        finally:
            self.step = step

    monkeypatch.setattr(yamlpos._Builder, "_entries", entries_without_budget)
    found = _fails(given(expansion_bombs())(FUZZ(lambda text: check_overlay_within(text, 3.0))))
    assert isinstance(found, OverTime), repr(found)


def check_overlay_within(text: str, bound: float) -> None:
    with _fresh() as d:
        root = Path(d)
        path = write(root / "overlay.yaml", text)
        assert_contract_outcome(cli(["spec", "validate", str(path)], root, bound=bound))


def test_the_results_fuzzer_catches_a_reader_without_its_nesting_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The results reader with the nesting scan switched off: deeply nested JSON reaches the
    recursive parser and checks, and the fuzzer (mutating the same documents) sees a traceback."""
    monkeypatch.setattr("ledgercheck.reports.results.shape_problem", lambda text, limits: None)
    @FUZZ
    @given(json_mutations(RESULTS_PATHS, RESULTS_POOL), st.sampled_from(REPORT_CMDS))
    def fuzz(muts: list[Any], command: str) -> None:
        check_results(dumps(mutate(RESULTS, muts)), command)

    found = _fails(fuzz)
    assert isinstance(found, RecursionError) or "Recursion" in repr(found), repr(found)
