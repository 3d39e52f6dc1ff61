"""A static certification site built from results files: ``ledgercheck site build``.

    ledgercheck site build docs/libraries/*/results.json --out docs/site [--history DB] [--confirmations FILE]

The site is plain files that work from ``file://`` and from any static host: no server, no
network request (each page's Content-Security-Policy forbids them; the one script, which sorts
and filters the index, is allowed by its hash and is not needed to read anything).

- ``index.html``: every implementation with its verdict (safety first: UNSAFE when the safety
  campaign found anomalies), version, the contract's version and digest, the date, and one cell
  per profile of the contract.
- ``impl/<slug>.html`` (and ``impl/<slug>/<version>.html`` for every version given): one page per
  implementation at its newest version (and one per version): the verdict line,
  the safety campaign's anomalies with their excerpts, the clause results, the crash windows, what
  the run did not reach, what changed since the previous version given (or recorded in the
  history: clauses fixed and regressed), the command that reproduces the run and each finding's
  replay command, and trend charts (inline SVG) from the history.
- ``badges/<slug>.svg`` (the verdict) and ``badges/<slug>/<profile>.svg``: stable addresses a
  project embeds in its own README; they always show the newest version given.
- ``track-record.html``: each finding a script using the library alone confirms (the
  confirmation registry, ``--confirmations``), with the library's version, the anomaly or clause,
  the script and the command that replays it.

Every value that comes from a results file is escaped.  Results files are read with
:func:`ledgercheck.reports.results.read_results` (schema, integrity hash and facts checked) and
their verdicts derived again by the current rules, so the site of results written by an earlier
version says what this version concludes from the same facts; a file that cannot be used stops
the build with one line naming it.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import verdicts
from .history import HistoryError, compare, open_history
from .results import ResultsError, read_results
from .timeline import CSS as TIMELINE_CSS

h = html.escape

BADGE_COLOURS = {"certified": "#2e7d32", "unsafe": "#b71c1c", "not certified": "#e65100", "inconclusive": "#616161",
                 "error": "#616161", "incomplete": "#616161", "failed": "#e65100", "not offered": "#757575",
                 "not claimed": "#9e9e9e"}
PROFILE_WORDS = {"certified": "certified", "failed": "not certified", "not_offered": "not offered", "error": "error",
                 "inconclusive": "inconclusive", "not_claimed": "not claimed", "not_requested": "not claimed",
                 "not_run": "not run"}
SCRIPT = """
(function () {
  var table = document.getElementById('impls');
  var filter = document.getElementById('filter');
  var rows = Array.prototype.slice.call(table.tBodies[0].rows);
  filter.hidden = false;
  filter.addEventListener('input', function () {
    var q = filter.value.toLowerCase();
    rows.forEach(function (r) { r.hidden = q && r.textContent.toLowerCase().indexOf(q) < 0; });
  });
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
    th.tabIndex = 0;
    th.addEventListener('click', function () {
      var dir = th.getAttribute('data-dir') === 'asc' ? 'desc' : 'asc';
      th.setAttribute('data-dir', dir);
      rows.sort(function (a, b) {
        var x = a.cells[i].getAttribute('data-key') || a.cells[i].textContent;
        var y = b.cells[i].getAttribute('data-key') || b.cells[i].textContent;
        return (x < y ? -1 : x > y ? 1 : 0) * (dir === 'asc' ? 1 : -1);
      });
      rows.forEach(function (r) { table.tBodies[0].appendChild(r); });
    });
  });
  document.documentElement.setAttribute('data-js', 'ready');
})();
""".strip()
CSS = """
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1b1b1b;background:#fafafa}
header{background:#263238;color:#fff;padding:1.2em 2em}header a{color:#cfd8dc}
main{padding:1em 2em;max-width:1200px}table{border-collapse:collapse;width:100%;margin:.5em 0 1.5em}
th,td{border-bottom:1px solid #ddd;padding:.35em .5em;text-align:left;vertical-align:top}
th{background:#eceff1;cursor:pointer}td.v-unsafe,span.v-unsafe{color:#b71c1c;font-weight:600}
.v-certified{color:#2e7d32;font-weight:600}.v-not-certified,.v-failed{color:#e65100;font-weight:600}
.v-inconclusive,.v-error{color:#616161;font-weight:600}.v-fail,.v-xfail{color:#e65100;font-weight:600}
.v-pass{color:#2e7d32}code,pre{font-family:ui-monospace,monospace;font-size:13px}
pre{background:#f1f1f1;padding:.6em;overflow-x:auto;white-space:pre-wrap}.muted{color:#757575}
nav a{margin-right:1em}input#filter{padding:.3em;width:20em}svg.trend{background:#fff;border:1px solid #ddd}
""".strip()


class SiteError(Exception):
    """The site cannot be built; ``str()`` is one line naming the file and the problem."""


def slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s or "implementation"


@dataclass
class Run:
    path: Path
    doc: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.doc["adapter"].get("name") or self.doc["adapter"].get("address") or "(unnamed)")

    @property
    def version(self) -> str:
        return str(self.doc["adapter"].get("version") or "")

    @property
    def finished(self) -> str:
        return str(self.doc["run"].get("finished_at") or "")

    @property
    def anomalies(self) -> dict[str, int]:
        return verdicts.anomaly_counts(self.doc)

    @property
    def label(self) -> str:
        """The verdict a reader sees first: UNSAFE when the safety campaign found anomalies."""
        if self.anomalies:
            return "UNSAFE"
        return str(self.doc["verdict"])

    @property
    def badge(self) -> str:
        return self.label.lower()


@dataclass
class Implementation:
    name: str
    runs: list[Run] = field(default_factory=list)  # newest first

    @property
    def slug(self) -> str:
        return slug(self.name)

    @property
    def latest(self) -> Run:
        return self.runs[0]


def load_runs(paths: Iterable[str | os.PathLike[str]]) -> list[Run]:
    runs = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            path = path / "results.json"
        try:
            doc = read_results(path, current_rules=True).doc  # intact; judged again by today's rules
        except ResultsError as exc:
            raise SiteError(f"site: {exc}") from None
        except OSError as exc:
            raise SiteError(f"site: {path}: cannot read ({exc.strerror or exc})") from None
        runs.append(Run(path, verdicts.apply(json.loads(json.dumps(doc)))))
    if not runs:
        raise SiteError("site: no results files given")
    return runs


def group(runs: Sequence[Run]) -> list[Implementation]:
    by: dict[str, Implementation] = {}
    for r in runs:
        by.setdefault(r.name, Implementation(r.name)).runs.append(r)
    for impl in by.values():
        impl.runs.sort(key=lambda r: r.finished, reverse=True)
    slugs: dict[str, str] = {}
    for impl in by.values():
        if impl.slug in slugs:
            raise SiteError(f"site: implementations {slugs[impl.slug]!r} and {impl.name!r} would share the page "
                            f"impl/{impl.slug}.html")
        slugs[impl.slug] = impl.name
    return sorted(by.values(), key=lambda i: (0 if i.latest.anomalies else 1, i.name.lower()))


# ------------------------------------------------------------------------------------ badges
def badge_svg(left: str, right: str) -> str:
    """A flat two-part badge; widths from a fixed advance per character (no font metrics)."""
    colour = BADGE_COLOURS.get(right, "#616161")
    lw, rw = 6 * len(left) + 12, 6 * len(right) + 12
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{lw + rw}" height="20" role="img" '
            f'aria-label="{h(left)}: {h(right)}"><title>{h(left)}: {h(right)}</title>'
            f'<rect width="{lw}" height="20" fill="#555"/><rect x="{lw}" width="{rw}" height="20" fill="{colour}"/>'
            f'<g fill="#fff" font-family="Verdana,DejaVu Sans,sans-serif" font-size="11">'
            f'<text x="{lw / 2}" y="14" text-anchor="middle">{h(left)}</text>'
            f'<text x="{lw + rw / 2}" y="14" text-anchor="middle">{h(right)}</text></g></svg>\n')


# ------------------------------------------------------------------------------------ pages
def _page(title: str, body: str, depth: int = 0, script: str | None = None) -> str:
    up = "../" * depth
    csp = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; base-uri 'none'; form-action 'none'"
    if script is not None:
        digest = hashlib.sha256(script.encode()).digest()
        csp += f"; script-src 'sha256-{base64.b64encode(digest).decode()}'"
    tail = f"<script>{script}</script>\n" if script is not None else ""
    return (f'<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{h(csp)}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n<title>{h(title)}</title>\n'
            f'<style>{CSS}\n{TIMELINE_CSS}</style>\n</head>\n<body>\n<header><h1>{h(title)}</h1><nav>'
            f'<a href="{up}index.html">All implementations</a><a href="{up}track-record.html">Track record</a>'
            f'</nav></header>\n<main>\n{body}\n</main>\n{tail}</body>\n</html>\n')


def _verdict_class(label: str) -> str:
    return "v-" + slug(label)


def _profiles(runs: Sequence[Run]) -> list[str]:
    seen: dict[str, None] = {}
    for r in runs:
        for p in (r.doc.get("profiles") or {}).get("verdicts") or {}:
            seen.setdefault(p)
    return list(seen)


def index_page(impls: Sequence[Implementation]) -> str:
    profiles = _profiles([i.latest for i in impls])
    head = "".join(f"<th>{h(p)}</th>" for p in profiles)
    rows = []
    for impl in impls:
        r = impl.latest
        spec = r.doc.get("spec") or {}
        anomalies = ", ".join(f"{h(k)} {n}" for k, n in r.anomalies.items()) or "0"
        cells = []
        for p in profiles:
            v = ((r.doc.get("profiles") or {}).get("verdicts") or {}).get(p, {}).get("verdict", "not_run")
            cells.append(f'<td class="{_verdict_class(v)}">{h(PROFILE_WORDS.get(v, v))}</td>')
        rank = {"UNSAFE": 0, "ERROR": 1, "INCOMPLETE": 1, "NOT CERTIFIED": 2, "INCONCLUSIVE": 3, "CERTIFIED": 4}
        rows.append(
            f'<tr data-impl="{h(impl.slug)}"><td><a href="impl/{h(impl.slug)}.html">{h(impl.name)}</a></td>'
            f"<td>{h(r.version)}</td>"
            f'<td class="{_verdict_class(r.label)}" data-key="{rank.get(r.label, 5)}">'
            f'<img src="badges/{h(impl.slug)}.svg" alt="{h(r.label)}"> {h(r.label)}</td>'
            f"<td>{anomalies}</td><td>{h(str(spec.get('version') or ''))} <code>{h(str(spec.get('digest') or '')[:12])}</code></td>"
            f"<td>{h(r.finished[:10])}</td>" + "".join(cells) + "</tr>")
    body = ('<p>Every implementation given to <code>ledgercheck site build</code>, its newest version. The verdict '
            "puts safety first: UNSAFE when the safety campaign found anomalies (lost or repeated work, two owners, "
            "stale writes accepted), then the contract's verdict. Click a column to sort.</p>\n"
            '<p><input id="filter" type="search" placeholder="filter" hidden></p>\n'
            '<table id="impls"><thead><tr><th>implementation</th><th>version</th><th>verdict</th><th>safety anomalies</th>'
            f"<th>contract</th><th>date</th>{head}</tr></thead>\n<tbody>\n" + "\n".join(rows) + "\n</tbody></table>")
    return _page("ledgercheck certifications", body, script=SCRIPT)


def _excerpt(a: Mapping[str, Any]) -> str:
    lines = []
    for rec in (a.get("excerpt") or [])[:12]:
        if isinstance(rec, Mapping):
            what = rec.get("op") or rec.get("fault") or rec.get("type")
            tail = rec.get("error") or rec.get("outcome") or ""
            lines.append(f"L{rec.get('line', '?')} t={rec.get('t', '?')} {rec.get('process', '')} {rec.get('type', '')} "
                         f"#{rec.get('id', '')} {what} {tail}".rstrip())
    return "\n".join(lines)


def _timeline(a: Mapping[str, Any]) -> str:
    """The anomaly's proof drawn as a timeline (reports/timeline.py), from the records results.json
    keeps: the same on every machine, whether or not the campaign's history file is at hand."""
    from .timeline import TimelineError, collect, render_timeline

    records = [*(a.get("excerpt") or []), *(a.get("context") or [])]
    if not records:
        return ""
    try:
        return render_timeline(collect(records), item=str(a.get("work_id") or "") or None, whole=True,
                               caption="The operations of the proof, by process over time.")
    except TimelineError as exc:
        return f'<p class="muted">{h(str(exc))}</p>'


def _trend_svg(points: Sequence[float], label: str, width: int = 320, height: int = 80) -> str:
    if not points:
        return ""
    top = max(max(points), 1e-9)
    n = len(points)
    xy = [(10 + (width - 20) * (i / (n - 1) if n > 1 else 0.5), height - 12 - (height - 24) * (v / top))
          for i, v in enumerate(points)]
    poly = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
    dots = "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5"><title>{h(label)}: {v:g}</title></circle>'
                   for (x, y), v in zip(xy, points, strict=True))
    return (f'<figure><svg class="trend" data-trend="{h(label)}" xmlns="http://www.w3.org/2000/svg" width="{width}" '
            f'height="{height}" role="img" aria-label="{h(label)}"><polyline fill="none" stroke="#1565c0" '
            f'stroke-width="2" points="{poly}"/>{dots}</svg><figcaption>{h(label)} over {n} run(s): '
            f"latest {points[-1]:g}, highest {top:g}</figcaption></figure>")


def trends(history: Any, name: str) -> str:
    if history is None or name not in history.adapters():
        return '<p class="muted">No history given for this implementation (<code>--history</code>).</p>'
    runs = [r for r in history.runs(name) if r["shard"] is None]
    rates, anomalies, seconds = [], [], []
    for r in runs:
        counts = history.outcome_counts(r["id"])
        judged = sum(n for k, n in counts.items() if k in ("pass", "fail", "error", "xfail"))
        rates.append(round(100.0 * counts.get("pass", 0) / judged, 1) if judged else 0.0)
        anomalies.append(float(len(history._rows("SELECT 1 FROM safety_anomalies WHERE run = ?", [r["id"]]))))
        seconds.append(float(r["duration_s"] or 0.0))
    return ("<h2>Trends</h2>" + _trend_svg(rates, "clauses passed (%)") + _trend_svg(anomalies, "safety anomalies")
            + _trend_svg(seconds, "run time (s)"))


def _changes(prev: Run, cur: Run, history_text: str = "") -> str:
    before = {c["id"]: c["outcome"] for c in prev.doc.get("clauses") or []}
    after = {c["id"]: c["outcome"] for c in cur.doc.get("clauses") or []}
    ch = compare(before, after)
    parts = [f"<p>Against version {h(prev.version)} ({h(prev.finished[:10])}){history_text}: "
             f"{len(ch.fixed)} fixed, {len(ch.regressed)} regressed, {len(ch.changed)} changed otherwise.</p>"]
    for title, items in (("Regressed", ch.regressed), ("Fixed", ch.fixed)):
        if items:
            parts.append(f"<h3>{title}</h3><ul>" + "".join(f"<li><code>{h(c)}</code>: {h(a)} → {h(b)}</li>"
                                                         for c, a, b in items) + "</ul>")
    return "".join(parts)


def versions(impl: Implementation) -> list[Run]:
    """The newest run of each version of ``impl``, newest first."""
    out: dict[str, Run] = {}
    for r in impl.runs:
        out.setdefault(r.version, r)
    return list(out.values())


def version_path(impl: Implementation, r: Run) -> str:
    return f"impl/{impl.slug}/{slug(r.version or 'unversioned')}.html"


def implementation_page(impl: Implementation, history: Any, r: Run | None = None) -> str:
    """The page of ``impl`` at its newest version (``impl/<name>.html``), or at the version of
    ``r`` (``impl/<name>/<version>.html``)."""
    latest = r is None
    r = impl.latest if r is None else r
    depth = 1 if latest else 2
    up = "../" * depth
    doc = r.doc
    out = [f'<p class="verdict {_verdict_class(r.label)}" id="verdict">{h(doc.get("verdict_line") or r.label)}</p>',
           f"<p>Version {h(r.version)} · contract {h(str((doc.get('spec') or {}).get('version')))} "
           f"<code>{h(str((doc.get('spec') or {}).get('digest') or '')[:12])}</code> · finished {h(r.finished)} · "
           f'badge: <img src="{up}badges/{h(impl.slug)}.svg" alt="badge"> <code>badges/{h(impl.slug)}.svg</code>'
           + ("" if latest else f' (the newest version: <a href="{up}impl/{h(impl.slug)}.html">{h(impl.latest.version)}</a>)')
           + "</p>",
           f"<h2>Reproduce</h2><pre>{h(str(doc['run'].get('command') or ''))}</pre>"]
    camps = doc.get("safety") or []
    out.append("<h2>Safety campaign</h2>")
    if not camps:
        out.append('<p class="muted">No safety campaign in this run.</p>')
    for camp in camps:
        out.append(f"<p>Verdict: <strong>{h(str(camp.get('verdict')))}</strong>"
                   + (f"; not reached: {h('; '.join(camp.get('missing') or []))}" if camp.get("missing") else "") + "</p>")
        for a in camp.get("anomalies") or []:
            out.append(f'<div class="anomaly" data-class="{h(str(a.get("class")))}"><h3>{h(str(a.get("class")))} '
                       f"<code>{h(str(a.get('work_id') or ''))}</code> (blamed on <code>{h(str(a.get('clause')))}</code>)"
                       f"</h3><p>{h(str(a.get('explanation') or ''))}</p><pre>{h(_excerpt(a))}</pre>{_timeline(a)}</div>")
    rows = []
    for c in doc.get("clauses") or []:
        if c["outcome"] in ("not_requested", "not_claimed"):
            continue
        replay = next((t.get("replay") for t in doc.get("tests") or [] if t.get("clause") == c["id"]
                       and t.get("outcome") == "failed" and t.get("replay")), None)
        rows.append(f'<tr data-clause="{h(c["id"])}" data-outcome="{h(c["outcome"])}"><td><code>{h(c["id"])}</code></td>'
                    f'<td class="{_verdict_class(c["outcome"])}">{h(c["outcome"])}</td>'
                    f'<td>{h(str((c.get("headline") if c["outcome"] in ("fail", "xfail") else c.get("statement")) or ""))}</td>'
                    f"<td>{'<pre>' + h(replay) + '</pre>' if replay else ''}</td></tr>")
    out.append("<h2>Clauses</h2><table><thead><tr><th>clause</th><th>outcome</th><th>what it says (what went wrong, for a failure)</th><th>replay</th></tr>"
               "</thead><tbody>" + "".join(rows) + "</tbody></table>")
    windows = doc.get("crash_windows") or []
    out.append("<h2>Crash windows</h2>" + (
        "<table><thead><tr><th>point</th><th>mode</th><th>verdict</th><th>what happened</th></tr></thead><tbody>"
        + "".join(f"<tr><td><code>{h(str(w.get('point')))}</code></td><td>{h(str(w.get('mode')))}</td>"
                  f'<td class="{_verdict_class(str(w.get("verdict")))}">{h(str(w.get("verdict")))}</td>'
                  f"<td>{h(str(w.get('message') or ''))[:300]}</td></tr>" for w in windows)
        + "</tbody></table>" if windows else '<p class="muted">No crash window was explored.</p>'))
    gaps = [f for f in doc.get("findings") or [] if f.get("severity") in ("not_offered", "not_reached", "inconclusive")]
    out.append("<h2>Coverage</h2>" + ("<ul>" + "".join(f"<li>{h(str(f.get('words')))}: {h(', '.join(f.get('clauses') or []))}</li>"
                                                       for f in gaps) + "</ul>" if gaps else "<p>Everything in scope was reached.</p>"))
    out.append("<h2>Since the previous version</h2>")
    vs = versions(impl)
    older = vs[vs.index(next(v for v in vs if v.version == r.version)) + 1:]
    out.append(_changes(older[0], r) if older else '<p class="muted">No earlier version given.</p>')
    out.append("<h2>Versions</h2><ul>" + "".join(
        f'<li><a href="{up}{h(version_path(impl, x))}">{h(x.version)}</a> · {h(x.finished)} · '
        f'<span class="{_verdict_class(x.label)}">{h(x.label)}</span></li>' for x in vs) + "</ul>")
    out.append(trends(history, impl.name))
    return _page(f"{impl.name} {r.version}", "\n".join(out), depth=depth)


# ------------------------------------------------------------------------------------ track record
def read_registry(path: Path) -> dict[str, dict[str, list[str]]]:
    """library -> finding -> the scripts that confirm it with the library alone (refutations and
    passes shown are left out: they are not bugs)."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise SiteError(f"site: {path}: cannot read the confirmation registry ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise SiteError(f"site: {path}: not YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(data, dict):
        raise SiteError(f"site: {path}: must map library -> finding -> script")
    out: dict[str, dict[str, list[str]]] = {}
    for lib, found in data.items():
        if not isinstance(found, dict):
            raise SiteError(f"site: {path}: {lib}: must map finding -> script")
        for finding, value in found.items():
            if isinstance(value, dict):
                continue
            names = value if isinstance(value, list) else [value]
            out.setdefault(str(lib), {})[str(finding)] = [str(n) for n in names]
    return out


def track_record(impls: Sequence[Implementation], registry: Path | None, out_dir: Path) -> str:
    if registry is None:
        body = '<p class="muted">No confirmation registry given (<code>--confirmations</code>).</p>'
        return _page("Track record", body)
    entries = read_registry(registry)
    by_name = {i.name: i for i in impls}
    rows = []
    for lib, found in sorted(entries.items()):
        impl = by_name.get(lib)
        if impl is None:
            continue
        r = impl.latest
        failing = {c["id"] for c in r.doc.get("clauses") or [] if c["outcome"] in ("fail", "xfail")}
        for finding, scripts in sorted(found.items()):
            if finding not in r.anomalies and finding not in failing:
                continue  # confirmed once, not in this run's findings
            words = verdicts.ANOMALY_WORDS.get(finding) or next(
                (c.get("headline") for c in r.doc.get("clauses") or [] if c["id"] == finding), "") or finding
            replay = next((t.get("replay") for t in r.doc.get("tests") or []
                           if t.get("outcome") == "failed" and t.get("replay") and finding in (t.get("message") or "")),
                          None) or str(r.doc["run"].get("command") or "")
            links = ", ".join(f'<a href="{h(os.path.relpath(registry.parent / s, out_dir).replace(os.sep, "/"))}">'
                              f"<code>{h(s)}</code></a>" for s in scripts)
            rows.append(f'<tr data-library="{h(lib)}" data-finding="{h(finding)}"><td><a href="impl/{h(impl.slug)}.html">'
                        f"{h(lib)}</a></td><td>{h(r.version)}</td><td><code>{h(finding)}</code>: {h(str(words))}</td>"
                        f"<td>{links}</td><td><pre>{h(replay)}</pre></td></tr>")
    body = ("<p>Each bug a ledgercheck run found in a library and a script using that library alone confirmed: "
            "the library's version, the anomaly or clause, the confirmation script and the command that replays "
            "the finding.</p><table id=\"track\"><thead><tr><th>library</th><th>version</th><th>finding</th>"
            "<th>confirmed by</th><th>replay</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>")
    return _page("Track record", body)


# ------------------------------------------------------------------------------------ build
def build(results: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], *, history: str | None = None,
          confirmations: str | None = None) -> dict[str, Any]:
    runs = load_runs(results)
    impls = group(runs)
    hist = None
    if history is not None:
        if not Path(history).is_file():
            raise SiteError(f"site: {history}: no such history file")
        try:
            hist = open_history(history, create=False)
        except HistoryError as exc:
            raise SiteError(f"site: {exc}") from None
    out_dir = Path(out)
    (out_dir / "impl").mkdir(parents=True, exist_ok=True)
    written = []

    def write(rel: str, text: str) -> None:
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(rel)

    write("index.html", index_page(impls))
    for impl in impls:
        write(f"impl/{impl.slug}.html", implementation_page(impl, hist))
        for r in versions(impl):
            write(version_path(impl, r), implementation_page(impl, hist, r))
        write(f"badges/{impl.slug}.svg", badge_svg("ledgercheck", impl.latest.badge))
        for p, v in ((impl.latest.doc.get("profiles") or {}).get("verdicts") or {}).items():
            if v.get("verdict") in ("not_requested", "not_claimed"):
                continue
            write(f"badges/{impl.slug}/{slug(p)}.svg", badge_svg(f"ledgercheck {p}", PROFILE_WORDS.get(v["verdict"], v["verdict"])))
    write("track-record.html", track_record(impls, Path(confirmations) if confirmations else None, out_dir))
    if hist is not None:
        hist.close()
    return {"out": str(out_dir), "implementations": [i.name for i in impls], "files": written}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("site", help="build a static certification site from results files")
    ssub = p.add_subparsers(dest="site_cmd", required=True, metavar="ACTION")
    b = ssub.add_parser("build", help="write index, implementation pages, badges and the track record")
    b.add_argument("results", nargs="+", help="results.json files (or directories holding one)")
    b.add_argument("--out", required=True, help="the site's directory")
    b.add_argument("--history", default=None, metavar="DB", help="a results history (trend charts)")
    b.add_argument("--confirmations", default=None, metavar="FILE",
                   help="the registry of findings confirmed with a library alone (the track record)")
    b.set_defaults(func=cmd_build)


def cmd_build(args: argparse.Namespace) -> int:
    try:
        done = build(args.results, args.out, history=args.history, confirmations=args.confirmations)
    except SiteError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    print(f"site: {len(done['implementations'])} implementation(s), {len(done['files'])} files in {done['out']}")
    return 0
