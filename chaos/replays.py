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

from ledgercheck.conformance.wire import plain
from ledgercheck.spec import Spec, SpecError, default_spec
from ledgercheck.spec.load import spec_from_document

from ledgercheck import __version__

from .points import ChaosError
from .workload import Workload, WorkloadError

FORMAT = "ledgercheck-crash-replay"
VERSION = 1


def default_replay_dir() -> str:
    return os.environ.get("LEDGERCHECK_REPLAY_DIR") or os.path.join(tempfile.gettempdir(), "ledgercheck-replays")


def replay_command(path: str) -> str:
    return f"ledgercheck crash replay {shlex.quote(path)}"


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
    window["replay"] = replay_command(path)


# ---------------------------------------------------------------------------------- reading
def load_replay(path: str) -> dict[str, Any]:
    """Read and validate a replay file; any problem is a ChaosError naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ChaosError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ChaosError(f"{path}: not a replay file (invalid JSON at line {getattr(exc, 'lineno', '?')}: "
                         f"{getattr(exc, 'msg', exc)})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ChaosError(f"{path}: not a ledgercheck crash replay file (no \"format\": \"{FORMAT}\")")
    if doc.get("version") != VERSION:
        raise ChaosError(f"{path}: replay format version {doc.get('version')!r}, this ledgercheck reads {VERSION}")
    kind = doc.get("kind")
    need = {"window": ("adapter", "seed", "workload", "point", "occurrence", "mode", "spec_digest"),
            "storm": ("adapter", "seed", "storm", "spec_digest")}.get(kind)
    if need is None:
        raise ChaosError(f"{path}: unknown replay kind {kind!r}")
    missing = [k for k in need if k not in doc]
    if missing:
        raise ChaosError(f"{path}: replay file is missing {', '.join(missing)}")
    if not isinstance(doc["adapter"], str) or not doc["adapter"]:
        raise ChaosError(f"{path}: 'adapter' must be an adapter address")
    if not isinstance(doc["seed"], int) or isinstance(doc["seed"], bool):
        raise ChaosError(f"{path}: 'seed' must be an integer")
    if kind == "window":
        if not isinstance(doc["point"], str) or not isinstance(doc["occurrence"], int) or doc["occurrence"] < 1:
            raise ChaosError(f"{path}: 'point' must be a name and 'occurrence' a positive integer")
        if doc["mode"] not in ("kill", "pause"):
            raise ChaosError(f"{path}: 'mode' must be kill or pause")
        sk = doc.get("scan_kill")
        if sk is not None and not (isinstance(sk, list) and len(sk) == 2 and isinstance(sk[0], str) and sk[0]
                                   and isinstance(sk[1], int) and not isinstance(sk[1], bool) and sk[1] >= 1):
            raise ChaosError(f"{path}: 'scan_kill' must be [adapter point, positive occurrence]")
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


def replay(path: str, *, address: str | None = None, tmp_root: str | None = None,
           max_workers: int | None = None) -> dict[str, Any]:
    """Re-run the window (or storm) a replay file describes; returns the window dict (or storm summary).
    A storm file asking for more than ``max_workers`` workers (default: the storms' cap) is refused."""
    doc = load_replay(path)
    spec = replay_spec(doc, path)
    if doc["kind"] == "storm":
        from .storms import MAX_WORKERS, storm_from_replay

        return storm_from_replay(doc, spec, path, address=address, max_workers=max_workers or MAX_WORKERS)
    from .exploration import run_one

    workload = replay_workload(doc, spec, path)
    window = run_one(address or doc["adapter"], spec, doc["point"], doc["occurrence"], seed=doc["seed"],
                     mode=doc["mode"], workload=workload, worker=doc.get("worker"), tmp_root=tmp_root, save=False,
                     scan_kill=tuple(doc["scan_kill"]) if doc.get("scan_kill") else None)
    if window["verdict"] != "pass":
        window["replay_file"] = os.path.abspath(path)
        window["replay"] = replay_command(window["replay_file"])
    return window
