"""Looking at a queue without owning it: :func:`inspect_queue` (also ``journaled.inspect_queue``).

``JournaledQueue(path).stats()`` opens the queue, and an open becomes the owner when nobody holds
the directory (and creates the directory when the path is wrong): a monitor must not do that.
:func:`inspect_queue` never does: it takes no lock (not even shared: who holds the directory is
read from ``/proc/locks``), creates and writes nothing, starts no socket server, and refuses a
path that holds no queue with :class:`NotAQueue`.  It reads the files (offline/snapshot.py, what
``journaled stat`` reads too) and, when a live owner serves the directory, asks it over its socket
for what only it knows: open reads, delayed items, the dead-letter and expiry counts, its health
and its clients.  ``journaled stat`` prints exactly this snapshot.
"""

from __future__ import annotations

import os
from typing import Any

import attrs

from journaled.disk import lease
from journaled.errors import JournaledError
from journaled.offline.snapshot import DiskBookmark, DiskReader, DiskView, NotAQueue, read_disk
from journaled.remote.connections import Link
from journaled.stats import ClientStats, Health

__all__ = ["NotAQueue", "OwnerView", "QueueSnapshot", "ReaderSnapshot", "ask_owner", "inspect_queue"]

#: seconds the owner may take to answer before the snapshot says it does not answer
OWNER_TIMEOUT = 5.0


@attrs.frozen
class OwnerView:
    """What the live owner said over its socket (``error`` set, the rest empty, if it did not
    answer within the timeout).

    Attributes:
        pid: the owner's process id (-1 if it did not answer).
        health: its :class:`~journaled.stats.Health`.
        clients: the other processes it serves (this one left out), with their open reads.
        readers: reader name -> that reader's ``ReaderStats`` fields, as the owner sent them.
        error: why the owner could not be asked, or None.
        queue: the queue's own ``QueueStats`` fields as the owner sent them (``next_id``,
            ``put``, ``bytes_put``, ``journal_files``, ``journal_bytes``, ...).
    """

    pid: int = -1
    health: Health | None = None
    clients: tuple[ClientStats, ...] = ()
    readers: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    error: str | None = None
    queue: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class ReaderSnapshot:
    """One reader, looked at without owning the queue.

    ``live`` says where the first four figures and the counters come from: True, the live
    owner's current counts (exact, see ``ReaderStats``); False, the files as of the reader's last
    checkpoint (exact for what was checkpointed; commits since then are not seen).  Open reads and
    delayed items exist only in the owner's memory and are None when no live owner answered.

    Attributes:
        name / head: the reader and the id below which everything is committed.
        backlog_items / backlog_bytes: items not yet committed (open ones included) and their
            payload bytes.
        oldest_age: seconds since the oldest item not yet committed was added, or None.
        live: the figures above come from the live owner.
        done_out_of_order / checkpoint_age / checkpoint_ok: from the checkpoint file.
        open_reads: reads handed out and not committed or aborted (every process's).
        items_delayed: aborted items waiting out a retry delay.
        items_not_due: items put with a not-before still ahead (held back; None from an owner
            too old to count them).
        items_behind_keys / oldest_key_wait: items held back by key order and the longest such
            wait in seconds (None without a live owner, or from one too old to count them;
            ``oldest_key_wait`` None too when nothing waits).
        dead_lettered / expired: items removed by those policies (as ``stats()`` counts them:
            kept in the checkpoint, so known without a live owner too).
    """

    name: str
    head: int
    backlog_items: int
    backlog_bytes: int
    oldest_age: float | None
    live: bool
    done_out_of_order: int
    checkpoint_age: float | None
    checkpoint_ok: bool
    open_reads: int | None = None
    items_delayed: int | None = None
    items_not_due: int | None = None
    items_behind_keys: int | None = None
    oldest_key_wait: float | None = None
    dead_lettered: int | None = None
    expired: int | None = None


@attrs.frozen
class QueueSnapshot:
    """A queue directory, looked at without owning it (see :func:`inspect_queue`).

    Attributes:
        path / name: the directory (absolute) and the queue's name.
        files / bytes: journal files on disk and their size.
        first_id / next_id / items: the ids on disk, ``first_id`` up to ``next_id - 1``.
        oldest_item_age / newest_file_age: seconds, or None with no item / no file.
        readers: one :class:`ReaderSnapshot` per reader with a checkpoint or in the registry.
        external_readers: bookmarks (a Spark query's committed offset) with head and lag.
        damaged_files_kept: files recovery set aside (``*.damaged``).
        owner_pid: the process holding the directory, or None if nobody does (-1: held, pid not
            visible).
        owner: what the live owner said, or None when nobody owns the directory (or it was not
            asked).
        owned_by: ``"owned by HOST pid P (lease renewed Ns ago)"`` from the owner's lease
            (disk/lease.py) while the directory is owned, here or on another host; None if not.
        owner_host: the owning host's name from the lease, or None.
    """

    path: str
    name: str
    files: int
    bytes: int
    first_id: int
    next_id: int
    items: int
    oldest_item_age: float | None
    newest_file_age: float | None
    readers: tuple[ReaderSnapshot, ...]
    external_readers: tuple[DiskBookmark, ...]
    damaged_files_kept: tuple[str, ...]
    owner_pid: int | None
    owner: OwnerView | None
    owned_by: str | None = None
    owner_host: str | None = None


