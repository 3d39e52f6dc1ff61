"""The results document: one JSON format for every run, built, checked, written, read and merged here.

The conformance plugin and the chaos runner hand their raw facts (what ran, against which
adapter and contract, each test's outcome, each crash window) to :func:`build_results`, which
adds the derived verdicts (rules in :mod:`ledgercheck.reports.verdicts`, prose in
docs/results.md).  :func:`write_results` puts it on disk with two hashes; :func:`load_results`
refuses anything truncated, edited or of another format with a one-line :class:`ResultsError`
that names the file.
"""

from __future__ import annotations

import copy
import json
import os
import shlex
import tempfile
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import fastjsonschema
import jsonschema
import jsonschema.exceptions
from ledgercheck.spec import Spec

from ledgercheck import PROTOCOL_VERSION, __version__
from ledgercheck.bounded import RESULTS as RESULTS_LIMITS
from ledgercheck.bounded import InputError, Limits, read_limited, shape_problem

from . import verdicts
from .environment import environment_info
from .integrity import (
    SIDECAR_SUFFIX,
    bytes_sha256,
    content_sha256,
    file_bytes,
    parse_sidecar,
    sidecar_text,
    with_integrity,
)

__all__ = [
    "FORMAT", "FORMAT_VERSION", "Loaded", "ResultsError", "build_results", "environment_info", "load_results",
    "atomic_write", "merge_results", "read_results", "results_file_sha256", "schema", "utc_now", "validate_results",
    "write_results",
]

FORMAT = "ledgercheck-results"
FORMAT_VERSION = 1
RUN_KINDS = ("certify", "conformance", "chaos")
TEST_KINDS = ("clause", "stateful", "chaos")
MAX_MESSAGE = 240


class ResultsError(ValueError):
    """A results document is malformed, inconsistent or unreadable.  The message is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


def _short(text: str, limit: int = MAX_MESSAGE) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def utc_now() -> str:
    """The current time as the document writes timestamps: ISO 8601, UTC, milliseconds, ``Z``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse_time(value: str, what: str) -> datetime:
    try:
        return datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise ResultsError(f"{what}: {value!r} is not an ISO 8601 timestamp") from None


# ---- schema ---------------------------------------------------------------------------------------


