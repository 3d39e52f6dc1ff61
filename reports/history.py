"""Results over time: every run appended to a SQLite history, and what changed between runs.

``ledgercheck certify`` and ``ledgercheck report merge`` append each results document they write
(see docs/results.md, "History").  The file is plain tables with indexes and foreign keys, made
and read with sqlite-utils, so ``sqlite-utils``, ``sqlite3`` and Datasette read it as it is:

- ``meta``: ``key``/``value``; ``format`` = ``ledgercheck-history``, ``version`` = ``1``;
- ``runs``: one row per run (adapter name, version, build digest, contract, seed, environment,
  verdict, a run error or an incomplete marker, the safety section when the run had one);
- ``clause_outcomes``: one row per (run, clause) with its outcome *as text*, so an outcome kind
  added later needs no schema change;
- ``crash_windows``: one row per crash window of the run;
- ``safety_anomalies``: one row per anomaly of the run's safety section, when present.

Comparisons take only whole runs (a shard judges part of the suite, and would look like a run
of errors): the *previous run* of an adapter is its latest whole run before this one; a clause
*regressed* when it passed then and does not now, was *fixed* when it did not pass and now does;
a clause is *flaky* when runs of one build (adapter name, version, artifact digest) against one
contract gave it different outcomes.  Outcomes that judge nothing (``not_claimed``,
``not_requested``, ``not_run``: no case of the clause ran) take part in none of these.  ``not_offered`` (an operation the clause needs is
not offered) is an outcome like the others: pass -> not_offered regressed, not_offered -> pass was
fixed, fail <-> not_offered is a change, neither; a "fail" stored by a run older than that outcome
whose message says the operation was unsupported is read as ``not_offered`` (see ``judged``).
"""

from __future__ import annotations

import json
import random
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlite_utils

from .integrity import content_sha256
from .results import utc_now

__all__ = [
    "DEFAULT_PATH", "FORMAT", "VERSION", "Changes", "History", "HistoryError", "NOT_JUDGED", "beside",
    "compare", "judged", "open_history", "record_run", "since_counts", "since_previous", "summary", "summary_text",
]

FORMAT = "ledgercheck-history"
VERSION = 1
FILE_NAME = "history.db"
DEFAULT_PATH = Path("reports") / "out" / FILE_NAME
NOT_JUDGED = frozenset({"not_claimed", "not_requested", "not_run"})
PASS = "pass"
TREND = 20  # runs shown per adapter by default
# Concurrent runs share one history: a writer waits for the others' transactions (SQLite's busy
# timeout, then again while the file stays locked) and gives up, with one line, only after
# LOCK_PATIENCE seconds of finding it locked; a run's row is never dropped because another run
# was writing at the same moment.
BUSY_TIMEOUT = 30.0
LOCK_PATIENCE = 600.0

TABLES: dict[str, dict[str, Any]] = {
    "meta": {"columns": {"key": str, "value": str}, "pk": "key", "not_null": ["value"]},
    "runs": {
        "columns": {
            "id": int, "run_id": str, "recorded_at": str, "kind": str, "started_at": str, "finished_at": str,
            "duration_s": float, "command": str, "seed": int, "hypothesis_profile": str, "shard": str, "parts": int,
            "adapter": str, "adapter_name": str, "adapter_version": str, "adapter_address": str,
            "adapter_protocol": str, "build_digest": str, "contract_name": str, "contract_version": str,
            "contract_digest": str, "harness_version": str, "verdict": str, "exit_code": int,
            "certified_profiles": str, "error": str, "incomplete": str, "environment": str, "safety": str,
            "results_sha256": str, "results_path": str,
        },
        "pk": "id",
        "not_null": ["run_id", "recorded_at", "adapter", "contract_digest", "verdict", "results_sha256"],
    },
    "clause_outcomes": {
        "columns": {"run": int, "clause": str, "profile": str, "level": str, "outcome": str, "message": str,
                    "tests": int, "failed": int, "errors": int},
        "pk": ("run", "clause"),
        "not_null": ["run", "clause", "outcome"],
        "foreign_keys": [("run", "runs", "id")],
    },
    "crash_windows": {
        "columns": {"id": int, "run": int, "point": str, "mode": str, "step_class": str, "occurrence": int,
                    "verdict": str, "clauses": str, "decision_expected": str, "decision_observed": str,
                    "effects_expected": str, "effects_observed": int, "final_status": str, "message": str,
                    "replay": str},
        "pk": "id",
        "not_null": ["run", "point", "verdict"],
        "foreign_keys": [("run", "runs", "id")],
    },
    "safety_anomalies": {
        "columns": {"id": int, "run": int, "position": int, "kind": str, "clause": str, "detail": str},
        "pk": "id",
        "not_null": ["run", "position", "detail"],
        "foreign_keys": [("run", "runs", "id")],
    },
}
INDEXES: dict[str, list[list[str]]] = {
    "runs": [["adapter", "started_at"], ["adapter_name", "adapter_version", "build_digest", "contract_digest"]],
    "clause_outcomes": [["clause"], ["outcome"]],
    "crash_windows": [["run"]],
    "safety_anomalies": [["run"]],
}
UNIQUE: dict[str, list[list[str]]] = {"runs": [["results_sha256"]]}


