"""What a results document records about the machine a run happened on."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sqlite3
from pathlib import Path
from typing import Any

MOUNTS = Path("/proc/mounts")
CPUINFO = Path("/proc/cpuinfo")


def _unescape_mount(field: str) -> str:
    # /proc/mounts writes space, tab, newline and backslash in octal (\040, \011, \012, \134).
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def filesystem_type(path: str, mounts_file: Path = MOUNTS) -> str:
    """The type of the filesystem ``path`` lives on, from the longest matching mount point."""
    try:
        target = os.path.realpath(path)
        lines = mounts_file.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "unknown"
    best, best_len = "unknown", -1
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mount = _unescape_mount(parts[1])
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) > best_len:
            best, best_len = parts[2], len(mount)
    return best


def cpu_model(cpuinfo_file: Path = CPUINFO) -> str:
    try:
        for line in cpuinfo_file.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment_info(path_for_fs: str | None = None) -> dict[str, Any]:
    """Interpreter, OS, CPU, SQLite and test-tool versions, and the filesystem of ``path_for_fs``
    (the current directory when not given)."""
    fs_path = os.path.abspath(path_for_fs or os.getcwd())
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "os": f"{platform.system()} {platform.release()}".strip(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "sqlite": sqlite3.sqlite_version,
        "fs_path": fs_path,
        "fs_type": filesystem_type(fs_path),
        "hypothesis": _version("hypothesis"),
        "pytest": _version("pytest"),
    }
