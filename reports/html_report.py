"""The HTML compliance report: one self-contained file (inline CSS, JS and SVG; nothing fetched).

Every value that reaches the page goes through :func:`~ledgercheck.reports.text.h`.  A
Content-Security-Policy forbids every network request and allows only the report's own script
(by its hash), so even text that slipped past escaping could not run.  The page reads completely
without JavaScript; the script only adds the clause filter, expand/collapse and copy buttons.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any

from .diagram import render_state_svg
from .summary import (
    adapter_label,
    blocking_clauses,
    coverage_totals,
    error_clauses,
    fmt_seconds,
    in_scope,
    not_offered_clauses,
    safety_situations,
    verdict_parts,
    warning_clauses,
)
from .text import h, one_line
from .verdicts import IMPACT_WORDS, WINDOW_OK, move_label, unattributed_failures, window_nodeid

OUTCOME_LABEL = {"pass": "pass", "fail": "fail", "error": "error", "xfail": "expected failure", "not_offered": "not offered",
                 "not_run": "not run", "not_claimed": "not claimed", "not_requested": "not requested"}
TEST_LABEL = {"passed": "passed", "failed": "failed", "error": "error", "skipped": "skipped",
              "xfailed": "expected failure", "xpassed": "unexpectedly passed", "not_offered": "not offered",
              "permitted": "permitted"}  # permitted: a crash window's (docs/chaos.md)
TEST_CLASS = {"passed": "o-pass", "failed": "o-fail", "error": "o-error", "skipped": "o-skipped",
              "xfailed": "o-xfail", "xpassed": "o-fail", "not_offered": "o-not_offered", "permitted": "o-permitted"}
WINDOW_OUTCOME = {"pass": "passed", "permitted": "permitted", "fail": "failed", "error": "error"}
VERDICT_LABEL = {"certified": "certified", "failed": "failed", "not_offered": "not offered", "inconclusive": "inconclusive",
                 "error": "error", "not_claimed": "not claimed", "not_requested": "not requested"}
BANNER = {"CERTIFIED": "v-certified", "NOT CERTIFIED": "v-not-certified", "ERROR": "v-error", "INCOMPLETE": "v-incomplete",
          "INCONCLUSIVE": "v-inconclusive"}
MOVE_LABEL = {"reached": "reached", "missing": "never reached", "not_offered": "not offered", "out_of_scope": "out of scope"}
MOVE_CLASS = {"reached": "o-pass", "missing": "o-error", "not_offered": "o-not_offered", "out_of_scope": "o-not_claimed"}
SAFETY_LABEL = {"pass": ("no anomaly", "o-pass"), "fail": ("anomalies", "o-fail"), "inconclusive": ("inconclusive", "o-error")}


@cache
def _asset(name: str) -> str:
    return resources.files("ledgercheck.reports").joinpath(f"templates/{name}").read_text("utf-8")


def _csp(script: str) -> str:
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    return (f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{digest}'; img-src data:; "
            "base-uri 'none'; form-action 'none'")


def _badge(label: str, cls: str) -> str:
    return f'<span class="badge {cls}">{h(label)}</span>'


def _code(value: Any) -> str:
    return f"<code>{h(value)}</code>"


def _kv(pairs: Sequence[tuple[str, str]]) -> str:
    """A definition list; values are HTML already escaped by the caller."""
    return '<dl class="kv">' + "".join(f"<dt>{h(k)}</dt><dd>{v}</dd>" for k, v in pairs) + "</dl>"


def _opt(value: Any, fmt: Any = None) -> str:
    if value is None or value == "":
        return '<span class="none">none</span>'
    return fmt(value) if fmt else h(value)


def _cmd(text: str) -> str:
    return f'<div class="cmd-wrap"><pre class="cmd">{h(text)}</pre></div>'


# ---- sections ------------------------------------------------------------------------------------


def _banner(doc: Mapping[str, Any]) -> str:
    s, r = doc["spec"], doc["run"]
    name, version = adapter_label(doc)
    line, detail = verdict_parts(doc)
    if detail is not None:
        line = f"ERROR: {one_line(detail, 300)}" if line == "ERROR" else f"{line} (first: {one_line(detail, 200)})"
    return (f'<header class="banner {BANNER[doc["verdict"]]}"><div class="wrap">'
            f'<p class="eyebrow">ledgercheck compliance report</p>'
            f'<h1><span class="name">{h(name)}</span> <span class="ver">{h(version)}</span></h1>'
            f'<p class="verdict" id="verdict" data-verdict="{h(doc["verdict"])}">{h(line)}</p>'
            f'<p class="sub">against contract {_code(s["name"])} {h(s["version"])} · {h(r["kind"])} run '
            f'{_code(r["id"])} · finished {h(r["finished_at"])} · {h(fmt_seconds(r["duration_s"]))}</p>'
            "</div></header>")


def _nav(doc: Mapping[str, Any], since: Mapping[str, Any] | None = None) -> str:
    links = [("profiles", "Profiles")] + ([("since", "Since the previous run")] if since is not None else [])
    links += [("reproduce", "Reproduce"), ("problems", "Problems")]
    if any(c.get("anomalies") or any(isinstance(r, Mapping) and r.get("result") == "violation"
                                     for r in ((c.get("linearizability") or {}).get("items") or {}).values())
           for c in doc.get("safety") or []):
        links.append(("timelines", "Timelines"))
    if doc.get("coverage") or doc.get("safety"):
        links.append(("coverage", "Coverage"))
    links.append(("clauses", "Clauses"))
    if doc["crash_windows"]:
        links.append(("crash-windows", "Crash windows"))
    links += [("state-machine", "State machine"), ("identity", "Contract, adapter, environment"), ("timings", "Timings")]
    return ('<nav class="toc"><div class="wrap">' + "".join(f'<a href="#{i}">{h(t)}</a>' for i, t in links)
            + "</div></nav>")


def _profiles(doc: Mapping[str, Any]) -> str:
    cards = []
    requires = doc["profiles"]["requires"]
    for p in doc["profiles"]["defined"]:
        v = doc["profiles"]["verdicts"][p]
        parts = [f"{v['clauses']} clauses", f"{v['passed']} pass"]
        for key, label in (("failed", "fail"), ("errors", "error"), ("xfailed", "known bug"),
                           ("not_offered", "not offered"), ("not_run", "not run"), ("not_claimed", "not claimed")):
            if v.get(key):
                parts.append(f"{v[key]} {label}")
        if v.get("lacks"):
            parts.append(f"lacks {', '.join(v['lacks'])}")
        warn = f'<p class="req">{len(v["warnings"])} SHOULD clause(s) not met</p>' if v["warnings"] else ""
        req = f'<p class="req">requires {h(", ".join(requires.get(p, [])))}</p>' if requires.get(p) else ""
        cards.append(f'<div class="card v-{v["verdict"]}" data-profile="{h(p)}" data-verdict="{v["verdict"]}">'
                     f'<h3><span>{h(p)}</span>{_badge(VERDICT_LABEL[v["verdict"]], "v-" + v["verdict"] + "-badge")}</h3>'
                     f'<p class="counts">{h(" · ".join(parts))}</p>{warn}{req}</div>')
    scope = in_scope(doc)
    note = (f'<p>Requested: {h(", ".join(doc["profiles"]["requested"]) or "none")}. '
            f'Claimed by the adapter: {h(", ".join(doc["profiles"]["claimed"]) or "none")}. '
            f'Certification covers {h(", ".join(scope) or "no profile")}.</p>')
    return f'<section id="profiles"><h2>Profiles</h2>{note}<div class="cards">{"".join(cards)}</div></section>'


CHANGE_CLASS = {"regressed": "o-fail", "fixed": "o-pass", "changed": "o-error"}


def _since(since: Mapping[str, Any] | None) -> str:
    """What changed since the adapter's previous run (ledgercheck.reports.history.since_previous)."""
    if since is None:
        return ""
    from .history import since_counts

    prev = since["previous"]
    contract = "" if since["same_contract"] else " The contract changed between the two runs."
    rows = "".join(f'<tr data-change="{kind}"><td>{_code(c["clause"])}</td><td>{_badge(kind, CHANGE_CLASS[kind])}</td>'
                   f'<td>{h(OUTCOME_LABEL.get(c["before"], c["before"]))}</td>'
                   f'<td>{h(OUTCOME_LABEL.get(c["after"], c["after"]))}</td></tr>'
                   for kind in ("regressed", "fixed", "changed") for c in since[kind])
    table = ('<table><thead><tr><th>clause</th><th>change</th><th>before</th><th>now</th></tr></thead>'
             f"<tbody>{rows}</tbody></table>") if rows else "<p>No clause changed its outcome.</p>"
    flaky = since.get("flaky") or []
    flaky_html = ""
    if flaky:
        items = "".join(f'<li data-flaky="{h(f["clause"])}">{_code(f["clause"])}: '
                        f'{h(", ".join(f"{OUTCOME_LABEL.get(o, o)} ×{n}" for o, n in f["outcomes"].items()))} '
                        f'over {f["runs"]} runs</li>' for f in flaky)
        flaky_html = f"<h3>Flaky across runs of this build and contract ({len(flaky)})</h3><ul>{items}</ul>"
    return (f'<section id="since"><h2>Since the previous run</h2><p>Compared with run {_code(prev["run_id"])} of '
            f'{h(prev["started_at"])} (version {_code(prev["adapter_version"])}, {h(prev["verdict"])}): '
            f'{h(since_counts(since))}.{h(contract)}</p>{table}{flaky_html}</section>')