class HistoryError(Exception):
    """The history file cannot be used (corrupt, foreign, newer, unwritable).  The message is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


def beside(report_dir: str | Path) -> Path:
    """The default history of a report directory: ``reports/out/history.db`` for reports under
    ``reports/out``, else ``history.db`` in the directory that holds the report directory (in the
    report directory itself when that is the current directory)."""
    d, here = Path(report_dir).resolve(), Path.cwd().resolve()
    if d.is_relative_to(here / DEFAULT_PATH.parent):
        return DEFAULT_PATH
    return d / FILE_NAME if d == here else d.parent / FILE_NAME


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, ensure_ascii=False)


def _adapter_key(adapter: Mapping[str, Any]) -> str:
    """How runs of one adapter are grouped: its name, or its address when it never gave one."""
    return str(adapter.get("name") or adapter.get("address") or "(unidentified adapter)")


def _shard(run: Mapping[str, Any]) -> str | None:
    s = run.get("shard")
    return f"{s['index']}/{s['count']}" if isinstance(s, Mapping) else None


def _incomplete(run: Mapping[str, Any]) -> str | None:
    value = run.get("incomplete")
    return None if value in (None, False) else _json(value)


@dataclass
class History:
    """An open history file."""

    path: Path
    db: sqlite_utils.Database

    def close(self) -> None:
        self.db.close()

    # ---- writing -------------------------------------------------------------------------------

    def append(self, doc: Mapping[str, Any], results_path: str | None = None) -> int | None:
        """Record one results document, in one transaction that waits while another process writes
        (see LOCK_PATIENCE); returns its row id, or None when the very same document (by content
        hash) is already recorded."""
        try:
            return _patiently(lambda: self._append(doc, results_path))
        except sqlite3.Error as exc:
            raise HistoryError(f"{self.path}: cannot record the run: {_sqlite_text(exc)}") from None

    def _append(self, doc: Mapping[str, Any], results_path: str | None) -> int | None:
        sha = (doc.get("integrity") or {}).get("sha256") or content_sha256(doc)
        with _immediate(self.db):
            if self.db.execute("SELECT 1 FROM runs WHERE results_sha256 = ?", [sha]).fetchone():
                return None
            run, adapter, spec = doc["run"], doc["adapter"], doc["spec"]
            row = {
                "run_id": run["id"], "recorded_at": utc_now(), "kind": run.get("kind"),
                "started_at": run.get("started_at"), "finished_at": run.get("finished_at"),
                "duration_s": run.get("duration_s"), "command": run.get("command"), "seed": run.get("seed"),
                "hypothesis_profile": run.get("hypothesis_profile"), "shard": _shard(run),
                "parts": len(run["parts"]) if run.get("parts") else None,
                "adapter": _adapter_key(adapter), "adapter_name": adapter.get("name"),
                "adapter_version": adapter.get("version"), "adapter_address": adapter.get("address"),
                "adapter_protocol": adapter.get("protocol"), "build_digest": adapter.get("artifact_sha256"),
                "contract_name": spec.get("name"), "contract_version": spec.get("version"),
                "contract_digest": spec["digest"], "harness_version": (doc.get("harness") or {}).get("version"),
                "verdict": doc["verdict"], "exit_code": doc.get("exit_code"),
                "certified_profiles": _json(list(doc.get("certified_profiles") or [])),
                "error": run.get("error"), "incomplete": _incomplete(run),
                "environment": _json(doc.get("environment")), "safety": _json(doc.get("safety")),
                "results_sha256": sha, "results_path": results_path,
            }
            rid = self.db["runs"].insert(row).last_pk
            self.db["clause_outcomes"].insert_all(
                {"run": rid, "clause": c["id"], "profile": c.get("profile"), "level": c.get("level"),
                 "outcome": str(c["outcome"]), "message": c.get("message"), "tests": c.get("tests"),
                 "failed": c.get("failed"), "errors": c.get("errors")} for c in doc.get("clauses") or [])
            self.db["crash_windows"].insert_all(
                {"run": rid, "point": w["point"], "mode": w.get("mode"), "step_class": w.get("step_class"),
                 "occurrence": w.get("occurrence"), "verdict": w["verdict"], "clauses": _json(w.get("clauses")),
                 "decision_expected": w.get("decision_expected"), "decision_observed": w.get("decision_observed"),
                 "effects_expected": w.get("effects_expected"), "effects_observed": w.get("effects_observed"),
                 "final_status": w.get("final_status"), "message": w.get("message"), "replay": w.get("replay")}
                for w in doc.get("crash_windows") or [])
            self.db["safety_anomalies"].insert_all(
                {"run": rid, "position": i, "kind": _anomaly_kind(a), "clause": _text(a, "clause"), "detail": _json(a)}
                for i, a in enumerate(_anomalies(doc.get("safety"))))
        return int(rid)

    # ---- reading -------------------------------------------------------------------------------

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        try:
            return _patiently(lambda: list(self.db.query(sql, params)))
        except sqlite3.Error as exc:
            raise HistoryError(f"{self.path}: cannot read the history: {_sqlite_text(exc)}") from None

    def adapters(self) -> list[str]:
        return [r["adapter"] for r in self._rows("SELECT DISTINCT adapter FROM runs ORDER BY adapter")]

    def runs(self, adapter: str) -> list[dict[str, Any]]:
        """Every run of one adapter, oldest first."""
        return self._rows("SELECT * FROM runs WHERE adapter = ? ORDER BY started_at, id", [adapter])

    def outcomes(self, run: int) -> dict[str, str]:
        return {r["clause"]: judged(r["outcome"], r["message"]) for r in
                self._rows("SELECT clause, outcome, message FROM clause_outcomes WHERE run = ? ORDER BY clause", [run])}

    def outcome_counts(self, run: int) -> dict[str, int]:
        return {r["outcome"]: r["n"] for r in self._rows(
            "SELECT outcome, count(*) AS n FROM clause_outcomes WHERE run = ? GROUP BY outcome ORDER BY outcome", [run])}

    def build_outcomes(self, run: Mapping[str, Any]) -> list[dict[str, Any]]:
        """(clause, outcome, run id) of every whole run of the same build and contract as ``run``."""
        rows = self._rows(
            "SELECT c.clause, c.outcome, c.message, r.run_id FROM clause_outcomes c JOIN runs r ON r.id = c.run "
            "WHERE r.shard IS NULL AND r.adapter = ? AND r.adapter_version IS ? AND r.build_digest IS ? "
            "AND r.contract_digest = ? ORDER BY c.clause, r.started_at, r.id",
            [run["adapter"], run["adapter_version"], run["build_digest"], run["contract_digest"]])
        return [{"clause": r["clause"], "outcome": judged(r["outcome"], r["message"]), "run_id": r["run_id"]} for r in rows]


# What runs recorded before the not_offered outcome existed said of a clause whose check met an
# operation the implementation does not offer: those "fail" outcomes are read as not_offered, so
# a comparison with a later run shows no change where nothing changed.
LEGACY_NOT_OFFERED = ("operation not supported by the implementation", "offers no event trail",
                      "refused with 'unsupported' but the contract says")


def judged(outcome: str, message: str | None) -> str:
    """A stored clause outcome as comparisons read it (see LEGACY_NOT_OFFERED)."""
    if outcome == "fail" and message and any(m in message for m in LEGACY_NOT_OFFERED) \
            and "it answered it earlier on this ledger" not in message:
        return "not_offered"
    return outcome


def _text(d: Any, key: str) -> str | None:
    v = d.get(key) if isinstance(d, Mapping) else None
    return None if v is None else str(v)


def _anomaly_kind(a: Any) -> str | None:
    for key in ("class", "kind", "type", "anomaly"):
        v = _text(a, key)
        if v is not None:
            return v
    return None


def _anomalies(safety: Any) -> list[Any]:
    """The anomalies a results document's ``safety`` section lists (none when it has none): the
    section is a list of campaigns (one object in documents written before it was)."""
    campaigns = safety if isinstance(safety, list) else [safety]
    out: list[Any] = []
    for camp in campaigns:
        found = camp.get("anomalies") if isinstance(camp, Mapping) else None
        out += list(found) if isinstance(found, list) else []
    return out


def _locked(exc: BaseException) -> bool:
    """SQLite could not take its lock (another connection holds the file) within the busy timeout."""
    return isinstance(exc, sqlite3.OperationalError) and any(
        w in str(exc).lower() for w in ("database is locked", "database table is locked", "database is busy"))


def _sqlite_text(exc: BaseException) -> str:
    if _locked(exc):
        return f"{exc} (another process kept it locked for {LOCK_PATIENCE:.0f} s)"
    return str(exc)


def _patiently(fn: Callable[[], Any], patience: float | None = None) -> Any:
    """``fn()``, tried again as long as it fails only because the file is locked, for up to
    ``patience`` seconds (LOCK_PATIENCE) of such failures; each attempt already waited the busy
    timeout inside SQLite.  Any other error, or a lock that outlasts the patience, is raised."""
    limit = LOCK_PATIENCE if patience is None else patience
    start = time.monotonic()
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if not _locked(exc) or time.monotonic() - start >= limit:
                raise
        time.sleep(random.uniform(0.01, 0.1))  # writers that collided do not retry in lockstep


@contextmanager
def _immediate(db: sqlite_utils.Database) -> Iterator[None]:
    """One write transaction, taken at once (BEGIN IMMEDIATE) so concurrent writers queue."""
    db.execute("BEGIN IMMEDIATE")
    try:
        with db.atomic():  # nested: a savepoint; sqlite-utils' own inserts nest the same way
            yield
        db.execute("COMMIT")  # may find the file locked by readers: then nothing is kept, and the
    except BaseException:     # whole transaction is tried again (_patiently)
        if db.conn.in_transaction:
            db.execute("ROLLBACK")
        raise


# ---- opening ---------------------------------------------------------------------------------------


def _connect(path: Path, create: bool) -> sqlite3.Connection:
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT, isolation_level=None)
    else:
        if not path.is_file():
            raise HistoryError(f"{path}: no history there (certify and report merge write one; see --history)")
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _check(db: sqlite_utils.Database, path: Path) -> bool:
    """True when the file is a ledgercheck history of this version, False when it is empty (new)."""
    try:
        names = set(db.table_names())
        if not names:
            return False
        if "meta" not in names:
            raise HistoryError(f"{path}: not a ledgercheck history (an SQLite file with tables "
                               f"{', '.join(sorted(names)[:5])}, and no meta table)")
        meta = {r["key"]: r["value"] for r in db.query("SELECT key, value FROM meta")}
        bad = db.execute("PRAGMA quick_check").fetchone()[0]
    except sqlite3.Error as exc:
        if _locked(exc):  # another process is writing: waited for by the caller (_patiently)
            raise
        raise HistoryError(f"{path}: not a readable SQLite history ({exc})") from None
    except (KeyError, TypeError):
        raise HistoryError(f"{path}: not a ledgercheck history (its meta table is not ours)") from None
    if meta.get("format") != FORMAT:
        raise HistoryError(f"{path}: not a ledgercheck history (format {meta.get('format')!r}, expected {FORMAT!r})")
    if meta.get("version") != str(VERSION):
        raise HistoryError(f"{path}: history version {meta.get('version')!r} is not supported "
                           f"(this ledgercheck reads version {VERSION})")
    if bad != "ok":
        raise HistoryError(f"{path}: the history is damaged (sqlite quick_check: {bad})")
    missing = sorted(set(TABLES) - names)
    if missing:
        raise HistoryError(f"{path}: the history is damaged (table(s) {', '.join(missing)} missing)")
    return True


def _create(db: sqlite_utils.Database) -> None:
    with _immediate(db):
        if db.table_names():  # another process created it meanwhile
            return
        for name, t in TABLES.items():
            db[name].create(t["columns"], pk=t["pk"], not_null=t["not_null"], foreign_keys=t.get("foreign_keys"))
            for cols in INDEXES.get(name, []):
                db[name].create_index(cols)
            for cols in UNIQUE.get(name, []):
                db[name].create_index(cols, unique=True)
        db["meta"].insert_all([{"key": "format", "value": FORMAT}, {"key": "version", "value": str(VERSION)}])


def open_history(path: str | Path, *, create: bool = True) -> History:
    """Open (and with ``create``, make when absent or empty) a history file.  Anything that is not a
    ledgercheck history of this version is refused with a one-line :class:`HistoryError`."""
    p = Path(path)
    try:
        conn = _connect(p, create)
    except sqlite3.Error as exc:
        raise HistoryError(f"{p}: cannot open: {exc}") from None
    except OSError as exc:
        raise HistoryError(f"{p}: cannot open: {exc.strerror or exc}") from None
    db = sqlite_utils.Database(conn)
    try:
        if not _patiently(lambda: _check(db, p)):
            if not create:
                raise HistoryError(f"{p}: the history is empty")
            try:
                _patiently(lambda: _create(db))
            except sqlite3.Error as exc:
                raise HistoryError(f"{p}: cannot create the history: {_sqlite_text(exc)}") from None
            _patiently(lambda: _check(db, p))
    except sqlite3.Error as exc:  # still locked after LOCK_PATIENCE
        conn.close()
        raise HistoryError(f"{p}: cannot open: {_sqlite_text(exc)}") from None
    except BaseException:
        conn.close()
        raise
    return History(path=p, db=db)


# ---- comparing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Changes:
    """What changed, clause by clause, between two runs: (clause, before, after) triples."""

    regressed: list[tuple[str, str, str]] = field(default_factory=list)
    fixed: list[tuple[str, str, str]] = field(default_factory=list)
    changed: list[tuple[str, str, str]] = field(default_factory=list)


def compare(before: Mapping[str, str], after: Mapping[str, str]) -> Changes:
    """Clause outcomes of two runs compared; clauses either run did not judge are left out."""
    out = Changes()
    for clause in sorted(set(before) & set(after)):
        b, a = before[clause], after[clause]
        if b == a or b in NOT_JUDGED or a in NOT_JUDGED:
            continue
        if b == PASS:
            out.regressed.append((clause, b, a))
        elif a == PASS:
            out.fixed.append((clause, b, a))
        else:
            out.changed.append((clause, b, a))
    return out


def flaky(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Clauses with more than one judged outcome among ``rows`` (clause, outcome, run_id)."""
    by: dict[str, dict[str, int]] = {}
    runs: dict[str, set[str]] = {}
    for r in rows:
        if r["outcome"] in NOT_JUDGED:
            continue
        counts = by.setdefault(r["clause"], {})
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
        runs.setdefault(r["clause"], set()).add(r["run_id"])
    return [{"clause": c, "runs": len(runs[c]), "outcomes": dict(sorted(o.items()))}
            for c, o in sorted(by.items()) if len(o) > 1]


