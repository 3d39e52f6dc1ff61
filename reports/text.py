"""Making adapter-supplied text safe for every output: HTML, Markdown, XML and the terminal.

Names, versions, error messages, stderr tails and counterexamples come from the ledger under test
and may contain anything.  Control characters are never dropped silently: they are shown as
``\\xNN`` (or ``\\uNNNN``) so a reader sees that they were there, and so the text is valid XML 1.0
and cannot move a terminal's cursor.
"""

from __future__ import annotations

import html
import re

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
