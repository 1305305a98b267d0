"""Reading and mending a queue directory without owning it: what the CLI and Spark use.

Offers: ``scan`` (read-only access safe beside a live owner), ``segments`` (id ranges planned and
read by byte ranges, for Spark's partitions), ``repair`` (``journaled check`` and
``journaled repair``), ``snapshot`` (what a directory's files say of its queue and readers,
with no lock taken: ``journaled stat`` and ``journaled.inspect_queue``; ``NotAQueue``).

May import: ``journaled.log`` (its record walker and recovery plan), ``journaled.disk``,
``journaled.format``, ``journaled.config``, ``journaled.errors``.
"""
