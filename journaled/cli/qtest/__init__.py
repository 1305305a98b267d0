"""``journaled qtest``: load tests that validate every delivery they measure.

Offers: ``main`` (the subcommands), ``args`` (their options and checks), ``run`` (payloads and
the ledger that proves them), ``crash`` and ``crash_worker`` (a child killed with SIGKILL over and
over), ``procs`` and ``procs_worker`` (producers and consumers in many client processes),
``keys`` (item keys, and the key-order check of competing consumers), ``disk`` (bytes on disk).

May import: the package's public face, ``journaled.cli.inspection`` and ``journaled.format``.
"""
