"""Safety campaigns: concurrent clients of one ledger under faults, the recorded history, and the offline checker of that history. See docs/safety.md."""
