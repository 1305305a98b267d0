"""Many processes, one queue: the owner's Unix-socket server and its clients.

Offers: ``protocol`` (frames of a JSON header and raw payload bytes, pure code on bytes),
``server`` (the owner's side: a thread per connection, open reads per client process),
``handlers`` (what the owner does per request), ``connections`` (a client's pooled
connections), ``clientqueue`` (``JournaledQueue(path)`` as a client of the owner, failover),
``clientreader`` (a client's readers).

May import: ``journaled.owner``, ``journaled.core``, ``journaled.disk``, ``journaled.format``, and
the package root's faces below the queue (``aio``, ``txn``, ``stats``, ``config``, ``item``,
``errors``); never ``journaled.queue``.
"""
