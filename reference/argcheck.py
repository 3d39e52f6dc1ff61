"""Argument checks compiled once per Spec: ``ledgercheck.spec.args`` compiles them (the model
uses the same checks); re-exported here for the reference ledger and its tests."""

from __future__ import annotations

from ledgercheck.spec.args import Check, Problem, compile_all, compile_check

__all__ = ["Check", "Problem", "compile_all", "compile_check"]
