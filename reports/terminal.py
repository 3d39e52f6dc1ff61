"""`ledgercheck report show`: the results in a terminal, and the same summary as JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .summary import (
    adapter_label,
    blocking_clauses,
    coverage_line,
    coverage_totals,
    error_clauses,
    first_problem,
    fmt_seconds,
    not_offered_clauses,
    verdict_line,
    warning_clauses,
)
from .text import one_line, terminal
from .verdicts import WINDOW_OK, unattributed_failures


def summary_json(doc: Mapping[str, Any], path: str, sha256: str) -> dict[str, Any]:
    def brief(c: Mapping[str, Any]) -> dict[str, Any]:
        p = first_problem(doc, c["id"])
        return {"id": c["id"], "profile": c["profile"], "level": c["level"], "outcome": c["outcome"],
                "message": c["message"], "replay": p["replay"] if p else None}

    windows = doc["crash_windows"]
    return {
        "file": path,
        "sha256": sha256,
        "verdict": doc["verdict"],
        "verdict_line": verdict_line(doc),
        "exit_code": doc["exit_code"],
        "certified_profiles": doc["certified_profiles"],
        "profiles": {p: v["verdict"] for p, v in doc["profiles"]["verdicts"].items()},
        "adapter": {k: doc["adapter"][k] for k in ("name", "version", "address", "artifact_sha256")},
        "spec": {k: doc["spec"][k] for k in ("name", "version", "digest")},
        "run": {k: doc["run"][k] for k in ("id", "kind", "command", "seed", "duration_s")},
        "errors": [brief(c) for c in error_clauses(doc)],
        "unattributed": [{"nodeid": x["nodeid"], "outcome": x["outcome"], "message": x["message"],
                          "replay": x["replay"]} for x in unattributed_failures(doc)],
        "findings": doc.get("findings") or [],
        "failures": [brief(c) for c in blocking_clauses(doc)],
        "not_offered": [brief(c) | {"lacks": c["lacks"]} for c in not_offered_clauses(doc)],
        "warnings": [brief(c) for c in warning_clauses(doc)],
        "crash_windows": {"total": len(windows), "failed": sum(1 for w in windows if w["verdict"] == "fail"),
                          "errors": sum(1 for w in windows if w["verdict"] == "error")},
        "coverage": coverage_totals(doc),
        "not_reached": [f for f in doc.get("findings") or [] if f["severity"] == "not_reached"],
    }


def _clause_lines(doc: Mapping[str, Any], title: str, clauses: list[dict[str, Any]]) -> list[str]:
    if not clauses:
        return []
    t = terminal
    lines = ["", f"{title} ({len(clauses)}):"]
    for c in clauses:
        lines.append(f"  {c['id']:<34} {c['outcome']:<6} {t(one_line(c['message'] or '', 100))}")
        p = first_problem(doc, c["id"])
        if p and p["replay"]:
            lines.append(f"  {'':<34} replay: {t(one_line(p['replay'], 160))}")
    return lines


def summary_text(doc: Mapping[str, Any], path: str, sha256: str) -> str:
    a, s, r = doc["adapter"], doc["spec"], doc["run"]
    name, version = adapter_label(doc)
    t = terminal
    lines = [
        t(verdict_line(doc)),
        "",
        f"results   {t(path)}  sha256 {sha256}",
        f"adapter   {t(one_line(name, 60))} {t(one_line(version, 30))}  ({a['transport']}, {t(one_line(a['address'], 80))})",
        f"contract  {t(s['name'])} {t(s['version'])}  sha256 {s['digest']}",
        f"run       {r['kind']} {t(r['id'])}, {fmt_seconds(r['duration_s'])}, seed {r['seed']}, "
        f"timeout scale {r['timeout_scale']:g}",
        "",
        f"{'profile':<14}{'verdict':<15}{'clauses':>8}{'pass':>6}{'fail':>6}{'error':>7}{'known':>7}{'n/o':>5}{'n/c':>5}",
    ]
    for p in doc["profiles"]["defined"]:
        v = doc["profiles"]["verdicts"][p]
        lines.append(f"{p:<14}{v['verdict'].replace('_', ' '):<15}{v['clauses']:>8}{v['passed']:>6}{v['failed']:>6}"
                     f"{v['errors']:>7}{v['xfailed']:>7}{v.get('not_offered', 0):>5}{v['not_claimed']:>5}")
    unsafe = [f for f in doc.get("findings") or [] if f["severity"] == "unsafe"]
    if unsafe:  # the most severe findings first: what happened to the work itself
        lines += ["", f"UNSAFE: the safety campaign found ({sum(f['count'] for f in unsafe)}):"]
        for f in unsafe:
            lines.append(f"  {f['words']:<34} x{f['count']:<5} blamed on {', '.join(f['clauses']) or '-'}")
    lines += _clause_lines(doc, "could not be decided", error_clauses(doc))
    lines += _clause_lines(doc, "failed (contract violations)", blocking_clauses(doc))
    lacking = [f for f in doc.get("findings") or [] if f["severity"] == "not_offered"]
    if lacking:  # never failures: what the implementation does not offer, and what that leaves unjudged
        lines += ["", f"not offered ({len(lacking)} operation(s), {len(not_offered_clauses(doc))} clause(s) not judged):"]
        for f in lacking:
            lines.append(f"  {t(f['what']):<34} {t(one_line(', '.join(f['clauses']), 110))}")
    gaps = [f for f in doc.get("findings") or [] if f["severity"] == "not_reached"]
    if gaps:  # what the run did not exercise: the verdict cannot pass
        lines += ["", f"not reached ({len(gaps)}):"]
        for f in gaps:
            lines.append(f"  {t(one_line(f['words'], 150))}")
            if f["message"] and f["what"] != "safety":
                lines.append(f"    {t(one_line(f['message'], 150))}")
    lines += _clause_lines(doc, "SHOULD not met (not blocking)", warning_clauses(doc))
    loose = unattributed_failures(doc)
    if loose:
        lines += ["", f"failed without naming a clause ({len(loose)}):"]
        for x in loose:
            lines.append(f"  {t(one_line(x['nodeid'], 60))}  {x['outcome']}  {t(one_line(x['message'] or '', 100))}")
    windows = doc["crash_windows"]
    if windows:
        bad = sum(1 for w in windows if w["verdict"] not in WINDOW_OK)
        allowed = sum(1 for w in windows if w["verdict"] == "permitted")
        lines += ["", f"crash windows: {len(windows)} run, {len(windows) - bad - allowed} passed, "
                  + (f"{allowed} permitted by the adapter's declaration, " if allowed else "") + f"{bad} failed or errored"]
    covered = coverage_line(doc)
    if covered:
        lines += ["", f"coverage: {t(covered)}"]
    lines += ["", f"reproduce: {t(r['command'])}"]
    return "\n".join(lines)
