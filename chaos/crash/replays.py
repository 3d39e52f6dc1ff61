"""Replay files: everything needed to re-create one failing kill (or storm) and check it again.

A replay file is JSON::

    {"format": "ledgercheck-crash-replay", "version": 1, "kind": "window" | "storm",
     "spec_digest": ..., "spec_version": ..., "contract": {...} | null,
     "adapter": "reference", "seed": 0, "workload": {...}, "worker": null,
     "point": "after_submit_before_record", "occurrence": 4, "mode": "kill",
     "recorded": {"verdict": "fail", "clauses": [...], "message": "..."}}

(``contract`` is present only when the run used a contract other than the shipped one; storm
files carry ``storm`` parameters and the recorded kill schedule instead of point/occurrence.)
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import tempfile
import time
from collections.abc import Mapping
from typing import Any

from ledgercheck.chaos.safety.workload import Workload, WorkloadError
from ledgercheck.spec import Spec, SpecError, default_spec
from ledgercheck.spec.load import spec_from_document
from ledgercheck.spec.yamlpos import MAX_VALUES
from ledgercheck.transport.wire import plain

from ledgercheck import __version__
from ledgercheck.bounded import (
    REPLAY,
    InputError,
    more_values_than,
    read_limited,
    shape_problem,
)

from .limits import HARD_MAX_WORKERS, SEED_RANGE, storm_problem
from .points import ChaosError

FORMAT = "ledgercheck-crash-replay"
VERSION = 1


def default_replay_dir() -> str:
    return os.environ.get("LEDGERCHECK_REPLAY_DIR") or os.path.join(tempfile.gettempdir(), "ledgercheck-replays")


def replay_command(path: str, address: str | None = None, worker: str | None = None) -> str:
    """The command that replays ``path``; it names the adapter and the worker variant when the file
    alone may not choose them (an ``exec:`` or ``python:`` address, any variant: see :func:`replay`)."""
    cmd = f"ledgercheck crash replay {shlex.quote(path)}"
    if address and address.startswith(("exec:", "python:")):
        cmd += f" --adapter {shlex.quote(address)}"
    if worker:
        cmd += f" --worker {shlex.quote(worker)}"
    return cmd


def _contract(spec: Spec) -> dict[str, Any] | None:
    return None if spec.digest == default_spec().digest else plain(spec.document)


def write_replay(directory: str, doc: dict[str, Any], stem: str) -> str:
    os.makedirs(directory, exist_ok=True)
    body = json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False)
    tag = hashlib.sha256(body.encode()).hexdigest()[:10]
    path = os.path.join(directory, f"{stem}-{tag}.json")
    tmp = path + f".{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(body + "\n")
    os.replace(tmp, path)
    return os.path.abspath(path)


def window_doc(*, spec: Spec, address: str, seed: int, workload: Workload, point: str, occurrence: int, mode: str,
               worker: str | None, recorded: Mapping[str, Any] | None = None,
               scan_kill: tuple[str, int] | None = None) -> dict[str, Any]:
    doc = {
        "format": FORMAT, "version": VERSION, "kind": "window", "ledgercheck": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "spec_digest": spec.digest, "spec_version": spec.version, "contract": _contract(spec),
        "adapter": address, "seed": seed, "workload": workload.to_dict(), "worker": worker,
        "point": point, "occurrence": occurrence, "mode": mode,
        "recorded": dict(recorded or {}),
    }
    if scan_kill is not None:  # the recovery scan's worker was killed too, at this point and occurrence
        doc["scan_kill"] = [scan_kill[0], scan_kill[1]]
    return doc


def attach_replay(window: dict[str, Any], directory: str, **kw: Any) -> None:
    """Write the replay file for a window that did not pass and note it in the window."""
    recorded = {k: window.get(k) for k in ("verdict", "clauses", "message", "decision_observed", "effects_observed")}
    doc = window_doc(recorded=recorded, **kw)
    safe = kw["point"].replace("/", "_").replace(".", "_")
    sk = kw.get("scan_kill")
    tail = f"-scan-{sk[0].replace('/', '_').replace('.', '_')}-{sk[1]}" if sk else ""
    path = write_replay(directory, doc, f"crash-{safe}-{kw['occurrence']}-{kw['mode']}{tail}")
    window["replay_file"] = path
    window["replay"] = replay_command(path, kw["address"], kw.get("worker"))


# ---------------------------------------------------------------------------------- reading
# Bounds on what a replay file may ask for, checked before anything runs (docs/inputs.md).
# They are far above what a run writes (a storm's workload is max(200, 4 x kills) items).
MAX_OCCURRENCE = 100_000
MAX_ITEMS = 1_000_000

def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _brief(value: Any, limit: int = 40) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _storm_problem(raw: Any, max_workers: int) -> str | None:
    if not isinstance(raw, Mapping):
        return "'storm' must be an object of storm parameters"
    return storm_problem(raw, max_workers=max_workers)


def _window_problem(doc: Mapping[str, Any]) -> str | None:
    if not isinstance(doc["point"], str) or not doc["point"] or not _is_int(doc["occurrence"]) or doc["occurrence"] < 1:
        return "'point' must be a name and 'occurrence' a positive integer"
    if doc["occurrence"] > MAX_OCCURRENCE:
        return f"'occurrence' {doc['occurrence']:,} is above {MAX_OCCURRENCE:,}, the bound for a replayed window"
    if doc["mode"] not in ("kill", "pause"):
        return "'mode' must be kill or pause"
    sk = doc.get("scan_kill")
    if sk is not None and not (isinstance(sk, list) and len(sk) == 2 and isinstance(sk[0], str) and sk[0]
                               and _is_int(sk[1]) and 1 <= sk[1] <= MAX_OCCURRENCE):
        return "'scan_kill' must be [adapter point, positive occurrence]"
    return None


def _common_problem(doc: Mapping[str, Any]) -> str | None:
    if not isinstance(doc["adapter"], str) or not doc["adapter"]:
        return "'adapter' must be an adapter address"
    if not _is_int(doc["seed"]):
        return "'seed' must be an integer"
    if not SEED_RANGE[0] <= doc["seed"] <= SEED_RANGE[1]:
        return f"'seed' {_brief(doc['seed'])} is outside [-2**63, 2**63)"
    if not isinstance(doc["spec_digest"], str):
        return "'spec_digest' must be a string"
    if doc.get("contract") is not None and not isinstance(doc["contract"], dict):
        return "'contract' must be a contract document (an object) or null"
    if doc.get("contract") is not None and more_values_than(doc["contract"], MAX_VALUES):
        return f"'contract' holds more than {MAX_VALUES:,} values, the limit for a contract"
    if doc.get("worker") is not None and not isinstance(doc["worker"], str):
        return "'worker' must be null or a worker variant's module:Class"
    rec = doc.get("recorded")
    if rec is not None:  # what the failing run saw, compared with the replay's outcome
        if not isinstance(rec, Mapping):
            return "'recorded' must be an object (the recorded verdict, clauses and message)"
        if rec.get("verdict") is not None and not isinstance(rec["verdict"], str):
            return "'recorded.verdict' must be a string"
        cl = rec.get("clauses")
        if cl is not None and not (isinstance(cl, list) and all(isinstance(c, str) for c in cl)):
            return "'recorded.clauses' must be a list of clause ids"
    wl = doc.get("workload")
    if wl is not None:
        if not isinstance(wl, Mapping) or not isinstance(wl.get("items"), list):
            return "'workload' must be a workload object with a list of items"
        if len(wl["items"]) > MAX_ITEMS:
            return f"'workload' has {len(wl['items']):,} items, more than {MAX_ITEMS:,}, the bound for a replay"
    return None


def load_replay(path: str, *, max_workers: int = HARD_MAX_WORKERS) -> dict[str, Any]:
    """Read and validate a replay file within bounds (:data:`ledgercheck.bounded.REPLAY`, the
    limits above and the storms' table in chaos/crash/limits.py, with ``max_workers`` the worker cap in
    force); any problem is a one-line ChaosError naming the file."""
    try:
        data = read_limited(path, REPLAY)
        text = data.decode("utf-8")
    except InputError as exc:
        raise ChaosError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise ChaosError(f"{path}: not a replay file (not UTF-8 text: byte {exc.start})") from None
    problem = shape_problem(text, REPLAY)
    if problem:
        raise ChaosError(f"{path}: {problem}")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ChaosError(f"{path}: not a replay file (invalid JSON at line {getattr(exc, 'lineno', '?')}: "
                         f"{getattr(exc, 'msg', exc)})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ChaosError(f"{path}: not a ledgercheck crash replay file (no \"format\": \"{FORMAT}\")")
    if doc.get("version") != VERSION:
        raise ChaosError(f"{path}: replay format version {_brief(doc.get('version'))}, this ledgercheck reads {VERSION}")
    kind = doc.get("kind")
    need = {"window": ("adapter", "seed", "workload", "point", "occurrence", "mode", "spec_digest"),
            "storm": ("adapter", "seed", "storm", "spec_digest")}.get(kind) if isinstance(kind, str) else None
    if need is None:
        raise ChaosError(f"{path}: unknown replay kind {_brief(kind)}")
    missing = [k for k in need if k not in doc]
    if missing:
        raise ChaosError(f"{path}: replay file is missing {', '.join(missing)}")
    problem = _common_problem(doc) or (_window_problem(doc) if kind == "window" else _storm_problem(doc["storm"], max_workers))
    if problem:
        raise ChaosError(f"{path}: {problem}")
    return doc


def replay_spec(doc: Mapping[str, Any], path: str) -> Spec:
    if doc.get("contract") is not None:
        try:
            spec = spec_from_document(doc["contract"])
        except SpecError as exc:
            raise ChaosError(f"{path}: the recorded contract does not validate: {exc.problems[0]}") from None
    else:
        spec = default_spec()
    if spec.digest != doc["spec_digest"]:
        raise ChaosError(f"{path}: recorded against contract {str(doc['spec_digest'])[:12]}, this ledgercheck ships "
                         f"{spec.digest[:12]} (run it with the ledgercheck that wrote it)")
    return spec


def replay_workload(doc: Mapping[str, Any], spec: Spec, path: str) -> Workload:
    try:
        return Workload.from_dict(doc["workload"], spec)
    except WorkloadError as exc:
        raise ChaosError(f"{path}: {exc}") from None


