"""How many examples the stateful hunts need to catch each broken ledger, over several seeds.

tests/conformance/test_broken_ledgers.py's stateful hunts run each broken ledger once, at one
seed and one budget (150 examples, generation only), and ask that the failure names the broken
clause.  One seed says little about a machine: whether a ledger that takes ~100 examples on
average is caught within 150 at seed 0 is a coin flip, and any change to the machine's choices
(rules, arguments, their order) draws it again.  This runs the same hunt (same settings, same
machine family) at every seed given, and prints for each ledger the
examples it took at each seed (machines started, hypothesis' replays of the failing one
included; a ``!`` beyond the test's budget; ``MISS``: not found within the budget; ``WRONG``:
the run failed with something else first, e.g. another clause the ledger also breaks, or an
adapter error).

    python bench/detection_margins.py [--seeds 0,1,2,3] [--budget 150] [--only A,B] [--jsonl out]

The budget defaults to the test's own: hypothesis sizes its draws by the budget it is given, so
a hunt with 300 examples draws other programs than the test's 150 from the same seed (a ledger
caught in 27 examples at 300 can be missed at 150), and only the test's budget says what the test
sees.

Run it in two checkouts (each with its own ``.venv``, from that checkout's root) to compare
machines on the distribution, not on one draw.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from hypothesis import Phase
from ledgercheck.conformance.harness import ClauseFailure, Harness, find_exception
from ledgercheck.conformance.stateful import hypothesis_settings, machine_profiles, make_machine, run_machine
from ledgercheck.spec import default_spec
from ledgercheck.transport.client import connect

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "conformance"), str(ROOT / "tests")]
import test_broken_ledgers as catalogue  # noqa: E402  (the test's own catalogue, families and budget)


def hunt(cls: type, seed: int, budget: int) -> dict[str, Any]:
    """One stateful hunt as the test runs it; the examples it took (machines started)."""
    spec = default_spec()
    family = catalogue._family(cls)
    client = connect(catalogue._address(cls), spec)
    h = Harness(client, spec, machine_profiles(client.profiles, family))
    started = [0]
    fresh = h.fresh

    def counted_fresh() -> Any:
        started[0] += 1
        return fresh()

    h.fresh = counted_fresh  # type: ignore[method-assign]
    opts = hypothesis_settings("dev", database=None, max_examples=budget, phases=(Phase.generate,))
    t0, res = time.perf_counter(), "MISS"
    try:
        run_machine(make_machine(h, only=family), opts, seed)
    except BaseException as e:  # noqa: BLE001 - the run's failure is what is looked at
        failure = find_exception(e, ClauseFailure)
        res = "ok" if failure is not None and cls.BREAKS in failure.clauses else "WRONG"
    finally:
        client.close()
    return {"ledger": cls.__name__, "family": family, "seed": seed, "res": res, "examples": started[0],
            "steps": h.rule_steps, "seconds": round(time.perf_counter() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0,1,2,3")
    ap.add_argument("--budget", type=int, default=catalogue.STATEFUL_BUDGET)
    ap.add_argument("--only", default="", help="comma-separated ledger names (default: every stateful-visible one)")
    ap.add_argument("--jsonl", help="also append each hunt's result to this file")
    a = ap.parse_args()
    only = {n for n in a.only.split(",") if n}
    seeds = [int(s) for s in a.seeds.split(",")]
    ledgers = [c for c in catalogue.CATALOGUE if c.STATEFUL_BLIND is None and (not only or c.__name__ in only)]
    out = open(a.jsonl, "a") if a.jsonl else None  # noqa: SIM115 - kept open for the whole run
    limit = catalogue.STATEFUL_BUDGET
    print(f"examples to catch (test budget {limit}; MISS = not within {a.budget}); seeds {seeds}")
    for cls in ledgers:
        row = []
        for seed in seeds:
            r = hunt(cls, seed, a.budget)
            if out:
                out.write(json.dumps(r) + "\n")
                out.flush()
            row.append(r["res"] if r["res"] != "ok" else str(r["examples"]) + ("!" if r["examples"] > limit else ""))
        print(f"{cls.__name__:30s} " + " ".join(f"{v:>6s}" for v in row), flush=True)


if __name__ == "__main__":
    main()
