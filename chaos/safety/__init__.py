"""Safety campaigns (Jepsen-style): concurrent clients of one ledger under faults, the recorded
history, and the offline checkers of that history.  See docs/safety.md.

Map:

* ``campaign``     the campaign: workers, the schedule, the verdict (``run_campaign``,
                   ``check_history``); the adapter's safety declarations (``Declared``)
* ``workload``     items of work and their steps, from a seed (the crash windows run them too)
* ``nemesis``      the seeded fault schedule and the faults (kill, pause, reopen, partition)
* ``hosts``        network namespaces around a database, for partitions
* ``sink``         the effect sink: which effects really happened (shared with the crash windows)
* ``history``      the history format: records, writer, bounded reader
* ``anomalies``    the checker: anomalies of a history, each with the records that prove it
* ``linearize``    per-item linearizability, with the contract's model as the interpreter
* ``crossitem``    rules between items that no single item's linearization sees
* ``history_sim``  synthetic histories for tests and benchmarks (a small correct ledger; the
                   "contract" helper of issue 34 moves it to the tests)
* ``commands``, ``history_commands``  ``ledgercheck safety`` and ``ledgercheck history check``
"""
