"""The work-ledger contract: YAML files, their JSON Schema, loader and validator."""

from .contract import (
    Allowance,
    Clause,
    LeaseTimings,
    Operation,
    RetryPolicy,
    Spec,
    Status,
    Transition,
    UnknownClause,
    canonical_json,
    parse_duration,
    sha256_hex,
)
from .load import DEFAULT_MANIFEST, SCHEMA_PATH, Problem, SpecError, default_spec, load_spec

__all__ = [
    "Allowance", "Clause", "DEFAULT_MANIFEST", "LeaseTimings", "Operation", "Problem", "RetryPolicy",
    "SCHEMA_PATH", "Spec", "SpecError", "Status", "Transition", "UnknownClause", "canonical_json", "default_spec",
    "load_spec", "parse_duration", "sha256_hex",
]
