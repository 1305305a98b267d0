"""A clock the tests move by hand, standing in for the ``time`` module of the core's modules
(patched in as their ``time``): expiry, open-read timeouts and retry delays become
deterministic, with no sleeps."""

import time


class FakeClock:
    """``time()``, ``time_ns()`` and ``monotonic()`` that move only by :meth:`advance`."""

    def __init__(self, mono: float | None = None) -> None:
        self.wall = time.time()
        self.mono = time.monotonic() if mono is None else mono

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def time_ns(self) -> int:
        """The wall time in ns: what a put path reads its add times from."""
        return round(self.wall * 1e9)

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


def set_put_clock(monkeypatch, clock) -> None:
    """Make the puts of queues opened from now on take their add times from ``clock``: the put
    path's seam (``owner/putpath.py`` ``CLOCK``, read when a queue's put path is made; a compiled
    module has no ``time`` global to patch) and ``queue.py``'s own ``time``.  For tests that need
    items of a chosen age, not tests of the put path."""
    import importlib

    from journaled.owner import putpath

    monkeypatch.setattr(putpath, "CLOCK", clock)
    monkeypatch.setattr(importlib.import_module("journaled.queue"), "time", clock)
