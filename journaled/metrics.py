"""Prometheus metrics for journaled queues (the optional extra ``journaled[metrics]``).

A program that already exposes ``prometheus_client`` metrics adds its queues::

    from journaled.metrics import register
    register(q)                    # on prometheus_client's default registry

and ``journaled serve PATH... --metrics HOST:PORT`` serves ``/metrics`` for the queues it owns.

Nothing is counted on the put/get path: :class:`QueueCollector` is a custom collector that calls
``q.stats()`` on each of its queues when it is scraped and turns the snapshot into metric
families (docs/metrics.md lists them, with their kestrel and OpenTelemetry names).  So a scrape
costs one ``q.stats()`` per queue -- the queue lock held for a few microseconds per reader -- and
works the same in a process that is a client of the queue's owner: its ``stats()`` asks the owner.

A queue that is closed is dropped from the collector at the next scrape (its series end, as
when a target goes away); a queue whose stats cannot be read (its owner gone and the hand-over
still under way) reports ``journaled_queue_up 0`` and nothing else until they can be.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Protocol

try:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry
    from prometheus_client.utils import floatToGoString
except ImportError as exc:  # pragma: no cover - the extra is installed wherever tests run
    raise ImportError("journaled.metrics needs prometheus_client: pip install 'journaled[metrics]'") from exc

from journaled.disk.bookmarks import read_bookmarks
from journaled.disk.layout import inspect_journal, list_journal_files
from journaled.errors import JournaledError, QueueClosed
from journaled.format.display import escape
from journaled.stats import QueueStats, ReaderStats, Turns

log = logging.getLogger("journaled")

__all__ = ["QueueCollector", "register", "unregister"]


class Observed(Protocol):
    """What the collector needs of a queue: a :class:`~journaled.JournaledQueue` in the owning
    process or in a client process."""

    @property
    def name(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    def stats(self) -> QueueStats: ...


# (metric name without the prefix, help, the ReaderStats field) -- in exposition order
READER_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("backlog_items", "Uncommitted items, open reads included (the lag).", "backlog_items"),
    (
        "backlog_bytes",
        "Payload bytes of the uncommitted items (over-estimated after reopen).",
        "backlog_bytes",
    ),
    ("waiting_items", "Items neither committed, open nor on their way to a sink.", "items_waiting"),
    ("waiting_bytes", "Payload bytes of the waiting items.", "bytes_waiting"),
    ("memory_items", "Waiting items held in memory.", "items_in_memory"),
    ("memory_bytes", "Payload bytes of the waiting items held in memory.", "bytes_in_memory"),
    ("disk_items", "Waiting items only on disk (read back later).", "items_on_disk"),
    ("disk_bytes", "Payload bytes of the waiting items only on disk.", "bytes_on_disk"),
    ("open_reads", "Reads handed out and not yet committed or aborted.", "open_reads"),
    ("open_bytes", "Payload bytes of the open reads.", "bytes_open"),
    ("delayed_items", "Aborted items waiting out a retry delay.", "items_delayed"),
    ("not_due_items", "Items held back until their not_before.", "items_not_due"),
    (
        "behind_key_items",
        "Waiting items held back by key order: an earlier item of their key is open or held back.",
        "items_behind_keys",
    ),
    ("waiters", "Calls blocked in get on this reader.", "waiters"),
)
READER_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("put_items", "Items put since the reader was created.", "put"),
    ("delivered_items", "Items handed out by get (again after an abort).", "delivered"),
    ("committed_items", "Items committed.", "committed"),
    ("aborted_items", "Reads aborted, timed-out ones included.", "aborted"),
    ("timed_out_items", "Open reads aborted by open_read_timeout.", "timed_out"),
    ("expired_items", "Items removed by expiry (max_age, expire_at).", "expired"),
    ("discarded_items", "Items discarded because the reader was full.", "discarded"),
    ("dead_lettered_items", "Items sent to the dead letter sink (max_errors).", "dead_lettered"),
    ("rejected_items", "Items given up on with reader.reject.", "rejected"),
    (
        "lost_to_retention_items",
        "Uncommitted items archived by the queue's retention before this reader read them "
        "(counted by the owner since it opened the queue).",
        "items_lost_to_retention",
    ),
)
READER_LABELS = ["queue", "reader"]
Family = GaugeMetricFamily | CounterMetricFamily


class Adds(Protocol):
    """What a queue's samples are added to: a metric family, or :class:`_Pending`."""

    def add_metric(self, labels: Sequence[str], value: float) -> None: ...


