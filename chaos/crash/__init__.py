"""Crash windows: a worker killed (SIGKILL) or paused at a named crash point, recovery, and the checks of what the contract says a kill there may leave. See docs/chaos.md."""
