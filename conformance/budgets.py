"""Stateful test budgets by name (light to import: the CLI and the plugin list them as choices)."""

from __future__ import annotations

PROFILES = {
    # a quick look, for test runs against slow (wall-clock) implementations: every rule is driven,
    # far fewer programs are tried, and a failing program is reported as found, not shrunk (against
    # a wall clock, shrinking sleeps through hypothesis' whole five-minute shrink allowance);
    # reports record the budget a run used
    "smoke": {"max_examples": 5, "stateful_step_count": 30, "shrink": False},
    "ci": {"max_examples": 40, "stateful_step_count": 50},
    "dev": {"max_examples": 150, "stateful_step_count": 60},
    "thorough": {"max_examples": 2000, "stateful_step_count": 100},
}