class _Pending:
    """One queue's samples of one family, held until all of its samples were made."""

    def __init__(self) -> None:
        self.added: list[tuple[Sequence[str], float]] = []

    def add_metric(self, labels: Sequence[str], value: float) -> None:
        self.added.append((labels, value))


class QueueCollector(Collector):
    """A ``prometheus_client`` collector for any number of queues, computed at scrape time.

    Register it once (``registry.register(collector)``, or :func:`register`) and :meth:`add`
    queues to it; a queue's label is its name, so two queues of one name are refused
    (``ValueError``).  ``add`` of a closed queue raises :class:`~journaled.errors.QueueClosed`;
    a queue closed later is dropped at the next scrape.
    """

    def __init__(self, queues: Iterable[Observed] = ()) -> None:
        self._lock = threading.Lock()  # a leaf: guards _queues and _health only
        self._queues: dict[str, Observed] = {}
        # queue name -> (health state last seen, when it was first seen)
        self._health: dict[str, tuple[tuple[bool, bool, bool], float]] = {}
        for q in queues:
            self.add(q)

    def add(self, queue: Observed) -> None:
        """Report ``queue`` from the next scrape on."""
        if queue.closed:
            raise QueueClosed(f"queue {queue.name!r} is closed: nothing to report")
        name = queue.name
        with self._lock:
            known = self._queues.get(name)
            if known is not None and known is not queue:
                raise ValueError(f"a queue named {name!r} is reported already (the label must differ)")
            self._queues[name] = queue

    def remove(self, queue: Observed) -> None:
        """Stop reporting ``queue`` (nothing if it is not reported)."""
        name = queue.name
        with self._lock:
            if self._queues.get(name) is queue:
                del self._queues[name]
                self._health.pop(name, None)

    @property
    def queues(self) -> list[Observed]:
        """The queues reported, by name."""
        with self._lock:
            return [self._queues[n] for n in sorted(self._queues)]

    def describe(self) -> Iterator[Metric]:
        """The metric families with no samples: what a registry checks names against, without
        asking any queue for its stats."""
        return iter(_families().values())

    def collect(self) -> Iterator[Metric]:
        """One ``q.stats()`` per queue, turned into metric families (called by each scrape)."""
        families = _families()
        for key, rows in self._rows().items():
            family = families[key]
            for labels, value in rows.added:
                family.add_metric(labels, value)
        return (f for f in families.values() if f.samples)

    def exposition(self) -> bytes:
        """What ``generate_latest`` writes for a registry holding only this collector, byte for
        byte (the Prometheus text format, version 0.0.4), written straight from the snapshots.

        It skips prometheus_client's sample objects and its generic formatting (about twice as
        fast at thousands of readers), and gives the other threads of the process their turn
        (:class:`~journaled.stats.Turns`) about every millisecond, so that a scrape of a queue
        with thousands of readers does not hold the GIL for long stretches (docs/design.md,
        "The cost of a scrape")."""
        out: list[str] = []
        turns = Turns()
        rows = self._rows(turns)
        # one reader's labels are the same list object in each of its families: written once
        label_text: dict[tuple[tuple[str, ...], tuple[str, ...]], str] = {}
        for key, kind, name, text, labelnames in _SPECS:
            added = rows[key].added
            if not added:
                continue
            shown = name + "_total" if kind == "counter" else name
            doc = text.replace("\\", r"\\").replace("\n", r"\n")
            out.append(f"# HELP {shown} {doc}\n# TYPE {shown} {kind}\n")
            order = sorted(range(len(labelnames)), key=labelnames.__getitem__)
            for labels, value in added:
                values = tuple(labels)
                text_ = label_text.get((labelnames, values))
                if text_ is None:  # label names sorted, as prometheus_client writes them
                    text_ = label_text[labelnames, values] = ",".join(
                        f'{labelnames[i]}="{_label_value(values[i])}"' for i in order
                    )
                out.append(f"{shown}{{{text_}}} {_go_float(value)}\n")
                turns.tick()
        return "".join(out).encode("utf-8")

    def _rows(self, turns: Turns | None = None) -> dict[str, _Pending]:
        """Every queue's samples, by family key (what :meth:`collect` and :meth:`exposition`
        write out); a queue's stats are asked for once per call.  ``turns``: tick it per reader."""
        families = {key: _Pending() for key, *_rest in _SPECS}
        now = time.time()
        for q in self.queues:
            if q.closed:
                self.remove(q)
                continue
            try:
                st = q.stats()
            except QueueClosed:
                self.remove(q)
                continue
            except (JournaledError, OSError):
                # the owner left and the hand-over is under way, or its socket failed: say so
                # rather than fail the whole scrape
                families["up"].add_metric([q.name], 0)
                continue
            # a queue's samples are made apart and added whole: whatever one queue's figures
            # (or the names in its directory) hold, the others are scraped
            own = {key: _Pending() for key in families}
            try:
                self._queue_samples(own, q, st, now)
                for r in st.readers:
                    _reader_samples(own, q.name, r)
                    if turns is not None:
                        turns.tick()
                _bookmark_samples(own, q.name, st)
            except Exception:
                log.exception("journaled metrics: the figures of queue %s could not be reported", q.name)
                families["up"].add_metric([q.name], 0)
                continue
            families["up"].add_metric([q.name], 1)
            for key, pending in own.items():
                families[key].added.extend(pending.added)
        return families

    def _queue_samples(self, families: Mapping[str, Adds], q: Observed, st: QueueStats, now: float) -> None:
        h = st.health
        name = q.name
        labels = [name]
        poisoned = h.poisoned is not None
        state = (h.ok, poisoned, h.directory_gone)
        with self._lock:
            seen = self._health.get(name)
            if seen is None or seen[0] != state:
                since = h.poisoned_since if poisoned and h.poisoned_since is not None else now
                seen = self._health[name] = (state, since)
        families["put_items"].add_metric(labels, st.put)
        families["put_bytes"].add_metric(labels, st.bytes_put)
        families["next_id"].add_metric(labels, st.next_id)
        families["journal_files"].add_metric(labels, st.journal_files)
        families["journal_bytes"].add_metric(labels, st.journal_bytes)
        families["readers"].add_metric(labels, len(st.readers))
        families["healthy"].add_metric(labels, int(h.ok))
        families["poisoned"].add_metric(labels, int(poisoned))
        families["directory_gone"].add_metric(labels, int(h.directory_gone))
        families["health_changed"].add_metric(labels, seen[1])
        families["failing_steps"].add_metric(labels, len(h.failing))
        families["background_errors"].add_metric(labels, h.errors)
        families["poison_readers"].add_metric(labels, len(h.poison_readers))
        families["skipped_entries"].add_metric(labels, len(h.skipped_entries))
        families["clients"].add_metric(labels, len(st.clients))
        families["client_connections"].add_metric(labels, sum(c.connections for c in st.clients))
        families["owned"].add_metric(labels, int(bool(getattr(q, "is_owner", True))))
        # a client's queue object counts its changes of owner; an owning one has had none
        families["owner_changes"].add_metric(labels, int(getattr(q, "generation", 0)))


