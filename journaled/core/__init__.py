"""A reader's delivery, in memory: the reader core, the rules it applies, and the policies that ask it.

Offers: ``readercore`` (:class:`~journaled.core.readercore.ReaderCore`: one named reader's memory
queue, open reads, parked items, error counts, done set, counters, dirty flag and backlog; the
only code that changes them, through the protocol written at its top), ``retry`` (delay and
backoff of a read that comes back, the clock they run on, the parked items), ``readbehind``
(what the core needs of the journal, and reading its backlog back), ``policies`` (over all of a
queue's readers: room for a put, the background tick), ``seek`` (where a reader starts).  Every
call is made under the queue lock (the core's ``lock``); the core never touches a file name, an
fsync or a thread.  ``readercore`` imports ``retry`` and ``readbehind``; ``policies`` and ``seek``
import ``readercore``; never the other way.

May import: ``journaled.log`` (read-behind), ``journaled.format``, and the value modules of the
package root (``config``, ``item``, ``deadletter``, ``errors``).
"""
