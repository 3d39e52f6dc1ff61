"""The effect sink behaves like each kind of provider, and keeps what it applied across processes."""

from __future__ import annotations

import multiprocessing
import os

import pytest
from ledgercheck.chaos.safety.sink import EffectSink, SinkError
from ledgercheck.spec import Spec


def _submit(sink: EffectSink, cls_: str, key: str = "k1", session: str = "a") -> object:
    return sink.submit(key=key, work_id="w1", step_id="s1", tool="crm.send", step_class=cls_, input={"x": 1},
                       worker="tester", session=session)


@pytest.fixture()
def sink(tmp_path, spec: Spec) -> EffectSink:
    s = EffectSink(tmp_path / "effects.db", spec, create=True)
    yield s
    s.close()


def test_keyed_provider_deduplicates_but_counts_submissions(sink: EffectSink) -> None:
    first = _submit(sink, "idempotent_with_key")
    second = _submit(sink, "idempotent_with_key")
    assert second == first  # the provider answers a repeat with the original result
    assert sink.applied_counts() == {"k1": 1}
    assert [s.applied for s in sink.submissions("k1")] == [True, False]


@pytest.mark.parametrize("cls_", ["non_idempotent_with_lookup", "non_idempotent_without_lookup", "checkpointed"])
def test_non_deduplicating_providers_apply_every_submission(sink: EffectSink, cls_: str) -> None:
    a, b = _submit(sink, cls_), _submit(sink, cls_)
    assert a != b
    assert sink.applied_counts() == {"k1": 2}


def test_pure_steps_apply_nothing(sink: EffectSink) -> None:
    _submit(sink, "pure")
    assert sink.applied_counts() == {}
    assert len(sink.submissions()) == 1


def test_lookup_answers_whether_the_key_happened(sink: EffectSink) -> None:
    assert sink.lookup("k1") is None
    res = _submit(sink, "non_idempotent_with_lookup")
    assert sink.lookup("k1") == res
    assert sink.lookup("other") is None


def test_sessions_can_be_left_out_of_counts(sink: EffectSink) -> None:
    _submit(sink, "non_idempotent_without_lookup", session="live")
    _submit(sink, "non_idempotent_without_lookup", session="stale")
    assert sink.applied_counts(exclude_sessions=("stale",)) == {"k1": 1}
    assert sink.summary() == {"submissions": 2, "applied": 2}


def _child(path: str, spec_doc: None) -> None:
    from ledgercheck.spec import default_spec

    s = EffectSink(path, default_spec())
    _submit(s, "non_idempotent_without_lookup", key="from-child")
    os._exit(0)  # no close, no clean-up: what was submitted must already be on disk


def test_a_submission_survives_the_process_that_made_it(tmp_path, spec: Spec) -> None:
    path = str(tmp_path / "effects.db")
    EffectSink(path, spec, create=True).close()
    p = multiprocessing.get_context("fork").Process(target=_child, args=(path, None))
    p.start()
    p.join(30)
    assert p.exitcode == 0
    assert EffectSink(path, spec).applied_counts() == {"from-child": 1}


def test_unusable_sink_files_are_refused_with_the_path(tmp_path, spec: Spec) -> None:
    with pytest.raises(SinkError, match="no effect sink"):
        EffectSink(tmp_path / "missing.db", spec)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(SinkError, match="junk.db"):
        EffectSink(junk, spec)


def test_unknown_step_class_is_rejected(sink: EffectSink) -> None:
    with pytest.raises(ValueError, match="unknown step class"):
        _submit(sink, "teleport")