def _reproduce(doc: Mapping[str, Any], results_sha256: str) -> str:
    r = doc["run"]
    shard = f'{r["shard"]["index"]}/{r["shard"]["count"]}' if r["shard"] else None
    pairs = [
        ("results.json SHA-256", f'<code id="results-sha256">{h(results_sha256)}</code>'),
        ("integrity (canonical)", _code(doc.get("integrity", {}).get("sha256", ""))),
        ("seed", _opt(r["seed"], _code)),
        ("hypothesis profile", _opt(r["hypothesis_profile"], _code)),
        ("timeout scale", h(f'{r["timeout_scale"]:g}×')),
        ("shard", _opt(shard)),
        ("workers", h(r["workers"] if r["workers"] else "0 (tests ran in the main process)")),
        ("working directory", _code(r["cwd"])),
        ("started / finished", f'{h(r["started_at"])} → {h(r["finished_at"])}'),
    ]
    if r.get("error"):
        pairs.insert(0, ("run error", f'<strong class="mismatch">{h(r["error"])}</strong>'))
    inc = r.get("incomplete")
    if inc:
        left = inc["tests"]["unfinished"]
        shown = ", ".join(left[:20]) + (f" … and {len(left) - 20} more" if len(left) > 20 else "")
        pairs.insert(0, ("not finished", f'<strong class="mismatch" id="incomplete">{h(inc["message"])}</strong>'
                                         + (f"<br>{h(len(left))} test(s) without an outcome: {_code(shown)}" if left else "")))
    parts = ""
    if r.get("parts"):
        rows = "".join(
            f'<tr><td>{_code(p["id"])}</td><td>{h(p["kind"])}</td>'
            f'<td>{h(str(p["shard"]["index"]) + "/" + str(p["shard"]["count"])) if p.get("shard") else "–"}</td>'
            f'<td>{_opt(p.get("seed"), _code)}</td><td class="num">{h(fmt_seconds(p["duration_s"]))}</td>'
            f'<td><code>{h(p["command"])}</code></td></tr>' for p in r["parts"])
        parts = ('<h3>Merged from</h3><table><thead><tr><th>run</th><th>kind</th><th>shard</th><th>seed</th>'
                 f'<th class="num">time</th><th>command</th></tr></thead><tbody>{rows}</tbody></table>')
    return (f'<section id="reproduce"><h2>Reproduce</h2><p>Run this to reproduce the results '
            f'(same adapter, contract, seed and settings):</p>{_cmd(r["command"])}'
            f'<div class="panel">{_kv(pairs)}</div>{parts}</section>')