def _reader_samples(families: Mapping[str, Adds], queue: str, r: ReaderStats) -> None:
    labels = [queue, r.name]
    for metric, _help, field in READER_GAUGES + READER_COUNTERS:
        families["reader_" + metric].add_metric(labels, getattr(r, field))
    families["reader_oldest_waiting_age"].add_metric(labels, r.oldest_age or 0.0)
    families["reader_oldest_uncommitted_age"].add_metric(labels, r.oldest_uncommitted_age or 0.0)
    families["reader_oldest_key_wait"].add_metric(labels, r.oldest_key_wait or 0.0)
    families["reader_full"].add_metric(labels, int(r.full))
    families["reader_poisoned"].add_metric(labels, int(r.poison is not None))
    families["reader_sinks_missing"].add_metric(labels, len(r.sinks_missing))


#: the queue's metrics: (key, "gauge" or "counter", name, help); every one labelled ``queue``
QUEUE_METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("up", "gauge", "journaled_queue_up", "1 if the queue's stats could be read at this scrape, else 0."),
    (
        "put_items",
        "counter",
        "journaled_queue_put_items",
        "Items put since the owning process opened the queue.",
    ),
    (
        "put_bytes",
        "counter",
        "journaled_queue_put_bytes",
        "Payload bytes put since the owning process opened the queue.",
    ),
    ("next_id", "gauge", "journaled_queue_next_id", "The id the next put will get (ids start at 1)."),
    ("journal_files", "gauge", "journaled_queue_journal_files", "Journal files in the directory."),
    (
        "journal_bytes",
        "gauge",
        "journaled_queue_journal_bytes",
        "Bytes of the journal files, buffered included.",
    ),
    ("readers", "gauge", "journaled_queue_readers", "Readers of the queue."),
    (
        "healthy",
        "gauge",
        "journaled_queue_healthy",
        "1 if the queue accepts puts, no background step fails and no reader is held by a poison item.",
    ),
    ("poisoned", "gauge", "journaled_queue_poisoned", "1 if the queue refuses writes until it is reopened."),
    (
        "directory_gone",
        "gauge",
        "journaled_queue_directory_gone",
        "1 if the queue's directory or journal file was removed or replaced under it.",
    ),
    (
        "health_changed",
        "gauge",
        "journaled_queue_health_changed_timestamp_seconds",
        "When the health state (healthy, poisoned, directory_gone) last changed, as seen by this "
        "collector (when poisoned: when the owner recorded it).",
    ),
    ("failing_steps", "gauge", "journaled_queue_failing_steps", "Background steps failing now (retried)."),
    (
        "background_errors",
        "counter",
        "journaled_queue_background_errors",
        "Background step failures since the queue was opened.",
    ),
    ("poison_readers", "gauge", "journaled_queue_poison_readers", "Readers held by a failing head item."),
    (
        "skipped_entries",
        "gauge",
        "journaled_queue_skipped_entries",
        "Entries of external/ the owner skipped as not regular files (not read as bookmarks).",
    ),
    ("clients", "gauge", "journaled_queue_clients", "Other processes using the queue through its owner."),
    (
        "client_connections",
        "gauge",
        "journaled_queue_client_connections",
        "Connections from those processes.",
    ),
    ("owned", "gauge", "journaled_queue_owned", "1 if this process owns the queue, 0 if it is a client."),
    (
        "owner_changes",
        "counter",
        "journaled_queue_owner_changes",
        "Changes of owner this process's queue object went through (a client's failovers).",
    ),
)
#: the reader's metrics computed here rather than copied from a field: (key, name, help); gauges
READER_DERIVED: tuple[tuple[str, str, str], ...] = (
    (
        "oldest_waiting_age",
        "journaled_reader_oldest_waiting_age_seconds",
        "Age of the oldest waiting item (0 if none waits; an upper bound when it is only on disk).",
    ),
    (
        "oldest_uncommitted_age",
        "journaled_reader_oldest_uncommitted_age_seconds",
        "Age of the oldest item not yet committed: waiting, delayed or open (0 if none).",
    ),
    (
        "oldest_key_wait",
        "journaled_reader_oldest_key_wait_seconds",
        "Seconds the longest-waiting item behind a busy key has waited (0 if none; key order).",
    ),
    ("full", "journaled_reader_full", "1 if a put of one more item would be refused or discard."),
    ("poisoned", "journaled_reader_poisoned", "1 if the head item has failed more than POISON_ERRORS times."),
    ("sinks_missing", "journaled_reader_sinks_missing", "Stored sinks this owner runs the reader without."),
)


