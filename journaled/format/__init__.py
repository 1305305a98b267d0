"""The bytes, and nothing but the bytes: journal headers and records, the small CRC'd files,
columnar decoding for Arrow, as pure functions on bytes (no file, no clock, no thread).

Offers: ``record`` (journal headers and records; every format constant, once), ``smallfiles``
(checkpoints and the CRC'd text files), ``columns`` (the Arrow-ready column layout of PUT records),
``fallback`` (the pure-Python references of the compiled twins in ``_speedups.c``, together),
``speedups`` (the one switch between the twins and the references; nothing else imports
``_speedups``).  docs/format.md describes these bytes one by one.

May import: ``journaled.errors`` and the standard library; nothing else of journaled.
"""
