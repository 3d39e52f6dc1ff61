"""Mutation testing of the reference ledger through the wire: does the harness catch a ledger
that is wrong in one small way, and does it name the right clause?

A *mutant* is the reference served over the JSON-lines protocol (as ``ledgercheck serve
reference`` does) with one rewrite of the messages that cross the pipe: a refusal turned into
a success, a returned field dropped or altered, a timing of the contract it runs under shifted
by one clock quantum, an identifier folded to lower case, a stale lease token swapped for the
live one, a list answer reversed...  The operators are not written per case: :func:`generate`
derives them from the contract (its operations, their arguments and result shapes, the event
data each operation writes, the error codes, the timings and limits), so an operation added to
the contract gets mutants of its own.

*Benign* mutants change nothing the contract or the protocol constrains (key order, unknown
extra fields, error messages, optional fields left out, the order of lists whose order is
free, a few milliseconds of delay): the harness must flag none of them.

Each mutant is judged by running the clause tests against it (:func:`judge`); it is *caught*
when a test fails (a clause violation, or an adapter error such as a malformed result), and
caught *by its own clause* when a failure names one of the clauses the contract ties to the
mutated behaviour (:func:`own_clauses`: the clauses whose statements name the error code, the
field, the argument or the timing the operator changes, and the operation).  The campaign
(:func:`campaign`, ``ledgercheck selfcheck mutate``, ``bench/bench_mutation.py``) first runs
the unmutated reference through an observing proxy (a control: it must pass every test), which
also records which operator sites the suite exercises; a generated mutant whose site never
occurs (``get`` never refused with ``stale_lease``) is reported as not exercised, not run.

See docs/selfcheck.md.
"""

from __future__ import annotations

from .cli import add_parser, cmd_list, cmd_mutate, cmd_serve, load_rows  # noqa: F401
from .generate import _GENERATED, _generate, generate, parse_mutant  # noqa: F401
from .judge import Catch, Verdict, _cases, _is_slow, _near_profiles, judge, observe, run_case, run_stateful  # noqa: F401
from .mutants import (  # noqa: F401
    _BY_OP,
    ARG_FAMILIES,
    BENIGN_FAMILIES,
    BENIGN_WHAT,
    CLASS_OF,
    GENERIC_RESULT_WORDS,
    LIMIT_PATHS,
    NO_REFUSAL,
    ORDER_WORDS,
    PASSED_THROUGH,
    PROTOCOL_OWNER,
    REFUSAL_WORDS,
    REPLAY_WORDS,
    SUFFIXES,
    TIMING_KEYS,
    TREE_WORDS,
    Mutant,
    _alter_paths,
    _answer_fields,
    _benign_rewrites,
    _duration_paths,
    _event_clauses,
    _event_fields,
    _forbidden_blames,
    _get_path,
    _in_snapshot,
    _item_schema,
    _list_answers,
    _mentions,
    _object_schema,
    _op_terms,
    _order_bearing,
    _record_clauses,
    _replay_refusal,
    _resolve,
    _result_schema,
    _row_tables,
    _rule_of,
    _said,
    _shapes_within,
    _status_owner,
    _tokens,
    mentions,
    own_clauses,
    unrecorded_option,
)
from .report import (  # noqa: F401
    FLOOR_CAUGHT,
    FLOOR_OWN,
    Figures,
    _judge_job,
    _progress_line,
    campaign,
    class_figures,
    class_floors_missed,
    class_lines,
    figures_text,
    floors_hold,
    markdown,
)
from .server import (  # noqa: F401
    MutantServer,
    _alter,
    _field_enum,
    _field_schema,
    _placeholder,
    _reverse_keys,
    _shift_timing,
    _stale_answer,
    _walk_path,
    address,
    serve_mutant,
)
