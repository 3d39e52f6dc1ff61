"""ledgercheck.services: the servers and processes the harness launches and reaps.

* ``postgres``  a throwaway PostgreSQL server (the reference's PostgreSQL backend, the library
  adapters, the tests and benchmarks)
* ``redis``     a throwaway redis-server (rq, BullMQ, the example database)
* ``servers``   what both share: one server per process, a watchdog that stops it
* ``reaper``    finding and ending the processes a run started

It imports nothing else of ledgercheck; transport, the reference, chaos, conformance and fixtures
may import it (tests/spec/test_import_cycles.py).
"""
