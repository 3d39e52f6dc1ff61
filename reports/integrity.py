"""Canonical hashing and the on-disk form of a results document.

Two hashes protect a results file:

* ``integrity.sha256`` inside the document: SHA-256 of the canonical JSON (sorted keys, no
  whitespace, UTF-8) of the document without its ``integrity`` member.  It survives
  re-indentation and detects any change of content.
* the SHA-256 of the file's bytes, written next to it as ``<name>.sha256`` in ``sha256sum``
  format and embedded in the HTML report, so a reader can tell which file a report was made from.

The file form is deterministic: a given document always serializes to the same bytes, so the
file hash can be computed without writing the file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ledgercheck.spec import canonical_json, sha256_hex

# Top-level members in the order a person reading the file wants them; nested objects are sorted.
TOP_ORDER = ("format", "format_version", "verdict", "exit_code", "certified_profiles", "run", "harness", "spec",
             "adapter", "environment", "profiles", "clauses", "tests", "crash_windows", "timings", "integrity")
SIDECAR_SUFFIX = ".sha256"


def content_sha256(doc: Mapping[str, Any]) -> str:
    """The integrity hash: canonical JSON of everything but ``integrity``."""
    return sha256_hex(canonical_json({k: v for k, v in doc.items() if k != "integrity"}))


def with_integrity(doc: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(doc)
    out["integrity"] = {"sha256": content_sha256(doc)}
    return out


def _sorted(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list | tuple):
        return [_sorted(v) for v in value]
    return value


def file_bytes(doc: Mapping[str, Any]) -> bytes:
    """The exact bytes ``write_results`` puts on disk for ``doc`` (which must carry its integrity)."""
    known = [k for k in TOP_ORDER if k in doc]
    extra = sorted(k for k in doc if k not in TOP_ORDER)
    ordered = {k: _sorted(doc[k]) for k in known + extra}
    text = json.dumps(ordered, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    return text.encode("utf-8")


def bytes_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sidecar_text(sha: str, filename: str) -> str:
    return f"{sha}  {filename}\n"


def parse_sidecar(text: str) -> str | None:
    """The hash from a ``sha256sum`` line, or None if the text is not one."""
    parts = text.strip().split()
    if not parts:
        return None
    sha = parts[0].lower()
    if len(sha) != 64 or any(ch not in "0123456789abcdef" for ch in sha):
        return None
    return sha
