"""Pipelined reads (docs/protocol.md, ``capabilities.pipeline``): an adapter that declares it gets
several requests before it answers the first, and the answers are the ones asked one by one
give; one that does not declare it gets them one by one, and keeps working unchanged."""

from __future__ import annotations

import sys

import pytest
from ledgercheck.transport.client import connect

SERVE = f"exec:{sys.executable} -m ledgercheck serve reference"
T0 = 1_000_000.0


def _ledger(tap: list[tuple[str, bytes]] | None = None, env: dict[str, str] | None = None):  # noqa: ANN202
    client = connect(SERVE, tap=(lambda d, line: tap.append((d, line))) if tap is not None else None, env=env)
    assert client.reset({}).ok
    ids = []
    for i in range(4):
        out = client.call("create", source_system="manual", source_id=f"s{i}", now=T0)
        assert out.ok
        ids.append(out.value["work"]["work_id"])
    assert client.call("claim", owner="w", work_id=ids[0], now=T0 + 1).ok
    return client, ids


def _reads(ids: list[str]) -> list[tuple[str, dict]]:
    return [(op, {"work_id": w}) for w in [*ids, "no-such-item"] for op in ("get", "events")]


def test_a_pipelining_adapter_gets_every_read_before_it_answers() -> None:
    tap: list[tuple[str, bytes]] = []
    client, ids = _ledger(tap)
    try:
        assert client.handshake["capabilities"]["pipeline"] is True
        one_by_one = [client.call(op, **a) for op, a in _reads(ids)]
        del tap[:]
        together = client.call_many(_reads(ids))
        # the same answers (the missing item's error included) in the same order
        assert [(o.ok, o.value if o.ok else o.code) for o in together] == \
               [(o.ok, o.value if o.ok else o.code) for o in one_by_one]
        assert not together[-2].ok and together[-2].code == "not_found"
        # and every request was written before the first answer was read
        directions = [d for d, _ in tap]
        assert directions == [">"] * len(together) + ["<"] * len(together)
        assert client.call("get", work_id=ids[1]).ok  # the connection goes on as before
    finally:
        client.close()


class _NoPipeline:
    """The reference, minus the capability: what an adapter that does not declare it looks like."""

    def __init__(self) -> None:
        from ledgercheck.reference.adapter import ReferenceAdapter

        self.inner = ReferenceAdapter()

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self.inner, name)

    def hello(self, **kw):  # noqa: ANN003, ANN201
        out = self.inner.hello(**kw)
        out["capabilities"] = {**out["capabilities"], "pipeline": False}
        return out


def test_an_adapter_without_the_capability_is_asked_one_by_one() -> None:
    tap: list[tuple[str, bytes]] = []
    client = connect(f"exec:{sys.executable} -m ledgercheck serve python:{__name__}:_NoPipeline",
                     tap=lambda d, line: tap.append((d, line)), env=_env_with_tests())
    try:
        assert client.handshake["capabilities"]["pipeline"] is False
        assert client.reset({}).ok
        made = client.call("create", source_system="manual", source_id="a", now=T0)
        wid = made.value["work"]["work_id"]
        del tap[:]
        outs = client.call_many([("get", {"work_id": wid}), ("events", {"work_id": wid}), ("get", {"work_id": wid})])
        assert all(o.ok for o in outs)
        assert [d for d, _ in tap] == [">", "<"] * 3
    finally:
        client.close()


def _env_with_tests() -> dict[str, str]:
    import os
    from pathlib import Path

    env = dict(os.environ)
    here = str(Path(__file__).resolve().parent)
    env["PYTHONPATH"] = os.pathsep.join([here, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def test_a_pipeline_that_dies_midway_fails_every_call_left(monkeypatch: pytest.MonkeyPatch) -> None:
    client, ids = _ledger()
    try:
        client.proc.kill()  # the adapter is gone before it reads anything
        outs = client.call_many(_reads(ids))
        assert outs and all(not o.ok and not o.definite and o.code == "adapter_crashed" for o in outs)
    finally:
        client.close()
