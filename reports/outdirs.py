"""Output folders that two runs can never share by accident.

A run that picks its own folder (``certify`` without ``--out``) makes a new one named after the
time it started plus a random suffix, ``20261128T162846Z-4f1c9a``: names sort by start time (to
the second), and the folder is made with one ``mkdir`` that fails if the name exists, so two runs
started in the same second (or on hosts sharing a file system) get two folders.

A folder the user names (``certify --out DIR``, ``safety --out DIR``) is held for the whole run
by an advisory lock on the folder itself (``flock``, released when the process ends, however it
ends); a second run naming the same folder while the first still runs is refused in one line
before it starts, instead of overwriting the first run's files.  Runs one after the other may
reuse a folder as before.
"""

from __future__ import annotations

import errno
import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["FolderBusy", "held", "new_run_folder", "stamp"]

SUFFIX_BYTES = 3  # 6 hex digits: 16.7 million names per second


class FolderBusy(Exception):
    """The folder is in use by another run, or cannot be made or locked.  One line."""


def stamp(t: float | None = None) -> str:
    """The UTC start time as a folder name begins: ``20261128T162846Z``."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if t is None else t))


def new_run_folder(parent: str | os.PathLike[str]) -> Path:
    """A new, empty folder under ``parent`` (made if needed) that no other run has: ``<stamp>-<hex>``,
    made atomically (``mkdir`` without ``exist_ok``), a fresh suffix drawn whenever a name is taken."""
    base = Path(parent)
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FolderBusy(f"{base}: cannot make the folder: {exc.strerror or exc}") from None
    while True:
        path = base / f"{stamp()}-{secrets.token_hex(SUFFIX_BYTES)}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise FolderBusy(f"{path}: cannot make the folder: {exc.strerror or exc}") from None
        return path


@contextmanager
def held(path: str | os.PathLike[str], what: str = "run") -> Iterator[Path]:
    """Make ``path`` if needed and hold it for the duration: a second ``held`` of the same folder
    (in this process or another) raises :class:`FolderBusy` at once.  Where the platform has no
    ``flock`` the folder is made and not locked."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise FolderBusy(f"{p}: not a folder") from None
    except OSError as exc:
        raise FolderBusy(f"{p}: cannot make the folder: {exc.strerror or exc}") from None
    try:
        import fcntl
    except ImportError:  # no flock here: the folder is used unlocked
        yield p
        return
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        raise FolderBusy(f"{p}: cannot open the folder: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderBusy(f"{p}: another {what} is writing to this folder now; name another folder "
                             f"(or leave the default, a new folder per run)") from None
        except OSError as exc:  # a file system without locks: used unlocked, as without flock
            if exc.errno not in (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK):
                raise FolderBusy(f"{p}: cannot lock the folder: {exc.strerror or exc}") from None
        yield p
    finally:
        os.close(fd)