@cache
def schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of format version 1, as shipped in the package."""
    text = resources.files("ledgercheck.reports").joinpath("schema/results.schema.json").read_text("utf-8")
    return json.loads(text)


def _fast(root: Mapping[str, Any]) -> Any:
    # The schema uses only keywords that mean the same in draft-07, which fastjsonschema compiles to
    # plain Python (a few ms per document instead of a tenth of a second); jsonschema, which knows
    # draft 2020-12, words the message when something is wrong.
    return fastjsonschema.compile({**copy.deepcopy(dict(root)), "$schema": "http://json-schema.org/draft-07/schema#"})


@cache
def _validators(name: str | None) -> tuple[Any, jsonschema.protocols.Validator]:
    root = schema() if name is None else {"$ref": f"#/$defs/{name}", "$defs": schema()["$defs"]}
    return _fast(root), jsonschema.Draft202012Validator(_inlined(copy.deepcopy(root)))


def _inlined(root: dict[str, Any]) -> dict[str, Any]:
    """``root`` with every subschema that is a bare ``{"$ref": "#/$defs/NAME"}`` replaced by the
    definition it names (a reference inside its own definition is left as it is; ``$defs`` stays
    for those).  The same schema, validated the same way and giving the same errors at the same
    instance paths, but jsonschema no longer resolves a reference at each of a document's many
    records: a whole document's errors are found in about half the time (the error message of
    a malformed results file, read by ``report show``, ``render``, ``merge``)."""
    defs = root.get("$defs") or {}

    def walk(node: Any, within: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if len(node) == 1 and isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref[len("#/$defs/"):]
                if name in defs and "/" not in name and name not in within:
                    return walk(defs[name], (*within, name))
                return node
            return {k: (v if k == "$defs" else walk(v, within)) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, within) for v in node]
        return node

    return walk(root, ())


def _schema_error(value: Any, name: str | None = None) -> jsonschema.exceptions.ValidationError | None:
    fast, full = _validators(name)
    try:
        fast(value)
        return None
    except fastjsonschema.JsonSchemaException:
        err = jsonschema.exceptions.best_match(full.iter_errors(value))
        if err is None:  # the two disagree: trust the draft 2020-12 validator
            return None
        return err


def _check_part(value: Any, name: str, where: str) -> None:
    """Check one input record (a test, a crash window, the run, the adapter) against its definition."""
    err = _schema_error(value, name)
    if err is not None:
        at = _where(err.absolute_path)
        raise ResultsError(f"{where}{'' if at == 'document' else '.' + at}: {_short(err.message, 160)}")


def _where(path: Iterable[Any]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "document"


# ---- building ------------------------------------------------------------------------------------


def _spec_info(spec: Spec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "version": spec.version,
        "title": spec.title,
        "digest": spec.digest,
        "files": dict(spec.files),
        "statuses": [{"name": n, "initial": s.initial, "terminal": s.terminal, "waiting": s.waiting_kind is not None,
                      "leased": s.leased, "description": s.description} for n, s in spec.statuses.items()],
        "transitions": [{"from": t.src, "to": t.dst, "ops": list(t.ops), "guard": t.guard, "requeue": t.requeue}
                        for t in spec.transitions],
    }


def _need(d: Mapping[str, Any], keys: Sequence[str], what: str) -> None:
    missing = [k for k in keys if k not in d or d[k] is None]
    if missing:
        raise ResultsError(f"{what}: missing {', '.join(missing)}")


def _run(run: Mapping[str, Any]) -> dict[str, Any]:
    _need(run, ("kind", "started_at", "finished_at", "command"), "run")
    r = dict(run)
    r.setdefault("id", uuid.uuid4().hex[:12])
    if "duration_s" not in r or r["duration_s"] is None:
        span = _parse_time(r["finished_at"], "run.finished_at") - _parse_time(r["started_at"], "run.started_at")
        r["duration_s"] = max(0.0, round(span.total_seconds(), 6))
    r.setdefault("argv", shlex.split(r["command"]) if isinstance(r["command"], str) else [])
    r.setdefault("cwd", os.getcwd())
    for key in ("seed", "hypothesis_profile", "shard", "error", "incomplete"):
        r.setdefault(key, None)
    r.setdefault("timeout_scale", 1.0)
    r.setdefault("workers", 1)
    return r


def _adapter(adapter: Mapping[str, Any]) -> dict[str, Any]:
    _need(adapter, ("address",), "adapter")
    a = dict(adapter)
    if a.get("transport") in (None, ""):
        a["transport"] = "wire" if str(a["address"]).startswith("exec:") else "in-process"
    for key in ("name", "version", "protocol", "artifact_sha256"):
        a.setdefault(key, None)  # None: the adapter never identified itself (no handshake)
    a["profiles"] = list(a.get("profiles") or [])
    a["capabilities"] = dict(a.get("capabilities") or {})
    a["crash_points"] = list(a.get("crash_points") or [])
    a["known_bugs"] = dict(a.get("known_bugs") or {})
    return a


def _tests(tests: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for i, t in enumerate(tests):
        _need(t, ("nodeid", "outcome"), f"tests[{i}]")
        rec = dict(t)
        rec.setdefault("clause", None)
        rec.setdefault("kind", "clause")
        rec["not_claimed"] = bool(rec.get("not_claimed", False))
        rec["not_offered"] = sorted({str(x) for x in rec.get("not_offered") or []})
        rec["duration_s"] = float(rec.get("duration_s") or 0.0)
        for key in ("message", "counterexample", "replay"):
            rec.setdefault(key, None)
        out.append(rec)
    return out


# the effect counts each declared delivery guarantee allows (docs/protocol.md, "Safety declarations")
DELIVERY_BOUNDS = {"at-most-once": (0, 1), "at-least-once": (1, None), "effectively-once": (1, 1)}


def _windows(windows: Iterable[Mapping[str, Any]], spec: Spec, adapter_points: Iterable[str] = ()) -> list[dict[str, Any]]:
    adapter_points = set(adapter_points)
    out = []
    for i, w in enumerate(windows):
        where = f"crash_windows[{i}]"
        _need(w, ("point", "occurrence", "verdict", "clauses"), where)
        rec = dict(w)
        rec.setdefault("mode", "kill")
        rec.setdefault("step_class", None)
        point, cls = rec["point"], rec["step_class"]
        if point not in spec.crash_points and point not in adapter_points:
            raise ResultsError(f"{where}: unknown crash point {point!r} (neither the contract's nor one the adapter declared)")
        if cls is not None and cls not in spec.step_classes:
            raise ResultsError(f"{where}: unknown step class {cls!r}")
        row = spec.matrix[cls] if cls is not None else {}
        delivery = rec.get("delivery")
        if delivery is not None:
            # a lease campaign's effect window: no recovery scan decides, and the effect count is
            # judged by the declared delivery guarantee, not by the matrix (docs/chaos.md)
            if delivery not in DELIVERY_BOUNDS:
                raise ResultsError(f"{where}: delivery {delivery!r} is not one of {', '.join(DELIVERY_BOUNDS)}")
            decisions = set(spec.decisions) | {"none"}
            effects = {name for name, a in spec.allowances.items() if (a.min, a.max) == DELIVERY_BOUNDS[delivery]}
            default_decision, default_effects = None, next(iter(sorted(effects)), None)
        elif cls is None:
            # the kill did not land inside a step (between items, say): no matrix cell applies
            decisions = {d for d in spec.decisions} | set(spec.scanner.values()) - {"by_class"}
            effects = set(spec.allowances)
            default_decision = default_effects = None
        elif point in spec.crash_points:
            # the contract's own point: the matrix cell, except that a journal the scanner sees as
            # "none" may hold earlier steps' completed receipts (then the scanner resumes)
            entry = row[point]
            cp = spec.crash_points[point]
            decisions = {entry.decision}
            if cp.journal != "pending" and not cp.waiting:
                decisions |= {spec.scanner["completed"], spec.scanner["none"]}
            effects = {entry.effects}
            default_decision, default_effects = entry.decision, entry.effects
        else:
            # a point the adapter declared inside its own operations: the kill leaves the state
            # before or after that operation, so any cell of the class's row may apply
            decisions = {e.decision for e in row.values()} | set(spec.scanner.values()) - {"by_class"}
            effects = {e.effects for e in row.values()}
            default_decision = default_effects = None
        for key, allowed, default in (("decision_expected", decisions, default_decision), ("effects_expected", effects, default_effects)):
            if rec.get(key) is None:
                rec[key] = default
            elif rec[key] not in allowed:
                raise ResultsError(f"{where}: {key} {rec[key]!r} contradicts the contract's matrix ({cls} x {point}: {'/'.join(sorted(allowed))})")
        allowance = spec.allowances.get(rec["effects_expected"]) if rec["effects_expected"] else None
        rec["effects_min"], rec["effects_max"] = (allowance.min, allowance.max) if allowance else (None, None)
        rec["clauses"] = list(rec["clauses"])
        for key in ("decision_observed", "effects_observed", "final_status", "message", "replay", "replay_file"):
            rec.setdefault(key, None)
        rec["duration_s"] = float(rec.get("duration_s") or 0.0)
        out.append(rec)
    return out


def _profiles(names: Iterable[str] | None, defined: Sequence[str], what: str) -> list[str]:
    if names is None:
        return list(defined)
    names = list(names)
    unknown = [p for p in names if p not in defined]
    if unknown:
        raise ResultsError(f"{what}: unknown profile(s) {', '.join(map(str, unknown))} (the contract defines {', '.join(defined)})")
    return [p for p in defined if p in names]


def coverage_plan(spec: Spec) -> dict[str, Any]:
    """What a run's coverage is measured against, read from the contract: the profile of each
    operation the transition table names (and of each operation that makes a guard hold), the
    operations that make each guard hold, and the contract's crash points (docs/results.md,
    "Coverage")."""
    from ledgercheck.spec import rules

    guards = {t.guard: list(rules.guard_setters(spec, t.guard)) for t in spec.transitions if t.guard}
    ops = list(dict.fromkeys([op for _src, op, _dst in rules.moves(spec)] + [op for s in guards.values() for op in s]))
    return {"operations": {op: spec.operations[op].profile for op in ops}, "guards": guards,
            "crash_points": list(spec.crash_points)}


def build_results(*, run: Mapping[str, Any], spec: Spec, adapter: Mapping[str, Any], environment: Mapping[str, Any],
                  tests: Iterable[Mapping[str, Any]], crash_windows: Iterable[Mapping[str, Any]] = (),
                  requested_profiles: Iterable[str] | None = None,
                  safety: Iterable[Mapping[str, Any]] = (), record_coverage: bool = False) -> dict[str, Any]:
    """Assemble a complete, checked results document (with its integrity hash).

    ``requested_profiles`` of None means every profile of the contract: profiles the adapter
    does not claim then show as "not claimed".  Missing optional fields get their defaults
    (docs/results.md); crash windows may leave ``decision_expected``/``effects_expected`` out, and
    get them from the contract's matrix.  ``record_coverage``: the tests carry what they exercised
    (``exercised``, as the conformance plugin records it), so the document gets a ``coverage``
    section and the verdict takes it into account (a profile whose transitions or clause cases
    were not all reached is inconclusive).  Raises :class:`ResultsError` on anything inconsistent.
    """
    r = _run(run)
    a = _adapter(adapter)
    defined = list(spec.profiles)
    doc: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "run": r,
        "harness": {"name": "ledgercheck", "version": __version__, "protocol": PROTOCOL_VERSION},
        "spec": _spec_info(spec),
        "adapter": a,
        "environment": dict(environment),
        "profiles": {
            "defined": defined,
            "requires": {n: list(p.requires) for n, p in spec.profiles.items()},
            "requested": _profiles(requested_profiles, defined, "requested profiles"),
            "claimed": _profiles(a["profiles"], defined, "adapter profiles"),
            "verdicts": {},
        },
        "clauses": [{"id": c.id, "profile": c.profile, "level": c.level, "impact": c.impact, "headline": c.headline,
                     "statement": c.statement, "source": c.source} for c in spec.clauses],
        "tests": _tests(tests),
        "crash_windows": _windows(crash_windows, spec, a.get("crash_points") or ()),
    }
    if spec.profile_sets:  # named sets ("full" is the whole contract), for the verdict line
        doc["profiles"]["sets"] = {n: list(s.profiles) for n, s in spec.profile_sets.items()}
    campaigns = [copy.deepcopy(dict(c)) for c in safety]
    if campaigns:  # the safety campaigns' records, as evidence beside the tests that carried them
        doc["safety"] = campaigns
    if record_coverage:
        doc["coverage"] = {"plan": coverage_plan(spec)}
    _check_part(r, "run", "run")
    _check_part(a, "adapter", "adapter")
    for i, t in enumerate(doc["tests"]):
        _check_part(t, "test", f"tests[{i}]")
    for i, w in enumerate(doc["crash_windows"]):
        _check_part(w, "crash_window", f"crash_windows[{i}]")
    _check_facts(doc, "results")
    doc = _sealed(verdicts.apply(doc), "results")
    validate_results(doc)
    return doc


# ---- validation ----------------------------------------------------------------------------------


def _sealed(doc: Mapping[str, Any], source: str) -> dict[str, Any]:
    """``doc`` with its integrity hash, or a ResultsError if something in it is not JSON (NaN, a set, ...)."""
    try:
        return with_integrity(doc)
    except (TypeError, ValueError) as exc:
        raise ResultsError(f"{source}: holds a value JSON cannot represent ({exc})") from None


def _check_facts(doc: Mapping[str, Any], source: str) -> None:
    """Consistency of the recorded facts (before anything is derived from them)."""
    ids = [c["id"] for c in doc["clauses"]]
    known = set(ids)
    if len(known) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ResultsError(f"{source}: clause {dup} is listed twice")
    defined = doc["profiles"]["defined"]
    for c in doc["clauses"]:
        if c["profile"] not in defined:
            raise ResultsError(f"{source}: clause {c['id']} belongs to undefined profile {c['profile']!r}")
    for key in ("requested", "claimed"):
        bad = [p for p in doc["profiles"][key] if p not in defined]
        if bad:
            raise ResultsError(f"{source}: profiles.{key} names undefined profile(s) {', '.join(bad)}")
    for name, members in (doc["profiles"].get("sets") or {}).items():
        bad = [p for p in members if p not in defined]
        if bad or name in defined:
            raise ResultsError(f"{source}: profiles.sets.{name} " + (f"names undefined profile(s) {', '.join(bad)}"
                                                                      if bad else "has the name of a profile"))
    inc = doc["run"].get("incomplete")
    if inc:
        for part, done, planned in (("tests", "finished", "planned"), ("crash_windows", "points_finished", "points_planned")):
            if inc[part][done] > inc[part][planned]:
                raise ResultsError(f"{source}: run.incomplete.{part}: {inc[part][done]} {done} of {inc[part][planned]} {planned}")
    seen: set[str] = set()
    for i, t in enumerate(doc["tests"]):
        if t["clause"] is not None and t["clause"] not in known:
            raise ResultsError(f"{source}: tests[{i}] ({t['nodeid']}) names unknown clause {t['clause']!r}")
        if t["nodeid"] in seen:
            raise ResultsError(f"{source}: test {t['nodeid']} appears twice")
        if t["outcome"] == "not_offered" and not t.get("not_offered"):
            raise ResultsError(f"{source}: tests[{i}] ({t['nodeid']}): outcome not_offered names no operation")
        seen.add(t["nodeid"])
    keys: set[tuple[str, str, str, int, str]] = set()
    for w in doc["crash_windows"]:
        where = f"{source}: crash window {verdicts.window_nodeid(w)}"
        bad = [c for c in w["clauses"] if c not in known]
        if bad:
            raise ResultsError(f"{where} names unknown clause(s) {', '.join(map(str, bad))}")
        k = verdicts.window_key(w)
        if k in keys:
            raise ResultsError(f"{where} appears twice")
        keys.add(k)
        # a window judged by the declared delivery: a pass ran the effect at most once and within
        # what the declaration allows; "permitted" is a repeat that at-least-once allows, or an
        # item brought back only by an operator under a declaration that says so, never else
        n = w.get("effects_observed")
        if w["verdict"] == "pass" and w.get("delivery") is not None and isinstance(n, int) and n > 1:
            raise ResultsError(f"{where}: verdict pass, but the effect ran {n} times: a repeat is never a pass")
        if w["verdict"] == "permitted":
            repeat = w.get("delivery") == "at-least-once" and isinstance(n, int) and n > 1
            operator = w.get("reclaim") in ("operator", "never") and bool(w.get("came_back_by"))
            if not (repeat or operator):
                raise ResultsError(f"{where}: verdict permitted, but the window records no declaration that permits "
                                   "what happened (delivery at-least-once with a repeated effect, or reclaim operator/never "
                                   "with what brought the item back)")
        # a passing kill window must show what its verdict claims; takeover windows judge fencing
        # (the stale worker's own effects are accounted apart), so only kill and scan-kill windows
        # are re-checked
        if w["verdict"] == "pass" and w.get("mode", "kill") in ("kill", "scan-kill") and w["decision_expected"] is not None:
            if w["decision_observed"] != w["decision_expected"]:
                raise ResultsError(f"{where}: verdict pass, but decision {w['decision_observed']!r} "
                                   f"is not the expected {w['decision_expected']!r}")
            n, lo, hi = w["effects_observed"], w["effects_min"], w["effects_max"]
            if lo is not None and (n is None or n < lo or (hi is not None and n > hi)):
                raise ResultsError(f"{where}: verdict pass, but {n} effect(s) is outside {w['effects_expected']} "
                                   f"({lo}..{'' if hi is None else hi})")


def _compare_derived(doc: Mapping[str, Any], source: str) -> None:
    want = verdicts.derive(doc)
    stored = {c["id"]: c for c in doc["clauses"]}
    for c in want["clauses"]:
        s = stored[c["id"]]
        if s["outcome"] != c["outcome"]:
            raise ResultsError(f"{source}: clause {c['id']}: recorded outcome {s['outcome']!r} does not follow "
                               f"from its tests ({c['outcome']!r})")
        for k, v in c.items():
            if s.get(k) != v:
                raise ResultsError(f"{source}: clause {c['id']}: recorded {k} {_short(repr(s.get(k)), 60)} does not "
                                   f"follow from its tests ({_short(repr(v), 60)})")
    got = doc["profiles"]["verdicts"]
    if set(got) != set(want["verdicts"]):
        raise ResultsError(f"{source}: profiles.verdicts must name exactly the defined profiles")
    for p, v in want["verdicts"].items():
        if got[p] != v:
            field = next(k for k in v if got[p].get(k) != v[k])
            raise ResultsError(f"{source}: profile {p}: recorded {field} {got[p].get(field)!r} does not follow "
                               f"from its clauses ({v[field]!r})")
    for key in ("verdict", "certified_profiles", "exit_code", "verdict_line", "findings"):
        if doc[key] != want[key]:
            raise ResultsError(f"{source}: recorded {key} {doc[key]!r} does not follow from the profile verdicts "
                               f"({want[key]!r})")
    if doc["timings"] != want["timings"]:
        raise ResultsError(f"{source}: recorded timings do not follow from the test durations")
    if want["coverage"] is not None:
        got_cov = {k: v for k, v in doc["coverage"].items() if k != "plan"}
        if got_cov != want["coverage"]:
            field = next((k for k in want["coverage"] if got_cov.get(k) != want["coverage"][k]), "coverage")
            raise ResultsError(f"{source}: recorded coverage.{field} does not follow from the tests and the plan")


def validate_results(doc: Any, source: str = "results", *, current_rules: bool = False) -> None:
    """Check a document against the schema, its integrity hash (when present) and the rules.

    ``current_rules``: the derived members (clause outcomes, verdicts, the verdict line, findings)
    are not compared with what this version of the rules derives: a file written by an earlier
    version, intact (its hash matches) but judged by rules that changed since, is read, and the
    caller derives them again (:func:`ledgercheck.reports.verdicts.apply`).

    Raises :class:`ResultsError` with one line starting with ``source`` (a file name, say).
    """
    if not isinstance(doc, dict):
        raise ResultsError(f"{source}: the document is a JSON {type(doc).__name__}, not an object")
    if doc.get("format") != FORMAT:
        raise ResultsError(f"{source}: not a ledgercheck results document (format {doc.get('format')!r}, "
                           f"expected {FORMAT!r})")
    if doc.get("format_version") != FORMAT_VERSION:
        raise ResultsError(f"{source}: format_version {doc.get('format_version')!r} is not supported "
                           f"(this ledgercheck reads version {FORMAT_VERSION})")
    err = _schema_error(doc)
    if err is not None:
        raise ResultsError(f"{source}: {_where(err.absolute_path)}: {_short(err.message, 160)}")
    try:
        actual = content_sha256(doc)
    except (TypeError, ValueError) as exc:
        raise ResultsError(f"{source}: holds a value JSON cannot represent ({exc})") from None
    if "integrity" in doc and doc["integrity"]["sha256"] != actual:
        raise ResultsError(f"{source}: content does not match its integrity hash (edited after it was written?)")
    _check_facts(doc, source)
    if not current_rules:
        _compare_derived(doc, source)


# ---- files ---------------------------------------------------------------------------------------


def results_file_sha256(doc: Mapping[str, Any]) -> str:
    """SHA-256 of the file :func:`write_results` writes for ``doc``, without writing it."""
    return bytes_sha256(file_bytes(_sealed(doc, "results")))


def _umask() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename: readers never see half a file.
    The file gets the usual permissions (0666 less the umask), not the temporary file's private ones."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_results(doc: Mapping[str, Any], path: str | os.PathLike[str]) -> str:
    """Write ``doc`` (re-hashed) as pretty, deterministic JSON plus a ``sha256sum`` sidecar.

    Returns the SHA-256 of the file's bytes.  Refuses (ResultsError) a document that fails
    validation, so nothing inconsistent reaches the disk.
    """
    p = Path(path)
    full = _sealed(doc, str(p))
    validate_results(full, str(p))
    data = file_bytes(full)
    sha = bytes_sha256(data)
    atomic_write(p, data)
    atomic_write(p.with_name(p.name + SIDECAR_SUFFIX), sidecar_text(sha, p.name).encode("utf-8"))
    return sha


SIDECAR_LIMITS = Limits("checksum file", 4096)  # one sha256sum line


class _NotJSON(ValueError):
    pass


def _no_constant(name: str) -> Any:
    raise _NotJSON(f"{name} is not a JSON number")


@dataclass(frozen=True)
class Loaded:
    doc: dict[str, Any]
    sha256: str  # of the file's bytes
    path: str
    sidecar: bool  # whether a sidecar was present (and matched)


def read_results(path: str | os.PathLike[str], *, current_rules: bool = False) -> Loaded:
    """Read, verify and validate a results file; see :func:`load_results` (and
    :func:`validate_results` for ``current_rules``)."""
    name = str(path)
    p = Path(path)
    try:
        data = read_limited(p, RESULTS_LIMITS)
    except InputError as exc:
        raise ResultsError(str(exc)) from None
    if not data.strip():
        raise ResultsError(f"{name}: the file is empty")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultsError(f"{name}: not UTF-8 text (byte {exc.start})") from None
    problem = shape_problem(text, RESULTS_LIMITS)  # before parsing: nesting and size of what is built
    if problem:
        raise ResultsError(f"{name}: {problem}")
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        hint = " (the file looks truncated)" if not text.rstrip().endswith("}") else ""
        raise ResultsError(f"{name}: not valid JSON{hint}: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except ValueError as exc:  # NaN or Infinity (_NotJSON), an integer of too many digits
        raise ResultsError(f"{name}: not valid JSON: {exc}") from None
    if isinstance(doc, dict) and doc.get("format") == FORMAT and doc.get("format_version") == FORMAT_VERSION:
        if not isinstance(doc.get("integrity"), dict):
            raise ResultsError(f"{name}: has no integrity hash; only files written by ledgercheck can be read")
    validate_results(doc, name, current_rules=current_rules)
    sha = bytes_sha256(data)
    side = p.with_name(p.name + SIDECAR_SUFFIX)
    has_side = side.exists()
    if has_side:
        try:
            want = parse_sidecar(read_limited(side, SIDECAR_LIMITS).decode("utf-8", errors="replace"))
        except InputError as exc:
            raise ResultsError(str(exc)) from None
        if want is None:
            raise ResultsError(f"{side}: not a sha256sum line")
        if want != sha:
            raise ResultsError(f"{name}: the file's SHA-256 {sha[:16]}… does not match {side.name} "
                               f"({want[:16]}…): changed after it was written")
    return Loaded(doc=doc, sha256=sha, path=name, sidecar=has_side)


def load_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The document in a results file, refusing (one-line ResultsError naming the file) anything
    that is not valid JSON, of another format or version, fails the schema or the rules, does not
    match its integrity hash, or does not match its sidecar checksum when one is present."""
    return read_results(path).doc


