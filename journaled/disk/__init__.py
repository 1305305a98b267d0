"""Every syscall and every file name: the file-operation seam, the names of the files in a queue
directory, the directory lock, the process's life (exit, fork), group commit, and the small
durable files (checkpoints and the registry, external bookmarks, spool batches and their ledger,
the durable settings).

Offers: ``fileio`` (every open/write/fsync/rename/unlink goes through it, never through a
symbolic link), ``layout``, ``dirlock``, ``lifecycle``, ``groupcommit``, ``checkpointfiles``,
``bookmarks``, ``spoolfiles``, ``settingsfile``.

May import: ``journaled.format``, ``journaled.errors``, ``journaled.config``, ``journaled.item``.
"""
