"""``JournaledQueue(path)`` in a process that does not own the directory: a queue served by its owner.

:class:`OpenOrConnect`, the metaclass of :class:`~journaled.JournaledQueue`, first tries to own
the directory (as before).  If another live process owns it and serves it (remote/server.py), it
returns a :class:`RemoteQueue` instead, with the same calls (put, put_many, reader, readers,
stats, sync, close, and on each reader the :class:`~journaled.Reader` calls: remote/clientreader.py)
carried out by the owner (remote/connections.py, remote/handlers.py).  A second open *in the
owning process* still raises ``QueueLocked``.

**Failover.**  When the owner closes or dies, the first call that notices (any thread) makes this
process try to own the directory, with this object's ``config``: whoever wins the lock recovers
the queue and serves it, the others connect to it.  Calls then go on, with these rules:

* a ``get`` in flight is simply made again on the new owner (nothing was delivered);
* a ``put``/``put_many`` refused because the owner was closing, or never sent, is made again;
  one sent to an owner that then died is made again too, with the same tag, on the next owner
  (which may be this process): every put carries its producer's tag (a random nonzero 63-bit id
  per queue object, and a sequence per item, consecutive within a ``put_many``), and an owner
  stores only the items whose sequences it does not hold, returning the ids of those it does,
  so the put lands exactly once.  It raises :class:`OwnerLost` with ``outcome_unknown=True``
  only when no next owner answers within :data:`~journaled.remote.routing.PUT_RETRY` seconds,
  or when the owner did not answer within the reply's deadline but did not die (stopped,
  wedged): it still holds the directory, so there is no next owner to ask, and it may still
  carry the put out;
* a read opened under a previous owner is not open any more: ``commit``/``commit_many``/
  ``abort``/``release``/``reject`` of it raise ``OwnerLost`` and are never made again (the item
  is delivered again: at least once, as after a crash); ``outcome_unknown`` is True when the
  request reached an owner that died before answering (it may have been carried out).  The
  worker loops (``process``, ``iter``, ``transaction`` and their asyncio forms) report such a
  lost commit and go on with the next owner (journaled/txn.py).

**Deadlines and limits** (remote/connections.py): an open has
:data:`~journaled.remote.routing.CONNECT_TIMEOUT` to
reach the owner or become it (``QueueLocked`` after it, its cause naming the deadline that
passed); every request has its wait plus ``REPLY_MARGIN`` to be answered, or the owner is taken
for lost (``OwnerLost``).  A queue object used in a process forked from the one that opened it
raises :class:`~journaled.QueueForked`: the child never uses nor replaces the parent's session.

Once this process is the owner, its calls are the same requests, carried out on the queue it
owns by the owner's own request handlers (remote/handlers.py) instead of over the socket: the
choice between the two is made in one place, remote/routing.py's :meth:`Route.call
<journaled.remote.routing.Route.call>`, and every method here states only its request and how it
reads the reply.
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from journaled.config import QueueConfig, ReaderConfig, validate_name
from journaled.disk.lease import OwnedElsewhere
from journaled.errors import OwnerLost, QueueLocked, UnknownReader, UnsafeDirectory
from journaled.format.metadata import Meta
from journaled.item import as_payload, epoch_ms, expire_ms, put_metas
from journaled.owner import closing
from journaled.remote import protocol as proto
from journaled.remote import routing
from journaled.remote.clientreader import RemoteReader
from journaled.remote.connections import Link
from journaled.stats import ClientStats, Health, QueueStats, ReaderStats


class OpenOrConnect(type):
    """Metaclass of ``JournaledQueue``: own the directory, or use its owner (module docstring)."""

    def __call__(
        cls, path: str | os.PathLike[str], config: QueueConfig | None = None, *, name: str | None = None
    ) -> Any:
        def open_owner() -> Any:
            return type.__call__(cls, path, config, name=name)

        deadline = time.monotonic() + routing.CONNECT_TIMEOUT
        while True:
            try:
                return open_owner()
            except QueueLocked as exc:
                if exc.pid == os.getpid() or isinstance(exc, OwnedElsewhere):
                    raise  # the owner is in this very process, or on another host: no socket reaches it
                try:
                    link = Link(os.path.abspath(os.fspath(path)), routing.left(deadline))
                except UnsafeDirectory:
                    raise
                except PermissionError:
                    raise exc from None
                except (OSError, proto.ProtocolError) as err:
                    # an owner still recovering (no socket yet), or one that just died: again
                    if time.monotonic() >= deadline:  # the cause says which deadline passed
                        within = routing.CONNECT_TIMEOUT
                        raise exc from OwnerLost(
                            f"the owner of {path} could not be reached within {within:g} s: {err}"
                        )
                    time.sleep(routing.RETRY_PAUSE)
                    continue
                if name is not None and link.name != name:
                    # one owner locks the whole directory and serves the queue it opened: never
                    # hand a caller who named another queue that one instead
                    link.kill()
                    raise QueueLocked(
                        exc.path, link.owner_pid, f"which serves queue {link.name!r}, not {name!r}"
                    )
                return RemoteQueue(link, config, open_owner, functools.partial(cls, path, config, name=name))


class RemoteQueue(closing.Closing):
    """A :class:`~journaled.JournaledQueue` owned by another process (see the module docstring).

    ``is_owner`` turns True if this process took the directory over after the owner left.
    """

    def __init__(
        self,
        link: Link,
        config: QueueConfig | None,
        open_owner: Callable[[], routing.OwnedQueue],
        opener: Callable[[], Any] | None = None,
    ) -> None:
        self.path = link.directory
        self.name = link.name
        self.config = config if config is not None else QueueConfig()
        self._route = routing.Route(self.path, link, open_owner)
        self._opener = opener  # picklable: how another process opens this queue
        self._readers: dict[str, RemoteReader] = {}
        # exactly-once puts: every put is tagged (producer id, sequence); the id is this object's
        # (random, nonzero, 63 bits: no coordination between processes, collisions negligible)
        self._producer = secrets.randbits(63) or 1
        self._next_sequence = 1
        self._tags = threading.Lock()  # a leaf: guards _next_sequence

    # ------------------------------------------------------------------ the way to the owner
    @property
    def is_owner(self) -> bool:
        """True when this process owns the directory (it took over after the owner left)."""
        return self._route.is_owner

    @property
    def owner_pid(self) -> int:
        """The pid of the process serving this queue now."""
        return self._route.owner_pid

    @property
    def puts_retried(self) -> int:
        """How many puts this object made again on a next owner after theirs died unanswered."""
        return self._route.puts_retried

    @property
    def generation(self) -> int:
        """How many times this object changed owner: a read opened under another is gone."""
        return self._route.generation

    def call(
        self,
        header: dict[str, Any],
        payload: bytes = b"",
        *,
        is_put: bool = False,
        wait: float = 0.0,
        opened: int | None = None,
    ) -> tuple[dict[str, Any], bytes, int]:
        """One request to the owner (:meth:`~journaled.remote.routing.Route.call`): its reply,
        payload and this object's generation."""
        return self._route.call(header, payload, is_put=is_put, wait=wait, opened=opened)

    # ------------------------------------------------------------------ putting
    def _sequences(self, count: int) -> int:
        """The first of ``count`` consecutive sequences of this object's producer id, never
        given to another put (threads share this object: several puts may be in flight)."""
        with self._tags:
            first = self._next_sequence
            self._next_sequence = first + count
        return first

    def put(
        self,
        data: bytes | bytearray | memoryview,
        *,
        expire_at: float | _dt.datetime | None = None,
        ttl: float | None = None,
        not_before: float | _dt.datetime | None = None,
        delay: float | None = None,
        headers: Mapping[str, bytes] | None = None,
        key: bytes | None = None,
        dedup: bool = True,
    ) -> int:
        """Append one item through the owner; return its id (durable as the owner's sync says).
        The keywords are those of :meth:`JournaledQueue.put`, checked here: bad input raises the
        same errors and nothing is sent.  Stored exactly once even if the owner dies meanwhile
        (module docstring)."""
        plain = expire_at is None and ttl is None and not_before is None and delay is None
        plain = plain and headers is None and key is None and dedup is True
        if plain and type(data) is bytes and len(data) <= proto.MAX_PAYLOAD:
            # perf: the usual put, a request whose header's bytes are made without the JSON encoder
            header = proto.tagged_put(self._producer, self._sequences(1))
            return int(self.call(header, data, is_put=True)[0]["first"])
        return self.put_many(
            (data,),
            expire_at=expire_at,
            ttl=ttl,
            not_before=not_before,
            delay=delay,
            headers=headers,
            keys=None if key is None else (key,),
            dedup=dedup,
        )[0]

    def put_many(
        self,
        items: Iterable[bytes | bytearray | memoryview],
        *,
        expire_at: float | _dt.datetime | None = None,
        ttl: float | None = None,
        not_before: float | _dt.datetime | None = None,
        delay: float | None = None,
        headers: Mapping[str, bytes] | None = None,
        keys: Iterable[bytes | None] | None = None,
        dedup: bool = True,
    ) -> list[int]:
        """Append several items with one request (one write at the owner); all or nothing.  The
        keywords are those of :meth:`JournaledQueue.put_many`, checked here (nothing is sent on
        bad input); the items take consecutive sequences of this object's producer id."""
        payloads = [p if type(p) is bytes else as_payload(p, proto.MAX_PAYLOAD) for p in items]
        when = epoch_ms(expire_at) / 1000.0 if isinstance(expire_at, _dt.datetime) else expire_at
        if when is not None and not isinstance(when, (int, float)) or isinstance(when, bool):
            raise TypeError("'expire_at' must be a number of seconds or a datetime")
        if ttl is not None and (not isinstance(ttl, (int, float)) or isinstance(ttl, bool)):
            raise TypeError("'ttl' must be a number of seconds")
        if type(dedup) is not bool:
            raise TypeError("'dedup' must be True or False")
        now_ms = time.time_ns() // 1_000_000
        expire_ms(when, ttl, now_ms)  # the owner's checks, before anything is sent
        total = sum(map(len, payloads))
        if total > proto.MAX_PAYLOAD:
            raise ValueError(
                f"a put_many of {total} bytes is more than one request carries ({proto.MAX_PAYLOAD})"
            )
        header: dict[str, Any] = {
            "op": "put_many",
            "lens": list(map(len, payloads)),
            "ttl": ttl,
            "expire_at": when,
        }
        extras = not_before is not None or delay is not None or headers is not None or keys is not None
        metas = put_metas(payloads, now_ms, not_before, delay, headers, keys, None) if extras else None
        if metas is not None:
            header.update(_meta_fields(metas))
        if not dedup:
            header["dedup"] = False  # sent only when asked: an older owner has no such keyword
        if payloads:
            header["tag"] = [self._producer, self._sequences(len(payloads))]
        reply, _, _ = self.call(header, b"".join(payloads), is_put=True)
        if "ids" in reply:
            return [int(i) for i in reply["ids"]]
        first, count = int(reply["first"]), int(reply["count"])
        return list(range(first, first + count))

    async def aput(self, data: bytes | bytearray | memoryview, **kwargs: Any) -> int:
        """``await q.aput(data)``: :meth:`put` on the loop's default executor."""
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(None, lambda: self.put(data, **kwargs))

    async def aput_many(self, items: Iterable[bytes | bytearray | memoryview], **kwargs: Any) -> list[int]:
        """``await q.aput_many(items)``: :meth:`put_many` on the loop's default executor."""
        import asyncio

        batch = list(items)
        return await asyncio.get_running_loop().run_in_executor(None, lambda: self.put_many(batch, **kwargs))

    # ------------------------------------------------------------------ readers
    def reader(self, name: str, config: ReaderConfig | None = None) -> RemoteReader:
        """The reader ``name`` (created at the owner on first use).  A ``config`` must hold only
        plain values (no sinks: ``expire_to``/``dead_letter`` belong to the owner's process)."""
        validate_name(name, "reader name")  # the owner's check, here: InvalidName, as in-process
        if config is not None and not isinstance(config, ReaderConfig):
            raise TypeError(f"config must be a ReaderConfig, not {type(config).__name__}")
        self.call({"op": "reader", "reader": name, "config": _config_dict(config)})
        existing = self._readers.get(name)
        if existing is None:
            existing = self._readers[name] = RemoteReader(self, name)
        return existing

    def readers(self) -> list[str]:
        """Names of the existing readers, sorted."""
        return list(self.call({"op": "readers"})[0]["readers"])

    def reader_settings(self, name: str) -> dict[str, Any]:
        """Reader ``name``'s stored settings, as :meth:`JournaledQueue.reader_settings` (at the owner)."""
        return dict(self.call({"op": "reader_settings", "reader": name})[0]["settings"])

    def set_reader_settings(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Change only the settings ``changes`` names, at the owner (stored, logged, applied), as
        :meth:`JournaledQueue.set_reader_settings`.  A sink is given as a queue's directory (a
        relative path is taken from this process's current directory) or ``None``: a callable or
        a queue object belongs to one process and cannot be sent (``TypeError``)."""
        sent: dict[str, Any] = {}
        for key, value in changes.items():
            if key in ("expire_to", "dead_letter") and value is not None:
                if not isinstance(value, (str, os.PathLike)):
                    raise TypeError(f"{key}: a client sets a destination by its directory, not {value!r}")
                value = os.path.abspath(os.fspath(value))  # the owner's current directory differs
            sent[key] = value
        reply = self.call({"op": "set_reader_settings", "reader": name, "changes": sent})[0]
        return dict(reply["settings"])

    def remove_reader(self, name: str) -> None:
        """Delete a reader and its checkpoint (at the owner)."""
        self.call({"op": "remove_reader", "reader": name})

    def sync(self) -> None:
        """Return once everything put so far is on stable storage."""
        self.call({"op": "sync"})

    def stats(self) -> QueueStats:
        """The owner's :class:`QueueStats` (``clients`` lists the processes it serves)."""
        raw = self.call({"op": "stats"})[0]["stats"]
        health = dict(raw["health"], failing=tuple(raw["health"]["failing"]))
        return QueueStats(
            **dict(
                raw,
                readers=tuple(ReaderStats(**r) for r in raw["readers"]),
                health=Health(**health),
                clients=tuple(ClientStats(**c) for c in raw["clients"]),
            )
        )

    def reader_stats(self, name: str) -> ReaderStats:
        """The owner's snapshot of reader ``name`` (``UnknownReader`` if there is none)."""
        for r in self.stats().readers:
            if r.name == name:
                return r
        raise UnknownReader(f"no reader named {name!r}")

    # ------------------------------------------------------------------ end
    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._route.closed

    def close(self) -> None:
        """Leave the queue: this process's open reads are aborted by the owner (delivered again);
        if this process had become the owner, the queue is closed as an owner closes it."""
        self._route.close()

    def __reduce__(self) -> tuple[Any, ...]:
        """Sent to another process, the queue is opened there by path (see :func:`reopen`)."""
        if self._opener is None:
            raise TypeError("this queue object cannot be sent to another process")
        return reopen, (self._opener,)

    def __repr__(self) -> str:
        return f"<JournaledQueue {self.path!r} served by pid {self.owner_pid}>"


def reopen(opener: Callable[[], Any]) -> Any:
    """Unpickling a queue: open it in this process, as ``JournaledQueue(path, config)`` does --
    as a client of its owner, or as the owner if the directory is free.  This is how a queue
    passed to a ``multiprocessing`` child (spawn or forkserver start methods) or sent through a
    ``multiprocessing.Queue`` works there."""
    return opener()


def reduce_owner(queue: object) -> tuple[Any, ...]:
    """``JournaledQueue.__reduce__``: what :func:`reopen` needs to open ``queue`` elsewhere."""
    q: Any = queue
    cls: Callable[..., Any] = type(queue)
    opener: Callable[[], Any] = functools.partial(cls, q.path, q.config, name=q.name)
    return reopen, (opener,)


def _meta_fields(metas: list[Meta | None]) -> dict[str, Any]:
    """The fields of a put request carrying ``metas`` (remote/handlers.put_extras): the
    not-before and headers every item shares, and the keys when any item has one."""
    shared = next(m for m in metas if m is not None)
    fields: dict[str, Any] = {}
    if shared.not_before_ms:
        fields["not_before"] = shared.not_before_ms
    if shared.headers:
        fields["headers"] = proto.headers_text(shared.headers)
    keys = [None if m is None or m.key is None else proto.text(m.key) for m in metas]
    if any(k is not None for k in keys):
        fields["keys"] = keys
    return fields


def _config_dict(config: ReaderConfig | None) -> dict[str, Any] | None:
    if config is None:
        return None
    if config.expire_to is not None or config.dead_letter is not None:
        raise TypeError("a reader's sinks (expire_to, dead_letter) can only be set in the owner's process")
    out = {}
    for key, value in ((a.name, getattr(config, a.name)) for a in config.__attrs_attrs__):
        if isinstance(value, _dt.datetime):
            value = epoch_ms(value) / 1000.0
        out[key] = value
    return out
