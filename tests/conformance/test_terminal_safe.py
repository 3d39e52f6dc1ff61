"""certify's terminal output never carries raw control bytes from an adapter: its messages are shown
with escapes (docs/results.md: terminal-safe output)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# every C0 control but newline and tab, DEL, C1 controls (as UTF-8), bidi embeddings/overrides/isolates/marks
RAW = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\x8e\x8f\xaa-\xae]|\xe2\x81[\xa6-\xa9]|\xd8\x9c")


def test_certify_shows_adapter_control_bytes_escaped(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run(
        [sys.executable, "-m", "ledgercheck", "certify", "--adapter", "python:adapters_terminal:ControlBytes",
         "--profile", "cancel", "--no-chaos", "-k", "cancel.immediate", "--out", str(tmp_path / "out"),
         "--artifacts", str(tmp_path / "art")],
        cwd=tmp_path, env=env, capture_output=True, timeout=600)
    assert proc.returncode in (1, 2), proc.stderr[-2000:]
    both = proc.stdout + proc.stderr
    assert b"cancel refused" in proc.stdout, proc.stdout[-2000:]  # the adapter's message is shown ...
    assert not RAW.search(both), both[RAW.search(both).start() - 80:][:200]  # ... never raw ...
    for shown in (rb"\x1b[2J", rb"\x1b]0;owned\x07", rb"\x00", rb"\x9b31m", rb"\u202e", rb"\u2066", rb"\x0d"):
        assert shown in proc.stdout, shown  # ... but visibly
