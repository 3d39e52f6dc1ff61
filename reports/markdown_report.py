"""The short Markdown summary CI posts on a pull request.

Link-free, and every adapter-supplied string sits in a code span (so it can be neither markup,
nor a link, nor break the table it is in).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .summary import (
    adapter_label,
    blocking_clauses,
    coverage_line,
    error_clauses,
    first_problem,
    fmt_seconds,
    verdict_parts,
    warning_clauses,
)
from .text import md_code, md_text
from .verdicts import IMPACT_WORDS, WINDOW_OK, unattributed_failures

ICON = {"CERTIFIED": "✅", "NOT CERTIFIED": "❌", "ERROR": "⚠️", "INCOMPLETE": "⏹️", "INCONCLUSIVE": "❔"}
PROFILE_ICON = {"certified": "✅ certified", "failed": "❌ failed", "not_offered": "🚫 not offered",
                "inconclusive": "❔ inconclusive", "error": "⚠️ error", "not_claimed": "➖ not claimed",
                "not_requested": "➖ not requested"}
MAX_ROWS = 25


def _clause_table(doc: Mapping[str, Any], clauses: list[dict[str, Any]]) -> list[str]:
    rows = ["| Clause | Level | Impact | Outcome | Why | Replay |", "|---|---|---|---|---|---|"]
    for c in clauses[:MAX_ROWS]:
        p = first_problem(doc, c["id"])
        replay = md_code(p["replay"], table=True, limit=200) if p and p["replay"] else "–"
        text = p["message"] if p and p["message"] and c["outcome"] != "xfail" else c["message"]
        why = md_code(text, table=True, limit=160) if text else "–"
        outcome = "known bug" if c["outcome"] == "xfail" else c["outcome"]
        impact = md_text(IMPACT_WORDS.get(c.get("impact") or "", c.get("impact") or "–"))
        rows.append(f"| {md_code(c['id'], table=True)} | {c['level']} | {impact} | {md_text(outcome)} | {why} | {replay} |")
    if len(clauses) > MAX_ROWS:
        rows.append(f"\n…and {len(clauses) - MAX_ROWS} more in the HTML report.")
    return rows


def _since(since: Mapping[str, Any]) -> list[str]:
    """The "since the previous run" section (see ledgercheck.reports.history.since_previous)."""
    from .history import since_counts

    prev = since["previous"]
    head = (f"**Since the previous run** (run {md_code(prev['run_id'])} of {md_code(prev['started_at'])}, version "
            f"{md_code(prev['adapter_version'])}, {md_text(prev['verdict'])}): {md_text(since_counts(since))}")
    if not since["same_contract"]:
        head += " (the contract changed between the two runs)"
    out = ["", head]
    rows = [(kind, c) for kind in ("regressed", "fixed", "changed") for c in since[kind]]
    if rows:
        out += ["", "| Clause | Change | Before | Now |", "|---|---|---|---|"]
        out += [f"| {md_code(c['clause'], table=True)} | {kind} | {md_code(c['before'], table=True)} "
                f"| {md_code(c['after'], table=True)} |" for kind, c in rows[:MAX_ROWS]]
        if len(rows) > MAX_ROWS:
            out.append(f"\n…and {len(rows) - MAX_ROWS} more in the HTML report.")
    flaky = since.get("flaky") or []
    if flaky:
        listed = ", ".join(f"{md_code(f['clause'])} ({md_text(', '.join(f'{o} ×{n}' for o, n in f['outcomes'].items()))})"
                           for f in flaky[:MAX_ROWS])
        out += ["", f"Flaky across runs of this build and contract ({len(flaky)}): {listed}"]
    return out


def render_markdown(doc: Mapping[str, Any], results_sha256: str | None = None,
                    since: Mapping[str, Any] | None = None) -> str:
    from .results import results_file_sha256

    sha = results_sha256 or results_file_sha256(doc)
    s, r = doc["spec"], doc["run"]
    name, version = adapter_label(doc)
    line, detail = verdict_parts(doc)
    head = f"**{md_text(line)}**"
    if detail is not None:
        head += f" {md_code(detail, limit=200)}" if line == "ERROR" else f" (first: {md_code(detail, limit=160)})"
    out = [
        f"### {ICON[doc['verdict']]} ledgercheck: {md_text(doc['verdict'])} — {md_code(name)} {md_code(version)}",
        "",
        head,
        "",
        f"Contract {md_code(s['name'])} {md_code(s['version'])} (sha256 {md_code(s['digest'][:16])}) · "
        f"{md_text(r['kind'])} run {md_code(r['id'])} in {md_text(fmt_seconds(r['duration_s']))} · "
        f"results.json sha256 {md_code(sha[:16])}",
        "",
        "| Profile | Verdict | Pass | Fail | Error | Known bug | Not offered | Not claimed |",
        "|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    inc = r.get("incomplete")
    if inc and inc["tests"]["unfinished"]:
        left = inc["tests"]["unfinished"]
        more = f" and {len(left) - 5} more" if len(left) > 5 else ""
        out[4:4] = [f"Without an outcome: {', '.join(md_code(n, limit=120) for n in left[:5])}{more}", ""]
    for p in doc["profiles"]["defined"]:
        v = doc["profiles"]["verdicts"][p]
        lacks = f" (lacks {md_code(', '.join(v['lacks']), table=True)})" if v.get("lacks") else ""
        out.append(f"| {md_text(p)} | {PROFILE_ICON[v['verdict']]}{lacks} | {v['passed']} | {v['failed']} | {v['errors']} "
                   f"| {v['xfailed']} | {v.get('not_offered', 0)} | {v['not_claimed']} |")
    covered = coverage_line(doc)
    if covered:
        out += ["", f"Coverage: {md_text(covered)}"]
    if since is not None:
        out += _since(since)
    found = doc.get("findings") or []
    unsafe = [f for f in found if f["severity"] == "unsafe"]
    if unsafe:  # most severe first: what the safety campaign saw happen to the work
        out += ["", f"**Safety anomalies** ({sum(f['count'] for f in unsafe)})", "", "| Anomaly | Count | Blamed on |",
                "|---|--:|---|"]
        out += [f"| {md_text(f['words'])} ({md_code(f['what'], table=True)}) | {f['count']} | "
                f"{', '.join(md_code(c, table=True) for c in f['clauses']) or '–'} |" for f in unsafe]
    for title, clauses in (("Undecided clauses", error_clauses(doc)), ("Contract violations", blocking_clauses(doc))):
        if clauses:
            out += ["", f"**{title}** ({len(clauses)})", "", *_clause_table(doc, clauses)]
    lacking = [f for f in found if f["severity"] == "not_offered"]
    if lacking:  # never failures: operations the implementation does not offer, and the clauses left unjudged
        out += ["", f"**Not offered** ({len(lacking)} operation(s); not failures, but the profile is not certified)", "",
                "| Operation | Clauses not judged |", "|---|---|"]
        out += [f"| {md_code(f['what'], table=True)} | {', '.join(md_code(c, table=True) for c in f['clauses'][:MAX_ROWS])} |"
                for f in lacking[:MAX_ROWS]]
    gaps = [f for f in found if f["severity"] == "not_reached"]
    if gaps:  # what the run did not exercise: the verdict cannot pass
        out += ["", f"**Not reached** ({len(gaps)}; the verdict cannot pass until they are)", ""]
        for f in gaps[:MAX_ROWS]:
            named = [*(f["message"].split("; ") if f["message"] and f["what"] != "safety" else []), *f["clauses"]]
            out.append(f"- {md_text(f['words'])}" + (f": {', '.join(md_code(x) for x in named[:MAX_ROWS])}" if named else ""))
    clauses = warning_clauses(doc)
    if clauses:
        out += ["", f"**SHOULD clauses not met (not blocking)** ({len(clauses)})", "", *_clause_table(doc, clauses)]
    loose = unattributed_failures(doc)
    if loose:
        out += ["", f"**Failures not tied to a clause** ({len(loose)})", "", "| Test | Outcome | Why | Replay |",
                "|---|---|---|---|"]
        for t in loose[:MAX_ROWS]:
            replay = md_code(t["replay"], table=True, limit=200) if t["replay"] else "–"
            why = md_code(t["message"], table=True, limit=160) if t["message"] else "–"
            out.append(f"| {md_code(t['nodeid'], table=True, limit=120)} | {md_text(t['outcome'])} | {why} | {replay} |")
    windows = doc["crash_windows"]
    if windows:
        bad = sum(1 for w in windows if w["verdict"] not in WINDOW_OK)
        allowed = sum(1 for w in windows if w["verdict"] == "permitted")
        out += ["", f"Crash windows: {len(windows)} run, {len(windows) - bad - allowed} passed, "
                + (f"{allowed} permitted by the adapter's declaration (not passes), " if allowed else "")
                + f"{bad} failed or errored."]
    out += ["", f"Reproduce: {md_code(r['command'], limit=400)}", ""]
    return "\n".join(out)