def ask_owner(path: str, timeout: float = OWNER_TIMEOUT, name: str | None = None) -> OwnerView | None:
    """Ask the live owner of ``path`` over its socket for its stats; None if nobody serves the
    directory, an :class:`OwnerView` with ``error`` if the owner does not answer in time, or
    serves another queue of the directory than ``name`` (its figures are not this queue's)."""
    try:
        link = Link(os.path.abspath(path), timeout=timeout)
    except FileNotFoundError:
        return None  # no socket: nobody serves it
    except ConnectionRefusedError:
        return None  # a socket left by an owner that is gone
    except (OSError, JournaledError) as exc:
        return OwnerView(error=f"the owner does not answer: {exc}")
    if name is not None and link.name != name:
        link.kill()
        return OwnerView(
            pid=link.owner_pid,
            error=f"the owner serves queue {link.name!r} of the directory, not {name!r}: "
            "figures from the files",
        )
    try:
        stats = link.call({"op": "stats"})[0]["stats"]
    except (OSError, JournaledError) as exc:
        return OwnerView(pid=link.owner_pid, error=f"the owner does not answer: {exc}")
    finally:
        link.kill()
    me = os.getpid()
    health = dict(stats["health"], failing=tuple(stats["health"]["failing"]))
    return OwnerView(
        pid=link.owner_pid,
        health=Health(**{k: v for k, v in health.items() if k in attrs.fields_dict(Health)}),
        clients=tuple(
            ClientStats(pid=c["pid"], connections=c["connections"], open_reads=dict(c["open_reads"]))
            for c in stats["clients"]
            if c["pid"] != me
        ),
        readers={r["name"]: r for r in stats["readers"]},
        queue={k: v for k, v in stats.items() if k not in ("readers", "health", "clients")},
    )


def _reader(name: str, disk: DiskReader | None, live: dict[str, Any] | None) -> ReaderSnapshot:
    """A reader's snapshot: the owner's figures when it answered, the files' otherwise (a reader
    only the owner knows was opened since the last checkpoint)."""
    if live is None:
        assert disk is not None
        return ReaderSnapshot(
            disk.name, disk.head, disk.backlog_items, disk.backlog_bytes, disk.oldest_age, False,
            disk.done_out_of_order, disk.checkpoint_age, disk.checkpoint_ok,
            dead_lettered=disk.counts.dead_lettered, expired=disk.counts.expired,
        )  # fmt: skip
    # the oldest item not yet committed, open reads included (an owner too old to send it: the
    # oldest waiting one, the best it knows)
    age = live.get("oldest_uncommitted_age", live["oldest_age"])
    return ReaderSnapshot(
        name=name,
        head=live["head"],
        backlog_items=live["backlog_items"],
        backlog_bytes=live["backlog_bytes"],
        oldest_age=round(age, 3) if age is not None else None,
        live=True,
        done_out_of_order=disk.done_out_of_order if disk else 0,
        checkpoint_age=disk.checkpoint_age if disk else None,
        checkpoint_ok=disk.checkpoint_ok if disk else False,
        open_reads=live["open_reads"],
        items_delayed=live["items_delayed"],
        items_not_due=live.get("items_not_due"),
        items_behind_keys=live.get("items_behind_keys"),
        oldest_key_wait=live.get("oldest_key_wait"),
        dead_lettered=live["dead_lettered"],
        expired=live["expired"],
    )


def inspect_queue(path: str | os.PathLike[str], name: str | None = None) -> QueueSnapshot:
    """A :class:`QueueSnapshot` of the queue in ``path`` (``name``: which one, where the
    directory holds several), taken without owning it: no lock (not even for an instant), no
    file or directory created or written, no server started; safe beside a live owner, and it
    never becomes one.  A path that is missing, not a directory, holds no queue, or several
    without ``name``, raises :class:`NotAQueue` (a :class:`~journaled.errors.JournaledError`).

    Cost: every record some reader has not committed is read once (its bytes are counted), and
    one request to the live owner, if any (at most ``OWNER_TIMEOUT`` seconds)."""
    disk: DiskView = read_disk(os.fspath(path), name)
    held = _live_lease(disk.path, disk.lock_holder)
    if held is not None and not lease.identity().same_machine(held.host, held.boot):
        # the owner runs on another host: its socket cannot be reached from here (and a
        # connection through a shared file system would only wait for a timeout)
        owner: OwnerView | None = OwnerView(
            pid=held.pid, error=f"{held.describe()}: on another host, its live figures cannot be asked for"
        )
    else:
        owner = ask_owner(disk.path, name=disk.name)
    if owner is None and disk.lock_holder is not None:
        owner = OwnerView(
            pid=disk.lock_holder,
            error="the process holding the directory does not serve it (an offline repair?)",
        )
    owner_pid = disk.lock_holder
    if owner is not None and owner.pid > 0:
        owner_pid = owner.pid
    live = owner.readers if owner is not None else {}
    on_disk = {r.name: r for r in disk.readers}
    readers = tuple(_reader(n, on_disk.get(n), live.get(n)) for n in sorted(on_disk.keys() | live.keys()))
    return QueueSnapshot(
        path=disk.path,
        name=disk.name,
        files=disk.files,
        bytes=disk.bytes,
        first_id=disk.first_id,
        next_id=disk.next_id,
        items=disk.items,
        oldest_item_age=disk.oldest_item_age,
        newest_file_age=disk.newest_file_age,
        readers=readers,
        external_readers=disk.external_readers,
        damaged_files_kept=disk.damaged_files_kept,
        owner_pid=owner_pid,
        owner=owner,
        owned_by=None if held is None else held.describe(),
        owner_host=None if held is None else held.host,
    )


def _live_lease(path: str, lock_holder: int | None) -> lease.Lease | None:
    """The lease of the directory's owner, if it is owned: held by a process of this host
    (``lock_holder``), or live and another host's (whose lock cannot be seen from here)."""
    try:
        held = lease.read_lease(path)
    except OSError:
        return None
    if held is None or held.released:
        return None
    if lease.identity().same_machine(held.host, held.boot):
        return held if lock_holder is not None else None
    return held if held.live() else None
