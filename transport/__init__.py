"""The layer adapters and the harness share: the protocol's types (``LedgerError``, ``Outcome``,
``Handshake``, the typed results), the client that drives an implementation (in process or over
the JSON-lines wire), the server that puts an in-process adapter on the wire, the clocks, and
the reaper that cleans up adapter processes.  It imports only ``ledgercheck.spec``; conformance,
chaos, the reference and the fixtures import it (docs/architecture.md)."""
