"""The owner's append path: ``put_many``'s checks, the de-duplication of keys and producer tags
(owner/dedup.py), and :meth:`PutPath.append_locked`, the one place items enter the queue (a
single put with metadata takes its one-item form, ``_append_meta_locked``: same steps, no runs);
whichever way they came, items reach the readers through :func:`hand_to_readers`.

The queue (queue.py) keeps thin ``put``/``put_many`` methods (the plain single put is
:meth:`PutPath.put_plain`); it tells this object when its readers change (``cores``) and when it
closes (``closed``).  Every call here but the constructor runs with or takes the queue lock
(queue.py, "Locks").  Compiled by mypyc where the build can (docs/design.md, "The compiled hot
path"), with the writer it appends through and the reader core it hands items to: add times
come from ``clock`` (passed in, else :data:`CLOCK` when the path is made), never from a patched
module global.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Protocol, cast

from journaled.config import QueueConfig
from journaled.core import policies
from journaled.core.readercore import ReaderCore
from journaled.errors import ItemTooLarge
from journaled.format.metadata import (
    MAX_KEY,
    MAX_PAYLOAD_WITH_META,
    NO_HEADERS,
    Meta,
)
from journaled.format.speedups import checked_headers, encode_meta
from journaled.item import (
    Item,
    as_payload,
    expire_ms,
    new_item,
    new_items,
    new_meta,
    not_before_ms,
    producer_tag,
    put_key,
    put_metas,
    with_meta,
)
from journaled.item import new_meta_item as item_new_meta_item
from journaled.log.journal import Journal
from journaled.log.writer import Writer
from journaled.owner import closing
from journaled.owner.adoption import PutGroup
from journaled.owner.dedup import KeyWindow, Producers, rebuild

_JUST_BYTES = {bytes}

# perf: a single put with metadata builds a Meta and, for its readers, a MetaItem: through the C
# codec's builders where it is built (journaled.item.new_meta / new_meta_item: slots set by their
# descriptors, the objects left out of the cyclic collector's walks when they can never be part of a
# cycle, as a plain put's Item is), else their references.
_new_meta: Final = new_meta  # kept in compiled statics: one call per put, no lookup by name
_new_meta_item: Final = item_new_meta_item
_checked_headers: Final = checked_headers
_encode_meta: Final = encode_meta
_NO_HEADERS: Final = NO_HEADERS  # no look-up in the module's globals per put


def new_meta_item(item_id: int, data: bytes, add_time: float, expire_at: float | None, meta: Meta) -> Item:
    """``MetaItem(item_id, data, add_time, expire_at, 0, meta)``, built faster (see above)."""
    return _new_meta_item(item_id, data, add_time, expire_at, 0, meta)


class SameHeaders:
    """The headers of a recent single put, checked (``metadata.checked_headers``), for the next
    ones that give the same names and values (perf: usually the same few headers on every put):
    ``pairs`` (exact ``str`` names and ``bytes`` values, in order), the read-only ``headers`` and
    their encoded ``block`` as stored; ``meta`` and ``encoded``, the metadata of a put carrying
    these headers and nothing else, once such a put has made them (None and ``b""`` before: puts
    whose headers change every time never pay for them); ``used``, whether a later put gave them
    again.  Shared by the items it is used for, as put_many shares its headers among its items, and
    never changed after that (but for ``used``)."""

    def __init__(self, pairs: list[tuple[str, bytes]], headers: Mapping[str, bytes], block: bytes) -> None:
        self.pairs = pairs
        self.headers = headers
        self.block = block
        self.meta: Meta | None = None
        self.encoded = b""
        self.used = False


class WallClock(Protocol):
    """Where a put's add time comes from: ``time_ns()``, as the ``time`` module's."""

    def time_ns(self) -> int: ...


#: The clock a put path made without one reads add times from (the ``time`` module); read when
#: the path is made, so a test that sets it before opening a queue gives that queue its clock.
CLOCK: WallClock = time


def hand_to_readers(cores: Sequence[ReaderCore], made: list[Item], nbytes: int) -> None:
    """Tell every reader of items just appended (ids in order, ``nbytes`` of payload): the one
    function through which a put, ``put_many``, a client's put and spool adoption reach readers."""
    for core in cores:
        core.on_put(made, nbytes)


