"""A reader's delivery, in memory: the reader core and the policies that ask it.

Offers: ``readercore`` (:class:`~journaled.core.readercore.ReaderCore`: one named reader's memory
queue, open reads, parked items, error counts, done set and counters; it is the only code that
changes them), ``policies`` (size limits, the full policy, expiry, open-read timeouts, dead
letters), ``retry`` (abort with a delay and the retry backoff, release, reject), ``seek`` (where a
reader starts).  Every call is made under the queue lock (the core's ``lock``); the core never
touches a file name, an fsync or a thread.

May import: ``journaled.log`` (read-behind), ``journaled.format``, and the value modules of the
package root (``config``, ``item``, ``deadletter``, ``errors``).
"""