# ---- merging -------------------------------------------------------------------------------------


def _strip_shard(argv: Sequence[str]) -> list[str]:
    out, skip = [], False
    for tok in argv:
        if skip:
            skip = False
            continue
        if tok == "--ledger-shard":
            skip = True
            continue
        if tok.startswith("--ledger-shard="):
            continue
        out.append(tok)
    return out


def _part(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    if run.get("parts"):
        return [dict(p) for p in run["parts"]]
    return [{k: run[k] for k in ("id", "kind", "command", "seed", "shard", "started_at", "finished_at", "duration_s")}]


def _common(values: Sequence[Any]) -> Any:
    return values[0] if all(v == values[0] for v in values) else None


def _merged_run(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    parts = [p for r in runs for p in _part(r)]
    starts = [_parse_time(r["started_at"], "run.started_at") for r in runs]
    ends = [_parse_time(r["finished_at"], "run.finished_at") for r in runs]
    first, last = min(range(len(runs)), key=lambda i: starts[i]), max(range(len(runs)), key=lambda i: ends[i])
    commands = list(dict.fromkeys(r["command"] for r in runs))
    try:
        unsharded = [shlex.join(_strip_shard(shlex.split(r["command"]))) for r in runs]
    except ValueError:  # not shell syntax: keep every command as it was
        unsharded = commands
    same_cmd = len(set(unsharded)) == 1
    errors = [r["error"] for r in runs if r.get("error")]
    shards = [p["shard"] for p in parts if p.get("shard")]
    if shards:
        counts = {s["count"] for s in shards}
        if len(counts) > 1:
            raise ResultsError(f"cannot merge shards of different splits ({', '.join(str(c) for c in sorted(counts))} shards)")
        idx = [s["index"] for s in shards]
        dup = next((i for i in idx if idx.count(i) > 1), None)
        if dup is not None:
            raise ResultsError(f"cannot merge: shard {dup}/{shards[0]['count']} appears twice")
        missing = sorted(set(range(1, shards[0]["count"] + 1)) - set(idx))
        if missing:
            n = shards[0]["count"]
            errors.append(f"shard(s) {', '.join(f'{m}/{n}' for m in missing)} missing from the merge")
    kinds = [r["kind"] for r in runs]
    incomplete = merged_incomplete(runs)
    return {
        "id": "merged-" + bytes_sha256("\n".join(p["id"] for p in parts).encode())[:12],
        "kind": _common(kinds) or "certify",
        "started_at": runs[first]["started_at"],
        "finished_at": runs[last]["finished_at"],
        "duration_s": round(max(0.0, (ends[last] - starts[first]).total_seconds()), 6),
        "command": unsharded[0] if same_cmd else " && ".join(commands),
        "argv": _strip_shard(runs[0]["argv"]) if same_cmd else [],
        "cwd": runs[0]["cwd"],
        "seed": _common([r["seed"] for r in runs]),
        "hypothesis_profile": _common([r["hypothesis_profile"] for r in runs]),
        "timeout_scale": max(float(r["timeout_scale"]) for r in runs),
        "shard": None,
        "workers": sum(int(r["workers"]) for r in runs),
        "error": "; ".join(errors) or None,
        "incomplete": incomplete,
        "parts": parts,
    }


STOPPED_AFTER_FAILURE = "stopped_after_failure"  # run.incomplete.reason of a run -x/--maxfail ended


def merged_incomplete(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The parts that did not finish, as one record (None when every part finished)."""
    parts = [r["incomplete"] for r in runs if r.get("incomplete")]
    if not parts:
        return None
    if len(parts) == 1:
        return copy.deepcopy(dict(parts[0]))
    planned = [p["crash_windows"].get("planned") for p in parts]
    return {
        # a part stopped by -x/--maxfail after a failure yields to a part that was interrupted
        "reason": next((p["reason"] for p in parts if p["reason"] != STOPPED_AFTER_FAILURE), parts[0]["reason"]),
        "message": "; ".join(p["message"] for p in parts),
        "signal": next((p.get("signal") for p in parts if p.get("signal")), None),
        "tests": {"planned": sum(p["tests"]["planned"] for p in parts),
                  "finished": sum(p["tests"]["finished"] for p in parts),
                  "unfinished": [n for p in parts for n in p["tests"]["unfinished"]]},
        "crash_windows": {k: sum(p["crash_windows"][k] for p in parts) for k in ("points_planned", "points_finished", "finished")}
        | {"planned": None if None in planned else sum(planned)},
    }


ADAPTER_IDENTITY = ("name", "version", "protocol", "transport", "artifact_sha256", "profiles", "known_bugs")


def merge_results(docs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One document from the results of shards or of several runs of one adapter against one contract.

    Tests and crash windows are concatenated (a node id or a crash window appearing twice is an
    error), requested profiles are united, and every derived member is recomputed.  A missing shard
    makes the merged run an error rather than a smaller certification.
    """
    docs = list(docs)
    if not docs:
        raise ResultsError("nothing to merge")
    for i, d in enumerate(docs, 1):
        validate_results(d, f"part {i}")
    first = docs[0]
    for i, d in enumerate(docs[1:], 2):
        if d["spec"]["digest"] != first["spec"]["digest"]:
            raise ResultsError(f"cannot merge: part {i} was run against contract {d['spec']['name']} "
                               f"{d['spec']['version']} ({d['spec']['digest'][:12]}), part 1 against "
                               f"{first['spec']['name']} {first['spec']['version']} ({first['spec']['digest'][:12]})")
        for key in ADAPTER_IDENTITY:
            a, b = first["adapter"].get(key), d["adapter"].get(key)
            if key == "profiles":
                a, b = sorted(a), sorted(b)
            if a != b:
                raise ResultsError(f"cannot merge: adapter {key} differs ({_short(repr(a), 60)} in part 1, "
                                   f"{_short(repr(b), 60)} in part {i})")
    defined = first["profiles"]["defined"]
    requested = {p for d in docs for p in d["profiles"]["requested"]}
    doc: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "run": _merged_run([d["run"] for d in docs]),
        "harness": copy.deepcopy(first["harness"]),
        "spec": copy.deepcopy(first["spec"]),
        "adapter": copy.deepcopy(first["adapter"]),
        "environment": copy.deepcopy(first["environment"]),
        "profiles": {"defined": list(defined), "requires": copy.deepcopy(first["profiles"]["requires"]),
                     "requested": [p for p in defined if p in requested],
                     "claimed": list(first["profiles"]["claimed"]), "verdicts": {},
                     **({"sets": copy.deepcopy(first["profiles"]["sets"])} if "sets" in first["profiles"] else {})},
        "clauses": [{k: c[k] for k in verdicts.CLAUSE_FACTS if k in c} for c in first["clauses"]],
        "tests": [copy.deepcopy(t) for d in docs for t in d["tests"]],
        "crash_windows": [copy.deepcopy(w) for d in docs for w in d["crash_windows"]],
    }
    if any(d.get("safety") for d in docs):
        doc["safety"] = [copy.deepcopy(c) for d in docs for c in d.get("safety") or []]
    plans = [(i, d["coverage"]["plan"]) for i, d in enumerate(docs, 1) if verdicts.coverage_recorded(d)]
    if plans:  # parts that recorded no coverage add tests and nothing else to it
        i, plan = plans[0]
        other = next((j for j, p in plans if p != plan), None)
        if other is not None:
            raise ResultsError(f"cannot merge: parts {i} and {other} measured their coverage against different plans")
        doc["coverage"] = {"plan": copy.deepcopy(plan)}
    _check_facts(doc, "merged results")
    doc = _sealed(verdicts.apply(doc), "merged results")
    validate_results(doc, "merged results")
    return doc
