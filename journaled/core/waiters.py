"""What a blocked ``get`` looks like to a reader core: the line of waiters it serves by hand-off."""

from __future__ import annotations

from typing import Protocol

from journaled.item import Item


class Waiter(Protocol):
    """A blocked ``get`` in a core's line: ``deliver(item)`` makes ``item`` its open read and
    wakes it, ``wake()`` wakes it without one (the queue closed); both under the core's lock."""

    def deliver(self, item: Item) -> None: ...
    def wake(self) -> None: ...