def _bookmark_samples(families: Mapping[str, Adds], queue: str, st: QueueStats) -> None:
    """External readers' bookmarks (a Spark query's committed offset), read from the directory
    as ``journaled stat`` reads them: the head, and the lag ``next_id - max(head, first id on
    disk)`` (ids archived ahead of a bookmark are not counted as lag).  Nothing without one."""
    try:
        marks = read_bookmarks(st.path)
    except OSError:
        return
    if not marks:
        return
    first = _first_id(st.path, st.name)
    for name, head in sorted(marks.items()):
        # an entry of external/ is any name someone left there: one that is not UTF-8 would
        # fail the encoding of the whole exposition, every queue's
        labels = [queue, escape(name)]
        families["bookmark_head"].add_metric(labels, head)
        families["bookmark_lag"].add_metric(labels, max(0, st.next_id - max(head, first)))


def _first_id(path: str, name: str) -> int:
    """The first id of the oldest journal file of ours (its header only), 1 if there is none."""
    for ms, file in list_journal_files(path, name):
        try:
            check = inspect_journal(file, name, ms)
        except OSError:
            continue
        if check.ours and check.header is not None:
            return int(check.header.first_id)
    return 1


#: the external readers' metrics: (key, name, help); gauges labelled ``queue`` and ``bookmark``
BOOKMARK_METRICS: tuple[tuple[str, str, str], ...] = (
    ("bookmark_head", "journaled_bookmark_head", "An external reader's (a Spark query's) next id."),
    (
        "bookmark_lag",
        "journaled_bookmark_lag_items",
        "Items from an external reader's bookmark to the queue's next id (the lag journaled stat shows).",
    ),
)


