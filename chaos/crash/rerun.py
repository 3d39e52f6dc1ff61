"""Re-running a replay file: the window (through the exploration) or the storm it records.

``replays`` reads and writes the files; this module runs them, so the modules that write replay
files (the exploration and the storms) never import the one that runs them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ledgercheck.bounded import InputError, adapter_to_run

from .exploration import run_one
from .limits import MAX_WORKERS
from .points import ChaosError
from .replays import _brief, load_replay, replay_command, replay_spec, replay_workload
from .storms import storm_from_replay


def replay(path: str, *, address: str | None = None, worker: str | None = None,
           tmp_root: str | None = None, max_workers: int | None = None) -> dict[str, Any]:
    """Re-run the window (or storm) a replay file describes; returns the window dict (or storm summary).

    A replay file is data: it runs against ``address`` when given, else against the adapter it
    records only when that is an installed adapter's name (an ``exec:`` or ``python:`` address
    would start a command or import a module the file chose); the worker variant it records is
    used only when the caller names the same one as ``worker``.  Everything is checked before
    anything starts (a storm file asking for more than ``max_workers`` workers, default the
    storms' cap, is refused).  The result says which adapter ran and which one the file recorded.
    """
    doc = load_replay(path, max_workers=max_workers or MAX_WORKERS)
    try:
        run_on = adapter_to_run(doc["adapter"], address, path)
    except InputError as exc:
        raise ChaosError(str(exc)) from None
    if doc.get("worker") is not None and worker != doc["worker"]:
        raise ChaosError(f"{path}: records worker variant {_brief(doc['worker'], 80)}; a replay file does not choose "
                         f"code to import: name it with --worker to replay with it")
    spec = replay_spec(doc, path)
    if doc["kind"] == "storm":
        result = storm_from_replay(doc, spec, path, address=run_on, max_workers=max_workers or MAX_WORKERS)
    else:
        workload = replay_workload(doc, spec, path)
        result = run_one(run_on, spec, doc["point"], doc["occurrence"], seed=doc["seed"],
                         mode=doc["mode"], workload=workload, worker=doc.get("worker"), tmp_root=tmp_root, save=False,
                         scan_kill=tuple(doc["scan_kill"]) if doc.get("scan_kill") else None)
        if result["verdict"] != "pass":
            result["replay_file"] = os.path.abspath(path)
            result["replay"] = replay_command(result["replay_file"], run_on, worker)
        result["reproduced"] = reproduced(result, doc.get("recorded"))
    result["adapter"], result["recorded_adapter"] = run_on, doc["adapter"]
    return result


def reproduced(result: Mapping[str, Any], recorded: Any) -> bool | None:
    """Whether a replayed window ended as the recorded one did: the same verdict, judging the same
    clauses (None when the file records no verdict)."""
    if not isinstance(recorded, Mapping) or not isinstance(recorded.get("verdict"), str):
        return None
    same_clauses = recorded.get("clauses") is None or sorted(recorded["clauses"] or []) == sorted(result.get("clauses") or [])
    return result.get("verdict") == recorded["verdict"] and same_clauses
