"""Load contract files, merge them, validate them, and build the frozen Spec.

A contract is given as one or more YAML files:

* a **manifest** (has ``include:``) whose included files are merged into it, or
* an **overlay** (has ``extends:``, either ``default`` for the shipped contract or a path to a
  manifest) that changes values of its base: mappings merge key by key, ``clauses`` are
  appended, any other value replaces the base's.

Further files on the command line are applied as overlays in order.  The merged document is
checked against the published JSON Schema, then by the semantic checks in ``checks.py``.
Every problem is reported as ``file:line:col: message`` naming where the offending value was
written.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema

from .contract import (
    Allowance,
    Arg,
    Clause,
    CrashPoint,
    EventType,
    LeaseTimings,
    MatrixEntry,
    Operation,
    Profile,
    RetryPolicy,
    Spec,
    Status,
    Transition,
    WorkField,
    frozen_map,
    parse_duration,
)
from .yamlpos import Pos, YamlLoadError, load_yaml

HERE = Path(__file__).resolve().parent
DEFAULT_MANIFEST = HERE / "contract" / "ledger.yaml"
SCHEMA_PATH = HERE / "schema" / "ledger-spec.schema.json"


@dataclass(frozen=True)
class Problem:
    pos: Pos | None
    message: str
    file: str = ""

    def __str__(self) -> str:
        where = str(self.pos) if self.pos else (self.file or "<spec>")
        return f"{where}: {self.message}"


class SpecError(Exception):
    """The contract could not be loaded; ``problems`` holds one entry per finding."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class Positions:
    """Source positions of a merged document, by path."""

    def __init__(self) -> None:
        self.by_path: dict[tuple[Any, ...], Pos] = {}
        self.file_of_root: dict[Any, str] = {}

    def at(self, path: Sequence[Any]) -> Pos | None:
        p = tuple(path)
        while True:
            if p in self.by_path:
                return self.by_path[p]
            if not p:
                return None
            p = p[:-1]


def _display(path: Path) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return rel if not rel.startswith("..") else str(path)


def _merge(
    base: dict[str, Any],
    over: Mapping[str, Any],
    pos: Positions,
    over_pos: Mapping[tuple[Any, ...], Pos],
    prefix: tuple[Any, ...],
    problems: list[Problem],
    strict_top: bool,
) -> None:
    """Merge ``over`` into ``base`` in place, carrying positions along."""
    for key, value in over.items():
        path = prefix + (key,)
        if strict_top and key in base and key != "clauses":
            where = pos.at(path)
            problems.append(Problem(over_pos.get(path), f"key {key!r} is already defined at {where}"))
            continue
        if key == "clauses" and not prefix and isinstance(value, list) and isinstance(base.get(key), list):
            offset = len(base[key])
            base[key].extend(value)
            for p, where in over_pos.items():
                if p[:1] == ("clauses",) and len(p) >= 2 and isinstance(p[1], int):
                    pos.by_path[("clauses", p[1] + offset) + p[2:]] = where
            continue
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            if path in over_pos:
                pos.by_path.setdefault(path, over_pos[path])  # keep the first definition's key position
            _merge(base[key], value, pos, over_pos, path, problems, strict_top=False)
            continue
        base[key] = _copy(value)
        for p in [p for p in pos.by_path if p[: len(path)] == path]:
            del pos.by_path[p]
        for p, where in over_pos.items():
            if p[: len(path)] == path:
                pos.by_path[p] = where


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _stable_name(path: Path) -> str:
    """Name of a contract file in reports: shipped files by their place in the package."""
    try:
        return "ledgercheck:spec/" + path.resolve().relative_to(HERE).as_posix()
    except ValueError:
        return _display(path)


