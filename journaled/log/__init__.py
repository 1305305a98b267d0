"""The journal: one queue's append-only files, behind the narrow facade :class:`journal.Journal`.

Offers: ``journal`` (the facade the queue uses), ``state`` (what the parts share: files, next id,
the journal lock; changed only through its own methods), ``opening`` (list, recover and open the
files), ``writer`` (append, rotate, sync), ``cursors`` (read by cursor and by id), ``positions``
(ids, times and sizes from memory), ``retention`` (archiving the files every reader has passed),
``walker`` (THE record walker, with one callback for damage), ``recoveryplan`` (what damage
becomes, per recovery mode).
The log knows nothing of readers: their positions reach it as numbers.

May import: ``journaled.disk``, ``journaled.format``, ``journaled.config``, ``journaled.errors``.
"""
