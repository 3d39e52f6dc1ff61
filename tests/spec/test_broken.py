"""Every file in broken/ must be refused, with a problem at the line its first comment names.

The first line of each file reads ``# expect: [FILE:]LINE[:COL]: TEXT``: a problem must be
reported at that line (and column) of that file (the broken file itself unless FILE, relative
to it, is given) whose message contains TEXT.
"""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from ledgercheck.spec.checks import CHECKS
from ledgercheck.spec.load import Problem, SpecError, load_spec

from ledgercheck.cli import main

BROKEN = Path(__file__).resolve().parent / "broken"
FILES = sorted(BROKEN.glob("*.yaml"))
EXPECT = re.compile(r"# expect: (?:(?P<file>[^:\s]+\.ya?ml):)?(?P<line>\d+)(?::(?P<col>\d+))?: (?P<text>.+)")
LOCATED = re.compile(r"(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): (?P<message>.+)")


def expectation(path: Path) -> tuple[Path, int, int | None, str]:
    first = path.read_bytes().split(b"\n", 1)[0].decode("ascii")
    m = EXPECT.fullmatch(first.strip())
    assert m, f"{path.name}: first line must be '# expect: [FILE:]LINE[:COL]: TEXT', not {first!r}"
    target = (path.parent / m["file"]).resolve() if m["file"] else path.resolve()
    return target, int(m["line"]), int(m["col"]) if m["col"] else None, m["text"]


def matches(file: str, line: int, col: int, message: str, want: tuple[Path, int, int | None, str]) -> bool:
    target, wline, wcol, text = want
    return Path(file).resolve() == target and line == wline and (wcol is None or col == wcol) and text in message


@cache
def problems_of(path: Path) -> tuple[Problem, ...]:
    with pytest.raises(SpecError) as info:
        load_spec([path])
    return tuple(info.value.problems)


def test_there_are_enough_broken_files() -> None:
    assert len(FILES) >= 14


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_broken_file_is_refused_at_the_expected_place(path: Path) -> None:
    want = expectation(path)
    problems = problems_of(path)
    assert problems
    for p in problems:
        assert p.pos is not None, f"problem without a position: {p}"
        assert "\n" not in str(p)
        assert LOCATED.fullmatch(str(p)), str(p)
    found = [p for p in problems if matches(p.pos.file, p.pos.line, p.pos.col, p.message, want)]  # type: ignore[union-attr]
    assert found, f"expected {want}, got:\n" + "\n".join(map(str, problems))


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_validate_command_exits_1_and_prints_the_line(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    want = expectation(path)
    assert main(["spec", "validate", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert lines
    parsed = [LOCATED.fullmatch(line) for line in lines]
    assert all(parsed), err
    assert any(matches(m["file"], int(m["line"]), int(m["col"]), m["message"], want) for m in parsed if m), err


def test_every_semantic_check_has_a_failing_fixture() -> None:
    fired = {p.check for f in FILES for p in problems_of(f) if p.check}
    missing = sorted({fn.__name__ for fn in CHECKS} - fired)
    assert not missing, f"no broken file makes these checks fail: {missing}"


def test_validate_as_a_real_process() -> None:
    paths = [BROKEN / f"{name}.yaml" for name in ("missing_include", "manifest_broken_include", "not_utf8")]
    proc = subprocess.run([sys.executable, "-m", "ledgercheck", "spec", "validate", *map(str, paths)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    parsed = [LOCATED.fullmatch(line) for line in proc.stderr.splitlines()]
    assert parsed and all(parsed), proc.stderr
    for path in paths:
        want = expectation(path)
        assert any(matches(m["file"], int(m["line"]), int(m["col"]), m["message"], want) for m in parsed if m), path.name
