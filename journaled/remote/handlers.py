"""What the owner does for each request of another process (remote/server.py carries the bytes).

Every function here takes the served queue (:class:`~journaled.remote.contract.ServedQueue`)
and the client's :class:`Session` and returns the reply header and payload; an exception
becomes an error reply (remote/server.py).  Nothing here reads from or writes to a socket, so
each request's effect on the queue can be read in one place, and a client that took the queue
over carries its own requests out here too (:func:`carry_out_here`, remote/clientqueue.py).

Open reads are keyed by ``(reader, id)`` in the session that took them: a process can settle
only the reads it holds, and when its last connection closes they are aborted (remote/server.py)
through the reader object they were opened on, so a reader removed meanwhile stays removed.
Whatever acknowledges a put or carries an item to another process goes out only after the
queue's ``write_out`` (remote/contract.py).
"""

from __future__ import annotations

import threading
from typing import Any

import attrs

from journaled.config import ReaderConfig
from journaled.errors import ItemTooLarge, JournaledError, UnknownRead, UnknownReader
from journaled.format import metadata
from journaled.item import Item
from journaled.remote import protocol as proto
from journaled.remote.contract import ServedQueue, ServedReader

#: how a read is settled: the op's name -> the keyword arguments it may carry (and their types)
SETTLE_OPS: dict[str, dict[str, tuple[type, ...]]] = {
    "commit": {},
    "abort": {"delay": (int, float, type(None))},
    "release": {},
    "reject": {"reason": (str,)},
}
#: the requests that append items
PUT_OPS = ("put", "put_many")
#: the requests that open reads (they may wait: remote/server.py waits in slices)
GET_OPS = ("get", "get_many")
#: the most items one ``get_many`` reply carries: the fields of each item without headers or a key
#: take at most ``META_BOUND`` bytes of the header (more: :func:`meta_bound`), so the reply's
#: header stays within ``MAX_HEADER``
MAX_REPLY_ITEMS = 5000
#: an upper bound of one item's bytes in a ``get_many`` reply's header (its ``item_meta`` and
#: its ``lens`` entry, the largest id, times and error count included)
META_BOUND = 200