def _specs() -> tuple[tuple[str, str, str, str, tuple[str, ...]], ...]:
    """Every family as (key, "gauge" or "counter", name, help, label names), in exposition order."""
    out: list[tuple[str, str, str, str, tuple[str, ...]]] = []
    for key, kind, name, text in QUEUE_METRICS:
        out.append((key, kind, name, text, ("queue",)))
    for metric, text, _field in READER_GAUGES:
        out.append(("reader_" + metric, "gauge", "journaled_reader_" + metric, text, tuple(READER_LABELS)))
    for metric, text, _field in READER_COUNTERS:
        out.append(("reader_" + metric, "counter", "journaled_reader_" + metric, text, tuple(READER_LABELS)))
    for key, name, text in READER_DERIVED:
        out.append(("reader_" + key, "gauge", name, text, tuple(READER_LABELS)))
    for key, name, text in BOOKMARK_METRICS:
        out.append((key, "gauge", name, text, ("queue", "bookmark")))
    return tuple(out)


_SPECS = _specs()


def _families() -> dict[str, Family]:
    """Fresh, empty metric families, keyed by a short name (a scrape fills them)."""
    out: dict[str, Family] = {}
    for key, kind, name, text, labelnames in _SPECS:
        family = GaugeMetricFamily if kind == "gauge" else CounterMetricFamily
        out[key] = family(name, text, labels=list(labelnames))
    return out


def _go_float(value: float) -> str:
    """A sample's value as prometheus_client writes it (Go's float formatting)."""
    return str(floatToGoString(value))  # type: ignore[no-untyped-call]


def _label_value(value: str) -> str:
    """A label value as the text format escapes it (backslash, newline, double quote)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


# registry -> the collector register() put there
_registered: weakref.WeakKeyDictionary[CollectorRegistry, QueueCollector] = weakref.WeakKeyDictionary()
_registered_lock = threading.Lock()


def register(*queues: Observed, registry: CollectorRegistry = REGISTRY) -> QueueCollector:
    """Report ``queues`` on ``registry`` (prometheus_client's default one unless given): the
    first call registers a :class:`QueueCollector` there, later calls add to it.  Returns it."""
    with _registered_lock:
        collector = _registered.get(registry)
        if collector is None:
            collector = QueueCollector()
            registry.register(collector)
            _registered[registry] = collector
    for q in queues:
        collector.add(q)
    return collector


def unregister(*queues: Observed, registry: CollectorRegistry = REGISTRY) -> None:
    """Stop reporting ``queues`` on ``registry`` (those :func:`register` added there)."""
    with _registered_lock:
        collector = _registered.get(registry)
    if collector is not None:
        for q in queues:
            collector.remove(q)
