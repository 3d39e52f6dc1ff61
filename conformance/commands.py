"""`ledgercheck certify` and `ledgercheck replay`."""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from ledgercheck.reports.text import shown_line

from .budgets import PROFILES

EXIT_CERTIFIED, EXIT_FAILED, EXIT_ERROR = 0, 1, 2


def add_parser(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("certify", help="run the conformance suite against an adapter and write a compliance report")
    c.add_argument("--adapter", default="reference", metavar="ADDRESS",
                   help="reference (default), python:MODULE:FACTORY, exec:COMMAND, or an installed adapter name")
    c.add_argument("--profile", default=None, metavar="NAMES", help="comma-separated profiles or profile sets, 'full' for the whole contract (default: every profile the adapter claims)")
    c.add_argument("--spec", action="append", default=[], metavar="FILE", help="contract file (repeat for overlays)")
    c.add_argument("--out", default=None, metavar="DIR", help="report directory (default: a new one per run, reports/out/<adapter>/<start time>-<suffix>)")
    c.add_argument("--hypothesis-profile", default="ci", choices=list(PROFILES), help="stateful test budget")
    c.add_argument("--seed", type=int, default=None, help="seed for the stateful tests (default: random, recorded)")
    c.add_argument("-n", "--workers", default=None, metavar="N", help="run on N processes (pytest-xdist), or 'auto'")
    c.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS", help="per-call adapter timeout (before scaling)")
    c.add_argument("--timeout-scale", type=float, default=1.0, metavar="FACTOR", help="multiply every timeout and wait")
    c.add_argument("--wall-scale", type=float, default=0.01, metavar="FACTOR", help="time scale for wall-clock adapters")
    c.add_argument("--shard", default=None, metavar="K/N", help="run one deterministic shard (merge with `ledgercheck report merge`)")
    c.add_argument("--artifact", default=None, metavar="FILE", help="the tested artifact; its SHA-256 goes into the report")
    c.add_argument("--artifacts", default=".ledgercheck", metavar="DIR",
                   help="where failure traces and replay files go (default .ledgercheck)")
    c.add_argument("--no-chaos", action="store_true", help="skip the crash-window exploration; the recovery clauses only it decides are then reported as errors (not checked), so the recovery profile cannot be certified")
    c.add_argument("--breaker", type=int, default=3, metavar="N",
                   help="stop the run (INCOMPLETE, exit 2) after N tests in a row end in an adapter timeout or crash; 0 never stops (default 3)")
    c.add_argument("-x", "--exitfirst", dest="maxfail", action="store_const", const=1, default=0,
                   help="stop at the first failing test (verdict NOT CERTIFIED, exit status 1; the report lists what was not run)")
    c.add_argument("--maxfail", dest="maxfail", type=int, metavar="N",
                   help="stop after N failing tests (as -x; the first tests are one case of every clause)")
    c.add_argument("-k", dest="keyword", default=None, help="only tests matching this pytest -k expression (the report says so)")
    c.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    c.add_argument("--json", action="store_true", help="print a JSON summary instead of text")
    c.add_argument("--timings", action="store_true",
                   help="print where the run spent its time: per phase, adapter process starts, round trips (also in results.json 'timings'; with --json, under 'timings')")
    c.add_argument("--example-db", default=None, metavar="DIR|redis://HOST:PORT/DB",
                   help="a hypothesis example database shared by shards and runs (default: none)")
    from ledgercheck.reports.commands import add_history_options

    add_history_options(c)
    c.set_defaults(func=cmd_certify)

    r = sub.add_parser("replay", help="replay a saved operation trace against an adapter (no hypothesis needed)")
    r.add_argument("trace", help="trace file written by a failing conformance test")
    r.add_argument("--adapter", default=None, metavar="ADDRESS", help="adapter to replay against (default: the one recorded in the trace when it is an installed "
                        "adapter's name; a recorded exec: or python: address must be named here)")
    r.add_argument("--spec", action="append", default=[], metavar="FILE", help="contract file (repeat for overlays)")
    r.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS", help="per-call adapter timeout")
    r.add_argument("--time-limit", type=float, default=600.0, metavar="SECONDS",
                   help="stop a replay still running after this long (exit 2; default 600)")
    r.add_argument("--steps", action="store_true",
                   help="replay the bare recorded steps, judged by the model, even when the trace names a clause test "
                        "this ledgercheck has (by default that test runs: the same steps and its own checks)")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_replay)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:60] or "adapter"


