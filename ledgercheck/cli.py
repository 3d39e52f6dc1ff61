"""The `ledgercheck` command line."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from . import __version__

# Each entry adds its own subcommands; modules are imported lazily so one broken optional
# part (or a slow import) does not take the whole command down.
COMMAND_MODULES = [
    "ledgercheck.transport.server",  # first: ``serve`` starts once per adapter process a run opens
    "ledgercheck.spec.commands",
    "ledgercheck.reference.commands",
    "ledgercheck.conformance.commands",
    "ledgercheck.conformance.mutation",
    "ledgercheck.chaos.crash.commands",
    "ledgercheck.chaos.safety.commands",
    "ledgercheck.chaos.safety.history_commands",
    "ledgercheck.reports.commands",
    "ledgercheck.reports.site",
]


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``command``, the modules after the one that adds it are not
    imported (an adapter served as ``exec:ledgercheck serve ...`` starts once per process a test
    opens, so it need not import the chaos and report commands)."""
    parser = argparse.ArgumentParser(prog="ledgercheck", description="Conformance and chaos testing for durable work ledgers.")
    parser.add_argument("--version", action="version", version=f"ledgercheck {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        mod.add_parser(sub)
        if command is not None and command in sub.choices:
            break
    return parser


def keep_byte_code(words: list[str]) -> str | None:
    """``ledgercheck serve`` starts once per adapter process a run opens (over the wire, one for
    every crash window).  Where the environment says not to write byte-code
    (PYTHONDONTWRITEBYTECODE) and names no place for it (PYTHONPYCACHEPREFIX), such a process
    would compile every module of the package it imports at every start, a third of its CPU:
    it keeps them in ledgercheck's cache instead (``$LEDGERCHECK_CACHE/pycache``, by default
    ``~/.cache/ledgercheck/pycache``; nothing is written beside the sources).
    ``LEDGERCHECK_CACHE=off`` leaves the environment's choice alone.  Returns the folder, or None."""
    if not words or words[0] != "serve" or not sys.dont_write_bytecode or sys.pycache_prefix:
        return None
    base = os.environ.get("LEDGERCHECK_CACHE")
    if base == "off":
        return None
    base = base or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                                "ledgercheck")
    sys.pycache_prefix = os.path.join(base, "pycache")
    sys.dont_write_bytecode = False
    return sys.pycache_prefix


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    keep_byte_code(words)
    parser = build_parser(words[0] if words and not words[0].startswith("-") else None)
    args = parser.parse_args(argv)
    try:
        rc = args.func(args)
    except KeyboardInterrupt:
        print("ledgercheck: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