class PutPath:
    """Appending to one queue: its journal, its readers' cores, its put counters and the memory
    of recent keys and producer tags (rebuilt from the journal's tail when constructed)."""

    def __init__(
        self,
        path: str,
        lock: threading.Lock,
        journal: Journal,
        config: QueueConfig,
        window: float | None,
        clock: WallClock | None = None,
    ) -> None:
        self.path = path
        self.lock = lock
        self.journal = journal
        self.writer: Writer = journal.appending_parts()[1]
        self.config = config
        self.sync_always = config.sync == "always"
        self.clock: WallClock = CLOCK if clock is None else clock
        self.time_ns: Callable[[], int] = self.clock.time_ns  # perf: one call per put, no lookup
        self.limit = config.max_item_size
        self.cores: list[ReaderCore] = []
        self.closed = False
        self.forked = False
        self.put_count = self.put_bytes = 0
        self.keys = KeyWindow(window) if window is not None else None
        self.producers = Producers()
        self.producers_read = False  # read back at the first tagged put (owner/dedup.py)
        self.same_headers: SameHeaders | None = None  # the last single put's headers (put_one)
        self.header_misses = 0  # puts whose headers were not remembered (_remember_headers)
        if self.keys is not None:
            rebuild(journal, self.keys, None, self.time_ns() // 1_000_000)

    def readers_changed(self, cores: list[ReaderCore]) -> None:
        """The queue's reader cores are now ``cores`` (call with the queue lock held)."""
        self.cores = cores

    def close(self) -> None:
        """Refuse every append from now on (call with the queue lock held)."""
        self.closed = True

    def forget_in_child(self, lock: threading.Lock) -> None:
        """In a process forked after the open: refuse every append, saying so; ``lock`` replaces
        the queue lock a vanished thread of the parent may hold."""
        self.closed = self.forked = True
        self.lock = lock

    def put_many(
        self,
        items: Iterable[bytes | bytearray | memoryview],
        expire_at: Any,
        ttl: Any,
        not_before: Any,
        delay: Any,
        headers: Any,
        keys: Any,
        producer: Any,
        dedup: Any,
    ) -> list[int]:
        """``JournaledQueue.put_many`` (its docstring says what it does; the arguments are typed
        there).  Here they are ``Any`` because they are checked here, with the errors the
        docstring promises: compiled code would otherwise refuse a wrong type before that, with
        another message."""
        if (
            type(items) is list
            and len(items) == 1
            and (keys is None or type(keys) is list and len(keys) == 1)
        ):
            # perf: a client's put is a tagged put_many of one item (remote/handlers.py)
            key = None if keys is None else keys[0]
            item = items[0]
            return [self.put_one(item, expire_at, ttl, not_before, delay, headers, key, producer, dedup)]
        if dedup is not True and dedup is not False:
            raise TypeError(f"dedup must be True or False, got {dedup!r}")
        limit = self.config.max_item_size
        payloads = cast("list[bytes]", list(items))  # checked just below
        # perf: plain bytes within the limit (the usual case) are checked with two C-level
        # passes; anything else goes through as_payload item by item (same errors as before).
        extras = not_before is not None or delay is not None or headers is not None
        extras = extras or keys is not None or producer is not None
        if not payloads:
            expire_ms(expire_at, ttl, 0)  # a bad argument raises even with nothing to put
            if extras:
                put_metas([], 0, not_before, delay, headers, keys, producer)
            return []
        if not (set(map(type, payloads)) == _JUST_BYTES and max(map(len, payloads)) <= limit):
            payloads = [as_payload(d, limit) for d in payloads]
        add_ms = self.time_ns() // 1_000_000
        expire = expire_ms(expire_at, ttl, add_ms) if expire_at is not None or ttl is not None else 0
        metas = put_metas(payloads, add_ms, not_before, delay, headers, keys, producer) if extras else None
        if metas is not None and (
            producer is not None or (dedup and keys is not None and self.keys is not None)
        ):
            return self._put_once(payloads, expire, metas, add_ms, dedup)
        run: PutGroup = (payloads, expire) if metas is None else (payloads, expire, metas)
        with self.lock:
            first_id, seq = self.append_locked((run,), len(payloads), sum(map(len, payloads)), add_ms)
        if self.config.sync == "always":
            self.journal.wait_durable(seq)
        return list(range(first_id, first_id + len(payloads)))

    def put_plain(self, data: Any) -> int:
        """``JournaledQueue.put(data)`` with no option: the plain single put, the hottest call of
        all.  Anything but bytes within ``max_item_size`` takes :meth:`put_one` (its checks, its
        errors)."""
        if type(data) is not bytes or len(data) > self.limit:
            return self.put_one(data, None, None, None, None, None, None, None, True)
        with self.lock:
            first_id, seq = self.append_locked(data, 1, len(data), self.time_ns() // 1_000_000)
        if self.sync_always:
            self.journal.wait_durable(seq)
        return first_id

    def put_one(
        self,
        data: Any,
        expire_at: Any,
        ttl: Any,
        not_before: Any,
        delay: Any,
        headers: Any,
        key: Any,
        producer: Any,
        dedup: Any,
    ) -> int:
        """``put_many`` of one item (``key`` its key) without the batch machinery: the same
        checks in the same order, the same errors, the same records and ids."""
        limit = self.limit
        payload = data if type(data) is bytes and len(data) <= limit else as_payload(data, limit)
        add_ms = self.time_ns() // 1_000_000
        expire = expire_ms(expire_at, ttl, add_ms) if expire_at is not None or ttl is not None else 0
        nb = not_before_ms(not_before, delay, add_ms) if not_before is not None or delay is not None else 0
        if headers is None:
            hdrs: Mapping[str, bytes] = _NO_HEADERS
            block = b""
            same = None
        else:
            hdrs, block, same = self._checked_headers(headers)
        if key is not None and not (type(key) is bytes and 0 < len(key) <= MAX_KEY):
            key = put_key(key)  # perf: a key of plain bytes within the limit is stored as it is
        pid = sequence = 0
        if producer is not None:
            pid, sequence = producer_tag(producer, 1)
        if not (nb or hdrs or pid or key is not None):
            with self.lock:
                run: PutGroup = ((payload,), expire)
                first_id, seq = self.append_locked((run,) if expire else payload, 1, len(payload), add_ms)
            if self.sync_always:
                self.journal.wait_durable(seq)
            return first_id
        if same is not None and not (nb or pid or key is not None):
            meta, encoded = self._same_meta(same)
        else:
            meta = _new_meta(nb, pid, sequence, key, hdrs)
            # made once, from the header block the check made: for the size check and the record
            encoded = _encode_meta(nb, pid, sequence, key, len(hdrs), block)
        shows = nb != 0 or key is not None or len(hdrs) > 0
        return self._store_one(payload, expire, meta, encoded, add_ms, pid, sequence, key, shows, dedup)

    def put_marked(self, data: Any, headers: Any, key: Any, dedup: Any) -> int:
        """``JournaledQueue.put(data, headers=..., key=...)`` with no time and no tag, the usual
        put with metadata (perf: a key, or the same few headers on every put, without
        :meth:`put_one`'s nine arguments and option checks).  Anything but bytes within
        ``max_item_size`` and a key of bytes within ``MAX_KEY`` takes :meth:`put_one` (its checks,
        its errors, in its order)."""
        if (
            type(data) is not bytes
            or len(data) > self.limit
            or key is not None
            and not (type(key) is bytes and 0 < len(key) <= MAX_KEY)
        ):
            return self.put_one(data, None, None, None, None, headers, key, None, dedup)
        if headers is None:
            if key is None:
                return self.put_plain(data)
            add_ms = self.time_ns() // 1_000_000
            meta = _new_meta(0, 0, 0, key, _NO_HEADERS)
            encoded = _encode_meta(0, 0, 0, key, 0, b"")  # perf: no len() of the empty headers
        else:
            add_ms = self.time_ns() // 1_000_000
            hdrs, block, same = self._checked_headers(headers)
            if same is not None and key is None:
                meta, encoded = self._same_meta(same)
            elif not hdrs and key is None:  # empty headers and no key: a plain put
                return self.put_one(data, None, None, None, None, headers, key, None, dedup)
            else:
                meta = _new_meta(0, 0, 0, key, hdrs)
                encoded = _encode_meta(0, 0, 0, key, len(hdrs), block)
        return self._store_one(data, 0, meta, encoded, add_ms, 0, 0, key, True, dedup)

    def _checked_headers(self, headers: Any) -> tuple[Mapping[str, bytes], bytes, SameHeaders | None]:
        """``headers`` checked (``metadata.checked_headers``, its errors): the read-only mapping,
        its encoded block, and the remembered headers they are (None when not remembered)."""
        same = self._same_headers(headers)
        if same is not None:
            return same.headers, same.block, same
        hdrs, block = _checked_headers(headers)
        if type(headers) is dict and hdrs:
            same = self._remember_headers(hdrs, block)
        return hdrs, block, same

    @staticmethod
    def _same_meta(same: SameHeaders) -> tuple[Meta, bytes]:
        """The ``Meta`` and encoding of a put carrying ``same``'s headers and nothing else: the
        same objects for every such put (perf), made at the first (two threads may both make it)."""
        meta = same.meta
        if meta is None:
            same.encoded = _encode_meta(0, 0, 0, None, len(same.headers), same.block)
            meta = same.meta = _new_meta(0, 0, 0, None, same.headers)
        return meta, same.encoded

    def _store_one(
        self,
        payload: bytes,
        expire: int,
        meta: Meta,
        encoded: bytes,
        add_ms: int,
        pid: int,
        sequence: int,
        key: bytes | None,
        shows: bool,
        dedup: Any,
    ) -> int:
        """The rest of a single put with metadata (:meth:`put_one`, :meth:`put_marked`): the size
        check, the look-up of a stored duplicate (its producer's tag, or its key when ``dedup``),
        the append, the wait for durability; the id."""
        if len(payload) + len(encoded) > MAX_PAYLOAD_WITH_META:
            raise ItemTooLarge(len(payload), MAX_PAYLOAD_WITH_META - len(encoded))
        if dedup is not True and dedup is not False:
            raise TypeError(f"dedup must be True or False, got {dedup!r}")
        with self.lock:
            found = None
            if pid or (key is not None and dedup and self.keys is not None):  # else nothing to find
                found = self._stored_locked(pid, sequence, key, add_ms, dedup)
            if found is None:
                first_id, seq = self._append_meta_locked(
                    payload, expire, meta, encoded, add_ms, pid, sequence, key, shows
                )
            else:
                first_id, seq = found, -1
        if self.sync_always:
            if seq < 0:
                self.journal.sync()  # the id returned may be another put's, not yet durable
            else:
                self.journal.wait_durable(seq)
        return first_id

    def _same_headers(self, headers: Any) -> SameHeaders | None:
        """The remembered headers of a recent single put when ``headers`` is a ``dict`` holding
        exactly those names and values (exact ``str`` and ``bytes``, in the same order), else None:
        what :func:`checked_headers` would make of them, without making it again."""
        same = self.same_headers
        if same is None or type(headers) is not dict or len(headers) != len(same.pairs):
            return None
        pairs = same.pairs
        i = 0
        for name, value in headers.items():  # perf: a dict's own iteration (narrowed), no zip
            had_name, had_value = pairs[i]
            if type(name) is not str or type(value) is not bytes or name != had_name or value != had_value:
                return None
            i += 1
        same.used = True
        return same

    def _remember_headers(self, hdrs: Mapping[str, bytes], block: bytes) -> SameHeaders | None:
        """Remember ``hdrs`` (checked, not empty) for the next single puts, if they are exact ``str``
        names and exact ``bytes`` values (what :meth:`_same_headers` compares); what is remembered.
        While the headers remembered last were never given again (headers that change every put),
        only every 8th put's are: remembering costs a list, a tuple per header and an object, all
        tracked by the collector, and puts whose headers stop changing are remembered soon enough."""
        last = self.same_headers
        if last is not None and not last.used:
            self.header_misses += 1
            if self.header_misses & 7:
                return None
        pairs = list(hdrs.items())
        for name, value in pairs:
            if type(name) is not str or type(value) is not bytes:
                return None
        same = self.same_headers = SameHeaders(pairs, hdrs, block)
        return same

    def _stored_locked(
        self, pid: int, sequence: int, key: bytes | None, add_ms: int, dedup: bool
    ) -> int | None:
        """The id under which a single put tagged ``(pid, sequence)`` or keyed ``key`` is stored
        already: its producer's tag (a client's retry) or, when ``dedup``, its key within the
        window; None for none."""
        if pid:
            if not self.producers_read:
                rebuild(self.journal, None, self.producers, add_ms)
                self.producers_read = True
            self.producers.expire(add_ms)
            found = self.producers.find(pid, sequence, 1)
            if found is not None:
                return found[0]
        keys = self.keys
        if dedup and keys is not None and key is not None:
            keys.expire(add_ms)
            return keys.find(key)
        return None

    def _put_once(
        self, payloads: list[bytes], expire: int, metas: list[Meta | None], add_ms: int, dedup: bool
    ) -> list[int]:
        """A put whose items may be stored already: by their producer's tag (a client's retry)
        or, when ``dedup``, by their key within the window.  Stores only the others, as one run."""
        count = len(payloads)
        ids: list[int | None] = [None] * count
        later: dict[int, int] = {}  # item -> the earlier item of this put with its key
        with self.lock:
            tag = metas[0]
            if tag is not None and tag.producer:
                if not self.producers_read:
                    rebuild(self.journal, None, self.producers, add_ms)
                    self.producers_read = True
                self.producers.expire(add_ms)
                ids = self.producers.find(tag.producer, tag.sequence, count) or ids
            keys = self.keys if dedup else None
            if keys is not None:
                keys.expire(add_ms)
                first_of: dict[bytes, int] = {}
                for i, meta in enumerate(metas):
                    key = None if meta is None or ids[i] is not None else meta.key
                    if key is None:
                        continue
                    ids[i] = keys.find(key)
                    if ids[i] is None:
                        if key in first_of:
                            later[i] = first_of[key]
                        else:
                            first_of[key] = i
            todo = [i for i in range(count) if ids[i] is None and i not in later]
            seq = -1
            if todo:
                run = ([payloads[i] for i in todo], expire, [metas[i] for i in todo])
                nbytes = sum(len(p) for p in run[0])
                first_id, seq = self.append_locked((run,), len(todo), nbytes, add_ms)
                for k, i in enumerate(todo):
                    ids[i] = first_id + k
            for i, j in later.items():
                ids[i] = ids[j]
        if self.config.sync == "always":
            if seq < 0:
                self.journal.sync()  # what this put returns may be another put's, not yet durable
            else:
                self.journal.wait_durable(seq)
        return cast("list[int]", ids)

    def _remember(self, first_id: int, metas: Sequence[Meta | None], add_ms: int) -> None:
        """Note the keys and producer tags of a run just appended (every path: a put, the spool)."""
        tagged: dict[int, list[tuple[int, int]]] = {}
        keys = self.keys
        if keys is not None:
            keys.expire(add_ms)  # the spool adds keys too: its puts must not grow the window
        for k, meta in enumerate(metas):
            if meta is None:
                continue
            if meta.producer and self.producers_read:  # else the first tagged put reads it back
                tagged.setdefault(meta.producer, []).append((meta.sequence, first_id + k))
            if meta.key is not None and keys is not None:
                keys.add(meta.key, first_id + k, add_ms)
        for producer, pairs in tagged.items():
            self.producers.add(producer, pairs, add_ms)

    def append_locked(
        self,
        items: bytes | Sequence[PutGroup],
        count: int,
        nbytes: int,
        add_ms: int,
        intent: Callable[[int], None] | None = None,
    ) -> tuple[int, int]:
        """The one place items enter the queue (``put``, ``put_many``, spool adoption): reader
        policies, ``intent(first_id)`` (the spool's ledger line), the journal, the counters, then
        every reader.  ``items`` is one plain payload (a single put without expiry) or a
        sequence of runs.  Call with the queue lock held; the caller then waits for durability
        with the returned journal sequence.  Returns ``(first id, sequence)``."""
        cores = self._admit_locked(count, nbytes)
        journal = self.journal
        if intent is not None:
            intent(journal.next_id)
        if type(items) is bytes:  # perf: the plain single put, without building a run
            first_id, added_ms, seq = self.writer.append_one(items, add_ms)
            if cores:
                hand_to_readers(cores, [new_item(first_id, items, added_ms / 1000.0, None, 0)], nbytes)
        else:
            first_id = seq = -1
            for run in cast("Sequence[PutGroup]", items):
                payloads, run_expire = run[0], run[1]
                metas = run[2] if len(run) > 2 else None
                if metas is None:
                    item_id, added_ms, seq = journal.append(payloads, add_ms, run_expire)
                else:
                    item_id, added_ms, seq = journal.append_meta(payloads, metas, add_ms, run_expire)
                    self._remember(item_id, metas, added_ms)
                if first_id < 0:
                    first_id = item_id
                if cores:
                    expire = run_expire / 1000.0 if run_expire else None
                    made = new_items(item_id, list(payloads), added_ms / 1000.0, expire)
                    if metas is not None:
                        made = [with_meta(it, shown(m)) for it, m in zip(made, metas)]
                    hand_to_readers(cores, made, nbytes if len(items) == 1 else sum(map(len, payloads)))
        self.put_count += count
        self.put_bytes += nbytes
        return first_id, seq

    def _admit_locked(self, count: int, nbytes: int) -> list[ReaderCore]:
        """Before anything is appended: refuse on a closed queue, then make room for the items
        by the readers' max_items/max_size (refusing, writing nothing, or discarding)."""
        if self.closed:
            raise closing.closed_error(self.path, self.forked)
        cores = self.cores
        if cores:
            policies.make_room(cores, count, nbytes)
        return cores

    def _append_meta_locked(
        self,
        payload: bytes,
        expire: int,
        meta: Meta,
        encoded: bytes,
        add_ms: int,
        pid: int,
        sequence: int,
        key: bytes | None,
        shows: bool,
    ) -> tuple[int, int]:
        """:meth:`append_locked` of one item with ``meta`` (``encoded`` its encoding; ``pid``,
        ``sequence`` and ``key`` its fields, ``shows``: :func:`shown` would keep it), the fields
        passed as they are because reading them back off ``meta`` is an attribute lookup each."""
        nbytes = len(payload)
        cores = self._admit_locked(1, nbytes)
        # perf: the writer's one-item method (no tuples), a native call
        item_id, added_ms, seq = self.writer.append_putx_one(payload, meta, encoded, add_ms, expire)
        if pid and self.producers_read:
            self.producers.add_one(pid, sequence, item_id, added_ms)
        keys = self.keys
        if key is not None and keys is not None:
            keys.expire(added_ms)
            keys.add(key, item_id, added_ms)
        if cores:
            expire_at = expire / 1000.0 if expire else None
            made: list[Item]
            if shows:
                made = [_new_meta_item(item_id, payload, added_ms / 1000.0, expire_at, 0, meta)]
            else:
                made = [new_item(item_id, payload, added_ms / 1000.0, expire_at, 0)]
            hand_to_readers(cores, made, nbytes)
        self.put_count += 1
        self.put_bytes += nbytes
        return item_id, seq


def shown(meta: Meta | None) -> Meta | None:
    """What readers see of a fresh put's ``meta``: None when it holds only a producer's tag, which
    is the owner's business (the item is then a plain ``Item``, as one read back from disk)."""
    if meta is None or (meta.key is None and not meta.headers and not meta.not_before_ms):
        return None
    return meta
