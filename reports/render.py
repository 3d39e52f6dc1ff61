"""Renderers for a results document, and the bundle a run leaves behind.

``write_bundle`` writes results.json first (with its sidecar checksum), then the HTML report that
quotes that file's SHA-256, the Markdown summary and the JUnit XML.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .html_report import render_html
from .junit_report import render_junit
from .markdown_report import render_markdown
from .results import atomic_write, validate_results, write_results
from .summary import verdict_line

__all__ = ["FORMATS", "render_html", "render_junit", "render_markdown", "render_formats", "verdict_line",
           "write_bundle"]

# format name -> (file name in a bundle, bundle key)
FORMATS = {"html": ("report.html", "html"), "md": ("summary.md", "markdown"), "junit": ("junit.xml", "junit")}


def render_formats(doc: Mapping[str, Any], out_dir: str | os.PathLike[str], formats: Iterable[str],
                   results_sha256: str | None = None, since: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Write the chosen renderings of ``doc`` into ``out_dir``; returns bundle key -> path.  ``since``:
    the comparison with the previous run (ledgercheck.reports.history), shown in HTML and Markdown."""
    out = Path(out_dir)
    written: dict[str, str] = {}
    for fmt in formats:
        name, key = FORMATS[fmt]
        if fmt == "html":
            text = render_html(doc, results_sha256, since=since)
        elif fmt == "md":
            text = render_markdown(doc, results_sha256, since=since)
        else:
            text = render_junit(doc)
        path = out / name
        atomic_write(path, text.encode("utf-8"))
        written[key] = str(path)
    return written


def write_bundle(doc: Mapping[str, Any], out_dir: str | os.PathLike[str],
                 since: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Write results.json (+ results.json.sha256), report.html, summary.md and junit.xml into ``out_dir``.

    Returns their paths under the keys ``results``, ``results_sha256``, ``html``, ``markdown``, ``junit``.
    """
    validate_results(doc)
    out = Path(out_dir)
    results = out / "results.json"
    sha = write_results(doc, results)
    paths = {"results": str(results), "results_sha256": str(results) + ".sha256"}
    paths.update(render_formats(doc, out, FORMATS, sha, since=since))
    return paths
