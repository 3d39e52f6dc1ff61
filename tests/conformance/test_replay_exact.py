"""Traces replay stateful failures exactly: exact instants, the run's seed, and a clear message
when a replay leaves the recorded run (the reference ledger draws real-valued retry jitter from
the reset's seed, like the Node ledger that reported the problem)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.conformance.harness import Harness, reset_seed
from ledgercheck.conformance.trace import TraceError, dump_trace, load_trace, replay, resolve
from ledgercheck.spec import Spec, default_spec
from ledgercheck.transport.client import connect

PROFILES = ["core", "lease", "retry"]


@pytest.fixture(scope="module")
def spec() -> Spec:
    return default_spec()


def _harness(spec: Spec, seed: int = 0, sent: list[Any] | None = None) -> Harness:
    client = connect("reference", spec)
    if sent is not None:
        reset = client.reset

        def spy(config: dict[str, Any]) -> Any:
            sent.append(config.get("seed"))
            return reset(config)

        client.reset = spy  # type: ignore[method-assign]
    return Harness(client, spec, PROFILES, seed=seed)


def _retry_program(h: Harness) -> None:
    """Fail, promote exactly at the adapter's jittered next_retry_at, claim again, fail again."""
    h.fresh()
    wid = h.create()
    tok = h.claim(wid)
    retryable = next(c for c, r in h.spec.error_classes.items() if r)
    h.do("fail", work_id=wid, token=tok, error_class=retryable)
    h.advance_to(h.item(wid)["next_retry_at"])
    h.do("promote_due")
    tok2 = h.claim(wid)
    h.do("fail", work_id=wid, token=tok2, error_class=retryable)


def _rounds_down(spec: Spec) -> int:
    """A run seed whose jittered next_retry_at a 6-decimal trace would round down (so the old
    trace's promote_due comes too early and promotes nothing)."""
    for seed in range(40):
        h = _harness(spec, seed)
        h.fresh()
        wid = h.create()
        tok = h.claim(wid)
        h.do("fail", work_id=wid, token=tok, error_class=next(c for c, r in spec.error_classes.items() if r))
        d = h.item(wid)["next_retry_at"] - h.epoch
        h.client.close()
        if round(d, 6) < d:
            return seed
    raise AssertionError("no seed found")


def test_instants_are_stored_exactly(spec: Spec) -> None:
    h = _harness(spec)
    h.fresh()
    for d in (0.8344163008, 1e-9, 12345.678901234567, 3.5e6 + 0.1234567891):  # the last: beyond 2x the epoch
        t = h.epoch + d
        ref = h.symbolize({"now": t})["now"]
        assert resolve(h, {"now": ref}, "here", epoch=h.epoch)["now"] == t, ref
    h.client.close()


def test_a_promotion_at_jittered_next_retry_at_replays(spec: Spec, tmp_path: Path) -> None:
    seed = _rounds_down(spec)
    h = _harness(spec, seed)
    _retry_program(h)
    path = dump_trace(h, tmp_path / "t.json", [], "reference")
    h.client.close()
    doc = load_trace(path)
    assert doc["seed"] == reset_seed(seed)
    assert all("outcome" in s for s in doc["steps"])
    again = _harness(spec)  # replay's harness has no run seed: the trace's seed is sent
    try:
        assert replay(again, doc, str(path)) == []
    finally:
        again.client.close()


def test_an_old_rounded_trace_still_loads_and_a_divergence_is_named(spec: Spec, tmp_path: Path) -> None:
    seed = _rounds_down(spec)
    h = _harness(spec, seed)
    _retry_program(h)
    path = dump_trace(h, tmp_path / "t.json", [], "reference")
    h.client.close()
    doc = json.loads(path.read_text())
    # what an older ledgercheck wrote: times rounded to 6 decimals (the outcomes kept, so the
    # replay can tell where it left the recorded run)
    for s in doc["steps"]:
        if isinstance(s["args"].get("now"), dict):
            s["args"]["now"] = {"$t": round(s["args"]["now"]["$t"], 6)}
    doc["version"] = 1
    path.write_text(json.dumps(doc))
    again = _harness(spec)
    try:
        with pytest.raises(TraceError) as err:
            replay(again, load_trace(path), str(path))
    finally:
        again.client.close()
    msg = str(err.value)
    assert "never issued on replay" in msg
    assert "left the recorded run earlier: step" in msg and "(promote_due) answered ok (list of 0) on replay, ok (list of 1)" in msg


def test_every_reset_sends_the_seed_derived_from_the_run_seed(spec: Spec, tmp_path: Path) -> None:
    sent: list[Any] = []
    h = _harness(spec, seed=2**32 + 7, sent=sent)
    h.fresh()
    h.fresh()
    assert sent == [7, 7] == [reset_seed(2**32 + 7)] * 2
    h.create()
    path = dump_trace(h, tmp_path / "t.json", [], "reference")
    h.client.close()
    sent.clear()
    again = _harness(spec, sent=sent)
    try:
        replay(again, load_trace(path), str(path))
    finally:
        again.client.close()
    assert sent == [7], "replay sends the recorded run's seed"
