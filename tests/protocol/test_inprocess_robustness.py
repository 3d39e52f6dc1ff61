"""In-process adapters that raise, lack methods or return malformed values; bad addresses.

The adapters live in tests/protocol/adapters/inproc_adapters.py.  Each misbehaving adapter is
also served over the wire (``ledgercheck serve python:inproc_adapters:NAME``) to show an
adapter gets the same verdicts in process and out of process.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from ledgercheck.spec import Spec
from ledgercheck.transport.client import AdapterError, Client, InProcessClient, connect

ADAPTERS = Path(__file__).resolve().parent / "adapters"

pytestmark = pytest.mark.usefixtures("adapters_on_path")


@pytest.fixture
def adapters_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ADAPTERS))


@pytest.fixture(params=["in-process", "wire"])
def open_adapter(request: pytest.FixtureRequest, spec: Spec, ledgercheck_cmd: str) -> Iterator[object]:
    opened: list[Client] = []

    def open_(name: str) -> Client:
        if request.param == "in-process":
            c = connect(f"python:inproc_adapters:{name}", spec)
        else:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ADAPTERS), os.environ.get("PYTHONPATH", "")])}
            c = connect(f"exec:{shlex.quote(ledgercheck_cmd)} serve python:inproc_adapters:{name}", spec, env=env, timeout=600)
        opened.append(c)
        return c

    yield open_
    for c in opened:
        c.close()


def test_exceptions_become_internal_errors(open_adapter) -> None:  # type: ignore[no-untyped-def]
    c = open_adapter("Raising")
    out = c.call("get", work_id="w-9")
    assert out.code == "internal" and out.definite is False
    assert "RuntimeError: database handle went away while reading w-9" in out.message
    assert c.call("list").code == "internal"
    # SystemExit from an adapter must not end the harness (nor the server)
    assert c.call("events", work_id="w-9").code == "internal"
    # a TypeError raised inside the adapter is its own bug, not a bad argument from the harness
    exp = c.call("expire", now=1.0)
    assert exp.code == "internal" and "TypeError" in exp.message
    assert c.reset().ok, "the adapter keeps serving after its failures"


def test_in_process_failures_keep_the_traceback(spec: Spec) -> None:
    c = connect("python:inproc_adapters:Raising", spec)
    assert isinstance(c, InProcessClient)
    out = c.call("get", work_id="w-9")
    assert "inproc_adapters.py" in out.message
    assert "RuntimeError" in c.stderr_tail() and "raise RuntimeError" in c.last_traceback


def test_missing_methods_and_parameters_are_unsupported(open_adapter) -> None:  # type: ignore[no-untyped-def]
    c = open_adapter("Lacking")
    assert c.call("list").code == "unsupported"
    assert c.call("recover", now=1.0).code == "unsupported"
    out = c.call("claim", owner="w", now=1.0)  # the adapter's claim takes `worker`, not `owner`
    assert out.code == "unsupported" and out.definite and "owner" in out.message
    missing = c.call("get")
    assert missing.code == "invalid_argument" and "work_id" in missing.message
    assert c.call("__init__").code == "unsupported", "private names are never operations"


def test_malformed_results_are_protocol_errors(open_adapter) -> None:  # type: ignore[no-untyped-def]
    c = open_adapter("Malformed")
    for op, args in [("get", {"work_id": "w"}), ("list", {}),
                     ("create", {"source_system": "manual", "source_id": "s", "now": 1.0})]:
        out = c.call(op, **args)
        assert out.code == "protocol_error" and not out.definite and "malformed result" in out.message, (op, out)
    out = c.call("events", work_id="w")
    assert out.code == "protocol_error" and "unknown error code 'disk_on_fire'" in out.message


@pytest.mark.parametrize(("address", "why"), [
    ("no-such-adapter", "unknown adapter 'no-such-adapter'"),
    ("python:no_such_module_for_ledgercheck:Factory", "cannot import 'no_such_module_for_ledgercheck'"),
    ("python:inproc_adapters:Nowhere", "has no attribute 'Nowhere'"),
    ("python:inproc_adapters", "use python:package.module:Factory"),
    ("python:inproc_adapters:BadFactory", "the factory raised OSError: cannot read the license file"),
    ("python:inproc_adapters:NoHello", "has no hello() method"),
    ("python:inproc_adapters:OldProtocol", "speaks protocol '0.9'"),
    ("exec:/no/such/ledger-adapter --fast", "command not found: /no/such/ledger-adapter"),
    ("exec:", "needs a command"),
    ("exec:node 'unbalanced", "No closing quotation"),
    ("exec:" + __file__, "cannot start"),  # exists, but is not executable
    ("", "empty adapter address"),
])
def test_bad_addresses_are_one_line_errors(spec: Spec, address: str, why: str) -> None:
    with pytest.raises(AdapterError) as err:
        connect(address, spec)
    msg = str(err.value)
    assert why in msg, msg
    assert "\n" not in msg
