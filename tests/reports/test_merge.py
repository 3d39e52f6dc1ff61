"""Merging shards and runs: the merge of the parts equals the document built from everything at once."""

from __future__ import annotations

import copy
import shlex
from typing import Any

import pytest
from ledgercheck.reports.integrity import content_sha256
from ledgercheck.reports.results import ResultsError, merge_results, validate_results

BASE_ARGV = ["pytest", "--ledger-adapter", "exec:./bin/acme-ledger --stdio", "-n", "2", "--ledger-seed", "1234"]


def shard_run(factory, k: int, n: int, start: str, end: str) -> dict[str, Any]:
    argv = [*BASE_ARGV[:3], "--ledger-shard", f"{k}/{n}", *BASE_ARGV[3:]]
    return factory.run(id=f"shard-{k}", kind="conformance", started_at=start, finished_at=end, argv=argv,
                       command=shlex.join(argv), shard={"index": k, "count": n})


def split(items: list[dict[str, Any]], n: int) -> list[list[dict[str, Any]]]:
    return [items[i::n] for i in range(n)]


@pytest.fixture
def shards(factory) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    tests, windows = factory.tests(), factory.windows()
    whole = factory.build(tests=tests, windows=windows, run=factory.run(kind="conformance", argv=BASE_ARGV,
                                                                         command=shlex.join(BASE_ARGV)))
    times = [("2025-03-14T09:26:53.000Z", "2025-03-14T09:29:00.250Z"), ("2025-03-14T09:27:10.000Z", "2025-03-14T09:31:05.500Z")]
    parts = [factory.build(tests=t, windows=w, run=shard_run(factory, k + 1, 2, *times[k]))
             for k, (t, w) in enumerate(zip(split(tests, 2), split(windows, 2), strict=True))]
    return whole, parts


def test_two_shards_merge_to_the_unsharded_build(shards) -> None:
    whole, parts = shards
    # a shard alone lacks the tests of some clauses; only the merge decides them
    assert any(c["outcome"] == "error" and c["tests"] == 0 for p in parts for c in p["clauses"])
    merged = merge_results(parts)
    validate_results(merged)
    for key in ("clauses", "profiles", "verdict", "exit_code", "certified_profiles", "spec", "adapter", "environment"):
        assert merged[key] == whole[key], key
    assert sorted(merged["tests"], key=lambda t: t["nodeid"]) == sorted(whole["tests"], key=lambda t: t["nodeid"])
    key = lambda w: (w["point"], w["step_class"], w["occurrence"])  # noqa: E731
    assert sorted(merged["crash_windows"], key=key) == sorted(whole["crash_windows"], key=key)
    for kind, v in whole["timings"]["by_kind"].items():
        assert merged["timings"]["by_kind"][kind]["count"] == v["count"]
        assert merged["timings"]["by_kind"][kind]["duration_s"] == pytest.approx(v["duration_s"])
    assert merged["timings"]["slowest"] == whole["timings"]["slowest"]
    assert merged["integrity"]["sha256"] == content_sha256(merged)


def test_merged_run_records_its_parts(shards) -> None:
    whole, parts = shards
    run = merge_results(parts)["run"]
    assert run["argv"] == BASE_ARGV and run["command"] == whole["run"]["command"]  # the shard option is gone
    assert run["shard"] is None and run["error"] is None
    assert run["started_at"] == "2025-03-14T09:26:53.000Z" and run["finished_at"] == "2025-03-14T09:31:05.500Z"
    assert run["duration_s"] == 252.5 and run["workers"] == 4 and run["seed"] == 1234
    assert [p["id"] for p in run["parts"]] == ["shard-1", "shard-2"]
    assert [p["shard"] for p in run["parts"]] == [{"index": 1, "count": 2}, {"index": 2, "count": 2}]
    again = merge_results([merge_results(parts)])  # merging a merge keeps the parts flat
    assert [p["id"] for p in again["run"]["parts"]] == ["shard-1", "shard-2"]


