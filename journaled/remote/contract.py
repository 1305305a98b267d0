"""The owner's contract: what remote/server.py and remote/handlers.py need of the queue they serve.

:class:`ServedQueue` lists every member the server and its request handlers use, and nothing
else; :class:`ServedReader` the same for a reader.  ``JournaledQueue`` (queue.py) satisfies both
(mypy checks it where the queue passes itself to ``serve``), and anything else that does can be
served (tests/remote/test_server.py serves an object that has only these members).  The server
never reaches past them into the queue's journal or its reader cores.

What the owner promises, besides each member's own contract:

* **Acknowledged to another process = in the OS.**  Before a reply acknowledges a put or carries
  an item out of the owner's process, the server calls :meth:`ServedQueue.write_out`, so a
  kill -9 of the owner can neither unmake a put a client was told is stored nor reuse the id of
  an item a client holds (docs/design.md, "Many processes, one queue").
* Every member may be called from any of the server's threads at once, and raises
  :class:`~journaled.QueueClosed` once the queue is closing, without having done anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from journaled.config import ReaderConfig, Start
from journaled.item import Item
from journaled.stats import QueueStats


class ServedReader(Protocol):
    """What the server does with one reader: open reads for a client and settle them.

    Each settle takes the :class:`Item` the owner's ``get_many`` returned (the delivery handle),
    never a bare id: the server keeps each client's open reads by ``(reader, id)`` and passes the
    handle it holds, on the reader object that opened it: once that reader is removed from the
    queue, its settles raise and never bring it back."""

    def get_many(self, max_items: int, timeout: float | None = None, *, block: bool = True) -> list[Item]:
        """Open reads of up to ``max_items`` items: wait (``block``, up to ``timeout`` seconds) for
        the first, ``Empty`` if none comes; then take what else is ready now."""
        ...

    def commit(self, item: Item) -> None:
        """Finish an open read (``UnknownRead`` if it is not open any more)."""
        ...

    def commit_many(self, items: Iterable[Item]) -> None:
        """Commit every item that is an open read; ``UnknownRead`` at the end for the others."""
        ...

    def abort(self, item: Item, delay: float | None = None) -> None:
        """Give an open read back, counting an error (``delay`` seconds before it is delivered
        again; ``None``: the reader's own backoff)."""
        ...

    def release(self, item: Item) -> None:
        """Give an open read back to the head without counting an error."""
        ...

    def reject(self, item: Item, reason: str = "") -> None:
        """Give up on an open read for good (to the reader's ``dead_letter`` if it has one)."""
        ...

    def seek(self, position: Start) -> int:
        """Move the reader (its open reads are taken back first); return the new head."""
        ...


class ServedQueue(Protocol):
    """What the server and its request handlers use of the queue they serve (module docstring)."""

    @property
    def name(self) -> str:
        """The queue's name (told to each client in the reply to its ``hello``)."""
        ...

    @property
    def path(self) -> str:
        """The absolute path of the queue directory, where the socket lives."""
        ...

    @property
    def closed(self) -> bool:
        """True once the queue's close began: a ``QueueClosed`` then tells the client the owner
        is going (it should find the next one)."""
        ...

    def put(self, data: bytes, *, expire_at: float | None = None, ttl: float | None = None) -> int:
        """Append one item, as :meth:`put_many` of it does (a request carrying one item)."""
        ...

    def put_many(
        self,
        items: Sequence[bytes],
        *,
        expire_at: float | None = None,
        ttl: float | None = None,
        not_before: float | None = None,
        headers: Mapping[str, bytes] | None = None,
        keys: Iterable[bytes | None] | None = None,
        producer: tuple[int, int] | None = None,
        dedup: bool = True,
    ) -> list[int]:
        """Append the items with one write, all or nothing; their ids.  Durable on return as the
        sync policy says (not necessarily in the OS: see :meth:`write_out`).  The handlers pass
        the keywords after ``ttl`` only when a request carries them (a served object without
        them serves every request of a client that sends none).  ``producer`` is the client's
        tag (producer id, first sequence): the items whose sequences are already stored are not
        stored again, and their ids are returned where theirs would be.  ``dedup=False`` stores
        keyed items even if their key was put within the queue's dedup window."""
        ...

    def write_out(self) -> None:
        """Return once every record appended so far is in the OS (``write(2)``, no fsync), so a
        kill -9 of this process cannot unmake it.  Called before a reply acknowledges a put or
        hands an item to another process."""
        ...

    def reader(self, name: str, config: ReaderConfig | None = None) -> ServedReader:
        """The reader ``name``, created on first use; ``config`` applies from now on."""
        ...

    def reader_settings(self, name: str) -> dict[str, Any]:
        """An existing reader's stored settings (docs/format.md, section 15)."""
        ...

    def set_reader_settings(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Change only the settings ``changes`` names of an existing reader, stored before it
        returns and applied; every other setting (a sink included) stays."""
        ...

    def readers(self) -> list[str]:
        """Names of the existing readers, sorted."""
        ...

    def remove_reader(self, name: str) -> None:
        """Delete a reader and its checkpoint (``UnknownReader`` if there is none)."""
        ...

    def stats(self) -> QueueStats:
        """A snapshot of the queue, every reader, and the processes the server serves."""
        ...

    def sync(self) -> None:
        """Return once everything put so far is on stable storage."""
        ...


__all__ = ["ServedQueue", "ServedReader"]
