"""The bytes, and nothing but the bytes: journal headers and records, the small CRC'd files,
columnar decoding for Arrow, as pure functions on bytes (no file, no clock, no thread).

Offers: ``record`` (journal headers and records; every format constant, once), ``smallfiles``
(checkpoints and the CRC'd text files), ``columns`` (PUT records into Arrow-ready buffers),
``speedups`` (the one switch between the compiled twins in ``_speedups.c`` and their pure-Python
references).  docs/format.md describes these bytes one by one.

May import: ``journaled.errors`` and the standard library; nothing else of journaled.
"""
