"""Realistic results documents built from the shipped contract, and a real headless Chromium."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ledgercheck.reports.results import build_results
from ledgercheck.spec import Spec, default_spec, rules

if os.path.dirname(os.path.abspath(__file__)) not in sys.path:  # helpers beside the tests (timeline_support)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ADAPTER_CLAIMS = ["core", "trail", "cancel", "lease", "waiting", "retry", "idempotency", "eventlog", "recovery"]
FAILING = "lease.fencing"
KNOWN_BUG = "retry.cap"
SHOULD_FAILING = "core.claim.order"
WINDOW_CLAUSES = ["recovery.matrix", "recovery.effects_allowed"]
BAD_WINDOW = ("after_submit_before_record", "non_idempotent_with_lookup")

COUNTEREXAMPLE = """\
state = LedgerMachine()
w0 = state.create(source_system='conversation', source_id='c-1', now=0.0)
t1 = state.claim(owner='worker-a', now=1.0)
state.advance_clock(seconds=76.0)
t2 = state.claim(owner='worker-b', now=77.0)
state.close_out(work_id=w0, token=t1, status='done', now=78.0)
state.teardown()"""


class Factory:
    """Builds results documents the way the conformance plugin and the chaos runner would."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec

    def run(self, **over: Any) -> dict[str, Any]:
        argv = ["ledgercheck", "certify", "--adapter", "exec:./bin/acme-ledger --stdio", "--seed", "1234",
                "--hypothesis-profile", "ci", "--timeout-scale", "2"]
        r = {"id": "run-7f3a9c", "kind": "certify", "started_at": "2025-03-14T09:26:53.000Z",
             "finished_at": "2025-03-14T09:31:05.500Z", "command": " ".join(argv[:3]) + " 'exec:./bin/acme-ledger --stdio'"
             " --seed 1234 --hypothesis-profile ci --timeout-scale 2", "argv": argv, "cwd": "/src/acme-ledger",
             "seed": 1234, "hypothesis_profile": "ci", "timeout_scale": 2.0, "shard": None, "workers": 2}
        r.update(over)
        return r

    def adapter(self, **over: Any) -> dict[str, Any]:
        a = {"address": "exec:./bin/acme-ledger --stdio", "transport": "wire", "name": "acme-ledger",
             "version": "2.4.1", "protocol": "1.0", "profiles": list(ADAPTER_CLAIMS),
             "capabilities": {"clock": "injected", "durable": True, "concurrent": True},
             "crash_points": list(self.spec.crash_points),
             "known_bugs": {KNOWN_BUG: "the backoff cap is applied before jitter; fixed in 2.5"},
             "artifact_sha256": "5f" * 32}
        a.update(over)
        return a

    def environment(self) -> dict[str, Any]:
        return {"python": "3.11.7", "implementation": "CPython", "platform": "Linux-6.1-x86_64-with-glibc2.36",
                "os": "Linux 6.1", "machine": "x86_64", "cpu_model": "AMD EPYC 7763 64-Core Processor",
                "cpu_count": 4, "sqlite": "3.40.1", "fs_path": "/tmp/ledgercheck", "fs_type": "ext4",
                "hypothesis": "6.100.0", "pytest": "8.2.0"}

    def exercised(self, skip: Iterable[tuple[str, str, str]] = (), unoffered: Iterable[tuple[str, str, str]] = (),
                  claimed: Iterable[str] = ADAPTER_CLAIMS) -> dict[str, list[str]]:
        """What a test that drove the item through every transition of the contract the claimed
        profiles reach records (as the harness does): every (from, operation, to) but ``skip``,
        those answered unsupported (``unoffered``), and a few calls."""
        skip, claimed = set(skip), set(claimed)
        moves = [m for m in rules.moves(self.spec) if m not in skip and self.spec.operations[m[1]].profile in claimed]
        return {"transitions": [" ".join(m) for m in moves], "not_offered": [" ".join(m) for m in unoffered],
                "calls": ["- create accepted", "queued claim accepted", "done claim refused"]}

    def tests(self, claimed: Iterable[str] = ADAPTER_CLAIMS, outcomes: Mapping[str, list[str]] | None = None,
              known_bugs: Iterable[str] = (KNOWN_BUG,), failing: Iterable[str] = (FAILING, SHOULD_FAILING),
              exercised: Mapping[str, list[str]] | None = None) -> list[dict[str, Any]]:
        """One to three tests per clause.  Outcomes: ``outcomes[clause]`` if given; skipped as not claimed
        for profiles the adapter does not claim; expected failures for known bugs; a failure (with a
        shrunk counterexample and a replay command) for ``failing``; passes otherwise.  ``exercised``:
        what the stateful run records it exercised (for a document that records coverage)."""
        claimed, outcomes, known, failing = set(claimed), dict(outcomes or {}), set(known_bugs), set(failing)
        out = []
        for ci, c in enumerate(self.spec.clauses):
            n = 1 + (ci * 7) % 3
            if c.id in outcomes:
                plan = outcomes[c.id]
            elif c.profile not in claimed:
                plan = ["skipped"] * n
            elif c.id in known:
                plan = ["xfailed"] * n
            elif c.id in failing:
                plan = ["passed"] * (n - 1) + ["failed"]
            else:
                plan = ["passed"] * n
            stem = c.id.replace(".", "_")
            for i, o in enumerate(plan):
                nodeid = f"tests/conformance/test_{c.profile}.py::test_{stem}[case{i}]"
                t: dict[str, Any] = {"nodeid": nodeid, "clause": c.id, "kind": "clause", "outcome": o,
                                     "not_claimed": o == "skipped" and c.profile not in claimed,
                                     "duration_s": round(0.004 + ((ci * 37 + i * 11) % 97) / 40.0, 3)}
                if o in ("failed", "error"):
                    t["message"] = (f"AssertionError: {c.id}: renew with the stale token of worker-a was accepted "
                                    "after worker-b took over (expected stale_lease)")
                    t["counterexample"] = COUNTEREXAMPLE
                    t["replay"] = f"ledgercheck replay --adapter exec:./bin/acme-ledger --clause {c.id} --seed 1234"
                elif o == "xfailed":
                    t["message"] = "delay 61.0s is above the cap 60.0s"
                elif o == "skipped" and not t["not_claimed"]:
                    t["message"] = "needs an injected clock"
                out.append(t)
        # a stateful run names a clause only when it finds one violated
        out.append({"nodeid": "ledger::stateful[core-machine]", "clause": None, "kind": "stateful",
                    "outcome": "passed", "duration_s": 41.7, **({"exercised": dict(exercised)} if exercised else {})})
        return out

    def windows(self, bad: Iterable[tuple[str, str]] = (BAD_WINDOW,)) -> list[dict[str, Any]]:
        bad = set(bad)
        out = []
        for pi, point in enumerate(self.spec.crash_points):
            for ci, cls in enumerate(self.spec.step_classes):
                entry = self.spec.matrix[cls][point]
                allow = self.spec.allowances[entry.effects]
                w: dict[str, Any] = {"point": point, "step_class": cls, "occurrence": 1, "clauses": list(WINDOW_CLAUSES),
                                     "decision_observed": entry.decision, "effects_observed": allow.min,
                                     "final_status": "done", "verdict": "pass", "seed": 1000 + pi * 10 + ci,
                                     "duration_s": round(0.8 + (pi * 5 + ci) % 7 / 3, 3)}
                if (point, cls) in bad:
                    w.update(decision_observed="retry", effects_observed=2, verdict="fail",
                             message=f"recovery chose retry for a {cls} step killed {point}; the provider applied "
                                     f"the write twice", replay=f"ledgercheck chaos replay --point {point} "
                                     f"--step-class {cls} --occurrence 1 --seed {w['seed']}",
                             replay_file=f"reports/out/replays/{point}-{cls}-1.json")
                out.append(w)
        return out

    def build(self, *, tests: list[dict[str, Any]] | None = None, windows: list[dict[str, Any]] | None = None,
              requested: Iterable[str] | None = None, run: Mapping[str, Any] | None = None,
              adapter: Mapping[str, Any] | None = None, record_coverage: bool = False,
              safety: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
        return build_results(run=dict(run or self.run()), spec=self.spec, adapter=dict(adapter or self.adapter()),
                             environment=self.environment(), tests=self.tests() if tests is None else tests,
                             crash_windows=self.windows() if windows is None else windows,
                             requested_profiles=None if requested is None else list(requested),
                             record_coverage=record_coverage, safety=safety)

    def certified(self) -> dict[str, Any]:
        """Everything claimed passes, no known bugs: CERTIFIED."""
        return self.build(tests=self.tests(known_bugs=(), failing=()), windows=self.windows(bad=()),
                          adapter=self.adapter(known_bugs={}))

    def covered(self, *, skip: Iterable[tuple[str, str, str]] = (), unoffered: Iterable[tuple[str, str, str]] = (),
                failing: Iterable[str] = (), drop: Iterable[str] = (), **kw: Any) -> dict[str, Any]:
        """A run that records its coverage: everything claimed passes (but ``failing``), every
        transition was reached but ``skip`` (``unoffered``: answered unsupported), and the clauses
        ``drop`` ran no case (their tests deselected)."""
        drop = set(drop)
        tests = [t for t in self.tests(known_bugs=(), failing=failing, exercised=self.exercised(skip, unoffered))
                 if t["clause"] not in drop]
        return self.build(tests=tests, windows=self.windows(bad=()), adapter=self.adapter(known_bugs={}),
                          record_coverage=True, **kw)


@pytest.fixture(scope="session")
def spec() -> Spec:
    return default_spec()


@pytest.fixture(scope="session")
def factory(spec: Spec) -> Factory:
    return Factory(spec)


@pytest.fixture(scope="session")
def realistic() -> dict[str, Any]:
    """NOT CERTIFIED: a MUST failure, a known bug, a SHOULD failure, a failing crash window, two
    profiles not claimed.  Shared: tests must not modify it (they deep-copy)."""
    return Factory(default_spec()).build()


# ---- Chromium --------------------------------------------------------------------------------------

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--mute-audio"]


def find_chromium() -> str | None:
    env = os.environ.get("LEDGERCHECK_CHROMIUM")
    if env:
        return env
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class Chromium:
    binary: str

    def _run(self, *args: str, done: Callable[[], bool] | None = None) -> subprocess.CompletedProcess[str]:
        """Chromium once, tried again when it hangs.  Headless Chromium, on a loaded machine, now and
        then never exits (seen once in ~50 runs, with its screenshot written or not); so a run that
        has not ended after HANG_S is killed and run again, up to ATTEMPTS times, and a screenshot
        run whose PNG is complete (``done``) is taken without waiting for Chromium's own exit."""
        last = ""
        for _ in range(ATTEMPTS):
            with tempfile.TemporaryDirectory(prefix="ledgercheck-chromium-") as profile:
                with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
                    cmd = [self.binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
                    proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, start_new_session=True)
                    end = time.monotonic() + HANG_S
                    rc = None
                    while rc is None and time.monotonic() < end:
                        try:
                            rc = proc.wait(timeout=0.2)
                        except subprocess.TimeoutExpired:
                            if done is not None and done():
                                rc = 0  # the screenshot is whole: what Chromium does next is not needed
                    if proc.poll() is None:
                        _kill_group(proc)
                    out.seek(0)
                    err.seek(0)
                    if rc is not None:
                        return subprocess.CompletedProcess(cmd, rc, out.read(), err.read())
                    last = err.read()[-800:]
        raise AssertionError(f"chromium did not exit in {ATTEMPTS} attempts of {HANG_S:.0f}s each: {last}")

    def dump_dom(self, url: str) -> str:
        proc = self._run("--dump-dom", url)
        assert proc.returncode == 0, f"chromium --dump-dom failed ({proc.returncode}): {proc.stderr[-800:]}"
        return proc.stdout

    def console(self, url: str) -> tuple[str, list[str]]:
        """The page's DOM and every message its console printed (errors, CSP violations, logs)."""
        proc = self._run("--enable-logging=stderr", "--v=0", "--dump-dom", url)
        assert proc.returncode == 0, f"chromium --dump-dom failed ({proc.returncode}): {proc.stderr[-800:]}"
        return proc.stdout, [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]

    pixel = staticmethod(lambda data, x, y: png_pixel(data, x, y))

    def screenshot(self, url: str, out: Path, width: int, height: int) -> tuple[int, int]:
        out.unlink(missing_ok=True)
        proc = self._run(f"--screenshot={out}", f"--window-size={width},{height}", url,
                         done=lambda: png_complete(out))
        assert proc.returncode == 0 and out.exists(), f"chromium --screenshot failed: {proc.stderr[-800:]}"
        return png_size(out.read_bytes())


ATTEMPTS = 3
HANG_S = 180.0  # a Chromium run longer than this is taken as hung (a render takes 1-5 s, ~60 s at load 30)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def png_complete(path: Path) -> bool:
    """Whether ``path`` holds a whole PNG (its IEND chunk written)."""
    try:
        data = path.read_bytes()
    except OSError:
        return False
    return data[:8] == b"\x89PNG\r\n\x1a\n" and data[-12:-8] == b"\x00\x00\x00\x00" and data[-8:-4] == b"IEND"


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def png_pixel(data: bytes, x: int, y: int) -> tuple[int, int, int]:
    """The RGB colour at (x, y) of an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes)."""
    pos, idat = 8, b""
    width = depth = color = interlace = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, _, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
    bpp = 3 if color == 2 else 4
    stride = width * bpp
    raw = zlib.decompress(idat)
    prev = bytearray(stride)
    for row in range(y + 1):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 0xFF
        prev = line
    return prev[x * bpp], prev[x * bpp + 1], prev[x * bpp + 2]


MISSING_CHROMIUM = ("Chromium is required for the HTML report tests and was not found: install it with "
                    "`apt-get install -y chromium` (CI does), or set LEDGERCHECK_CHROMIUM to a Chromium binary")


def require_chromium() -> Chromium:
    """A usable Chromium, or a test failure that says how to get one (never a silent skip)."""
    binary = find_chromium()
    if binary is None or not os.access(binary, os.X_OK):
        pytest.fail(MISSING_CHROMIUM + (f" ({binary} is not executable)" if binary else ""), pytrace=False)
    return Chromium(binary)


@pytest.fixture(scope="session")
def chromium() -> Chromium:
    return require_chromium()


@pytest.fixture
def chromium_finder() -> tuple[Any, str]:
    """The lookup the ``chromium`` fixture uses, and its failure message (to test that it fails loudly)."""
    return require_chromium, MISSING_CHROMIUM
