"""Crash windows: a worker killed (SIGKILL) or paused at a named crash point, then recovery, then
the checks of what the contract says a kill there may leave.  See docs/chaos.md.

Map (what each module holds, in the order a window runs through them):

* ``points``       the worker's crash points and stages, lined up with the contract's
                   (spec/contract/recovery.yaml); ``ChaosError``
* ``worker``       the worker process: plays an agent runtime against the ledger, hits the points
* ``forkserver``, ``_warm``, ``pool``  warm worker processes: forked from a server that imported
                   everything once; how the harness kills, pauses and talks to them
* ``scenario``     one window end to end: kill at a point, recover, finish, check
* ``checker``      what must be true after that kill (the contract's journal and recovery matrix)
* ``exploration``  every point x every occurrence of it in a workload's run
* ``storms``, ``limits``  many workers on one ledger under random kills; what a storm may ask for
* ``replays``, ``rerun``  replay files of a failing window or storm; running one again
* ``leases``, ``lease_worker``  kill or pause processes that hold a lease (adapters without a
                   journal or an injected clock); the lease worker's process entry point
* ``powerloss``    SQLite crash states where unsynced writes are gone
* ``commands``     ``ledgercheck crash ...``

The effect sink and the workloads the windows run are shared with the safety campaigns and live
in ``ledgercheck.chaos.safety`` (``sink``, ``workload``).
"""
