"""The campaign over many mutants and its figures: overall and per class, the floors, Markdown."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ledgercheck.spec import Spec

from .generate import generate, parse_mutant
from .judge import Verdict, judge, observe
from .mutants import CLASS_OF

# ---------------------------------------------------------------------------------------------
# The campaign


@dataclass
class Figures:
    generated: int
    exercised: int
    non_benign: int
    caught: int
    own_caught: int
    benign: int
    benign_flagged: int
    not_fired: int
    control_flagged: int
    seconds: float
    per_class: dict[str, dict[str, int]] = field(default_factory=dict)  # class_figures(rows)

    @property
    def caught_fraction(self) -> float:
        return self.caught / self.non_benign if self.non_benign else 1.0

    @property
    def own_fraction(self) -> float:
        return self.own_caught / self.caught if self.caught else 1.0


FLOOR_CAUGHT = 0.95
FLOOR_OWN = 0.90


def _judge_job(job: tuple[str, bool, float]) -> dict[str, Any]:
    from ledgercheck.spec import default_spec

    name, exhaustive, timeout = job
    spec = default_spec()
    return asdict(judge(spec, parse_mutant(spec, name), exhaustive=exhaustive, timeout=timeout))


def campaign(spec: Spec, *, names: list[str] | None = None, jobs: int = 1, exhaustive: bool = False,
             timeout: float = 10.0, progress: Callable[[str], None] | None = None,
             keep: Mapping[str, dict[str, Any]] | None = None) -> tuple[Figures, list[dict[str, Any]]]:
    """Observe, then judge every exercised mutant (or those named), ``jobs`` at a time.

    ``keep`` (rows of an earlier campaign, by mutant name; ``--resume``) spares judging again a
    mutant that was caught by one of its own clauses, with the same own clauses, by a clause
    test: nothing later in a judgement can change that verdict.  Every other mutant is judged."""
    t0 = time.monotonic()
    say = progress or (lambda s: None)
    every = generate(spec)
    chosen = every if names is None else [m for m in every if m.name in set(names)]
    if names is not None:
        missing = sorted(set(names) - {m.name for m in chosen})
        if missing:
            raise ValueError(f"unknown mutant(s): {', '.join(missing)}")
    say(f"control: the clause tests through the observing proxy ({len(chosen)} mutants generated)")
    sites, control = observe(spec, timeout)
    rows: list[dict[str, Any]] = []
    todo = []
    kept = 0
    for m in chosen:
        old = (keep or {}).get(m.name)
        if m.site is not None and tuple(m.site) not in sites:
            rows.append(asdict(Verdict(m.name, m.family, m.benign, list(m.own), m.what, exercised=False, klass=m.klass)))
        elif old is not None and not m.benign and old.get("own_caught") and old.get("own") == list(m.own) \
                and old.get("fired") and not any(c["test"].startswith("stateful::") for c in old.get("catches", [])):
            rows.append({**old, "klass": m.klass, "resumed": True})
            kept += 1
        else:
            todo.append(m.name)
    if keep is not None:
        say(f"resume: {kept} verdicts (caught by an own clause) kept from the earlier campaign")
    exercised = sum(1 for m in chosen if m.site is None or tuple(m.site) in sites)
    say(f"control: {len(control)} test(s) flagged; {exercised} of {len(chosen)} mutants exercised; "
        f"judging {len(todo)} with {jobs} job(s)")
    results: list[dict[str, Any]] = []
    work = [(n, exhaustive, timeout) for n in todo]
    if jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for i, r in enumerate(pool.map(_judge_job, work), 1):
                results.append(r)
                say(_progress_line(i, len(work), r))
    else:
        for i, job in enumerate(work, 1):
            r = _judge_job(job)
            results.append(r)
            say(_progress_line(i, len(work), r))
    rows += results
    order = {m.name: i for i, m in enumerate(every)}
    rows.sort(key=lambda r: order.get(r["mutant"], 0))
    judged = [r for r in rows if r["exercised"] and r["fired"]]
    bad = [r for r in judged if not r["benign"]]
    good = [r for r in judged if r["benign"]]
    figs = Figures(generated=len(chosen), exercised=len([r for r in rows if r["exercised"]]), non_benign=len(bad),
                   caught=sum(r["caught"] for r in bad), own_caught=sum(r["own_caught"] for r in bad if r["caught"]),
                   benign=len(good), benign_flagged=sum(r["caught"] for r in good),
                   not_fired=len([r for r in rows if r["exercised"] and not r["fired"]]), control_flagged=len(control),
                   seconds=round(time.monotonic() - t0, 1), per_class=class_figures(rows))
    return figs, rows


def class_figures(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Per class of bug (Mutant.klass), the counts the overall figures are made of: generated,
    exercised, did not fire, non-benign judged, caught, caught by an own clause, benign judged and
    benign flagged (a row of an older campaign without a class gets its family's)."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        k = r.get("klass") or ("benign" if r["benign"] else CLASS_OF.get(r["family"], r["family"]))
        c = out.setdefault(k, dict.fromkeys(("generated", "exercised", "not_fired", "non_benign", "caught", "own_caught",
                                             "benign", "benign_flagged"), 0))
        c["generated"] += 1
        if not r["exercised"]:
            continue
        c["exercised"] += 1
        if not r["fired"]:
            c["not_fired"] += 1
        elif r["benign"]:
            c["benign"] += 1
            c["benign_flagged"] += int(bool(r["caught"]))
        else:
            c["non_benign"] += 1
            c["caught"] += int(bool(r["caught"]))
            c["own_caught"] += int(bool(r["caught"] and r["own_caught"]))
    return dict(sorted(out.items()))


def class_floors_missed(f: Figures) -> list[str]:
    """The classes whose rates are below the floors (a class with nothing judged misses none)."""
    bad = []
    for k, c in f.per_class.items():
        if c["non_benign"] and c["caught"] / c["non_benign"] < FLOOR_CAUGHT:
            bad.append(k)
        elif c["caught"] and c["own_caught"] / c["caught"] < FLOOR_OWN:
            bad.append(k)
        elif c["benign_flagged"]:
            bad.append(k)
    return bad


def class_lines(f: Figures) -> list[str]:
    """One line per class: ``fence  caught 16/17 (94.1%)  own 15/16 (93.8%)  benign flagged 0/0 ...``."""
    out = []
    for k, c in f.per_class.items():
        caught = f"{c['caught']}/{c['non_benign']}" + (f" ({c['caught'] / c['non_benign']:.1%})" if c["non_benign"] else "")
        own = f"{c['own_caught']}/{c['caught']}" + (f" ({c['own_caught'] / c['caught']:.1%})" if c["caught"] else "")
        out.append(f"  {k:8} caught {caught:16} own clause {own:16} benign flagged {c['benign_flagged']}/{c['benign']}  "
                   f"({c['generated']} generated, {c['exercised']} exercised, {c['not_fired']} did not fire)")
    return out


def _progress_line(i: int, n: int, r: Mapping[str, Any]) -> str:
    if not r["fired"]:
        state = "did not fire"
    elif r["benign"]:
        state = "FLAGGED" if r["caught"] else "not flagged"
    else:
        state = ("caught by own clause" if r["own_caught"] else "caught, not by its own clause") if r["caught"] else "SURVIVED"
    first = r["catches"][0]["clauses"] if r["catches"] else []
    return f"[{i}/{n}] {r['mutant']}: {state} {', '.join(first)} ({r['seconds']}s)"


def figures_text(f: Figures) -> str:
    return (f"mutants: {f.generated} generated, {f.exercised} exercised by the suite, {f.not_fired} did not fire\n"
            f"caught: {f.caught}/{f.non_benign} non-benign ({f.caught_fraction:.1%}; floor {FLOOR_CAUGHT:.0%})\n"
            f"own clause: {f.own_caught}/{f.caught} of those caught ({f.own_fraction:.1%}; floor {FLOOR_OWN:.0%})\n"
            f"benign flagged: {f.benign_flagged}/{f.benign} (floor 0); control flagged: {f.control_flagged}\n"
            f"time: {f.seconds}s"
            + ("\nper class:\n" + "\n".join(class_lines(f)) if f.per_class else ""))


def floors_hold(f: Figures) -> bool:
    return (f.caught_fraction >= FLOOR_CAUGHT and f.own_fraction >= FLOOR_OWN and f.benign_flagged == 0
            and f.control_flagged == 0 and not class_floors_missed(f))


def markdown(f: Figures, rows: list[dict[str, Any]]) -> str:
    lines = ["# Mutation self-check", "", "```text", figures_text(f), "```", "",
             "| class | generated | exercised | caught | own clause | benign flagged |", "|---|--:|--:|--:|--:|--:|"]
    for k, c in f.per_class.items():
        lines.append(f"| {k} | {c['generated']} | {c['exercised']} | {c['caught']}/{c['non_benign']} | {c['own_caught']}/{c['caught']} | "
                     f"{c['benign_flagged']}/{c['benign']} |")
    lines += ["", "| mutant | class | benign | verdict | first failure names | own clauses | what |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r["exercised"]:
            verdict = "not exercised"
        elif not r["fired"]:
            verdict = "did not fire"
        elif r["benign"]:
            verdict = "**flagged**" if r["caught"] else "not flagged"
        else:
            verdict = ("own clause" if r["own_caught"] else "caught (other clause)") if r["caught"] else "**survived**"
        first = ", ".join(r["catches"][0]["clauses"]) if r["catches"] else ""
        klass = r.get("klass") or ("benign" if r["benign"] else CLASS_OF.get(r["family"], r["family"]))
        lines.append(f"| `{r['mutant']}` | {klass} | {'yes' if r['benign'] else ''} | {verdict} | {first} | "
                     f"{', '.join(r['own'])} | {r['what']} |")
    return "\n".join(lines) + "\n"
