"""What the process that owns a queue directory runs besides delivery: background work, each
reader's durable state, closing, and adopting spool batches.

Offers: ``engine`` (maintenance, housekeeping and sink threads), ``readerfiles`` (checkpoint
files, the registry, archiving decisions), ``reopen`` (what a reopened queue learns from its
readers' checkpoints), ``closing`` (how an open queue ends), ``adoption`` (spool batches, exactly
once).

May import: ``journaled.core``, ``journaled.log``, ``journaled.disk``, ``journaled.format``, and
the package root's ``stats``, ``config``, ``item``, ``errors``.
"""