def _evidence(doc: Mapping[str, Any], clause_id: str) -> list[dict[str, Any]]:
    out = []
    clause = next(c for c in doc["clauses"] if c["id"] == clause_id)
    # what explains the outcome: failures, errors and known bugs; skips only when they are the reason
    shown = ("failed", "error", "xpassed", "xfailed", "not_offered") + (("skipped",) if clause["outcome"] == "error" else ())
    for t in doc["tests"]:
        if t["clause"] == clause_id and t["outcome"] in shown:
            out.append({"who": t["nodeid"], "outcome": t["outcome"], "message": t["message"],
                        "counterexample": t["counterexample"], "replay": t["replay"], "file": None,
                        "seconds": t["duration_s"], "seed": t.get("seed")})
    for w in doc["crash_windows"]:
        if clause_id in w["clauses"] and w["verdict"] not in WINDOW_OK:
            out.append({"who": window_nodeid(w), "outcome": "failed" if w["verdict"] == "fail" else "error",
                        "message": w["message"], "counterexample": None, "replay": w["replay"],
                        "file": w["replay_file"], "seconds": w["duration_s"], "seed": w.get("seed")})
    return out


def _problem(doc: Mapping[str, Any], c: Mapping[str, Any]) -> str:
    known = doc["adapter"]["known_bugs"].get(c["id"])
    level = '<span class="should">SHOULD</span>' if c["level"] != "MUST" else "MUST"
    impact = c.get("impact")
    data_impact = f' data-impact="{h(impact)}"' if impact else ""
    out = [f'<article class="problem p-{c["outcome"]}" id="f-{h(c["id"])}" data-clause="{h(c["id"])}"{data_impact}>',
           f'<h3>{_badge(OUTCOME_LABEL[c["outcome"]], "o-" + c["outcome"])} {_code(c["id"])}'
           f'<span class="meta">{level} · {h(c["profile"])}'
           f'{" · " + h(IMPACT_WORDS.get(impact, impact)) if impact else ""} · source {h(c["source"])}</span></h3>']
    if c.get("headline") and c["outcome"] in ("fail", "xfail"):
        out.append(f'<p class="headline">{h(c["headline"])}</p>')
    out.append(f'<p class="stmt">{h(c["statement"])}</p>')
    if known:
        out.append(f'<p class="known">Declared by the adapter as a known bug: {h(known)}</p>')
    evs = _evidence(doc, c["id"])
    if not evs or c["outcome"] == "error" and not any(e["outcome"] == "error" for e in evs):
        out.append(f'<pre class="message">{h(c["message"] or "")}</pre>')
    for e in evs:
        out.append('<div class="evidence">'
                   f'<p class="who">{_code(e["who"])} {_badge(TEST_LABEL[e["outcome"]], TEST_CLASS[e["outcome"]])} '
                   f'<span class="none">{h(fmt_seconds(e["seconds"]))}'
                   f'{" · seed " + h(e["seed"]) if e["seed"] is not None else ""}</span></p>')
        if e["message"]:
            out.append(f'<pre class="message">{h(e["message"])}</pre>')
        if e["counterexample"]:
            out.append(f'<p class="lbl">Shrunk counterexample</p><pre class="counterexample">{h(e["counterexample"])}</pre>')
        if e["replay"]:
            out.append(f'<p class="lbl">Replay</p>{_cmd(e["replay"])}')
        if e["file"]:
            out.append(f'<p class="lbl">Replay file</p><p>{_code(e["file"])}</p>')
        out.append("</div>")
    out.append("</article>")
    return "".join(out)


