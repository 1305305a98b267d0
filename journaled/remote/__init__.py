"""Many processes, one queue: the owner's Unix-socket server and its clients.

Offers: ``protocol`` (frames of a JSON header and raw payload bytes, pure code on bytes),
``transport`` (frames over a socket: the one framing module both ends use), ``contract`` (the
owner's contract: ``ServedQueue``, everything the server uses of the queue it serves, and the
promise "acknowledged to another process = in the OS"), ``server`` (the owner's side: a thread
per connection, open reads per client process), ``handlers`` (what the owner does per request),
``connections`` (a client's pooled connections), ``clientqueue`` (``JournaledQueue(path)`` as a
client of the owner, failover, and the one place that chooses where a request is carried out),
``clientreader`` (a client's readers).

May import: ``journaled.owner``, ``journaled.core``, ``journaled.disk``, ``journaled.format``, and
the package root's faces below the queue (``aio``, ``txn``, ``stats``, ``config``, ``item``,
``errors``); never ``journaled.queue`` (``JournaledQueue`` keeps the contract by shape, checked by
mypy where it passes itself to ``serve``).
"""
