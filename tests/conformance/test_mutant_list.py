"""The mutant generator's output is the same as it was before conformance/mutation.py became the
package conformance/mutation/ (the list computed on main, commit 6514ccb, in
mutants_at_main.txt): the same mutants in the same order, with the same parameters, benign
flags, own clauses, sites and descriptions (their records' sha256).  Deliberate changes since
(branch classes): an ignored optional argument the contract records in no compared field and no
answer is benign (``unrecorded_option``; eight ``drop_option`` rows), so is a limit the contract
sets as a maximum made smaller (``limit:inbox.drain_max:-``), and a default batch no clause names
is owned by the clause of the read it defaults (``outbox.pending_max``), and an ignored
``work_id`` of an operation that lists a transition (claim's) by ``core.transition.allowed`` too, a
read's ignored filter by the clause the model judges the read by, an ignored argument kept in a
record answers hand back (a log entry's payload) by the clauses of the record (as ``alter``);
no ``row_swap`` or ``limit`` whose contract the contract's checks refuse (two rows, first_seq 0); a
list's order owned by its operation's clauses (``reorder:cancel_tree`` benign: its order is left
open), ``limit:...max_attempts:-`` owning ``retry.schedule`` too, ``replay_stale:requeue`` owning
``lease.version.monotonic`` too (a stale repeat of a move owns the field owners naming the move: claim's
``lease.acquire`` too), and a row swap only the chaos exploration judges benign (five
rows); a changed field of a snapshot answer owned by its operation's ``blame`` (the contract's
clause for what the operation answers) too, each own clause listed once (15 ``alter`` rows, no
clause taken out of any own set).  The families added since
(CLASS_OF, ADDED_SINCE) are left out of the comparison and must be all that is new."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from ledgercheck.conformance import mutation as M
from ledgercheck.spec import default_spec

SAVED = Path(__file__).with_name("mutants_at_main.txt")
ADDED_SINCE = ("replay_refuse", "tree_finished")  # issue 32's classes: a replay refused, a tree walk skipping finished nodes


def test_the_same_mutants_in_the_same_order() -> None:
    head, *rows = SAVED.read_text(encoding="utf-8").splitlines()
    mutants = [m for m in M.generate(default_spec()) if m.family not in ADDED_SINCE]
    assert [m.name + ("  benign" if m.benign else "") for m in mutants] == rows
    digest = hashlib.sha256("\n".join(json.dumps(asdict(m), sort_keys=True) for m in mutants).encode()).hexdigest()
    assert head.endswith(digest), "a mutant's own clauses, site or description changed"


def test_the_added_families_are_generated() -> None:
    got = {m.family for m in M.generate(default_spec())}
    assert set(ADDED_SINCE) <= got