def _problems(doc: Mapping[str, Any]) -> str:
    groups = [("Could not be decided", error_clauses(doc)),
              ("Failed: contract violations", [c for c in blocking_clauses(doc) if c["outcome"] == "fail"]),
              ("Known bugs (block certification)", [c for c in blocking_clauses(doc) if c["outcome"] == "xfail"]),
              ("Not offered: the implementation does not offer an operation these need (not failures; "
               "block certification)", not_offered_clauses(doc)),
              ("SHOULD clauses not met (do not block)", warning_clauses(doc))]
    body = []
    unsafe = [f for f in doc.get("findings") or [] if f["severity"] == "unsafe"]
    if unsafe:  # most severe first: what the safety campaign saw happen to the work itself
        rows = "".join(f'<li>{_badge(f["words"], "o-fail")} {_code(f["what"])} ×{h(f["count"])} · blamed on '
                       f'{", ".join(_code(c) for c in f["clauses"]) or "–"}</li>' for f in unsafe)
        body.append(f'<div class="unsafe" id="unsafe"><h3>Safety anomalies ({sum(f["count"] for f in unsafe)})</h3>'
                    f'<ul>{rows}</ul><p>The safety campaign\'s section of results.json holds each anomaly\'s proof.</p></div>')
    loose = unattributed_failures(doc)
    if loose:
        body.append(f"<h3>Failed without naming a clause ({len(loose)})</h3>")
        for t in loose:
            ce = (f'<p class="lbl">Shrunk counterexample</p><pre class="counterexample">{h(t["counterexample"])}</pre>'
                  if t["counterexample"] else "")
            replay = f'<p class="lbl">Replay</p>{_cmd(t["replay"])}' if t["replay"] else ""
            body.append(f'<article class="problem p-error" data-test="{h(t["nodeid"])}"><h3>'
                        f'{_badge(TEST_LABEL[t["outcome"]], TEST_CLASS[t["outcome"]])} {_code(t["nodeid"])}'
                        f'<span class="meta">{h(t["kind"])} test</span></h3>'
                        f'<pre class="message">{h(t["message"] or "")}</pre>{ce}{replay}</article>')
    for title, clauses in groups:
        if clauses:
            body.append(f"<h3>{h(title)} ({len(clauses)})</h3>")
            body += [_problem(doc, c) for c in clauses]
        if title.startswith("Not offered"):  # what the run did not reach comes after what is not offered
            gaps = [f for f in doc.get("findings") or [] if f["severity"] == "not_reached"]
            if gaps:
                items = "".join(f'<li data-gap="{h(f["what"])}">{h(f["words"])}'
                                f'{": " + h(f["message"]) if f["message"] and f["what"] != "safety" else ""}</li>'
                                for f in gaps)
                body.append(f'<h3>Not reached: the run did not exercise these (the verdict cannot pass) ({len(gaps)})</h3>'
                            f'<ul class="gaps">{items}</ul><p>The <a href="#coverage">coverage</a> section has the '
                            "details.</p>")
    if not body:
        body.append("<p>No clause in the certified profiles failed, errored or is a declared known bug.</p>")
    return f'<section id="problems"><h2>Problems</h2>{"".join(body)}</section>'


def _timelines(doc: Mapping[str, Any]) -> str:
    """Per safety campaign, a timeline of each failing item (reports/timeline.py): its anomalies
    (the class checker's) and, when the campaign holds a per-item linearizability result
    (``linearizability``), its violation.  Drawn from the campaign's history file while it can be
    read (the window around the item, with the faults); else an anomaly's timeline is drawn from the
    records of its proof, which results.json holds, and a violation is named with why it is not drawn."""
    from .timeline import (
        CSS,
        MAX_TIMELINES,
        TimelineError,
        anomaly_ids,
        collect,
        failing_items,
        history_loader,
        render_timeline,
    )

    load_history = history_loader()

    body: list[str] = []
    drawn = 0
    for camp in doc.get("safety") or []:
        lin = camp.get("linearizability") if isinstance(camp.get("linearizability"), Mapping) else None
        failing = failing_items(None, lin, camp.get("anomalies") or [])
        if not failing:
            continue
        ops, problem = None, "the campaign kept no history"
        if camp.get("history") and load_history is None:
            problem = "no history reader is loaded (ledgercheck.chaos.safety.history)"
        elif camp.get("history"):
            try:
                ops = collect(load_history(str(camp["history"])))
            except Exception as exc:  # noqa: BLE001 - the reader's one-line HistoryError, or an OSError
                problem = str(exc)
        parts, left = [], 0
        for wid, f in failing.items():
            if drawn >= MAX_TIMELINES:
                left += 1
                continue
            anomalies, result = f["anomalies"], f["result"]
            why = "".join(f"<li>{_code(a.get('class'))} {h(a.get('explanation'))}</li>" for a in anomalies)
            if result is not None:
                why += "<li>not linearizable</li>"
            try:
                if ops is not None:
                    fig = render_timeline(ops, focus=anomaly_ids(anomalies), item=wid, result=result)
                elif anomalies:
                    records = [r for a in anomalies for r in [*(a.get("excerpt") or []), *(a.get("context") or [])]]
                    fig = render_timeline(collect(records), item=wid, whole=True,
                                          caption=f"The operations of the proof only (the history is not at hand: "
                                                  f"{problem}).")
                else:
                    fig = f'<p class="tl-note">Its timeline needs the history: {h(problem)}</p>'
            except TimelineError as exc:
                fig = f'<p class="tl-note">{h(exc)}</p>'
            parts.append(f'<div class="tl-item" data-item="{h(wid)}"><h4>Item {_code(wid)}</h4><ul>{why}</ul>{fig}</div>')
            drawn += 1
        more = f'<p class="tl-note">{left} more failing item(s) not drawn (at most {MAX_TIMELINES}).</p>' if left else ""
        body.append(f'<div class="panel safety-timelines" data-seed="{h(camp.get("seed"))}"><h3>Safety campaign, seed '
                    f'{h(camp.get("seed"))}</h3>{"".join(parts)}{more}</div>')
    if not body:
        return ""
    return (f'<section id="timelines"><h2>Timelines of the failing items</h2><style>{CSS}</style>'
            "<p>Each failing item's operations by process over time, with the faults injected; "
            "<code>ledgercheck history check FILE --html OUT --item ITEM</code> draws any item of a history.</p>"
            f'{"".join(body)}</section>')


def _list_or_dash(items: Sequence[str], code: bool = False) -> str:
    if not items:
        return '<span class="none">–</span>'
    return ", ".join(_code(i) if code else h(i) for i in items)


