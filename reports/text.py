"""Making adapter-supplied text safe for every output: HTML, Markdown, XML and the terminal.

Names, versions, error messages, stderr tails and counterexamples come from the ledger under test
and may contain anything.  Control characters are never dropped silently: they are shown as
``\\xNN`` (or ``\\uNNNN``) so a reader sees that they were there, and so the text is valid XML 1.0
and cannot move a terminal's cursor.
"""

from __future__ import annotations

import html
import re
from typing import Any

# C0 controls except tab/newline/carriage return, DEL, C1 controls, surrogates and the two noncharacters
# XML 1.0 forbids.  Tab, newline and carriage return are allowed by XML and handled per output.
# Bidirectional embeddings, overrides and isolates (and the implicit marks) reorder what a reader sees
# without being visible themselves, so they are shown as escapes too.
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f{_BIDI}\ud800-\udfff\ufffe\uffff]")
_TERMINAL = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}\ud800-\udfff\ufffe\uffff]")
_MD_CODE_BREAK = re.compile(r"\s+")


def _show(m: re.Match[str]) -> str:
    cp = ord(m.group())
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}"


def visible(text: object) -> str:
    """``text`` as a string with disallowed control characters shown as escapes (keeps \\t \\n \\r)."""
    return _CONTROL.sub(_show, "" if text is None else str(text))


def terminal(text: object) -> str:
    """Text safe to print on a terminal: every control character but newline and tab escaped (so no
    ANSI sequence, NUL, BEL, C1 control, carriage return or bidi override from an adapter or a
    ledger reaches the screen); each is shown as ``\\xNN`` or ``\\uNNNN``."""
    return _TERMINAL.sub(_show, "" if text is None else str(text))


# ---- how much of it is shown ------------------------------------------------------------------------
# Adapter text on a terminal: every line at most LINE_LIMIT characters once escaped, a block of it
# (a test's failure, captured output) at most BLOCK_LINES lines; what is cut off is counted in a
# marker at the cut.  In results.json (and so in every report) a recorded text is at most
# RECORDED_LIMIT characters, a test's message at most MESSAGE_LIMIT (docs/inputs.md).
LINE_LIMIT = 1000
BLOCK_LINES = 400
RECORDED_LIMIT = 20_000
MESSAGE_LIMIT = 4000
_ESCAPE_AT_END = re.compile(r"\\(?:x[0-9a-f]?|u[0-9a-f]{0,3})?$")  # the start of an escape, cut short


def _cut(s: str, limit: int, marker: str) -> str:
    """``s`` (already escaped) cut to at most ``limit`` characters, ``marker`` (formatted with the
    number of characters cut) included; an escape sequence is never cut in two."""
    if len(s) <= limit:
        return s
    keep = max(0, limit - len(marker.format(n=len(s))))
    head = s[:keep]
    m = _ESCAPE_AT_END.search(head[-6:])
    if m:
        head = head[: len(head) - (len(head[-6:]) - m.start())]
    return head + marker.format(n=len(s) - len(head))


def shown_line(text: object, limit: int = LINE_LIMIT) -> str:
    """Adapter text as one line of a terminal: escaped (see :func:`terminal`), its line breaks and
    tabs made spaces, and cut to ``limit`` characters."""
    s = terminal(text).replace("\n", " ").replace("\t", " ")
    return _cut(s, limit, "… [{n:,} more characters]")


def shown(text: object, limit: int = LINE_LIMIT, max_lines: int | None = BLOCK_LINES) -> str:
    """Adapter text for a terminal, escaped (:func:`terminal`), each line cut to ``limit``
    characters and, with ``max_lines``, the whole cut to that many lines."""
    lines = terminal(text).split("\n")
    out = [_cut(ln, limit, "… [{n:,} more characters]") for ln in (lines if max_lines is None else lines[:max_lines])]
    if max_lines is not None and len(lines) > max_lines:
        out.append(f"… [{len(lines) - max_lines:,} more lines]")
    return "\n".join(out)


