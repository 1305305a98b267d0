"""``journaled qtest --keys N --key-order``: the keys producers give their items, and the check
that a reader with ``ReaderConfig(key_order=True)`` keeps its promises while consumers compete.

The promises checked (docs/design.md, "Key order"), per reader:

- **one open item per key**: a consumer marks the key of an item in flight when ``get`` returns it
  and unmarks it *before* ``commit``/``abort``: the key stays busy in the queue until that call,
  so the next item of the key cannot reach another consumer before the mark is gone, and a mark
  found already set is a real violation, never a race of the check itself;
- **id order per key**: each delivery's id is at least the last delivered id of its key on that
  reader (an abort brings the same id back, so equal is allowed).

Across processes (``put --processes``) the marks cannot be shared; each worker logs when it got
and released each item instead (``time.monotonic``: one clock for every process of the machine)
and :func:`check_intervals` finds the overlaps and order breaks afterwards.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable, Sequence

#: at most this many violation examples are kept for the report
EXAMPLES = 5


def key_bytes(index: int) -> bytes:
    """The key of key number ``index`` (``--keys N``: 0..N-1)."""
    return b"k%d" % index


def choose_keys(rng: random.Random, keys: int, n: int) -> list[bytes | None]:
    """``n`` keys drawn from ``keys`` by ``rng`` (none when ``keys`` is 0: no keys)."""
    if not keys:
        return [None] * n
    return [key_bytes(rng.randrange(keys)) for _ in range(n)]


class KeyOrderCheck:
    """Live key-order checks of the competing consumers of one or more readers (thread safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.in_flight: dict[tuple[str, bytes], int] = {}  # (reader, key) -> id open now
        self.last: dict[tuple[str, bytes], int] = {}  # (reader, key) -> last delivered id
        self.concurrent = 0  # a key's item delivered while another of that key was open
        self.out_of_order = 0  # a key's item delivered after a later one of that key
        self.checked = 0
        self.examples: list[str] = []

    def got(self, reader: str, key: bytes | None, item_id: int) -> None:
        """A consumer of ``reader`` got item ``item_id`` with ``key``: mark it in flight."""
        if key is None:
            return
        slot = (reader, key)
        with self._lock:
            self.checked += 1
            open_id = self.in_flight.get(slot)
            if open_id is not None:
                self.concurrent += 1
                self._example(f"reader {reader}: key {key!r}: id {item_id} delivered while id {open_id} open")
            last = self.last.get(slot)
            if last is not None and item_id < last:
                self.out_of_order += 1
                self._example(f"reader {reader}: key {key!r}: id {item_id} delivered after id {last}")
            self.in_flight[slot] = item_id
            self.last[slot] = item_id

    def release(self, reader: str, key: bytes | None, item_id: int) -> None:
        """The consumer is about to commit or abort ``item_id``: unmark its key (before the call)."""
        if key is None:
            return
        with self._lock:
            if self.in_flight.get((reader, key)) == item_id:
                del self.in_flight[(reader, key)]

    def reopened(self, reader: str) -> None:
        """The queue was closed and reopened: the reads left open came back, their keys free."""
        with self._lock:
            for slot in [s for s in self.in_flight if s[0] == reader]:
                del self.in_flight[slot]

    def _example(self, text: str) -> None:
        if len(self.examples) < EXAMPLES:
            self.examples.append(text)

    def errors(self) -> list[str]:
        """The violations as validation errors (none: an empty list)."""
        return violation_errors(self.concurrent, self.out_of_order, self.examples)

    def figures(self) -> dict[str, int]:
        """For the result: deliveries with a key checked, and the violations of each rule."""
        return {"checked": self.checked, "concurrent": self.concurrent, "out_of_order": self.out_of_order}


def violation_errors(concurrent: int, out_of_order: int, examples: Sequence[str]) -> list[str]:
    """Validation error lines for key-order violations."""
    if not concurrent and not out_of_order:
        return []
    head = (
        f"key order: {concurrent} deliveries while an item of the same key was open, "
        f"{out_of_order} deliveries after a later item of the same key"
    )
    return [head, *(f"key order: {e}" for e in examples)]


def check_intervals(
    reader: str, deliveries: Iterable[tuple[float, float, bytes, int]], check: KeyOrderCheck
) -> None:
    """Feed ``check`` the deliveries of competing consumers in other processes, each
    ``(got_at, released_at, key, id)`` on the shared monotonic clock, in the order they happened:
    a get marks, a release unmarks (a release and a get at the same instant: the release first)."""
    events: list[tuple[float, int, bytes, int]] = []
    for got_at, released_at, key, item_id in deliveries:
        events.append((got_at, 1, key, item_id))
        events.append((released_at, 0, key, item_id))
    for _at, kind, key, item_id in sorted(events, key=lambda e: (e[0], e[1])):
        if kind:
            check.got(reader, key, item_id)
        else:
            check.release(reader, key, item_id)
