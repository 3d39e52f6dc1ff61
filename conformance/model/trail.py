"""The trail profile's operation: reading an item's event trail."""

from __future__ import annotations

from typing import Any

from .base import Accept, Expectation, ModelBase, Refuse


class TrailOps(ModelBase):
    PROFILE = "trail"

    def _op_events(self, a: dict[str, Any]) -> Expectation:
        wid = a["work_id"]
        if wid not in self.items:
            return Refuse(frozenset({"not_found"}), "core.not_found", f"no work {wid!r}")
        return Accept(lambda res: self._compare_events(wid, res), "core.not_found", "the record exists")