def _read(path: Path, files: dict[str, str]) -> tuple[Any, dict[tuple[Any, ...], Pos], str]:
    shown = _display(path)
    value, positions = load_yaml(path, shown)
    files[_stable_name(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    if not isinstance(value, dict):
        kind = "empty" if value is None else type(value).__name__
        raise SpecError([Problem(positions.get(()), f"a contract file must be a mapping, not {kind}", shown)])
    return value, positions, shown


def _load_manifest(path: Path, doc: dict[str, Any], pos: Positions, files: dict[str, str], problems: list[Problem]) -> None:
    value, vpos, shown = _read(path, files)
    _merge(doc, value, pos, vpos, (), problems, strict_top=False)
    includes = value.get("include", [])
    if not isinstance(includes, list):
        problems.append(Problem(vpos.get(("include",)), "include must be a list of file names"))
        return
    for i, name in enumerate(includes):
        if not isinstance(name, str):
            problems.append(Problem(vpos.get(("include", i)), "include entries must be file names"))
            continue
        sub = (path.parent / name).resolve()
        try:
            sval, spos, _ = _read(sub, files)
        except YamlLoadError as exc:
            problems.append(Problem(exc.pos, exc.message, file=_display(sub)))
            continue
        if "include" in sval or "extends" in sval:
            problems.append(Problem(spos.get(("include",)) or spos.get(("extends",)), "included files cannot include or extend others"))
            continue
        _merge(doc, sval, pos, spos, (), problems, strict_top=True)


def merged_document(paths: Sequence[str | Path] | None = None) -> tuple[dict[str, Any], Positions, dict[str, str]]:
    """Read and merge the given files (or the shipped contract); no validation beyond YAML syntax."""
    doc: dict[str, Any] = {}
    pos = Positions()
    files: dict[str, str] = {}
    problems: list[Problem] = []
    chain = [Path(p) for p in (paths or [DEFAULT_MANIFEST])]
    try:
        first, first_pos, first_shown = _read(chain[0], files)
        if "extends" in first:
            base = first["extends"]
            base_path = DEFAULT_MANIFEST if base == "default" else (chain[0].parent / str(base)).resolve()
            _load_manifest(base_path, doc, pos, files, problems)
            overlays = [(first, first_pos)]
        else:
            files.pop(_stable_name(chain[0]), None)
            _load_manifest(chain[0], doc, pos, files, problems)
            overlays = []
        for extra in chain[1:]:
            val, vpos, _ = _read(extra, files)
            overlays.append((val, vpos))
        for val, vpos in overlays:
            _merge(doc, {k: v for k, v in val.items() if k != "extends"}, pos, vpos, (), problems, strict_top=False)
    except YamlLoadError as exc:
        raise SpecError([Problem(exc.pos, exc.message, file=str(exc).split(":")[0])]) from None
    if problems:
        raise SpecError(problems)
    return doc, pos, files


@lru_cache(maxsize=1)
def _schema_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _dotted(path: Sequence[Any]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<document>"


def schema_problems(doc: Mapping[str, Any], pos: Positions) -> list[Problem]:
    problems = []
    errors = sorted(_schema_validator().iter_errors(doc), key=lambda e: [str(x) for x in e.absolute_path])
    for err in errors:
        path = list(err.absolute_path)
        msg = err.message
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            allowed = set(err.schema.get("properties", {}))
            extra = [k for k in err.instance if k not in allowed]
            if extra:
                path.append(extra[0])
                msg = f"unknown key {extra[0]!r}"
        elif err.validator == "oneOf" and err.context:
            msg = f"{err.instance!r} is not valid here: " + "; ".join(sorted({c.message for c in err.context}))
        problems.append(Problem(pos.at(path), f"{_dotted(path)}: {msg}"))
    return problems


def load_spec(paths: Sequence[str | Path] | None = None) -> Spec:
    """Load, merge and validate a contract; raise SpecError listing every problem found."""
    from .checks import semantic_problems

    doc, pos, files = merged_document(paths)
    problems = schema_problems(doc, pos)
    if problems:
        raise SpecError(problems)
    problems = semantic_problems(doc, pos)
    if problems:
        raise SpecError(problems)
    return build_spec(doc, files)


def spec_from_document(doc: Mapping[str, Any]) -> Spec:
    """Validate and build a Spec from an already merged document (as sent by the harness)."""
    pos = Positions()
    problems = schema_problems(doc, pos)
    if not problems:
        from .checks import semantic_problems

        problems = semantic_problems(doc, pos)
    if problems:
        raise SpecError(problems)
    return build_spec(_copy(dict(doc)), {})


@lru_cache(maxsize=4)
def _cached_default() -> Spec:
    return load_spec(None)


def default_spec() -> Spec:
    """The shipped contract (loaded once per process)."""
    return _cached_default()


def _lease(d: Mapping[str, Any], base: LeaseTimings | None = None) -> LeaseTimings:
    def get(k: str) -> float:
        if k in d:
            return parse_duration(d[k])
        assert base is not None
        return getattr(base, k)

    return LeaseTimings(ttl=get("ttl"), renew_interval=get("renew_interval"), grace=get("grace"))


def _policy(d: Mapping[str, Any]) -> RetryPolicy:
    return RetryPolicy(
        max_attempts=int(d["max_attempts"]),
        initial_backoff=parse_duration(d["initial_backoff"]),
        multiplier=float(d["multiplier"]),
        max_backoff=parse_duration(d["max_backoff"]),
        jitter=str(d["jitter"]),
    )


def build_spec(doc: Mapping[str, Any], files: Mapping[str, str] | None = None) -> Spec:
    """Build the frozen Spec from a merged document that passed validation."""
    ops = {}
    for name, o in doc["operations"].items():
        args = frozen_map({a: Arg(a, v["type"], bool(v.get("required", False))) for a, v in o.get("args", {}).items()})
        ev = o.get("event")
        ops[name] = Operation(
            name=name,
            profile=o.get("profile"),
            kind=o["kind"],
            args=args,
            returns=o["returns"],
            event=frozen_map(ev) if isinstance(ev, dict) else ev,
            intent_event=o.get("intent_event"),
            intent_from=tuple(o.get("intent_from", ())),
            requires_lease=bool(o.get("requires_lease", False)),
            lease=o.get("lease"),
            attempt=o.get("attempt"),
            statuses=tuple(o.get("statuses", ())),
        )
    lease_default = _lease(doc["lease"])
    retry_default = _policy(doc["retry"]["policy"])
    return Spec(
        name=doc["spec"],
        version=doc["version"],
        title=doc.get("title", doc["spec"]),
        profiles=frozen_map({n: Profile(n, p["description"], tuple(p["requires"])) for n, p in doc["profiles"].items()}),
        seeds=frozen_map(doc["seeds"]),
        source_systems=tuple(doc["source_systems"]),
        identity_key=tuple(doc["identity"]["key"]),
        run_id_required_for=tuple(doc["identity"]["run_id_required_for"]),
        priority_default=doc["priority"]["default"],
        priority_min=doc["priority"]["min"],
        priority_max=doc["priority"]["max"],
        statuses=frozen_map(
            {
                n: Status(n, s["terminal"], s.get("initial", False), s.get("leased", False), s.get("waiting_kind"), s.get("description", ""))
                for n, s in doc["statuses"].items()
            }
        ),
        work_fields=frozen_map(
            {n: WorkField(n, f["type"], f.get("nullable", False), f["compare"], f.get("fold", False)) for n, f in doc["work_fields"].items()}
        ),
        events=frozen_map({n: EventType(n, e["transition"], tuple(e["data"])) for n, e in doc["events"].items()}),
        transitions=tuple(
            Transition(t["from"], t["to"], tuple(t["ops"]), t.get("guard"), bool(t.get("requeue", False))) for t in doc["transitions"]
        ),
        forbidden_examples=tuple((f["from"], f["to"]) for f in doc["forbidden_examples"]),
        operations=frozen_map(ops),
        lease_default=lease_default,
        lease_by_source=frozen_map({s: _lease(v, lease_default) for s, v in doc["lease"]["by_source"].items()}),
        waiting_timeouts=frozen_map({k: parse_duration(v) for k, v in doc["waiting"]["timeouts"].items()}),
        waiting_by_source=frozen_map(
            {s: frozen_map({k: parse_duration(v) for k, v in d.get("timeouts", {}).items()}) for s, d in doc["waiting"]["by_source"].items()}
        ),
        retry_default=retry_default,
        retry_by_source=frozen_map({s: retry_default.merged(d.get("policy", {})) for s, d in doc["retry"]["by_source"].items()}),
        jitter_modes=frozen_map({k: (float(v[0]), float(v[1])) for k, v in doc["retry"]["jitter_modes"].items()}),
        error_classes=frozen_map({k: bool(v["retryable"]) for k, v in doc["retry"]["error_classes"].items()}),
        phases=frozen_map(
            {
                k: frozen_map({**v, "timeout": parse_duration(v["timeout"]) if "timeout" in v else None})
                for k, v in doc["phases"].items()
            }
        ),
        timeout_reasons=frozen_map(doc["timeout_reasons"]),
        idem_scope=tuple(doc["idempotency"]["scope"]),
        receipt_states=tuple(doc["idempotency"]["receipt_states"]),
        receipt_transitions=frozenset((a, b) for a, b in doc["idempotency"]["receipt_transitions"]),
        retention=parse_duration(doc["idempotency"]["retention"]),
        inbox_max_nacks=int(doc["inbox"]["max_nacks"]),
        inbox_drain_max=int(doc["inbox"]["drain_max"]),
        outbox_pending_max=int(doc["outbox"]["pending_max"]),
        first_seq=int(doc["eventlog"]["first_seq"]),
        errors=frozen_map({k: bool(v["definite"]) for k, v in doc["errors"].items()}),
        crash_points=frozen_map(
            {n: CrashPoint(n, c["journal"], bool(c.get("waiting", False)), c["description"]) for n, c in doc["crash_points"].items()}
        ),
        step_classes=frozen_map({n: c["effect"] for n, c in doc["step_classes"].items()}),
        decisions=frozen_map({n: frozen_map(d) for n, d in doc["decisions"].items()}),
        allowances=frozen_map(
            {n: Allowance(n, a["min"], a.get("max"), bool(a.get("quarantined", False))) for n, a in doc["effect_allowances"].items()}
        ),
        matrix=frozen_map(
            {c: frozen_map({p: MatrixEntry(e["decision"], e["effects"]) for p, e in row.items()}) for c, row in doc["matrix"].items()}
        ),
        scanner=frozen_map(doc["scanner"]),
        clauses=tuple(Clause(c["id"], c["level"], c["profile"], c["source"], c["statement"]) for c in doc["clauses"]),
        files=frozen_map(files or {}),
        document=frozen_map(doc),
    )
