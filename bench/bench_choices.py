"""Hypothesis choices a stateful step costs: rule selection, arguments, and the engine's own.

Runs the lifecycle machine against the reference in process (the ``ci`` budget, as
bench_conformance.py does) for each seed given, and counts every choice hypothesis draws
(``ConjectureData._draw``), split into those that choose a rule (the feature flags, the
rejection-sampled and fall-back draws of ``RuleStrategy``), those that draw the chosen rule's
arguments, and all the others (the step loop's own boolean, and the engine replaying, mutating
and simulating choice sequences in its data tree for the target phase and for generation).
A seed's figure depends on the handful of examples it explores (the target phase runs copies of
the one with the best coverage), so compare sums over several seeds.

    python bench/bench_choices.py [--seeds 7,1,2,3,4] [--no-target]

It counts by wrapping two hypothesis internals (6.1xx: ``ConjectureData._draw`` and
``RuleStrategy.do_draw``); it works in a checkout older than the transport layer too, so it can
be run with another checkout's ``.venv`` from that checkout's root.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import Any

import hypothesis.stateful as hs
from hypothesis import Phase
from hypothesis.internal.conjecture import data as conjecture
from ledgercheck.conformance.harness import Harness
from ledgercheck.conformance.stateful import hypothesis_settings, machine_profiles, make_machine, run_machine
from ledgercheck.spec import default_spec

try:
    from ledgercheck.transport.client import connect
except ImportError:  # a checkout older than the transport layer
    from ledgercheck.conformance.client import connect  # type: ignore[no-redef]


class Counting:
    """Counts every choice drawn, and those drawn inside rule selection and argument draws."""

    def __init__(self) -> None:
        self.reset()
        draw, counter = conjecture.ConjectureData._draw, self

        def counted_draw(data: Any, *a: Any, **kw: Any) -> Any:
            counter.total += 1
            return draw(data, *a, **kw)

        def do_draw(strategy: Any, data: Any) -> Any:
            n0 = counter.total
            strategy._feature_flags = data.draw(strategy.enabled_rules_strategy)
            rule = data.draw(strategy._enabled_rules_strategy)
            n1 = counter.total
            arguments = {k: data.draw(s) for k, s in rule.arguments_strategies.items()}
            name = rule.function.__name__
            counter.select[name] += n1 - n0
            counter.args[name] += counter.total - n1
            counter.steps[name] += 1
            return rule, arguments

        conjecture.ConjectureData._draw = counted_draw  # type: ignore[method-assign]
        hs.RuleStrategy.do_draw = do_draw  # type: ignore[method-assign]

    def reset(self) -> None:
        self.total = 0
        self.select: Counter[str] = Counter()
        self.args: Counter[str] = Counter()
        self.steps: Counter[str] = Counter()


def run(counting: Counting, seed: int, examples: int, target: bool) -> dict[str, Any]:
    counting.reset()
    spec = default_spec()
    client = connect("reference", spec)
    try:
        h = Harness(client, spec, machine_profiles(client.profiles, "lifecycle"))
        over: dict[str, Any] = {} if target else {"phases": (Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink)}
        run_machine(make_machine(h, only="lifecycle"), hypothesis_settings("ci", database=None, max_examples=examples, **over), seed)
    finally:
        client.close()
    steps = sum(counting.steps.values())
    select, args = sum(counting.select.values()), sum(counting.args.values())
    return {"seed": seed, "steps": steps, "choices": counting.total, "select": select, "args": args,
            "engine": counting.total - select - args, "rules": dict(counting.steps.most_common())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="7", help="comma-separated seeds (default 7, as bench_conformance.py)")
    ap.add_argument("--examples", type=int, default=40)
    ap.add_argument("--no-target", action="store_true", help="leave the target phase out (generation alone)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    counting = Counting()
    rows = [run(counting, int(s), a.examples, not a.no_target) for s in a.seeds.split(",")]
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    for r in rows:
        s = max(r["steps"], 1)
        print(f"seed {r['seed']:3d}  steps {r['steps']:5d}  choices {r['choices']:6d} ({r['choices'] / s:5.1f}/step)  "
              f"selection {r['select'] / s:4.1f}  arguments {r['args'] / s:4.1f}  engine {r['engine'] / s:5.1f}")
    steps = sum(r["steps"] for r in rows)
    for key in ("choices", "select", "args", "engine"):
        print(f"all seeds: {key:8s} {sum(r[key] for r in rows) / max(steps, 1):5.1f} a step")


if __name__ == "__main__":
    main()