def _triples(items: list[tuple[str, str, str]]) -> list[dict[str, str]]:
    return [{"clause": c, "before": b, "after": a} for c, b, a in items]


def _changes_json(prev: Mapping[str, Any], cur_id: str, changes: Changes, same_contract: bool) -> dict[str, Any]:
    return {"previous": _run_ref(prev), "run": cur_id, "same_contract": same_contract,
            "regressed": _triples(changes.regressed), "fixed": _triples(changes.fixed),
            "changed": _triples(changes.changed)}


def _run_ref(r: Mapping[str, Any]) -> dict[str, Any]:
    return {"run_id": r["run_id"], "started_at": r["started_at"], "adapter_version": r["adapter_version"],
            "build_digest": r["build_digest"], "verdict": r["verdict"]}


def _build(r: Mapping[str, Any]) -> dict[str, Any]:
    return {"adapter_version": r["adapter_version"], "build_digest": r["build_digest"],
            "contract_version": r["contract_version"], "contract_digest": r["contract_digest"]}


def summary(history: History, adapter: str | None = None, limit: int = TREND) -> dict[str, Any]:
    """What ``ledgercheck report history --json`` prints (reports/schema/history.schema.json)."""
    names = history.adapters()
    if adapter is not None:
        if adapter not in names:
            known = ", ".join(names) or "none"
            raise HistoryError(f"{history.path}: no runs of adapter {adapter!r} (recorded: {known})")
        names = [adapter]
    out = []
    for name in names:
        runs = history.runs(name)
        whole = [r for r in runs if r["shard"] is None]
        trend = [{**_run_ref(r), "kind": r["kind"], "seed": r["seed"], "shard": r["shard"],
                  "contract_version": r["contract_version"], "contract_digest": r["contract_digest"],
                  "exit_code": r["exit_code"], "error": r["error"], "outcomes": history.outcome_counts(r["id"])}
                 for r in runs[-limit:]]
        since = None
        if len(whole) >= 2:
            prev, cur = whole[-2], whole[-1]
            changes = compare(history.outcomes(prev["id"]), history.outcomes(cur["id"]))
            since = _changes_json(prev, cur["run_id"], changes, prev["contract_digest"] == cur["contract_digest"])
        flakes = []
        seen: set[tuple[Any, ...]] = set()
        for r in reversed(whole):
            key = (r["adapter_version"], r["build_digest"], r["contract_digest"])
            if key in seen:
                continue
            seen.add(key)
            for f in flaky(history.build_outcomes(r)):
                flakes.append({**f, "build": _build(r)})
        out.append({"adapter": name, "runs": len(runs), "shard_runs": len(runs) - len(whole), "trend": trend,
                    "since_previous": since, "flaky": flakes})
    return {"format": "ledgercheck-history-summary", "version": VERSION, "history": str(history.path),
            "adapters": out}