def _coverage(doc: Mapping[str, Any]) -> str:
    """What the run exercised: per profile the transitions reached, not offered and never reached
    and the clauses with a case run; the crash points hit; each safety campaign's situations."""
    cov = doc.get("coverage")
    camps = doc.get("safety") or []
    if not cov and not camps:
        return ""
    body = []
    if cov:
        tot = coverage_totals(doc)
        assert tot is not None
        rows = []
        for p in [p for p in doc["profiles"]["defined"] if p in cov["profiles"]]:  # (on disk: keys sorted)
            g = cov["profiles"][p]
            gaps = len(g["missing"]) + len(g["not_run"])
            rows.append(f'<tr data-profile="{h(p)}" data-gaps="{gaps}"><td>{h(p)}</td>'
                        f'<td class="num">{g["reached"]} / {g["transitions"]}</td><td class="num">{g["not_offered"]}</td>'
                        f'<td>{_list_or_dash(g["missing"], code=True)}</td>'
                        f'<td class="num">{g["clauses_run"]} / {g["clauses"]}</td>'
                        f'<td>{_list_or_dash(g["not_run"], code=True)}</td></tr>')
        unoffered = f', {tot["not_offered"]} not offered' if tot["not_offered"] else ""
        body.append(
            f'<p>Transitions: {tot["reached"]} of {tot["transitions"]} reached{unoffered}; clauses: {tot["clauses_run"]} of '
            f'{tot["clauses"]} with a case run. A profile certifies only when every transition of its own through '
            "offered operations was reached and every clause of it ran at least one case.</p>"
            '<div class="scroll"><table class="coverage" id="coverage-profiles"><thead><tr><th>profile</th>'
            '<th class="num">transitions reached</th><th class="num">not offered</th><th>never reached</th>'
            '<th class="num">clauses with a case run</th><th>no case run</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')
        moves = "".join(f'<tr data-move="{h(move_label(r["from"], r["operation"], r["to"]))}" data-state="{h(r["state"])}">'
                        f'<td>{_code(r["from"])}</td><td>{_code(r["operation"])}</td><td>{_code(r["to"])}</td>'
                        f'<td>{h(r["profile"])}</td><td>{_badge(MOVE_LABEL[r["state"]], MOVE_CLASS[r["state"]])}</td>'
                        f'<td class="num">{r["tests"]}</td></tr>' for r in cov["transitions"])
        body.append('<details class="all-moves"><summary>Every transition of the contract</summary><div class="scroll">'
                    '<table><thead><tr><th>from</th><th>operation</th><th>to</th><th>profile</th><th>state</th>'
                    f'<th class="num">tests</th></tr></thead><tbody>{moves}</tbody></table></div></details>')
        points = "".join(f'<tr data-point="{h(p["point"])}"><td>{_code(p["point"])}</td><td class="num">{p["kill"]}</td>'
                         f'<td class="num">{p["takeover"]}</td><td class="num">{p["scan-kill"]}</td>'
                         f'<td class="num">{p.get("permitted", 0)}</td><td class="num">{p["failed"]}</td></tr>'
                         for p in cov["crash_points"])
        body.append(f'<h3>Crash points ({tot["points_hit"]} of {tot["points"]} hit, {tot["windows"]} windows)</h3>'
                    '<div class="scroll"><table id="coverage-points"><thead><tr><th>point</th><th class="num">kill</th>'
                    '<th class="num">takeover</th><th class="num">scan-kill</th><th class="num">permitted</th>'
                    '<th class="num">failed</th></tr></thead>'
                    f'<tbody>{points}</tbody></table></div>')
        calls = "".join(f'<tr><td>{_opt(s["status"], _code)}</td><td>{_code(s["operation"])}</td>'
                        f'<td class="num">{s["accepted"]}</td><td class="num">{s["refused"]}</td></tr>'
                        for s in cov["states_operations"])
        body.append('<details><summary>Statuses × operations called (tests that made each call)</summary>'
                    '<div class="scroll"><table><thead><tr><th>status before</th><th>operation</th>'
                    f'<th class="num">accepted</th><th class="num">refused</th></tr></thead><tbody>{calls}</tbody>'
                    '</table></div></details>')
    for camp in camps:
        label, cls = SAFETY_LABEL.get(str(camp.get("verdict")), (str(camp.get("verdict")), "o-error"))
        seen = safety_situations(camp)
        rows = "".join(f'<tr data-situation="{h(k)}" class="{"" if n else "mismatch"}"><td>{_code(k)}</td>'
                       f'<td class="num">{n}</td></tr>' for k, n in seen)
        table = ('<div class="scroll"><table class="situations"><thead><tr><th>situation</th><th class="num">times</th>'
                 f'</tr></thead><tbody>{rows}</tbody></table></div>') if rows else             '<p class="none">The campaign recorded no situations (made before the checker counted them).</p>'
        missing = [str(m) for m in camp.get("missing") or []]
        miss = (f'<p>Not reached: </p><ul class="gaps">{"".join(f"<li>{h(m)}</li>" for m in missing)}</ul>'
                if missing else "")
        body.append(f'<div class="panel safety-coverage" data-seed="{h(camp.get("seed"))}" '
                    f'data-verdict="{h(camp.get("verdict"))}"><h3>Safety campaign, seed {h(camp.get("seed"))} '
                    f'{_badge(label, cls)}</h3>{miss}{table}</div>')
    return f'<section id="coverage"><h2>Coverage</h2>{"".join(body)}</section>'