class Session:
    """One client process: its connections and its open reads (``(reader, id) -> Item``),
    with the reader object each reader's reads were opened on (``readers``).  Changed only
    under the server's lock, by the server's calls below and this module."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.connections = 0
        self.reads: dict[tuple[str, int], Item] = {}
        self.readers: dict[str, ServedReader] = {}

    def connected(self) -> None:
        """One more connection of this process."""
        self.connections += 1

    def disconnected(self) -> list[tuple[ServedReader, Item]]:
        """One connection fewer; when it was the last, the open reads it leaves (they are no
        longer the session's) with the reader object each was opened on, newest first: aborted
        in that order, each to the head, they keep their id order.  Aborting through that
        object, never by name, cannot create a reader removed meanwhile (its abort fails)."""
        self.connections -= 1
        if self.connections:
            return []
        reads = sorted(
            ((self.readers[k[0]], it) for k, it in self.reads.items() if k[0] in self.readers),
            key=lambda r: -r[1].id,
        )
        self.reads.clear()
        self.readers.clear()
        return reads

    def forget(self, name: str) -> None:
        """Reader ``name``'s reads are not open any more (it was moved or removed)."""
        self.reads = {k: v for k, v in self.reads.items() if k[0] != name}
        self.readers.pop(name, None)


#: What a client's ``reader(name, config)`` never changes in an existing reader: where it starts
#: (a setting of a new reader only) and its sinks (objects of the owner's process).
CLIENT_KEEPS = frozenset({"start", "expire_to", "dead_letter"})


def existing_reader(queue: ServedQueue, name: str) -> ServedReader:
    """The reader ``name``; never created here (a removed reader stays removed)."""
    if name not in queue.readers():
        raise UnknownReader(f"no reader named {name!r}")
    return queue.reader(name)


def item_meta(item: Item) -> dict[str, Any]:
    """What a reply says of one delivered item besides its payload: with its metadata, if it
    has any, as ``"headers"`` (name -> base64), ``"key"`` (base64) and ``"not_before"`` (epoch
    ms), each only when set (an older client ignores them)."""
    out: dict[str, Any] = {
        "id": item.id,
        "add_time": item.add_time,
        "expire_at": item.expire_at,
        "error_count": item.error_count,
    }
    meta = item.meta
    if meta is not None:
        if meta.headers:
            out["headers"] = proto.headers_text(meta.headers)
        if meta.key is not None:
            out["key"] = proto.text(meta.key)
        if meta.not_before_ms:
            out["not_before"] = meta.not_before_ms
    return out


def meta_bound(item: Item) -> int:
    """An upper bound of ``item``'s bytes in a ``get_many`` reply's header."""
    meta = item.meta
    if meta is None:
        return META_BOUND
    # base64 makes 4 bytes of 3, JSON adds quotes, a colon and a comma to each header
    return META_BOUND + 2 * metadata.encoded_size(meta) + 8 * len(meta.headers)


def fit_reply(items: list[Item]) -> tuple[list[Item], list[Item]]:
    """Split the items a ``get_many`` took into those one reply carries and the rest, which the
    caller gives back at once: at most ``MAX_REPLY_ITEMS``, a header within ``MAX_HEADER`` and
    a payload within ``MAX_PAYLOAD``, but always the first, which may need a long frame
    (remote/protocol.py); one larger than any client accepts raises ``ItemTooLarge``."""
    if len(items[0].data) > proto.REPLY_LIMITS.payload:
        raise ItemTooLarge(len(items[0].data), proto.REPLY_LIMITS.payload)
    total = head = 0
    for n, item in enumerate(items[:MAX_REPLY_ITEMS]):
        total += len(item.data)
        head += META_BOUND if type(item) is Item else meta_bound(item)
        if n and (total > proto.MAX_PAYLOAD or head > proto.MAX_HEADER):
            return items[:n], items[n:]
    return items[:MAX_REPLY_ITEMS], items[MAX_REPLY_ITEMS:]


# ---------------------------------------------------------------------- opening reads
def get_request(header: dict[str, Any], op: str) -> tuple[str, float | None, bool, int]:
    """A ``get``/``get_many`` request's ``(reader, timeout, block, max_items)``, checked."""
    name = proto.field(header, "reader", str)
    timeout = proto.field(header, "timeout", (int, float, type(None)), None)
    block = proto.field(header, "block", bool, True)
    most = proto.field(header, "max_items", int) if op == "get_many" else 1
    if timeout is not None and not timeout >= 0:
        raise ValueError("'timeout' must be a non-negative number")
    return name, timeout, block, most


def hand_out(
    queue: ServedQueue,
    session: Session,
    lock: threading.Lock,
    name: str,
    reader: ServedReader,
    items: list[Item],
    op: str,
    *,
    leaves_process: bool = True,
) -> tuple[dict[str, Any], list[bytes], list[Item]]:
    """The reply carrying ``items`` (reads ``reader`` just opened) to ``session``: its header,
    its payload (as the items' pieces, sent without joining them) and the items it carries.
    What one reply cannot carry goes back to the head uncounted, before the reply is sent;
    the rest become the session's open reads.  When the items leave this process
    (``leaves_process``), their records are in the OS first (``queue.write_out``): a kill -9
    of this process must not unmake an item another process holds, whose id would then be given
    to a later put.  A reader in the owner's own process needs no such step: it dies with us."""
    excess: list[Item] = []
    try:
        items, excess = fit_reply(items)
    except ItemTooLarge:
        excess = items  # given back, never stranded: the client is told why
        raise
    finally:
        for item in reversed(excess):  # back to the head, newest first, so they keep their order
            reader.release(item)
    if leaves_process:
        try:
            queue.write_out()
        except BaseException:
            for item in reversed(items):
                reader.release(item)
            raise
    with lock:
        session.readers[name] = reader
        for item in items:
            session.reads[(name, item.id)] = item
    if op == "get":
        return dict(item_meta(items[0]), ok=True), [items[0].data], items
    reply = {"ok": True, "items": [item_meta(it) for it in items], "lens": [len(it.data) for it in items]}
    return reply, [it.data for it in items], items


def take_back(
    session: Session, lock: threading.Lock, reader: ServedReader, name: str, items: list[Item]
) -> None:
    """The reply carrying ``items`` never reached the client: each still held by ``session``
    goes back to the head, uncounted (no error of the client's), the newest first."""
    for item in reversed(items):
        with lock:
            mine = session.reads.pop((name, item.id), None) is item
        if mine:
            reader.release(item)


# ---------------------------------------------------------------------- every other request
def put_extras(header: dict[str, Any]) -> dict[str, Any]:
    """The keywords of ``put_many`` a put request carries besides ``ttl``/``expire_at`` (all
    optional, so an older client's requests stay valid): ``"tag"`` ``[producer id, first
    sequence]``, ``"not_before"`` (epoch ms), ``"headers"`` (name -> base64), ``"keys"`` (one
    base64 key or null per item), ``"dedup": false``.  The queue checks the values as it
    checks its own caller's."""
    extras: dict[str, Any] = {}
    tag = header.get("tag")
    if tag is not None:
        if not (type(tag) is list and len(tag) == 2 and type(tag[0]) is int and type(tag[1]) is int):
            raise proto.ProtocolError("'tag' must be [producer id, first sequence]")
        extras["producer"] = (tag[0], tag[1])
    not_before = proto.field(header, "not_before", int, 0)
    if not_before:
        # half a millisecond early: the queue rounds seconds up to the ms, giving back this one
        extras["not_before"] = (not_before - 0.5) / 1000.0
    if "headers" in header:
        extras["headers"] = proto.headers_raw(header["headers"])
    if proto.field(header, "dedup", bool, True) is False:
        extras["dedup"] = False
    if "keys" in header:
        keys = proto.field(header, "keys", list)
        extras["keys"] = [None if k is None else proto.raw(k, "a key") for k in keys]
    return extras


def put_ids(queue: ServedQueue, op: str, header: dict[str, Any], payload: bytes | bytearray) -> list[int]:
    """Carry out a ``put``/``put_many`` request: the ids of its items.  They are consecutive
    except for a retried put (same producer's tag) some of whose items the queue had stored
    before.  It returns once the records are in the OS: acknowledged to another process means
    at least that, so the put survives this process being killed (docs/design.md, "Many
    processes")."""
    items = [bytes(payload)] if op == "put" else proto.split(payload, header.get("lens"))
    if isinstance(payload, bytearray):
        payload.clear()
    tag = header.get("tag") if len(header) == 2 else None
    if type(tag) is list and len(tag) == 2 and type(tag[0]) is int and type(tag[1]) is int and op == "put":
        # perf: a client's usual request, {"op": "put", "tag": [producer, sequence]}
        ids = queue.put_many(items, producer=(tag[0], tag[1]))
        queue.write_out()
        return ids
    ttl = proto.field(header, "ttl", (int, float, type(None)), None)
    expire_at = proto.field(header, "expire_at", (int, float, type(None)), None)
    extras = put_extras(header) if len(header) > 1 else {}
    if len(items) == 1 and not extras:
        ids = [queue.put(items[0], ttl=ttl, expire_at=expire_at)]  # perf: an untagged plain put
    else:
        ids = queue.put_many(items, ttl=ttl, expire_at=expire_at, **extras)
    queue.write_out()
    return ids


def consecutive(ids: list[int]) -> bool:
    """True when ``ids`` are ``ids[0]``, ``ids[0] + 1``, ... (a put's reply then names the first)."""
    return len(ids) < 2 or ids == list(range(ids[0], ids[0] + len(ids)))


def put_reply(ids: list[int]) -> bytes:
    """The JSON bytes of the reply to a put that stored (or had stored) ``ids``."""
    first = ids[0] if ids else -1
    return proto.put_reply(first, len(ids), None if consecutive(ids) else ids)


def put(queue: ServedQueue, op: str, header: dict[str, Any], payload: bytes | bytearray) -> tuple[int, int]:
    """:func:`put_ids`, as the first id (-1 for none) and how many (consecutive ids only)."""
    ids = put_ids(queue, op, header, payload)
    if not consecutive(ids):
        raise ValueError("the put's ids are not consecutive: use put_ids")
    return (ids[0] if ids else -1), len(ids)


def carry_out(
    queue: ServedQueue,
    session: Session,
    sessions: dict[str, Session],
    lock: threading.Lock,
    op: str,
    header: dict[str, Any],
    payload: bytes | bytearray,
) -> tuple[dict[str, Any], bytes]:
    """Carry out every request except ``get``/``get_many`` (which wait: remote/server.py).

    ``sessions`` are all the server's sessions and ``lock`` the server's leaf lock guarding them.
    A ``bytearray`` payload (a large request's own buffer, remote/transport.py) is emptied once
    its items are cut from it, so it is freed before the queue copies them into its journal.
    """
    if op in PUT_OPS:
        ids = put_ids(queue, op, header, payload)
        reply: dict[str, Any] = {"ok": True, "first": ids[0] if ids else -1, "count": len(ids)}
        if not consecutive(ids):
            reply["ids"] = ids
        return reply, b""
    if op in SETTLE_OPS:
        name, key = proto.field(header, "reader", str), proto.field(header, "id", int)
        kwargs = {k: proto.field(header, k, kinds) for k, kinds in SETTLE_OPS[op].items() if k in header}
        reader = existing_reader(queue, name)
        with lock:
            item = session.reads.pop((name, key), None)
        if item is None:
            raise UnknownRead(f"no open read of id {key} on reader {name!r} by this process")
        if op == "commit":
            reader.commit(item)
        elif op == "release":
            reader.release(item)
        elif op == "abort":
            reader.abort(item, kwargs.get("delay"))
        else:
            reader.reject(item, kwargs.get("reason", ""))
        return {"ok": True}, b""
    if op == "commit_many":
        name, keys = proto.field(header, "reader", str), proto.field(header, "ids", list)
        if not all(type(k) is int for k in keys):
            raise proto.ProtocolError("'ids' must be a list of integers")
        reader = existing_reader(queue, name)
        with lock:
            held = [(k, session.reads.pop((name, k), None)) for k in keys]
        unknown = [k for k, item in held if item is None]
        reader.commit_many([item for _, item in held if item is not None])
        if unknown:  # the others were committed all the same
            raise UnknownRead(f"no open reads of {unknown} on reader {name!r} by this process")
        return {"ok": True}, b""
    if op == "seek":
        name = proto.field(header, "reader", str)
        position = proto.field(header, "position", (str, int, float))
        if isinstance(position, str) and position not in ("earliest", "latest"):
            raise ValueError(f"position must be 'earliest', 'latest', an id or a time, not {position!r}")
        head = existing_reader(queue, name).seek(position)
        with lock:  # the seek took back every open read of this reader, in every process
            for s in sessions.values():
                s.forget(name)
        return {"ok": True, "head": head}, b""
    if op == "reader":
        name, config = (
            proto.field(header, "reader", str),
            proto.field(header, "config", (dict, type(None)), None),
        )
        if config is not None and name in queue.readers():
            # An existing reader's config from a client changes only the plain fields it carries:
            # a client cannot send sinks, so the owner's stored and running ones stay (dropping
            # a dead-letter queue because a worker did not name it would lose items).
            changes = {k: v for k, v in config.items() if k not in CLIENT_KEEPS}
            queue.set_reader_settings(name, changes)
        else:
            queue.reader(name, None if config is None else ReaderConfig(**config))
        return {"ok": True}, b""
    if op == "remove_reader":
        name = proto.field(header, "reader", str)
        queue.remove_reader(name)
        with lock:  # its open reads went with it, in every process
            for s in sessions.values():
                s.forget(name)
        return {"ok": True}, b""
    if op == "readers":
        return {"ok": True, "readers": queue.readers()}, b""
    if op == "reader_settings":
        return {"ok": True, "settings": queue.reader_settings(proto.field(header, "reader", str))}, b""
    if op == "set_reader_settings":
        name, changes = proto.field(header, "reader", str), proto.field(header, "changes", dict)
        return {"ok": True, "settings": queue.set_reader_settings(name, changes)}, b""
    if op == "stats":
        stats = attrs.asdict(queue.stats(), recurse=True)
        reply = {"ok": True, "stats": stats}
        if len(proto.dump_header(reply)) > proto.REPLY_LIMITS.header:
            raise JournaledError(
                f"the stats of {len(stats['readers'])} readers are more than one reply "
                f"carries ({proto.REPLY_LIMITS.header} bytes of header)"
            )
        return reply, b""
    if op == "sync":
        queue.sync()
        return {"ok": True}, b""
    raise proto.ProtocolError(f"unknown op {op!r}")


def carry_out_here(
    queue: ServedQueue, session: Session, lock: threading.Lock, header: dict[str, Any], payload: bytes = b""
) -> tuple[dict[str, Any], bytes]:
    """Carry out a request of this very process on the queue it owns (a client that took the
    directory over after the owner left): the same code as for a request that came over the
    socket, and the same reply, without the socket.  A ``get`` waits in one piece (there is no
    peer that could go away) and its items stay in this process (no write-out)."""
    op = proto.field(header, "op", str)
    if op in GET_OPS:
        name, timeout, block, most = get_request(header, op)
        reader = existing_reader(queue, name)
        items = reader.get_many(most, timeout, block=block)
        reply, out, _ = hand_out(queue, session, lock, name, reader, items, op, leaves_process=False)
        return reply, out[0] if len(out) == 1 else b"".join(out)
    return carry_out(queue, session, {"here": session}, lock, op, header, payload)


__all__ = [
    "GET_OPS",
    "MAX_REPLY_ITEMS",
    "META_BOUND",
    "PUT_OPS",
    "SETTLE_OPS",
    "Session",
    "carry_out",
    "carry_out_here",
    "existing_reader",
    "fit_reply",
    "get_request",
    "hand_out",
    "consecutive",
    "item_meta",
    "meta_bound",
    "put",
    "put_extras",
    "put_ids",
    "put_reply",
    "take_back",
]
