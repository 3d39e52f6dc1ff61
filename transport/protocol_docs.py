"""The operation reference of docs/protocol.md, generated from the contract.

``ledgercheck protocol docs`` writes it into the page and ``ledgercheck protocol reference`` prints it
(transport/server.py); tests/protocol/test_docs.py fails when the page is stale.  The result shapes
it lists are the wire's (:func:`ledgercheck.transport.wire.result_types`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ledgercheck.spec import Spec

from .wire import result_types


def arg_type_text(spec: Spec, typ: str) -> str:
    """What a value of a contract argument type looks like on the wire."""
    def one_of(names: Any) -> str:
        return "one of " + ", ".join(f"`{n}`" for n in names)

    table = {
        "string": "string",
        "nonempty_string": "string, not blank",
        "time": "number (seconds)",
        "duration": "number of seconds > 0",
        "object": "JSON object",
        "any": "any JSON value",
        "boolean": "boolean",
        "positive_int": "integer >= 1",
        "nonnegative_int": "integer >= 0",
        "source_system": "string, " + one_of(spec.source_systems),
        "priority": f"integer in [{spec.priority_min}, {spec.priority_max}], default {spec.priority_default} (lower runs first)",
        "retry_policy": "object with any of `max_attempts`, `initial_backoff`, `multiplier`, `max_backoff`, `jitter`",
        "status": "string, a status",
        "terminal_status": "string, " + one_of(spec.terminal_statuses),
        "waiting_kind": "string, " + one_of(spec.waiting_statuses),
        "error_class": "string, an error class of the contract",
        "step_class": "string, " + one_of(spec.step_classes),
        "receipt_state": "string, " + one_of(spec.receipt_states),
        "effect_key": "string, 64 lowercase hex digits (sha256)",
    }
    return table.get(typ, typ)


def _type_text(s: Any) -> str:
    if not isinstance(s, Mapping) or not s:
        return "any"
    if "$ref" in s:
        name = s["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name})"
    if "anyOf" in s:
        return " or ".join(_type_text(x) for x in s["anyOf"])
    if "enum" in s:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in s["enum"])
    t = s.get("type")
    if t == "array":
        return f"array of {_type_text(s.get('items'))}"
    if isinstance(t, list):
        return " or ".join(t)
    return str(t)


def _shape_rows(s: Mapping[str, Any]) -> list[str]:
    if s.get("type") != "object" or "properties" not in s:
        return [f"Shape: {_type_text(s)}."]
    req = set(s.get("required", []))
    rows = ["| field | type | required |", "|---|---|---|"]
    for name, sub in s["properties"].items():
        rows.append(f"| `{name}` | {_type_text(sub)} | {'yes' if name in req else 'no'} |")
    return rows


def reference_markdown(spec: Spec) -> str:
    """The generated part of docs/protocol.md: operations, result shapes, errors, rules tables."""
    types = result_types(spec)
    out: list[str] = []
    w = out.append
    w(f"Generated from contract `{spec.name}` {spec.version} by `ledgercheck protocol docs` "
      "(`ledgercheck protocol reference` prints it); a test fails when this section is stale.")
    w("")
    w("### Operations")
    w("")
    w("Session operations (`hello`, `reset`) belong to no profile; every adapter answers them. "
      "An adapter answers `unsupported` for operations it does not offer (see [Operations of profiles you do not claim]"
      "(#operations-of-profiles-you-do-not-claim)).")
    groups: dict[str | None, list[str]] = {}
    for name, op in spec.operations.items():
        groups.setdefault(op.profile, []).append(name)
    order = [None, *[p for p in spec.profiles if p in groups]]
    for prof in order:
        w("")
        if prof is None:
            w("#### Session")
        else:
            p = spec.profiles[prof]
            needs = f" Requires: {', '.join(p.requires)}." if p.requires else ""
            w(f"#### Profile `{prof}`")
            w("")
            w(f"{p.description}{needs}")
        for name in groups[prof]:
            op = spec.operations[name]
            w("")
            w(f"##### `{name}` → [{op.returns}](#{op.returns})")
            w("")
            facts = [f"kind: {op.kind}"]
            if op.requires_lease:
                facts.append("the caller presents the live lease `token` (fencing)")
            if op.lease:
                facts.append(f"lease: {op.lease}")
            if op.event:
                ev = op.event if isinstance(op.event, str) else ", ".join(f"{k} → `{v}`" for k, v in op.event.items())
                facts.append(f"event: `{ev}`" if isinstance(op.event, str) else f"event by target status: {ev}")
            edges = spec.edges_of(name)
            if edges:
                facts.append("moves " + ", ".join(f"{t.src} → {t.dst}" + (f" (if {t.guard})" if t.guard else "") for t in edges))
            w("; ".join(facts) + ".")
            if op.args:
                w("")
                w("| argument | type | required |")
                w("|---|---|---|")
                for a in op.args.values():
                    w(f"| `{a.name}` | {arg_type_text(spec, a.type)} | {'yes' if a.required else 'no'} |")
    w("")
    w("### Result shapes")
    for name, s in types.items():
        w("")
        w(f"#### {name}")
        w("")
        if s.get("description"):
            w(s["description"])
            w("")
        out.extend(_shape_rows(s))
    w("")
    w("### Error codes")
    w("")
    w("| code | definite | meaning |")
    w("|---|---|---|")
    docs = spec.document.get("errors", {})
    for code, definite in spec.errors.items():
        desc = (docs.get(code) or {}).get("description", "")
        w(f"| `{code}` | {'yes' if definite else 'no'} | {desc} |")
    w("")
    w("### Statuses")
    w("")
    w("| status | initial | terminal | leased | waiting kind |")
    w("|---|---|---|---|---|")
    for st in spec.statuses.values():
        w(f"| `{st.name}` | {'yes' if st.initial else ''} | {'yes' if st.terminal else ''} | "
          f"{'yes' if st.leased else ''} | {st.waiting_kind or ''} |")
    w("")
    w("### Transitions")
    w("")
    w("Every pair not listed is refused with `invalid_transition` and writes nothing.")
    w("")
    w("| from | to | operations | guard |")
    w("|---|---|---|---|")
    for t in spec.transitions:
        w(f"| `{t.src}` | `{t.dst}` | {', '.join(f'`{o}`' for o in t.ops)} | {t.guard or ''} |")
    w("")
    w("### Events")
    w("")
    w("Transition events carry `from_status`/`to_status`; the others carry `null` in both. "
      "`data` holds these snapshot fields, with their values after the event.")
    w("")
    w("| type | transition | data |")
    w("|---|---|---|")
    for e in spec.events.values():
        w(f"| `{e.name}` | {'yes' if e.transition else 'no'} | {', '.join(f'`{d}`' for d in e.data)} |")
    w("")
    w("### Work snapshot fields")
    w("")
    w("| field | type | nullable |")
    w("|---|---|---|")
    for f in spec.work_fields.values():
        w(f"| `{f.name}` | {f.type} | {'yes' if f.nullable else 'no'} |")
    return "\n".join(out) + "\n"