def since_previous(history: History, doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """For a report: ``doc`` against the adapter's latest whole run recorded before it, and the
    clauses flaky across the runs of its build and contract (``doc`` included).  None for a shard,
    or when the history holds no earlier whole run of the adapter."""
    run = doc["run"]
    if _shard(run) is not None:
        return None
    key = _adapter_key(doc["adapter"])
    sha = (doc.get("integrity") or {}).get("sha256")
    earlier = [r for r in history.runs(key) if r["shard"] is None and r["results_sha256"] != sha
               and (r["started_at"] or "") <= (run.get("started_at") or "")]
    if not earlier:
        return None
    prev = earlier[-1]
    now = {c["id"]: str(c["outcome"]) for c in doc.get("clauses") or []}
    changes = compare(history.outcomes(prev["id"]), now)
    out = _changes_json(prev, run["id"], changes, prev["contract_digest"] == doc["spec"]["digest"])
    me = {"adapter": key, "adapter_version": doc["adapter"].get("version"),
          "build_digest": doc["adapter"].get("artifact_sha256"), "contract_digest": doc["spec"]["digest"]}
    rows = [r for r in history.build_outcomes(me)
            if r["run_id"] != run["id"]] + [{"clause": c, "outcome": o, "run_id": run["id"]} for c, o in now.items()]
    out["flaky"] = flaky(rows)
    return out


# ---- words -----------------------------------------------------------------------------------------


def since_counts(since: Mapping[str, Any]) -> str:
    """``2 regressed, 1 fixed, 0 other changes`` (and the flaky clauses, when the comparison has them)."""
    text = f"{len(since['regressed'])} regressed, {len(since['fixed'])} fixed, {len(since['changed'])} other change(s)"
    if since.get("flaky"):
        text += f"; {len(since['flaky'])} flaky clause(s)"
    return text


def _outcomes_text(counts: Mapping[str, int]) -> str:
    return " ".join(f"{o} {n}" for o, n in counts.items()) or "no clauses"


def summary_text(doc: Mapping[str, Any]) -> str:
    """What ``ledgercheck report history`` prints: per adapter the trend, the changes since the
    previous run and the flaky clauses."""
    from .text import terminal

    out = [f"history {terminal(doc['history'])}"]
    if not doc["adapters"]:
        out.append("  no runs recorded")
    for a in doc["adapters"]:
        shards = f", {a['shard_runs']} shard run(s) not compared" if a["shard_runs"] else ""
        out += ["", f"{terminal(a['adapter'])}: {a['runs']} run(s){shards}"]
        for r in a["trend"]:
            build = f" build {r['build_digest'][:12]}" if r["build_digest"] else ""
            shard = f" shard {r['shard']}" if r["shard"] else ""
            out.append(f"  {r['started_at']}  {terminal(r['adapter_version'])}{terminal(build)}  contract "
                       f"{terminal(r['contract_version'])} ({r['contract_digest'][:12]})  {r['verdict']:<13}"
                       f"{shard}  {_outcomes_text(r['outcomes'])}")
        since = a["since_previous"]
        if since is None:
            out.append("  since the previous run: nothing to compare (fewer than two whole runs)")
        else:
            note = "" if since["same_contract"] else " (the contract changed)"
            out.append(f"  since the previous run ({terminal(since['previous']['run_id'])} -> {terminal(since['run'])})"
                       f"{note}: {since_counts(since)}")
            for kind in ("regressed", "fixed", "changed"):
                for c in since[kind]:
                    out.append(f"    {kind:<9} {c['clause']}: {terminal(c['before'])} -> {terminal(c['after'])}")
        if a["flaky"]:
            out.append(f"  flaky (outcome changes between runs of one build and contract): {len(a['flaky'])}")
            for f in a["flaky"]:
                b = f["build"]
                out.append(f"    {f['clause']}: {_outcomes_text(f['outcomes'])} over {f['runs']} runs of version "
                           f"{terminal(b['adapter_version'])}, contract {terminal(b['contract_version'])}")
        else:
            out.append("  flaky: none")
    return "\n".join(out)


def record_run(path: Path | None, doc: Mapping[str, Any],
               write: Callable[[dict[str, Any] | None], dict[str, str]]) -> tuple[dict[str, str], str | None]:
    """Write a run's files and append it to the history at ``path`` (None: no history).

    ``write(since)`` writes the results and reports (``since``: the comparison with the previous
    run, for the reports) and returns their paths.  The files are written whatever happens to the
    history: a history that cannot be used costs the run its record, never its results.  Returns
    the paths and a one-line problem with the history, or None.
    """
    if path is None:
        return write(None), None
    history: History | None = None
    since: dict[str, Any] | None = None
    problem = None
    try:
        history = open_history(path)
        since = since_previous(history, doc)
    except HistoryError as exc:
        problem = str(exc)
    try:
        paths = write(since)
        if history is not None:
            try:
                history.append(doc, paths.get("results"))
                paths = {**paths, "history": str(path)}
            except HistoryError as exc:
                problem = str(exc)
    finally:
        if history is not None:
            history.close()
    return paths, problem