def recordable(value: Any, limit: int | None = RECORDED_LIMIT) -> Any:
    """``value`` (JSON-like: dicts, lists, scalars) with every string made fit for results.json: a
    lone surrogate (which UTF-8, hence JSON files, cannot hold) shown as ``\\udXXX`` and a string
    longer than ``limit`` (unless None) cut, with a marker saying how much was cut."""
    if isinstance(value, str):
        s = _SURROGATE.sub(_show, value) if _SURROGATE.search(value) else value
        return s if limit is None else _cut(s, limit, "… [{n:,} more characters]")
    if isinstance(value, dict):
        return {recordable(k, limit) if isinstance(k, str) else k: recordable(v, limit) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [recordable(v, limit) for v in value]
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")


def one_line(text: object, limit: int | None = None) -> str:
    """Collapse all whitespace (newlines included) to single spaces, and optionally shorten."""
    s = " ".join(visible(text).split())
    if limit is not None and len(s) > limit:
        s = s[: max(0, limit - 1)].rstrip() + "…"
    return s


def h(text: object) -> str:
    """HTML-escape text for element content or a quoted attribute value."""
    return html.escape(visible(text), quote=True)


# ---- Markdown ---------------------------------------------------------------------------------------
# Adapter text only ever appears inside code spans: nothing in a code span is a link, an image, HTML or
# emphasis.  What remains to handle is the span's own delimiter (a backtick run), line breaks (which
# would end a table row) and, inside tables, the pipe.

def md_code(text: object, *, table: bool = False, limit: int | None = None) -> str:
    """``text`` as one Markdown code span, safe in running text and (with ``table=True``) in a table cell."""
    s = one_line(text, limit)
    if table:
        s = s.replace("|", "\\|")
    if not s:
        return "` `"
    longest = max((len(run) for run in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or (s.startswith(" ") and s.endswith(" ")) else ""
    return f"{fence}{pad}{s}{pad}{fence}"


_MD_PUNCT = re.compile(r"([\\`*_\[\]<>|~&])")


def md_text(text: object) -> str:
    """Plain text for Markdown prose (for text from the contract, not the adapter): characters that can
    start emphasis, code, links, HTML or break a table are backslash-escaped, whitespace collapsed."""
    return _MD_PUNCT.sub(r"\\\1", one_line(text))


# ---- secrets ---------------------------------------------------------------------------------------
# A password in a URL's user part (redis://:pw@host, postgresql://user:pw@host/db) or in a
# key=value connection string (host=h password=pw) is never shown: messages that name a store or
# a database show it as ***.
_URL_SECRET = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)([^/\s]*)@")
_KV_SECRET = re.compile(r"(?i)\b(password|passwd|pwd)(\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&;]*)")
SECRET_SHOWN = "***"


def without_secrets(text: object) -> str:
    """``text`` with the password of every URL (``scheme://user:PASSWORD@host``) and every
    ``password=...`` setting replaced by ``***``."""
    s = _URL_SECRET.sub(lambda m: f"{m.group(1)}{SECRET_SHOWN}@", "" if text is None else str(text))
    return _KV_SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}{SECRET_SHOWN}", s)


def timings_table(doc: Any) -> str:
    """The ``timings`` of a results document as text (``certify --timings``): the run's wall time,
    then one row per phase with its tests' time, the adapter processes they started and the
    time from spawn to greeting, the time spent ending processes, the wire round trips and their
    mean, and the chaos worker processes; the load average the run ended at (the figures depend
    on it)."""
    import os

    t = doc["timings"]
    lines = [f"timings: wall {t['total_s']:.1f}s, tests {t['tests_s']:.1f}s (summed over workers)"]
    phases = t.get("phases") or {}
    if not phases:
        lines.append("  (the tests recorded no cost: by kind only)")
        for kind, k in sorted(t["by_kind"].items()):
            lines.append(f"  {kind:15} {k['count']:5} tests {k['duration_s']:9.2f}s")
        return "\n".join(lines)
    lines.append(f"  {'phase':15} {'tests':>5} {'time':>9} {'starts':>6} {'start':>8} {'stop':>7} "
                 f"{'round trips':>11} {'rt time':>8} {'per rt':>8} {'workers':>7} {'w.start':>8}")
    total: dict[str, float] = {}
    for name, p in phases.items():
        for k, v in p.items():
            total[k] = total.get(k, 0) + v
        lines.append(_timings_row(name, p))
    lines.append(_timings_row("all", total))
    try:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "unknown"
    lines.append(f"  load average at the end: {load} on {os.cpu_count()} cores")
    return "\n".join(lines)


def _timings_row(name: str, p: Any) -> str:
    rt = int(p["round_trips"])
    per = f"{p['round_trip_s'] / rt * 1e6:6.0f}us" if rt else "       -"
    return (f"  {name:15} {int(p['count']):5} {p['duration_s']:8.2f}s {int(p['starts']):6} {p['start_s']:7.2f}s "
            f"{p['stop_s']:6.2f}s {rt:11} {p['round_trip_s']:7.2f}s {per:>8} {int(p['workers']):7} {p['worker_start_s']:7.2f}s")
