"""Every value an overlay can set is bounded by what a run can exercise (docs/contract.md, "Bounds").

Out-of-range overlays are refused as one file:line:col line per value; the schema's integer bounds
and the constants the checks and the clause tests use are the same numbers.  (That an overlay at
the bounds certifies the reference is tests/conformance/test_bounds_certify.py.)
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from ledgercheck.spec import SCHEMA_PATH, load_spec
from ledgercheck.spec import checks as C

from ledgercheck.cli import main

BIG = 10**87


def _overlay(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "overlay.yaml"
    path.write_text("extends: default\n# bounds\n" + textwrap.dedent(body).lstrip("\n"), encoding="utf-8")
    return path


def _validate(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, list[str]]:
    capsys.readouterr()
    rc = main(["spec", "validate", str(path)])
    out = capsys.readouterr()
    return rc, [ln for ln in (out.out + out.err).splitlines() if ln.strip()]


REFUSED = [
    # the examples: each would hang a test or fail a correct ledger
    ("retry:\n  policy:\n    max_attempts: " + str(BIG) + "\n", 5, "retry.policy.max_attempts", "maximum 25"),
    ("inbox:\n  max_nacks: " + str(10**37) + "\n", 4, "inbox.max_nacks", "maximum 25"),
    ("lease:\n  ttl: " + "1" + "0" * 50 + "d\n", 4, "is longer than ten years", ""),
    # one past each bound
    ("lease:\n  grace: 3651d\n", 4, "is longer than ten years", ""),
    ("idempotency:\n  retention: 315360001\n", 4, "is longer than ten years", ""),
    ("waiting:\n  timeouts: {user: 87601h}\n", 4, "is longer than ten years", ""),
    ("retry:\n  policy:\n    max_attempts: 26\n", 5, "retry.policy.max_attempts", "maximum 25"),
    ("retry:\n  policy:\n    max_attempts: 1\n", 5, "retry.policy.max_attempts", "minimum 2"),
    ("retry:\n  policy:\n    multiplier: 101\n", 5, "retry.policy.multiplier", "maximum 100"),
    ("inbox:\n  max_nacks: 1\n", 4, "inbox.max_nacks", "minimum 2"),
    ("inbox:\n  drain_max: 1001\n", 4, "inbox.drain_max", "maximum 1000"),
    ("outbox:\n  pending_max: 1001\n", 4, "outbox.pending_max", "maximum 1000"),
    ("outbox:\n  pending_max: 9\n", 4, "outbox.pending_max", "minimum 10"),
    ("eventlog:\n  first_seq: 0\n", 4, "eventlog.first_seq", "minimum 1"),
    ("eventlog:\n  first_seq: 1000001\n", 4, "eventlog.first_seq", "maximum 1000000"),
    ("priority:\n  max: 1000001\n", 4, "priority.max", "maximum 1000000"),
    ("priority:\n  min: -992\n", 4, "priority range [-992, 9] spans 1001 levels, more than 1000", ""),
    ("lease:\n  ttl: 50m\n  grace: 10m\n", 4, "lease ttl + grace (3600s) must be shorter than the execution timeout (3600s)", ""),
    ("lease:\n  renew_interval: 1.75\n", 4, "the execution timeout (3600s) is 2057 renew intervals (1.75s), more than 2000", ""),
    ("lease:\n  by_source:\n    control: {renew_interval: 1s}\n", 5, "is 3600 renew intervals (1s for control)", ""),
]


@pytest.mark.parametrize(("body", "line", "needle", "more"), REFUSED)
def test_out_of_range_values_are_refused_at_their_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, body: str,
                                                        line: int, needle: str, more: str) -> None:
    path = _overlay(tmp_path, body)
    rc, lines = _validate(capsys, path)
    assert rc == 1 and len(lines) == 1, lines
    assert f"overlay.yaml:{line}:" in lines[0].split(" ")[0], lines
    assert needle in lines[0] and more in lines[0], lines


def test_certify_refuses_an_out_of_range_overlay_with_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _overlay(tmp_path, "retry:\n  policy:\n    max_attempts: " + str(BIG) + "\n")
    capsys.readouterr()
    rc = main(["certify", "--adapter", "reference", "--spec", str(path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and "overlay.yaml:5:" in lines[0] and "maximum 25" in lines[0], err
    assert not (tmp_path / "out").exists()


# overlays at the bounds validation allows, shared with tests/conformance/test_bounds_certify.py
# (which certifies the reference against each)
ACCEPTED = {p.stem: p.read_text(encoding="utf-8") for p in sorted((Path(__file__).parent / "bounds").glob("*.yaml"))}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_values_at_the_bounds_are_accepted(tmp_path: Path, name: str) -> None:
    load_spec([_overlay(tmp_path, ACCEPTED[name])])


def test_schema_bounds_are_the_checks_constants() -> None:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))["properties"]
    policy = schema["retry"]["properties"]["policy"]["properties"]
    by_source = schema["retry"]["properties"]["by_source"]["additionalProperties"]["properties"]["policy"]["properties"]
    assert (policy["max_attempts"]["minimum"], policy["max_attempts"]["maximum"]) == (C.MIN_ATTEMPTS, C.MAX_ATTEMPTS)
    assert (by_source["max_attempts"]["minimum"], by_source["max_attempts"]["maximum"]) == (1, C.MAX_ATTEMPTS)
    assert policy["multiplier"]["maximum"] == by_source["multiplier"]["maximum"] == C.MAX_MULTIPLIER
    inbox = schema["inbox"]["properties"]
    assert (inbox["max_nacks"]["minimum"], inbox["max_nacks"]["maximum"]) == (C.MIN_NACKS, C.MAX_NACKS)
    for batch in (inbox["drain_max"], schema["outbox"]["properties"]["pending_max"]):
        assert (batch["minimum"], batch["maximum"]) == (C.MIN_BATCH, C.MAX_BATCH)
    first_seq = schema["eventlog"]["properties"]["first_seq"]
    assert (first_seq["minimum"], first_seq["maximum"]) == (C.MIN_FIRST_SEQ, C.MAX_FIRST_SEQ)
    for k in ("min", "max", "default"):
        p = schema["priority"]["properties"][k]
        assert (p["minimum"], p["maximum"]) == (-C.PRIORITY_LIMIT, C.PRIORITY_LIMIT)