def _relative(p: Path) -> str:
    """A path as the user would type it from here (relative under the current directory)."""
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def _reproduce(args: argparse.Namespace, seed: int) -> str:
    cmd = ["ledgercheck", "certify", "--adapter", args.adapter, "--seed", str(seed), "--hypothesis-profile", args.hypothesis_profile]
    if args.profile:
        cmd += ["--profile", args.profile]
    for f in args.spec:
        cmd += ["--spec", f]
    if args.timeout_scale != 1.0:
        cmd += ["--timeout-scale", str(args.timeout_scale)]
    if args.shard:
        cmd += ["--shard", args.shard]
    if args.no_chaos:
        cmd.append("--no-chaos")
    if args.keyword:
        cmd += ["-k", args.keyword]
    return " ".join(shlex.quote(c) for c in cmd)


class _Stopped(KeyboardInterrupt):
    """An interrupt outside the suite's own handling (before the plugin took over)."""


def _handle(handler: Any) -> dict[int, Any]:
    """Set ``handler`` for SIGINT and SIGTERM (main thread only); returns the previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}


_SHA256 = re.compile(r"[0-9a-f]{64}")


def artifact_problem(artifact: str | None, handshake: dict[str, Any]) -> str | None:
    """Why the tested artifact's SHA-256 could not go into the report: ``--artifact`` is not a
    readable file, or (without ``--artifact``, whose hash the report uses instead) the adapter's
    handshake gives an ``artifact_sha256`` that is not 64 lowercase hex digits.  None when usable."""
    if artifact is not None:
        try:
            with open(artifact, "rb") as f:
                f.read(1)
        except OSError as exc:
            return f"--artifact {artifact}: cannot read: {exc.strerror or exc}"
        return None
    sha = handshake.get("artifact_sha256")
    if sha is not None and not (isinstance(sha, str) and _SHA256.fullmatch(sha)):
        shown = " ".join(repr(sha).split())
        return (f"the adapter's handshake gives artifact_sha256 {shown[:80]}, which is not 64 lowercase hex digits "
                f"(a SHA-256) or null")
    return None


def cmd_certify(args: argparse.Namespace) -> int:
    """Run the suite; whatever way it ends, nothing the run started is left running.

    Every process the run starts inherits a tag in its environment (reaper.RUN_TAG); when the
    suite is over, any process still carrying it is killed.  SIGINT and SIGTERM stop the run
    once (the plugin handles them while the suite runs) and the verdict is INCOMPLETE."""
    import uuid

    from ledgercheck.services.reaper import RUN_TAG, scratch_parent, sweep

    from .options import keyword_problem, option_problem

    problem = option_problem(timeout=args.timeout, timeout_scale=args.timeout_scale, wall_scale=args.wall_scale,
                             seed=args.seed, shard=args.shard, breaker=args.breaker, workers=args.workers) \
        or keyword_problem(args.keyword) or _paths_problem(args)
    if problem:
        print(f"ledgercheck certify: {problem}", file=sys.stderr)
        return EXIT_ERROR
    tag = uuid.uuid4().hex
    old_tag = os.environ.get(RUN_TAG)
    os.environ[RUN_TAG] = tag
    seen: list[str] = []

    def stop(signum: int, frame: Any) -> None:
        seen.append(signal.Signals(signum).name)
        if len(seen) == 1:
            raise _Stopped(seen[0])

    previous = _handle(stop)
    try:
        # scratch files go under one directory per run, removed after the sweep together with
        # what a killed adapter could not remove itself
        with scratch_parent():
            try:
                return _certify(args, seen)
            except KeyboardInterrupt:
                why = f"interrupted by {seen[0]}" if seen else "interrupted"
                print(f"ledgercheck certify: INCOMPLETE: {why} before the suite produced its results", file=sys.stderr)
                return EXIT_ERROR
            finally:
                if previous:
                    _handle(signal.SIG_IGN)  # the sweep and the scratch removal are not cut short
                sweep(RUN_TAG, tag)
    finally:
        if old_tag is None:
            os.environ.pop(RUN_TAG, None)
        else:
            os.environ[RUN_TAG] = old_tag
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _paths_problem(args: argparse.Namespace) -> str | None:
    """The folders and files certify writes or reads, checked before anything runs."""
    from ledgercheck.reports.text import terminal

    for option, value in (("--out", args.out), ("--artifacts", args.artifacts)):
        if value is None:
            continue
        if not value.strip():
            return f"{option}: empty; name a folder"
        if os.path.exists(value) and not os.path.isdir(value):
            return f"{option} {terminal(value)}: not a folder"
    if args.history is not None and os.path.isdir(args.history):
        return f"--history {terminal(args.history)}: a folder, not a history file"
    if args.artifact is not None and os.path.exists(args.artifact) and not os.path.isfile(args.artifact) \
            and not os.path.isdir(args.artifact):  # (a folder: "cannot read", below)
        # a device or a pipe could be read forever when the run hashes it
        return f"--artifact {terminal(args.artifact)}: not a regular file"
    return None


def _certify(args: argparse.Namespace, seen: list[str]) -> int:
    from ledgercheck.spec import SpecError, load_spec
    from ledgercheck.transport.client import AdapterError, connect

    if args.maxfail is not None and args.maxfail < 0:
        print(f"ledgercheck certify: --maxfail {args.maxfail}: must be 0 (never stop) or more", file=sys.stderr)
        return EXIT_ERROR
    # Fail fast, in one line, on a contract or adapter that cannot even start.
    try:
        spec = load_spec(args.spec or None)
    except SpecError as exc:
        for p in exc.problems:
            print(p, file=sys.stderr)
        return EXIT_ERROR
    if args.profile:
        from ledgercheck.reports.text import terminal

        _, unknown = spec.expand_profiles(p.strip() for p in args.profile.split(",") if p.strip())
        if unknown:
            shown = terminal(", ".join(unknown))
            print(f"ledgercheck certify: --profile: unknown profile(s) {shown[:200]}; the contract has "
                  f"{', '.join(spec.profiles)}" + (f", and the profile set(s) {', '.join(spec.profile_sets)}"
                                                   if spec.profile_sets else ""), file=sys.stderr)
            return EXIT_ERROR
    try:
        probe = connect(args.adapter, spec, timeout=args.timeout * args.timeout_scale, startup_timeout=30 * args.timeout_scale)
        name = probe.handshake.get("name") or "adapter"
        probe.close()
    except AdapterError as exc:  # may carry the adapter's stderr: shown terminal-safe
        print(shown_line(f"ledgercheck certify: {exc}"), file=sys.stderr)
        return EXIT_ERROR
    if args.example_db:
        from .example_db import StoreError, check_store, parse_store

        try:
            check_store(parse_store(args.example_db))
        except StoreError as exc:
            print(f"ledgercheck certify: {exc}", file=sys.stderr)
            return EXIT_ERROR
    problem = artifact_problem(args.artifact, probe.handshake)
    if problem:  # found now, not after the whole suite ran and failed to write its report
        print(f"ledgercheck certify: {problem}", file=sys.stderr)
        return EXIT_ERROR
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    from contextlib import ExitStack

    from ledgercheck.reports.outdirs import FolderBusy, held, new_run_folder

    with ExitStack() as stack:
        # a folder of its own: a new one per run by default, and a named one held for the run, so
        # two runs never write (and record in the history) each other's files
        try:
            out = stack.enter_context(held(args.out if args.out else new_run_folder(Path("reports") / "out" / _slug(name)),
                                           "certify run"))
        except FolderBusy as exc:
            print(f"ledgercheck certify: --out {exc}" if args.out else f"ledgercheck certify: {exc}", file=sys.stderr)
            return EXIT_ERROR
        return _run_suite(args, seen, out, seed)


def _run_suite(args: argparse.Namespace, seen: list[str], out: Path, seed: int) -> int:
    """The suite, its report in ``out`` (held by this run) and its history row."""
    import pytest

    results = out / "results.json"
    if results.exists():
        results.unlink()
    with tempfile.TemporaryDirectory(prefix="ledgercheck-certify-") as empty:
        pyargs = [
            # --assert=plain: verdicts come from the harness, not from rewritten asserts, and
            # rewriting every module of the entry-point plugins (hypothesis's too) costs seconds
            # per process where bytecode is not cached
            empty, "--rootdir", empty, "-p", "no:cacheprovider", "-o", "addopts=", "-o", "testpaths=", "--assert=plain",
            # the suite's entry point by name: loaded even where pytest's plugin autoloading is off
            "-p", "ledgercheck",
            "--ledger-adapter", args.adapter, "--ledger-only", "--ledger-results", str(results),
            "--ledger-hypothesis-profile", args.hypothesis_profile, "--ledger-seed", str(seed),
            "--ledger-timeout", str(args.timeout), "--ledger-timeout-scale", str(args.timeout_scale),
            "--ledger-wall-scale", str(args.wall_scale), "--ledger-reproduce", _reproduce(args, seed),
            "--ledger-artifacts", _relative(Path(args.artifacts).resolve()),
        ]
        for f in args.spec:
            pyargs += ["--ledger-spec", str(Path(f).resolve())]
        if args.profile:
            pyargs += ["--ledger-profile", args.profile]
        if args.shard:
            pyargs += ["--ledger-shard", args.shard]
        if args.artifact:
            pyargs += ["--ledger-artifact-file", str(Path(args.artifact).resolve())]
        if args.no_chaos:
            pyargs.append("--ledger-no-chaos")
        if args.example_db:
            pyargs += ["--ledger-example-db", args.example_db]
        if args.keyword:
            pyargs += ["-k", args.keyword]
        pyargs += ["--ledger-breaker", str(args.breaker)]
        if args.maxfail:
            pyargs += ["--maxfail", str(args.maxfail)]
        if args.workers:
            # long tests (crash points, stateful machines) go to whichever worker is free
            pyargs += ["-p", "xdist", "-n", str(args.workers), "--dist", "worksteal"]
        pyargs += ["-q", "--no-header", "-rN"] if not args.quiet else ["-qq", "--no-header", "-rN", "-p", "no:terminalprogress"]
        if args.json:
            pyargs += ["--capture=sys", "-qq"]
        if args.json:  # stdout carries the JSON summary alone: pytest's own lines go to stderr
            from contextlib import redirect_stdout

            with redirect_stdout(sys.stderr):
                rc = pytest.main(pyargs)
        else:
            rc = pytest.main(pyargs)
    # the suite is over: an interrupt from here on is ignored, so the report it already decided
    # on (INCOMPLETE if it was stopped) is written whole
    _handle(signal.SIG_IGN)
    if not results.exists():
        if seen or rc == pytest.ExitCode.INTERRUPTED:
            why = f"interrupted by {seen[0]}" if seen else "interrupted"
            print(f"ledgercheck certify: INCOMPLETE: {why} before the suite produced its results", file=sys.stderr)
        else:
            print(f"ledgercheck certify: the suite produced no results (pytest exit status {int(rc)})", file=sys.stderr)
        return EXIT_ERROR
    from ledgercheck.reports.render import verdict_line, write_bundle
    from ledgercheck.reports.results import ResultsError, load_results

    try:
        doc = load_results(str(results))
    except ResultsError as exc:
        print(f"ledgercheck certify: {exc}", file=sys.stderr)
        return EXIT_ERROR
    from ledgercheck.reports.commands import history_path
    from ledgercheck.reports.history import record_run

    paths, problem = record_run(history_path(args, out), doc, lambda since: write_bundle(doc, str(out), since=since))
    if problem:
        print(shown_line(f"ledgercheck certify: the run is not recorded in the history: {problem}"), file=sys.stderr)
    line = verdict_line(doc)
    if args.json:
        summary = {"verdict": doc["verdict"], "certified_profiles": doc["certified_profiles"], "exit_code": doc["exit_code"],
                   "line": line, "files": paths, "seed": seed}
        if args.timings:
            summary["timings"] = doc["timings"]
        print(json.dumps(summary, indent=2))
    else:
        print()
        print(shown_line(line))  # it may quote what the adapter said
        for key in ("html", "markdown", "junit", "results", "history"):
            if key in paths:
                print(shown_line(f"  {key:9} {paths[key]}"))
        if args.timings:
            from ledgercheck.reports.text import timings_table

            print()
            print(timings_table(doc))
    return int(doc["exit_code"])


def cmd_replay(args: argparse.Namespace) -> int:
    from ledgercheck.spec import SpecError, load_spec
    from ledgercheck.transport.client import AdapterError, connect

    from .harness import AdapterFailure
    from .trace import (
        TraceError,
        adapter_to_run,
        check_spec,
        check_steps,
        load_trace,
        replay_harness,
        run_replay,
    )

    try:
        doc = load_trace(args.trace)
    except TraceError as exc:
        print(shown_line(f"ledgercheck replay: {exc}"), file=sys.stderr)
        return EXIT_ERROR
    try:
        spec = load_spec(args.spec or None)
    except SpecError as exc:
        for p in exc.problems:
            print(p, file=sys.stderr)
        return EXIT_ERROR
    # everything the file says is checked before an adapter starts
    try:
        check_steps(doc, spec, args.trace)
        address = adapter_to_run(doc.get("adapter"), args.adapter, args.trace)
    except TraceError as exc:
        print(shown_line(f"ledgercheck replay: {exc}"), file=sys.stderr)
        return EXIT_ERROR
    warning = check_spec(doc, spec, args.trace)
    if warning:
        print(shown_line(f"ledgercheck replay: warning: {warning}"), file=sys.stderr)
    try:
        client = connect(address, spec, timeout=args.timeout)
    except AdapterError as exc:
        print(shown_line(f"ledgercheck replay: {exc}"), file=sys.stderr)
        return EXIT_ERROR
    h = replay_harness(client, spec, doc)
    try:
        done = run_replay(h, doc, args.trace, time_limit=args.time_limit, steps_only=args.steps)
    except (TraceError, AdapterFailure) as exc:
        print(shown_line(f"ledgercheck replay: {exc}"), file=sys.stderr)
        return EXIT_ERROR
    finally:
        h.leave_directory()
        client.close()
    found = done.violations
    recorded = doc.get("adapter")
    summary: dict[str, Any] = {"trace": args.trace, "adapter": address, "recorded_adapter": recorded, "steps": len(doc["steps"]),
                               "mode": done.mode, "case": done.case, "listed": done.listed, "recorded_clauses": done.recorded,
                               "reproduced": done.reproduced, "reproduced_clauses": done.again,
                               "inexact": done.inexact, "diverged": done.diverged, "stopped": done.stopped,
                               "violations": [{"clause": v.clause, "op": v.op, "message": v.message} for v in found]}
    against = address if recorded in (None, address) else f"{address} (recorded against {recorded})"
    if args.json:
        print(json.dumps(summary, indent=2))
    else:  # the adapter's answers and the trace's own words are shown escaped and cut
        print(shown_line(done.headline(args.trace, against)))
        for v in found:
            print(shown_line(f"  {v}"))
        if done.diverged:
            print(shown_line(f"  the replay left the recorded run at {done.diverged}"))
        if done.inexact:
            print(shown_line(f"  {done.inexact}"))
    return EXIT_FAILED if found else EXIT_ERROR if done.stopped else EXIT_CERTIFIED
