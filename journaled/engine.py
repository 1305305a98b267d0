"""The queue's background work, on two threads that never wait for each other.

* The **maintenance thread** (``journaled-<queue>``) flushes and fdatasyncs the journal under a
  periodic sync policy, runs the time-driven reader policies (open-read timeouts, the expiry
  sweep), writes checkpoints every ``checkpoint_interval``, adopts spool batches and archives
  passed journal files.  No user code runs on it, so a put made under ``sync=0.05`` is flushed
  within one interval whatever a sink does.
* The **sink thread** (``journaled-<queue>-sinks``, started the first time an item is bound for
  an ``expire_to`` / ``dead_letter`` sink) hands such items to their sinks, outside the queue
  lock, then commits them.  A sink may be slow, may raise, and may call back into the queue,
  ``close()`` included.

Locks: the engine takes the queue lock only in short sections (sweeps, collecting and committing
disposals) and ``disposal_lock`` around a whole hand-over pass, so no item reaches a sink twice
in one session.  Neither thread ever holds the queue lock while calling user code or I/O.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from journaled import policies
from journaled.errors import JournaledError, QueueClosed

if TYPE_CHECKING:
    from journaled.delivery import ReaderCore

log = logging.getLogger("journaled")


class Flushable(Protocol):
    """What the maintenance thread needs from the journal."""

    @property
    def dirty(self) -> bool: ...

    def sync(self) -> None: ...


def run_disposals(
    lock: threading.Lock, cores: Sequence[ReaderCore], closing: Callable[[], bool]
) -> int:
    """Hand parked items to their sinks (outside ``lock``, the queue lock), then commit them.

    A sink that raises is logged and its item is committed anyway: a broken sink must not make a
    reader redeliver an item it already decided never to deliver.  A crash between the sink and
    the next checkpoint calls the sink again after reopen (at-least-once).  While the queue is
    closing, a sink raising ``QueueClosed`` (e.g. it is this very queue) leaves its item
    uncommitted instead, so the sink gets it after reopen.  Call with the engine's disposal lock.
    """
    with lock:
        batch = [(c, item, sink) for c in cores for item, sink in c.disposing.values()]
    kept = set()
    for k, (core, item, sink) in enumerate(batch):
        try:
            if callable(sink):
                sink(item)
            else:
                sink.put(item.data)
        except QueueClosed:
            if not closing():
                log.exception("reader %s: sink %r failed for item %d; item dropped", core.name, sink, item.id)
                continue
            log.warning("reader %s: sink %r closed; item %d kept for after reopen", core.name, sink, item.id)
            kept.add(k)
        except Exception:
            log.exception("reader %s: sink %r failed for item %d; item dropped", core.name, sink, item.id)
    with lock:
        for k, (core, item, _sink) in enumerate(batch):
            if k not in kept and core.disposing.pop(item.id, None) is not None:
                core.settle(item)
    return len(batch)


class Engine:
    """The two background threads of one open queue (see the module docstring)."""

    def __init__(
        self,
        name: str,
        lock: threading.Lock,
        cores: Callable[[], Sequence[ReaderCore]],
        journal: Flushable,
        sync_interval: float | None,
        checkpoint_interval: float,
        checkpoint: Callable[[], None],
        maintain: Callable[[], None],
        closing: Callable[[], bool],
    ) -> None:
        self._name = name
        self._lock = lock  # the queue lock
        self._cores = cores  # the current readers' cores (read it under the queue lock)
        self._journal = journal
        self._sync_interval = sync_interval
        self._checkpoint_interval = checkpoint_interval
        self._checkpoint = checkpoint
        self._maintain = maintain  # spool adoption and archiving
        self._closing = closing
        self._stop = threading.Event()
        self._kick = threading.Event()  # wakes the maintenance thread early
        self._sink_kick = threading.Event()  # wakes the sink thread
        self.disposal_lock = threading.Lock()  # one hand-over pass at a time (see run_disposals)
        self._thread = threading.Thread(target=self._run, name=f"journaled-{name}", daemon=True)
        self._sink_thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """Something for the background: a time-driven policy started, or an item is bound for
        a sink.  Safe to call with the queue lock held (it only sets an event)."""
        self._kick.set()
        self._sink_kick.set()

    def on_engine_thread(self) -> bool:
        """Is the caller one of this engine's threads (e.g. a sink calling ``close()``)?"""
        current = threading.current_thread()
        return current is self._thread or current is self._sink_thread

    # ------------------------------------------------------------------ maintenance thread
    def _run(self) -> None:
        interval = self._sync_interval
        next_ckpt = time.monotonic() + self._checkpoint_interval
        while not self._stop.is_set():
            wait = next_ckpt - time.monotonic()
            if interval is not None:
                wait = min(wait, interval)
            with self._lock:
                cores = self._cores()
                timed = any(policies.uses_time_policies(c) for c in cores)
                pending = any(c.disposing for c in cores)
            if timed:
                wait = min(wait, policies.POLICY_TICK)
            if pending:
                self._hand_to_sinks()
            self._kick.wait(max(0.0, wait))
            self._kick.clear()
            if self._stop.is_set():
                return
            try:
                if timed:
                    self.sweep()
                if interval is not None and self._journal.dirty:
                    self._journal.sync()
                if time.monotonic() >= next_ckpt:
                    self._checkpoint()
                    next_ckpt = time.monotonic() + self._checkpoint_interval
                self._maintain()
            except (JournaledError, OSError) as exc:
                log.error("background maintenance of %s failed: %s", self._name, exc)
            except Exception:
                # a bug must not silently end flushing, checkpoints and archiving for good:
                # log it with its traceback and keep the thread alive for the next round
                log.exception("background maintenance of %s failed unexpectedly", self._name)
                self._stop.wait(0.1)  # never spin on a fault that repeats every round

    def sweep(self) -> bool:
        """One round of time-driven policies over every reader; True if items now wait for a
        sink."""
        with self._lock:
            return policies.tick(self._cores())

    # ------------------------------------------------------------------ sink thread
    def _hand_to_sinks(self) -> None:
        # Only the maintenance thread starts the sink thread, and stop() joins the maintenance
        # thread before it looks at the sink thread: no lock needed.
        if self._sink_thread is None:
            self._sink_thread = threading.Thread(
                target=self._run_sinks, name=f"journaled-{self._name}-sinks", daemon=True
            )
            self._sink_thread.start()
        self._sink_kick.set()

    def _run_sinks(self) -> None:
        while True:
            self._sink_kick.wait()
            self._sink_kick.clear()
            if self._stop.is_set():
                return
            try:
                self.dispose_now()
            except Exception:
                log.exception("handing items of %s to their sinks failed", self._name)
                self._stop.wait(0.1)

    def dispose_now(self) -> int:
        """Hand every item bound for a sink to it now, on the calling thread."""
        with self.disposal_lock:
            with self._lock:
                cores = list(self._cores())
            return run_disposals(self._lock, cores, self._closing)

    # ------------------------------------------------------------------ stopping
    def stop(self) -> None:
        """Stop both threads; wait for them unless called from one of them.  Items already bound
        for a sink are then handed over on the calling thread (not from a sink: those stay
        uncommitted and reach their sink after reopen)."""
        self._stop.set()
        self._kick.set()
        self._sink_kick.set()
        here = threading.current_thread()
        if self._thread is not here and self._thread.is_alive():
            self._thread.join()
        sinks = self._sink_thread  # read after the maintenance thread (its only writer) ended
        if sinks is not None and sinks is not here:
            sinks.join()
        if here is not self._sink_thread:
            try:
                self.dispose_now()
            except Exception:
                log.exception("handing items to expire_to/dead_letter sinks on close failed")
