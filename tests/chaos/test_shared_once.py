"""chaos_support.shared_once: a result the xdist workers share is computed once per test run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from chaos_support import SHARED_DIR
from patience import SAFETY_NET

HERE = Path(__file__).resolve().parent
# each process says it is about to ask, then asks for the same result; computing it leaves a mark
# and lasts until both processes have asked, so the two requests always overlap (however the
# machine schedules the two processes)
CALLER = """
import os, sys, time
sys.path.insert(0, sys.argv[1])
from chaos_support import shared_once

def compute():
    with open(sys.argv[2], "a") as f:
        f.write(f"{os.getpid()}\\n")
    end = time.monotonic() + 600  # a safety net only
    while len(os.listdir(sys.argv[3])) < 2 and time.monotonic() < end:
        time.sleep(0.005)
    return {"by": os.getpid(), "windows": [("point", 1)]}

open(os.path.join(sys.argv[3], str(os.getpid())), "w").close()

print(shared_once("probe", compute))
"""


def _ask_twice(tmp_path: Path, env: dict[str, str]) -> tuple[list[str], list[str]]:
    marks, asking = tmp_path / "marks", tmp_path / "asking"
    asking.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", CALLER, str(HERE), str(marks), str(asking)], env=env,
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=SAFETY_NET)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    return outs, marks.read_text().split()


def test_two_workers_share_one_computation(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    outs, marks = _ask_twice(tmp_path, dict(os.environ, **{SHARED_DIR: str(shared)}))
    assert len(marks) == 1 and outs[0] == outs[1], (marks, outs)
    assert f"'by': {marks[0]}" in outs[0] and "('point', 1)" in outs[0]  # the value as made, tuples kept


def test_without_the_run_directory_each_computes(tmp_path: Path) -> None:
    env = dict(os.environ)
    env.pop(SHARED_DIR, None)
    outs, marks = _ask_twice(tmp_path, env)
    assert len(marks) == 2 and outs[0] != outs[1], (marks, outs)