def _clause_row(doc: Mapping[str, Any], c: Mapping[str, Any], tests: Sequence[tuple[str, str, float]]) -> str:
    level = '<span class="should" title="SHOULD: reported, does not block certification">SHOULD</span>' \
        if c["level"] != "MUST" else '<span class="must">MUST</span>'
    counts = [f"{c[k]} {label}" for k, label in (("passed", "passed"), ("failed", "failed"), ("errors", "error"),
                                                 ("xfailed", "expected failure"), ("xpassed", "unexpectedly passed"),
                                                 ("not_offered", "not offered"), ("skipped", "skipped")) if c.get(k)]
    if c["tests"] and c["passed"] == c["tests"]:
        ev = h(f"{c['tests']} passed")
    else:
        ev = h(", ".join(counts) if counts else "no test")
    if c["outcome"] in ("fail", "error", "xfail", "not_offered") and c["profile"] in in_scope(doc):
        ev += f' · <a href="#f-{h(c["id"])}">details</a>'
    elif c["message"]:
        ev += f'<div>{h(one_line(c["message"], 160))}</div>'
    if tests:
        items = "".join(f'<li>{_code(n)} {_badge(TEST_LABEL[o], TEST_CLASS[o])} {h(fmt_seconds(d))}</li>'
                        for n, o, d in tests)
        ev += f"<details><summary>tests</summary><ul>{items}</ul></details>"
    return (f'<tr class="clause o-row-{c["outcome"]}" id="c-{h(c["id"])}" data-clause="{h(c["id"])}" '
            f'data-outcome="{c["outcome"]}" data-level="{h(c["level"])}" data-profile="{h(c["profile"])}">'
            f'<td class="cid">{_code(c["id"])}<div class="stmt">{h(c["statement"])}</div></td>'
            f'<td>{level}</td><td>{_badge(OUTCOME_LABEL[c["outcome"]], "o-" + c["outcome"])}</td>'
            f'<td class="ev">{ev}</td></tr>')


def _matrix(doc: Mapping[str, Any]) -> str:
    tests: dict[str, list[tuple[str, str, float]]] = {}
    for t in doc["tests"]:
        tests.setdefault(t["clause"], []).append((t["nodeid"], t["outcome"], t["duration_s"]))
    for w in doc["crash_windows"]:
        for cid in w["clauses"]:
            outcome = WINDOW_OUTCOME[w["verdict"]]
            tests.setdefault(cid, []).append((window_nodeid(w), outcome, w["duration_s"]))
    options = "".join(f'<option value="{v}">{h(label)}</option>' for v, label in (
        ("all", "all outcomes"), ("problems", "problems only"), ("pass", "pass"), ("fail", "fail"), ("error", "error"),
        ("xfail", "expected failure"), ("not_offered", "not offered"), ("not_run", "not run"), ("not_claimed", "not claimed"),
        ("not_requested", "not requested")))
    controls = ('<div class="controls" id="matrix-controls" hidden>'
                f'<label>Show <select id="filter-outcome">{options}</select></label>'
                '<input id="filter-text" type="search" placeholder="filter by clause id or text" aria-label="filter">'
                '<button type="button" id="expand-all">Expand tests</button><span class="count" id="filter-count"></span>'
                "</div>")
    groups = []
    for p in doc["profiles"]["defined"]:
        v = doc["profiles"]["verdicts"][p]
        rows = [_clause_row(doc, c, tests.get(c["id"], [])) for c in doc["clauses"] if c["profile"] == p]
        groups.append(f'<tbody class="profile-group" data-profile="{h(p)}"><tr class="group"><th colspan="4">{h(p)}'
                      f'{_badge(VERDICT_LABEL[v["verdict"]], "v-" + v["verdict"] + "-badge")}'
                      f'<span class="gmeta">{v["clauses"]} clauses</span></th></tr>{"".join(rows)}</tbody>')
    total = len(doc["clauses"])
    loose = [t for t in doc["tests"] if t["clause"] is None]
    other = ""
    if loose:
        rows = "".join(f'<tr><td>{_code(t["nodeid"])}</td><td>{h(t["kind"])}</td>'
                       f'<td>{_badge(TEST_LABEL[t["outcome"]], TEST_CLASS[t["outcome"]])}</td>'
                       f'<td class="num">{h(fmt_seconds(t["duration_s"]))}</td></tr>' for t in loose)
        other = (f"<h3>Tests that name no clause ({len(loose)})</h3><p>These exercise many clauses at once (a stateful "
                 "run, say) and name a clause only when they find one violated; a failure that names none makes the "
                 "run an error.</p><table><thead><tr><th>test</th><th>kind</th><th>outcome</th><th class=\"num\">time"
                 f"</th></tr></thead><tbody>{rows}</tbody></table>")
    return (f'<section id="clauses"><h2>Clauses ({total})</h2>{controls}'
            '<table class="matrix"><thead><tr><th>Clause</th><th>Level</th><th>Outcome</th><th>Evidence</th></tr>'
            f'</thead>{"".join(groups)}</table>{other}</section>')


def _breakable(name: str) -> str:
    """Escaped identifier that may wrap after its underscores (long crash point names in headers)."""
    return h(name).replace("_", "_<wbr>")


