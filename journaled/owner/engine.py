"""The queue's background work, on three threads that never wait for each other.

* The **maintenance thread** (``journaled-<queue>``) flushes and fdatasyncs the journal under a
  periodic sync policy, runs the time-driven reader policies (open-read timeouts, the expiry
  sweep) and checks that the queue's directory and current journal file are still there.  No
  user code and no other step runs on it, so a put made under ``sync=0.05`` is flushed within one
  interval whatever a sink, a checkpoint or archiving does.
* The **housekeeping thread** (``journaled-<queue>-house``) writes checkpoints every
  ``checkpoint_interval``, adopts spool batches and archives passed journal files.
* The **sink thread** (``journaled-<queue>-sinks``, started the first time an item is bound for
  an ``expire_to`` / ``dead_letter`` sink) hands such items to their sinks, outside the queue
  lock, then commits them: a callable gets the :class:`~journaled.deadletter.DeadLetter`, a queue
  (``put(bytes)``) its encoded envelope.  A sink may be slow, may raise, and may call back into
  the queue, ``close()`` included.

* The **lease thread** (``journaled-<queue>-lease``, started by :meth:`Engine.watch_directory`)
  renews the owner's lease every ``lease.PERIOD`` seconds (disk/lease.py), so a host can tell a
  live owner on another host from a dead one; once the lease is another host's (or could not be
  renewed for ``lease.EXPIRY`` seconds), the journal is marked gone and refuses writes.  On the
  same tick it looks at ``external/`` (a bookmark that appears or moves makes archiving wanted: a
  queue without readers, whose heads never move, would otherwise never look again) and wakes
  the housekeeping thread, so archiving follows a bookmark or a head within about one period.

Faults that last: each background step (:class:`Step`) that fails is retried with a backoff,
from ``BACKOFF_FIRST`` up to ``BACKOFF_MAX`` seconds, never in a loop; its failure is logged once,
with what to do about it, then summarised at most every ``SUMMARY_EVERY`` seconds, and logged
again when it works again.  :meth:`Engine.health` says what is failing (``stats().health``).
Once the directory is gone, nothing touches the path any more (no checkpoint, spool or
archiving): it may now be somebody else's directory.

Locks: the engine takes the queue lock only in short sections (sweeps, collecting and committing
disposals) and ``disposal_lock`` around a whole hand-over pass, so no item reaches a sink twice
in one session.  No engine thread ever holds the queue lock while calling user code or I/O.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from journaled.core import policies
from journaled.disk import lease, lifecycle
from journaled.disk.bookmarks import BOOKMARK_DIR
from journaled.errors import JournaledError, JournalIOError, QueueClosed, QueueDirectoryGone
from journaled.stats import Health

if TYPE_CHECKING:
    from journaled.core.readercore import ReaderCore
    from journaled.log.journal import Journal

log = logging.getLogger("journaled")


#: A failing step is retried after this many seconds, then twice as long each time, up to
#: ``BACKOFF_MAX``.
BACKOFF_FIRST = 0.1
BACKOFF_MAX = 5.0
#: A failure that lasts is summarised in the log at most this often (seconds).
SUMMARY_EVERY = 60.0
#: Without a periodic flush, the directory is still checked at least this often (seconds).
HOME_CHECK_EVERY = 1.0


class Flushable(Protocol):
    """What the maintenance thread needs from the journal."""

    @property
    def dirty(self) -> bool: ...

    @property
    def poisoned(self) -> JournalIOError | None: ...

    @property
    def poisoned_since(self) -> float | None: ...

    @property
    def gone(self) -> bool: ...

    def sync(self) -> None: ...

    def check_home(self) -> None: ...


def advice(exc: BaseException) -> str:
    """What an operator can do about a background failure (one sentence for the log)."""
    if isinstance(exc, QueueDirectoryGone):
        return (
            "The queue's directory or journal file was removed or replaced: puts are refused; "
            "close this queue, then restore the directory (or reopen it where it was moved)."
        )
    code = getattr(exc, "errno", None)
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        if isinstance(exc, JournalIOError):
            return (
                "The file system is full (or a file size limit was reached): free space, then close "
                "and reopen the queue; it refuses writes until then."
            )
        return "The file system is full (or a file size limit was reached): free space."
    if isinstance(exc, JournalIOError):
        return "The queue refuses writes until it is closed and reopened (after fixing the cause)."
    if code in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "Check the permissions and mount of the queue directory."
    if isinstance(exc, (JournaledError, OSError)):
        return "Check the queue directory."
    return "This is a bug in journaled; please report it with the traceback."


def _clock(wall: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wall))


class Step:
    """One background step's failures: when it may run again (backoff), and what was logged,
    so a failure that lasts is reported once, then summarised (see the module docstring)."""

    def __init__(self, queue: str, name: str) -> None:
        self.queue = queue
        self.name = name
        self.failures = 0  # in a row; 0 while it works
        self.since = 0.0  # wall-clock time of the first of them
        self.retry_at = 0.0  # monotonic: not run again before
        self.delay = 0.0
        self.kind: tuple[type, object] | None = None  # what was reported last (type, errno)
        self.summary_at = 0.0

    def due(self, now: float) -> bool:
        return now >= self.retry_at

    def failed(self, exc: BaseException, now: float) -> None:
        self.failures += 1
        if self.failures == 1:
            self.since = time.time()
        self.delay = min(BACKOFF_MAX, self.delay * 2 if self.delay else BACKOFF_FIRST)
        self.retry_at = now + self.delay
        kind = (type(exc), getattr(exc, "errno", None))
        if kind != self.kind:
            self.kind = kind
            self.summary_at = now + SUMMARY_EVERY
            bug = not isinstance(exc, (JournaledError, OSError))
            log.error(
                "background %s of queue %s failed%s: %s. %s Retried with backoff (up to every %g s); "
                "while it keeps failing it is summarised at most every %g s.",
                self.name,
                self.queue,
                " unexpectedly" if bug else "",
                exc,
                advice(exc),
                BACKOFF_MAX,
                SUMMARY_EVERY,
                exc_info=exc if bug else None,
            )
        elif now >= self.summary_at:
            self.summary_at = now + SUMMARY_EVERY
            log.error(
                "background %s of queue %s still failing: %s times since %s (%s)",
                self.name,
                self.queue,
                f"{self.failures:,}",
                _clock(self.since),
                exc,
            )

    def succeeded(self) -> None:
        if self.failures:
            log.warning(
                "background %s of queue %s works again after %s failures since %s",
                self.name,
                self.queue,
                f"{self.failures:,}",
                _clock(self.since),
            )
        self.failures = 0
        self.delay = self.retry_at = 0.0
        self.kind = None


def run_disposals(
    lock: threading.Lock,
    cores: Sequence[ReaderCore],
    closing: Callable[[], bool],
    told: set[tuple[str, int]] | None = None,
) -> int:
    """Hand parked items to their sinks (outside ``lock``, the queue lock), then commit them.

    A sink that raises is logged and its item is committed anyway: a broken sink must not make a
    reader redeliver an item it already decided never to deliver.  A crash between the sink and
    the next checkpoint calls the sink again after reopen (at-least-once).  A sink raising
    ``QueueClosed`` (a destination queue closed before this one, or this very queue closing) is
    not broken but stopped: its item stays uncommitted, is offered again on the next pass, and
    reaches its sink after reopen at the latest.  ``told`` holds the ``(reader, id)`` of items
    already logged as kept, so a closed destination is said once per item, not once per pass.
    Call with the engine's disposal lock.
    """
    with lock:
        batch = [(c, item, sink) for c in cores for item, sink in c.disposing.values()]
    kept = set()
    for k, (core, item, sink) in enumerate(batch):
        try:
            if callable(sink):
                sink(item)
            elif getattr(sink, "closed", False) is True:  # e.g. a destination still opening
                raise QueueClosed(f"{sink!r} is closed")
            else:
                sink.put(item.encode())
        except QueueClosed:
            kept.add(k)
            if told is None or (core.name, item.id) not in told:
                why = "this queue is closing" if closing() else "it is closed"
                log.warning(
                    "reader %s: sink %r refused item %d (%s); kept, to be handed again (after reopen "
                    "at the latest)",
                    core.name,
                    sink,
                    item.id,
                    why,
                )
                if told is not None:
                    told.add((core.name, item.id))
        except Exception:
            log.exception("reader %s: sink %r failed for item %d; item dropped", core.name, sink, item.id)
    with lock:
        for k, (core, item, _sink) in enumerate(batch):
            if k not in kept:
                core.end_disposal(item)
                if told is not None:
                    told.discard((core.name, item.id))
    return len(batch)


class Engine:
    """The background threads of one open queue (see the module docstring)."""

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
        self._house_kick = threading.Event()  # wakes the housekeeping thread early
        self._sink_kick = threading.Event()  # wakes the sink thread
        self.disposal_lock = threading.Lock()  # one hand-over pass at a time (see run_disposals)
        self._told: set[tuple[str, int]] = set()  # items kept for a closed sink, already logged
        steps = ("directory check", "policies", "flush", "checkpoint", "maintenance", "lease renewal")
        self._steps = {n: Step(name, n) for n in steps}
        self._errors_lock = threading.Lock()  # the two counters below; taken on failures only
        self._errors = 0
        self._last_error: tuple[str, float] | None = None
        self._thread = threading.Thread(target=self._run, name=f"journaled-{name}", daemon=True)
        self._house = threading.Thread(target=self._run_house, name=f"journaled-{name}-house", daemon=True)
        self._sink_thread: threading.Thread | None = None
        self._lease_thread: threading.Thread | None = None
        self._holder: lease.LeaseHolder | None = None  # set by watch_directory, before its thread

    def start(self) -> None:
        self._thread.start()
        self._house.start()

    def wake(self) -> None:
        """Something for the background: a time-driven policy started, or an item is bound for
        a sink.  Safe to call with the queue lock held (it only sets an event)."""
        self._kick.set()
        self._house_kick.set()
        self._sink_kick.set()

    def on_engine_thread(self) -> bool:
        """Is the caller one of this engine's threads (e.g. a sink calling ``close()``)?"""
        current = threading.current_thread()
        return current in (self._thread, self._house, self._sink_thread, self._lease_thread)

    # ------------------------------------------------------------------ faults
    def _attempt(self, name: str, step: Callable[[], object], now: float) -> bool:
        """Run one step unless it is backing off; True if it ran and succeeded."""
        record = self._steps[name]
        if not record.due(now):
            return False
        try:
            step()
        except Exception as exc:
            with self._errors_lock:
                self._errors += 1
                self._last_error = (f"{name}: {exc}", time.time())
            record.failed(exc, now)
            return False
        record.succeeded()
        return True

    def health(self, skipped_entries: tuple[str, ...] = ()) -> Health:
        """Whether the queue accepts writes and its background steps succeed (no I/O);
        ``skipped_entries``: the names of ``external/`` the last archiving pass skipped as not
        regular files (owner/readerfiles.py), which make it not ok."""
        journal = self._journal
        poisoned = journal.poisoned
        failing = tuple(n for n, s in self._steps.items() if s.failures)
        with self._errors_lock:
            errors, last = self._errors, self._last_error
        return Health(
            ok=poisoned is None and not failing and not skipped_entries,
            skipped_entries=skipped_entries,
            poisoned=None if poisoned is None else str(poisoned),
            poisoned_since=None if poisoned is None else journal.poisoned_since,
            directory_gone=journal.gone,
            failing=failing,
            errors=errors,
            last_error=None if last is None else last[0],
            last_error_at=None if last is None else last[1],
        )

    # ------------------------------------------------------------------ maintenance thread
    def _run(self) -> None:
        lifecycle.mark_background()
        interval = self._sync_interval
        idle = interval if interval is not None else min(self._checkpoint_interval, HOME_CHECK_EVERY)
        while not self._stop.is_set():
            wait = idle
            with self._lock:
                cores = self._cores()
                timed = any(policies.uses_time_policies(c) for c in cores)
                pending = any(c.disposing for c in cores)
                due = policies.next_due(cores)
            if timed:
                wait = min(wait, policies.POLICY_TICK)
            if due is not None:  # a parked item's time: blocked gets get it then, not a tick later
                wait = min(wait, max(0.001, due - time.monotonic()))
            if pending:
                self._hand_to_sinks()
            self._kick.wait(wait)
            self._kick.clear()
            if self._stop.is_set():
                return
            now = time.monotonic()
            journal = self._journal
            self._attempt("directory check", journal.check_home, now)
            if timed or due is not None:
                self._attempt("policies", self.sweep, now)
            if interval is not None and journal.dirty and not journal.gone and not self.lease_overdue():
                self._attempt("flush", journal.sync, now)

    def sweep(self) -> bool:
        """One round of time-driven policies over every reader; True if items now wait for a
        sink."""
        with self._lock:
            return policies.tick(self._cores())

    # ------------------------------------------------------------------ housekeeping thread
    def _run_house(self) -> None:
        lifecycle.mark_background()
        interval = self._sync_interval
        checkpoints = self._steps["checkpoint"]
        next_ckpt = time.monotonic() + self._checkpoint_interval
        while not self._stop.is_set():
            # a failing checkpoint waits for its backoff, never for a moment already past
            wait = max(next_ckpt, checkpoints.retry_at) - time.monotonic()
            if interval is not None:
                wait = min(wait, interval)
            self._house_kick.wait(max(0.005, wait))
            self._house_kick.clear()
            if self._stop.is_set():
                return
            now = time.monotonic()
            try:
                # checked here too, right before touching the path: the maintenance thread's
                # tick may be up to one interval old (it is the one that reports the failure)
                self._journal.check_home()
            except OSError:
                next_ckpt = now + self._checkpoint_interval  # the path may not be ours any more
                continue
            if self.lease_overdue():
                continue  # the lease thread first says whether the directory is still ours
            if now >= next_ckpt and self._attempt("checkpoint", self._checkpoint, now):
                next_ckpt = now + self._checkpoint_interval
            self._attempt("maintenance", self._maintain, now)

    # ------------------------------------------------------------------ lease thread
    def watch_directory(
        self, holder: lease.LeaseHolder | None, journal: Journal, want_archiving: Callable[[], None]
    ) -> None:
        """Start the lease thread (module docstring): renew ``holder`` (None: no lease to keep),
        fence ``journal`` once it is lost, and call ``want_archiving`` when a bookmark appears
        or moves.  Call once, after :meth:`start`."""
        self._holder = holder
        self._lease_thread = threading.Thread(
            target=self._run_lease,
            args=(holder, journal, want_archiving),
            name=f"journaled-{self._name}-lease",
            daemon=True,
        )
        self._lease_thread.start()

    def lease_overdue(self) -> bool:
        """The lease was last renewed more than ``lease.EXPIRY`` seconds ago (this process was
        stopped, or renewals fail): another host may own the directory now, so the background
        writes nothing until the lease thread has renewed it or fenced the journal."""
        holder = self._holder
        return holder is not None and time.monotonic() - holder.renewed_at > lease.EXPIRY

    def _run_lease(
        self, holder: lease.LeaseHolder | None, journal: Journal, want_archiving: Callable[[], None]
    ) -> None:
        lifecycle.mark_background()
        marks = _Watched(journal.directory)
        step = self._steps["lease renewal"]
        while not self._stop.wait(lease.PERIOD):
            if journal.gone:
                return  # not ours any more (or removed): nothing here touches the path again
            if holder is not None and not self._renew(holder, journal, step):
                return
            if marks.changed():
                want_archiving()
            # a housekeeping thread asleep for a whole checkpoint_interval would leave archiving
            # that a moved head or bookmark wants waiting that long: one pass a period bounds it
            self._house_kick.set()

    def _renew(self, holder: lease.LeaseHolder, journal: Journal, step: Step) -> bool:
        """One renewal; False once the lease is lost (the journal is then fenced)."""
        now = time.monotonic()
        try:
            holder.renew()
        except lease.LeaseLost as exc:
            self._fence(journal, str(exc))
            return False
        except OSError as exc:
            step.failed(exc, now)
            with self._errors_lock:
                self._errors += 1
                self._last_error = (f"lease renewal: {exc}", time.time())
            stale = now - holder.renewed_at
            if stale > lease.EXPIRY:  # another host may take over from now on: stop writing
                self._fence(journal, f"the lease could not be renewed for {stale:.0f} s ({exc})")
                return False
            return True
        step.succeeded()
        return True

    def _fence(self, journal: Journal, why: str) -> None:
        log.error("queue %s: %s; it refuses writes from now on: close it", self._name, why)
        state, _writer = journal.appending_parts()
        with state.lock:
            state.mark_gone(f"queue directory {journal.directory!r}: {why}", errno.EBUSY)
        self._kick.set()  # the maintenance thread reports it in health()

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
        lifecycle.mark_background()
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
            return run_disposals(self._lock, cores, self._closing, self._told)

    # ------------------------------------------------------------------ stopping
    def stop(self) -> None:
        """Stop both threads; wait for them unless called from one of them.  Items already bound
        for a sink are then handed over on the calling thread (not from a sink: those stay
        uncommitted and reach their sink after reopen)."""
        self._stop.set()
        self._kick.set()
        self._house_kick.set()
        self._sink_kick.set()
        here = threading.current_thread()
        for thread in (self._thread, self._house, self._lease_thread):
            if thread is not None and thread is not here and thread.is_alive():
                thread.join()
        sinks = self._sink_thread  # read after the maintenance thread (its only writer) ended
        if sinks is not None and sinks is not here:
            sinks.join()
        if here is not self._sink_thread:
            try:
                self.dispose_now()
            except Exception:
                log.exception("handing items to expire_to/dead_letter sinks on close failed")


class _Watched:
    """``external/`` as last seen (exists, inode, mtime): a bookmark written or removed there
    renames or unlinks an entry, which changes the directory's mtime."""

    def __init__(self, directory: str) -> None:
        self._path = os.path.join(directory, BOOKMARK_DIR)
        self._seen = self._look()

    def _look(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self._path, follow_symlinks=False)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_nlink

    def changed(self) -> bool:
        now = self._look()
        if now == self._seen:
            return False
        self._seen = now
        return True
