"""Imported once by the worker fork server: everything a worker needs, already loaded.

Loading the contract and compiling its result schemas takes a good part of a second; doing it
here means every forked worker starts with both in memory.
"""

from __future__ import annotations

import importlib.metadata

from ledgercheck.spec import default_spec
from ledgercheck.transport import client as _client
from ledgercheck.transport.wire import result_checker

from . import worker as _worker  # noqa: F401

result_checker(default_spec())
for _ep in importlib.metadata.entry_points(group=_client.ENTRY_POINT_GROUP):
    try:
        _ep.load()
    except Exception:  # noqa: BLE001, S112 - a broken adapter is reported when it is used
        continue