def _window_rows(ws: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for w in ws:
        # a window with no expectation (a lease campaign's: no recovery scan decides) shows none
        dec_ok = w["decision_expected"] is None or w["decision_observed"] == w["decision_expected"]
        n, lo, hi = w["effects_observed"], w["effects_min"], w["effects_max"]
        eff_ok = lo is None or (n is not None and n >= lo and (hi is None or n <= hi))
        allowed = "–" if w["effects_expected"] is None else f"{w['effects_expected']} ({lo}..{'∞' if hi is None else hi})"
        verdict_cls = TEST_CLASS[WINDOW_OUTCOME[w["verdict"]]]
        observed_dec = f'<span class="{"" if dec_ok else "mismatch"}">{_opt(w["decision_observed"])}</span>'
        observed_eff = f'<span class="{"" if eff_ok else "mismatch"}">{_opt(n)}</span>'
        rows.append(
            f'<tr class="w-{w["verdict"]}" data-window="{h(window_nodeid(w))}" data-verdict="{w["verdict"]}">'
            f'<td>{_code(w["point"])}</td><td>{_code(w["step_class"])}</td><td class="num">{h(w["occurrence"])}</td>'
            f'<td>{_opt(w["decision_expected"]) if w["decision_expected"] is not None else "–"} → {observed_dec}</td><td>{h(allowed)} → {observed_eff}</td>'
            f'<td>{_opt(w["final_status"])}</td><td>{_badge(w["verdict"], verdict_cls)}</td></tr>')
        if w["verdict"] != "pass":
            seed = f' · seed {_code(w["seed"])}' if w.get("seed") is not None else ""
            counts = ("permitted by the adapter's declaration; fails none of" if w["verdict"] == "permitted"
                      else "counts against")
            extra = f'<p class="who">{counts} {", ".join(_code(c) for c in w["clauses"])}{seed}</p>'
            extra += f'<pre class="message">{h(w["message"])}</pre>' if w["message"] else ""
            extra += _cmd(w["replay"]) if w["replay"] else ""
            extra += f'<p class="who">replay file {_code(w["replay_file"])}</p>' if w["replay_file"] else ""
            rows.append(f'<tr class="wmsg w-{w["verdict"]}"><td colspan="7">{extra}</td></tr>')
    return ('<div class="scroll"><table class="windows"><thead><tr><th>point</th><th>step class</th><th class="num">#</th>'
            '<th>decision: expected → observed</th><th>effects: allowed → observed</th><th>final status</th>'
            f'<th>verdict</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>')


def _windows(doc: Mapping[str, Any]) -> str:
    ws = doc["crash_windows"]
    if not ws:
        return ""
    points = list(dict.fromkeys(w["point"] for w in ws))
    classes = list(dict.fromkeys(w["step_class"] for w in ws))
    head = "".join(f"<th>{_breakable(p)}</th>" for p in points)
    grid_rows = []
    for cls in classes:
        cells = []
        for p in points:
            mine = [w for w in ws if w["point"] == p and w["step_class"] == cls]
            if not mine:
                cells.append('<td class="cell empty">–</td>')
                continue
            bad = [w for w in mine if w["verdict"] == "fail"]
            err = [w for w in mine if w["verdict"] == "error"]
            allowed = [w for w in mine if w["verdict"] == "permitted"]
            ok = len(mine) - len(bad) - len(err) - len(allowed)
            kind = "some-fail" if bad else "some-error" if err else "some-permitted" if allowed else "all-pass"
            text = f"{ok}/{len(mine)} pass" if (bad or err or allowed) else f"{ok} pass"
            text += f", {len(allowed)} permitted" if allowed else ""
            cells.append(f'<td class="cell {kind}" title="{h(cls)} × {h(p)}">{h(text)}</td>')
        grid_rows.append(f"<tr><th>{h(cls)}</th>{''.join(cells)}</tr>")
    bad = [w for w in ws if w["verdict"] not in WINDOW_OK]
    allowed = [w for w in ws if w["verdict"] == "permitted"]
    passed = len(ws) - len(bad) - len(allowed)
    named = list(dict.fromkeys(c for w in ws for c in w["clauses"]))
    failing = f"<h3>Failed or errored ({len(bad)})</h3>{_window_rows(bad)}" if bad else ""
    failing += (f"<h3>Permitted by the adapter's declaration ({len(allowed)})</h3><p>Not what the contract asks for, but "
                "what the adapter declares (an effect run again under <code>delivery: at-least-once</code>, an item "
                "brought back only by an operator's call under <code>reclaim: operator</code>): these fail no clause "
                f"and are not passes.</p>{_window_rows(allowed)}") if allowed else ""
    return (f'<section id="crash-windows"><h2>Crash windows ({len(ws)})</h2>'
            f'<p>{passed} of {len(ws)} windows recovered as the contract requires'
            f'{f", {len(allowed)} as the adapter declares it may" if allowed else ""}. Each window '
            f'counts as a test of the clauses it names ({", ".join(_code(c) for c in named)}).</p>'
            f'<div class="scroll"><table class="grid"><thead><tr><th>step class \\ crash point</th>{head}</tr></thead>'
            f'<tbody>{"".join(grid_rows)}</tbody></table></div>{failing}'
            f'<details class="all-windows"><summary>All {len(ws)} windows</summary>{_window_rows(ws)}</details>'
            "</section>")


def _state_machine(doc: Mapping[str, Any]) -> str:
    s = doc["spec"]
    rows = "".join(f'<tr><td>{_code(t["from"])}</td><td>{_code(t["to"])}</td><td>{h(", ".join(t["ops"]))}</td>'
                   f'<td>{_opt(t["guard"])}</td><td>{"yes" if t["requeue"] else ""}</td></tr>' for t in s["transitions"])
    return (f'<section id="state-machine"><h2>State machine</h2><p>{len(s["statuses"])} statuses and '
            f'{len(s["transitions"])} allowed transitions of {_code(s["name"])} {h(s["version"])}; every other move '
            f'is refused.</p><div class="diagram">{render_state_svg(s)}</div>'
            '<details><summary>The transitions as a table</summary><table><thead><tr><th>from</th><th>to</th>'
            f'<th>operations</th><th>guard</th><th>requeue</th></tr></thead><tbody>{rows}</tbody></table></details>'
            "</section>")


def _identity(doc: Mapping[str, Any]) -> str:
    s, a, hs, env = doc["spec"], doc["adapter"], doc["harness"], doc["environment"]
    files = "".join(f"<tr><td>{_code(name)}</td><td>{_code(sha)}</td></tr>" for name, sha in sorted(s["files"].items()))
    spec_panel = _kv([("name", _code(s["name"])), ("version", h(s["version"])), ("title", h(s["title"])),
                      ("digest (SHA-256)", _code(s["digest"]))])
    caps = ", ".join(f"{k}={v}" for k, v in sorted(a["capabilities"].items()))
    bugs = "".join(f"<li>{_code(k)}: {h(v)}</li>" for k, v in sorted(a["known_bugs"].items()))
    adapter_panel = _kv([
        ("name", _opt(a["name"], _code)), ("version", _opt(a["version"], _code)), ("address", _code(a["address"])),
        ("transport", h(a["transport"])), ("protocol", _opt(a["protocol"])),
        ("artifact SHA-256", _opt(a["artifact_sha256"], _code)),
        ("claims", h(", ".join(a["profiles"]) or "no profile")), ("capabilities", _opt(caps)),
        ("crash points", _opt(", ".join(a["crash_points"]))),
        ("known bugs", f"<ul>{bugs}</ul>" if bugs else '<span class="none">none declared</span>'),
    ])
    harness_panel = _kv([("harness", h(f'{hs["name"]} {hs["version"]}')), ("protocol", h(hs["protocol"])),
                         ("results format", h(f'{doc["format"]} v{doc["format_version"]}'))])
    env_panel = _kv([(str(k), _opt(v)) for k, v in sorted(env.items())])
    return ('<section id="identity"><h2>Contract, adapter, environment</h2><div class="grid2">'
            f'<div class="panel"><h3>Contract</h3>{spec_panel}</div>'
            f'<div class="panel"><h3>Adapter</h3>{adapter_panel}</div>'
            f'<div class="panel"><h3>Harness</h3>{harness_panel}</div>'
            f'<div class="panel"><h3>Environment</h3>{env_panel}</div></div>'
            f'<h3 style="margin-top:18px">Contract files</h3><table><thead><tr><th>file</th><th>SHA-256</th></tr></thead>'
            f"<tbody>{files}</tbody></table></section>")


def _workers(n: int) -> str:
    return "in the main process" if n == 0 else f"on {n} worker(s)"


def _timings(doc: Mapping[str, Any]) -> str:
    t = doc["timings"]
    kinds = "".join(f'<tr><td>{h(k)}</td><td class="num">{v["count"]}</td>'
                    f'<td class="num">{h(fmt_seconds(v["duration_s"]))}</td></tr>' for k, v in sorted(t["by_kind"].items()))
    top = max((s["duration_s"] for s in t["slowest"]), default=0.0) or 1.0
    slow = "".join(f'<tr><td>{_code(s["nodeid"])}</td><td class="num">{h(fmt_seconds(s["duration_s"]))}</td>'
                   f'<td style="width:30%"><div class="bar" style="width:{100 * s["duration_s"] / top:.1f}%"></div></td></tr>'
                   for s in t["slowest"])
    return (f'<section id="timings"><h2>Timings</h2><p>Wall time {h(fmt_seconds(t["total_s"]))}; '
            f'time spent in tests and crash windows {h(fmt_seconds(t["tests_s"]))} '
            f'({h(_workers(doc["run"]["workers"]))}).</p><div class="grid2"><div>'
            '<table><thead><tr><th>kind</th><th class="num">count</th><th class="num">time</th></tr></thead>'
            f'<tbody>{kinds}</tbody></table></div><div><table><thead><tr><th>slowest</th><th class="num">time</th><th></th>'
            f'</tr></thead><tbody>{slow}</tbody></table></div></div></section>')


def render_html(doc: Mapping[str, Any], results_sha256: str | None = None,
                since: Mapping[str, Any] | None = None) -> str:
    """The report for ``doc``.  ``results_sha256`` is the SHA-256 of the results.json the page was
    made from; by default, that of the file :func:`write_results` writes for ``doc``.  ``since``:
    the comparison with the adapter's previous run, when a history has one."""
    from .results import results_file_sha256

    sha = results_sha256 or results_file_sha256(doc)
    script = _asset("report.js")
    name, version = adapter_label(doc)
    title = f"ledgercheck: {doc['verdict']} — {one_line(name, 80)} {one_line(version, 40)}"
    body = "".join([
        _banner(doc), _nav(doc, since), '<main class="wrap">', _profiles(doc), _since(since), _reproduce(doc, sha), _problems(doc),
        _timelines(doc), _coverage(doc), _matrix(doc), _windows(doc), _state_machine(doc), _identity(doc), _timings(doc), "</main>",
        f'<footer><div class="wrap">Made by {h(doc["harness"]["name"])} {h(doc["harness"]["version"])} from results '
        f'{_code(sha)} (format {h(doc["format"])} v{h(doc["format_version"])}). Self-contained: this page loads '
        "nothing from the network.</div></footer>",
    ])
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{h(_csp(script))}">\n'
            f'<meta name="generator" content="ledgercheck {h(doc["harness"]["version"])}">\n'
            f'<meta name="ledgercheck-verdict" content="{h(doc["verdict"])}">\n'
            f'<meta name="ledgercheck-results-sha256" content="{h(sha)}">\n'
            f"<title>{h(title)}</title>\n<style>\n{_asset('report.css')}</style>\n</head>\n"
            f"<body>\n{body}\n<script>{script}</script>\n</body>\n</html>\n")
