"""Every field of every kind of file a command reads, and the command line itself, fed values no
reader expects: each input loads (the command does its job) or is refused in one line, never a
traceback (docs/inputs.md).

The files are real documents of each kind (a trace recorded from the reference, window and storm
replay files, a results file from a certification, a synthetic safety history); one field at a
time is replaced by an integer of 5,000 digits, a number too large for a double, a lone
surrogate, invalid UTF-8 inside a string, a string of 300,000 characters and the like.  The default
run gives each field (list positions folded together) one of these values in turn, and one field
in three of crash replay files (one that loads runs its window or storm) and one in six of a
results file (read, and rendered when sealed);
``LEDGERCHECK_FUZZ=thorough`` gives every field every value.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fuzz_support import (
    THOROUGH,
    assert_refused_or_done,
    cli,
    paths,
    results_doc,
    sealed_bytes,
    storm_replay_doc,
    trace_doc,
    window_replay_doc,
)
from history_sim import simulate

BIG = "9" * 5000
# raw JSON text put where a field's value was
RAW: dict[str, bytes] = {
    "5000 digits": BIG.encode(),
    "-5000 digits": ("-" + BIG).encode(),
    "1e999": b"1e999",
    "400-digit float": ("1" + "0" * 400 + ".5").encode(),
    "2**64": b"18446744073709551616",
    "lone surrogate": b'"\\ud800x"',
    "invalid UTF-8": b'"\xff\xfe"',
    "300,000 characters": b'"' + b"\x1b" * 10 + b"x" * 300_000 + b'"',
    "-0": b"-0",
}
# values a sealed results document can hold (its integrity hash recomputed, so they reach the rules)
SEALED: dict[str, Any] = {"lone surrogate": "\ud800x", "2**64": 2**64, "1e308": 1e308, "-1": -1,
                          "300,000 characters": "\x1b" * 10 + "x" * 300_000}


def _fold(path: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple("#" if isinstance(p, int) else p for p in path)


def fields(doc: Any, stride: int = 1) -> list[tuple[Any, ...]]:
    """One path per field of ``doc`` (list positions folded together); every ``stride``-th one."""
    seen: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for p in paths(doc, limit=200_000):
        seen.setdefault(_fold(p), p)
    return list(seen.values())[::stride]


def placed(doc: Any, path: tuple[Any, ...], raw: bytes) -> bytes:
    """``doc`` as JSON with the value at ``path`` replaced by the raw JSON text ``raw``."""
    d = copy.deepcopy(doc)
    holder = d
    for k in path[:-1]:
        holder = holder[k]
    holder[path[-1]] = "__ledgercheck_hostile__"
    return json.dumps(d, ensure_ascii=False).encode("utf-8").replace(b'"__ledgercheck_hostile__"', raw)


def cases(doc: Any, values: dict[str, Any], stride: int = 1) -> Iterator[tuple[tuple[Any, ...], str, Any]]:
    """(path, value name, value): every value at every field (thorough), or one each in turn."""
    names = list(values)
    for i, path in enumerate(fields(doc, 1 if THOROUGH else stride)):
        for name in (names if THOROUGH else [names[i % len(names)]]):
            yield path, name, values[name]


def sweep(tmp_path: Path, kind: str, inputs: Iterator[tuple[str, bytes]], argv: Callable[[str], list[str]],
          prefix: str, ok: tuple[int, ...] = (0, 1)) -> int:
    f = tmp_path / f"{kind}.input"
    n = 0
    for label, data in inputs:
        f.write_bytes(data)
        ran = cli(argv(str(f)), tmp_path, bound=3600)  # a hang, not a slow machine
        try:
            assert_refused_or_done(ran, prefix, ok)
        except AssertionError as exc:
            raise AssertionError(f"{kind}, {label}: {exc}") from None
        n += 1
    return n


def test_every_field_of_a_trace(tmp_path: Path) -> None:
    doc = trace_doc(tmp_path)
    n = sweep(tmp_path, "trace", ((f"{p} = {name}", placed(doc, p, raw)) for p, name, raw in cases(doc, RAW)),
              lambda f: ["replay", f, "--adapter", "reference", "--json"], "ledgercheck replay: ")
    assert n >= 30


@pytest.mark.parametrize("kind", ["window", "storm"])
def test_every_field_of_a_crash_replay_file(tmp_path: Path, kind: str) -> None:
    doc = window_replay_doc() if kind == "window" else storm_replay_doc()
    if kind == "storm":  # a storm that loads runs: a small one
        doc["storm"].update(kills=2, items=10, workers=2)
    # a replay file that loads runs its window or storm (seconds each): one field in three by default
    n = sweep(tmp_path, kind, ((f"{p} = {name}", placed(doc, p, raw)) for p, name, raw in cases(doc, RAW, stride=3)),
              lambda f: ["crash", "replay", f, "--json"], "ledgercheck crash replay: ")
    assert n >= 10


def test_every_field_of_a_results_file(tmp_path: Path) -> None:
    doc = json.loads(sealed_bytes(results_doc()))
    raw = ((f"{p} = {name}", placed(doc, p, v)) for p, name, v in cases(doc, RAW, stride=6))
    n = sweep(tmp_path, "results", raw, lambda f: ["report", "show", f], "ledgercheck report: ")

    def sealed() -> Iterator[tuple[str, bytes]]:
        for p, name, v in cases(doc, SEALED, stride=6):
            d = copy.deepcopy(doc)
            d.pop("integrity", None)
            holder = d
            for k in p[:-1]:
                holder = holder[k]
            holder[p[-1]] = v
            yield f"{p} = {name} (sealed)", sealed_bytes(d)

    n += sweep(tmp_path, "results", sealed(), lambda f: ["report", "render", f, "--out", "rendered"], "ledgercheck report: ")
    assert n >= 100


def test_every_field_of_a_safety_history(tmp_path: Path) -> None:
    """Scalars only: a list or an object where the checker expects a token or a status is a
    question for the checker (chaos/safety/anomalies.py), not for the reader."""
    lines = simulate(4, items=3, workers=2, steps=40).dumps().splitlines()
    firsts: dict[tuple[Any, ...], int] = {}
    for i, line in enumerate(lines):  # one line of each record type and operation
        rec = json.loads(line)
        firsts.setdefault((rec.get("type"), rec.get("op")), i)

    def inputs() -> Iterator[tuple[str, bytes]]:
        for i in sorted(firsts.values()):
            rec = json.loads(lines[i])
            for p, name, raw in cases(rec, RAW):
                yield f"line {i + 1} {p} = {name}", b"\n".join(lines[:i] + [placed(rec, p, raw)] + lines[i + 1:]) + b"\n"

    n = sweep(tmp_path, "history", inputs(), lambda f: ["history", "check", f], "ledgercheck history: ", ok=(0, 1))
    assert n >= 30


def test_a_list_or_an_object_as_an_identifier_of_a_history(tmp_path: Path) -> None:
    """A work id, token, owner or status that is a list or an object (no ledger hands one out) is
    refused in one line naming its line and field, exit 2, where the checker would have raised."""
    lines = simulate(4, items=3, workers=2, steps=40).dumps().splitlines()
    hits = 0

    def inputs() -> Iterator[tuple[str, bytes]]:
        nonlocal hits
        for i, line in enumerate(lines):
            rec = json.loads(line)
            for holder in ("args", "result"):
                obj = rec.get(holder)
                for key in ("work_id", "token", "lease_token", "owner", "status"):
                    if isinstance(obj, dict) and key in obj:
                        for raw in (b"[1]", b'{"a": 1}'):
                            hits += 1
                            yield f"line {i + 1} {holder}.{key} = {raw!r}", \
                                b"\n".join(lines[:i] + [placed(rec, (holder, key), raw)] + lines[i + 1:]) + b"\n"
                        if hits >= 24:
                            return

    n = sweep(tmp_path, "history", inputs(), lambda f: ["history", "check", f], "ledgercheck history: ", ok=(0, 1))
    assert n >= 10


# ---- the command line ---------------------------------------------------------------------------------

QUICK = ["-k", "zzz_selects_nothing", "--no-chaos", "--no-history", "--quiet"]


def _garbage_argv(d: Path) -> list[tuple[list[str], str]]:
    """(argv, the start of the one line it must be refused with)."""
    big = "9" * 5000
    out = ["--out", str(d / "o")]
    c = "ledgercheck certify: "
    cases: list[tuple[list[str], str]] = []
    for opt in ("--timeout", "--timeout-scale", "--wall-scale"):
        for v in ("nan", "inf", "-1", "0", "1e999", big):
            cases.append((["certify", opt, v, *QUICK, *out], f"{c}{opt} must be a number above 0"))
    for v in (big, "-1", str(2**32), "1e3"):
        cases.append((["certify", "--seed", v, *QUICK, *out], "" if v in (big, "1e3") else f"{c}--seed must be an integer"))
    for v in (f"{big}/2", f"1/{big}", "/2", "1/", "٣/4", "0x1/2", "2/1", "1/0", " 1/2"):
        cases.append((["certify", "--shard", v, *QUICK, *out], f"{c}--shard must be K/N"))
    for v in ("", " ", big, "1e3", "٣"):
        cases.append((["certify", "-n", v, *QUICK, *out], f"{c}-n must be auto, logical or a number"))
    for v in ("(", "not", "a and", "\x00"):
        cases.append((["certify", "-k", v, "--no-chaos", "--no-history", "--quiet", *out], f"{c}-k "))
    for v in ("nope", "\x1b[2J", "full,nope"):
        cases.append((["certify", "--profile", v, *QUICK, *out], f"{c}--profile: unknown profile(s)"))
    (d / "file").write_text("x")
    cases += [(["certify", "--out", str(d / "file"), *QUICK], f"{c}--out {d / 'file'}: not a folder"),
              (["certify", "--out", "", *QUICK], f"{c}--out: empty"),
              (["certify", "--artifacts", str(d / "file"), *QUICK, *out], f"{c}--artifacts {d / 'file'}: not a folder"),
              (["certify", "--artifact", "/dev/zero", *QUICK, *out], f"{c}--artifact /dev/zero: not a regular file"),
              (["certify", "--history", str(d), "-k", "zzz_selects_nothing", "--no-chaos", "--quiet", *out],
               f"{c}--history {d}: a folder")]
    for url, words in (("redis://[::1", "not a valid URL (Invalid IPv6 URL)"),
                       ("redis://:hunter2@[::1:1/0", "not a valid URL"),
                       ("redis://:hunter2@127.0.0.1:1/0", "the Redis server does not answer"),
                       (f"redis://:hunter2@h:{big}/0", "the port is not a number"),
                       (f"redis://:hunter2@h/{big}", "the database must be a number"),
                       ("redis://:hunter2@h/0?socket_timeout=abc", "Invalid value for 'socket_timeout'"),
                       ("http://u:hunter2@h/", "unknown scheme 'http'")):
        cases.append((["certify", "--example-db", url, *QUICK, *out], f"{c}--ledger-example-db "))
        cases[-1] = (cases[-1][0], cases[-1][1] + "|" + words)
    for dsn in ("postgresql://[::1", "postgresql://u:hunter2@127.0.0.1:1/x", "host=127.0.0.1 port=1 password=hunter2",
                f"postgresql://h:{big}/x", "host='unterminated"):
        cases.append((["ledger", "list", "--db", dsn], "ledgercheck ledger"))
    cases += [(["protocol", "schema", "--output", str(d / "file" / "x")], "ledgercheck protocol: "),
              (["crash", "explore", "--workload", str(d / "file"), "--points", "after_claim"], "ledgercheck crash explore: "),
              (["ledger", "close-out", "--db", str(d / "l.db"), "w", "--status", "done", "--result", "[" * 100_000],
               "ledgercheck ledger")]
    return cases


def test_garbage_on_the_command_line_is_one_line(tmp_path: Path) -> None:
    for argv, want in _garbage_argv(tmp_path):
        try:
            ran = cli(argv, tmp_path, bound=3600)  # a hang, not a slow machine
        except SystemExit as exc:  # argparse's own refusal (usage and one error line), exit 2
            assert exc.code == 2 and want == "", (argv[:4], exc.code)
            continue
        where = [a[:40] for a in argv[:5]]
        assert "Traceback" not in ran.err, (where, ran.err[-2000:])
        assert ran.rc == 2, (where, ran.rc, ran.out[-1000:], ran.err[-1000:])
        lines = ran.err.splitlines()
        assert len(lines) == 1, (where, ran.err[-2000:])
        start, _, words = want.partition("|")
        assert lines[0].startswith(start) and words in lines[0], (where, lines[0][:300])
        assert "hunter2" not in ran.err + ran.out, (where, lines[0])
