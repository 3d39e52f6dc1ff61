"""``ledgercheck serve`` keeps compiled byte-code in ledgercheck's cache where the environment says
not to write it (it starts once per crash window over the wire), and leaves alone an environment
that names a place for it or turns the cache off (ledgercheck/cli.py keep_byte_code)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HELLO = b'{"id":1,"op":"hello","args":{"protocol":1}}\n'


def _serve(tmp_path: Path, **env: str | None) -> subprocess.CompletedProcess[bytes]:
    e = {k: v for k, v in os.environ.items() if k not in ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE", "LEDGERCHECK_CACHE")}
    e.update({k: v for k, v in env.items() if v is not None})
    out = subprocess.run([sys.executable, "-m", "ledgercheck", "serve", "reference"], input=HELLO, capture_output=True,
                         env=e, cwd=tmp_path, timeout=600)
    assert out.returncode == 0 and b'"ok":true' in out.stdout, out.stderr
    return out


def _compiled(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*.pyc")) if root.exists() else []


def test_serve_keeps_its_byte_code_in_the_cache_where_none_is_written(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _serve(tmp_path, PYTHONDONTWRITEBYTECODE="1", LEDGERCHECK_CACHE=str(cache))
    names = _compiled(cache / "pycache")
    assert any(n.startswith("client.") for n in names) and any(n.startswith("server.") for n in names), names


@pytest.mark.parametrize("how", ["cache off", pytest.param("a prefix named", marks=pytest.mark.thorough)])
def test_serve_leaves_the_environments_choice_alone(tmp_path: Path, how: str) -> None:
    cache = tmp_path / "cache"
    env: dict[str, str | None] = {"PYTHONDONTWRITEBYTECODE": "1", "LEDGERCHECK_CACHE": str(cache)}
    if how == "cache off":
        env["LEDGERCHECK_CACHE"] = "off"
    else:  # (compiles what it imports into a new folder: 2 s)
        env["PYTHONPYCACHEPREFIX"] = str(tmp_path / "theirs")
        env["PYTHONDONTWRITEBYTECODE"] = None
    _serve(tmp_path, **env)
    assert _compiled(cache / "pycache") == []
    if how == "a prefix named":
        assert any(n.startswith("client.") for n in _compiled(tmp_path / "theirs"))
