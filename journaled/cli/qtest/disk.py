"""The bytes a qtest queue takes on disk, so that ``--compression`` shows its effect.

Consumers make the library archive journal files as they go, so the figure is the *peak* of the
queue directory's size: sampled every :data:`PERIOD` seconds by a thread, and at the moments a
test knows the journal holds all its items (``put``: its producers done, nothing consumed yet).
Read from the directory (``os.scandir``), so it works whichever process owns the queue.
"""

from __future__ import annotations

import os
import threading
from types import TracebackType

#: seconds between two samples
PERIOD = 0.1


def directory_bytes(path: str) -> int:
    """Bytes of the regular files in ``path`` now (0 if it is gone); files that vanish while
    counted (archived under us) are skipped."""
    total = 0
    try:
        entries = list(os.scandir(path))
    except OSError:
        return 0
    for entry in entries:
        try:
            if entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return total


class DiskWatch:
    """The peak size of a queue directory over a ``with`` block (and :meth:`sample` calls)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> int:
        """Measure now; returns the peak so far."""
        self.peak = max(self.peak, directory_bytes(self.path))
        return self.peak

    def _loop(self) -> None:
        while not self._stop.wait(PERIOD):
            self.sample()

    def __enter__(self) -> DiskWatch:
        self.sample()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()