def test_missing_shard_makes_the_merge_an_error(factory, shards) -> None:
    _, parts = shards
    third = factory.build(tests=[], windows=[], run=shard_run(factory, 3, 3, "2025-03-14T09:26:53Z", "2025-03-14T09:27:53Z"))
    p1 = factory.build(tests=parts[0]["tests"], windows=parts[0]["crash_windows"],
                       run=shard_run(factory, 1, 3, "2025-03-14T09:26:53Z", "2025-03-14T09:27:53Z"))
    merged = merge_results([p1, third])
    assert merged["verdict"] == "ERROR" and merged["run"]["error"] == "shard(s) 2/3 missing from the merge"


def test_conformance_and_chaos_runs_merge(factory) -> None:
    tests = factory.tests(known_bugs=(), failing=())
    conf = factory.build(tests=tests, windows=[], adapter=factory.adapter(known_bugs={}),
                         run=factory.run(kind="conformance", id="c1", command="ledgercheck conformance --adapter x"))
    chaos = factory.build(tests=[], windows=factory.windows(bad=()), adapter=factory.adapter(known_bugs={}),
                          run=factory.run(kind="chaos", id="k1", command="ledgercheck chaos run --adapter x"),
                          requested=["recovery"])
    merged = merge_results([conf, chaos])
    assert merged["run"]["kind"] == "certify"
    assert merged["run"]["command"] == "ledgercheck conformance --adapter x && ledgercheck chaos run --adapter x"
    assert merged["verdict"] == "CERTIFIED"
    matrix = next(c for c in merged["clauses"] if c["id"] == "recovery.matrix")
    assert matrix["tests"] == sum(t["clause"] == "recovery.matrix" for t in tests) + 30


def test_duplicate_test_is_refused(realistic) -> None:
    with pytest.raises(ResultsError, match=r"test tests/conformance/\S+ appears twice"):
        merge_results([realistic, realistic])


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda d: d["adapter"].update(version="2.5.0"), "adapter version differs ('2.4.1' in part 1, '2.5.0' in part 2)"),
    (lambda d: d["adapter"].update(artifact_sha256="0" * 64), "adapter artifact_sha256 differs"),
    (lambda d: d["spec"].update(digest="0" * 64), "part 2 was run against contract ledgercheck-work-ledger 1.1.0 (000000000000)"),
])
def test_other_adapter_or_contract_is_refused(factory, edit, needle: str) -> None:
    a = factory.build(tests=factory.tests()[:40], windows=[])
    b = factory.build(tests=factory.tests()[40:], windows=[])
    edit(b)
    b["integrity"]["sha256"] = content_sha256(b)
    with pytest.raises(ResultsError) as exc:
        merge_results([a, b])
    assert needle in str(exc.value)


def test_shards_of_other_splits_are_refused(factory) -> None:
    t = factory.tests()
    a = factory.build(tests=t[:10], windows=[], run=shard_run(factory, 1, 2, "2025-03-14T09:26:53Z", "2025-03-14T09:27:53Z"))
    b = factory.build(tests=t[10:], windows=[], run=shard_run(factory, 2, 3, "2025-03-14T09:26:53Z", "2025-03-14T09:27:53Z"))
    with pytest.raises(ResultsError, match="shards of different splits"):
        merge_results([a, b])
    c = factory.build(tests=t[10:], windows=[], run=shard_run(factory, 1, 2, "2025-03-14T09:26:53Z", "2025-03-14T09:27:53Z"))
    with pytest.raises(ResultsError, match="shard 1/2 appears twice"):
        merge_results([a, c])


def test_tampered_part_is_refused(realistic) -> None:
    bad = copy.deepcopy(realistic)
    bad["verdict"] = "CERTIFIED"
    with pytest.raises(ResultsError, match="^part 1: content does not match its integrity hash"):
        merge_results([bad])
    with pytest.raises(ResultsError, match="nothing to merge"):
        merge_results([])
