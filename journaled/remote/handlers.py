"""What the owner does for each request of another process (remote/server.py carries the bytes).

Every function here takes the served queue and the client's :class:`Session` and returns the
reply header and payload; an exception becomes an error reply (remote/server.py).  Nothing here reads
from or writes to a socket, so each request's effect on the queue can be read in one place.

Open reads are keyed by ``(reader, id)`` in the session that took them: a process can settle
only the reads it holds, and when its last connection closes they are aborted (remote/server.py).
"""

from __future__ import annotations

import threading
from typing import Any

import attrs

from journaled.config import ReaderConfig
from journaled.errors import UnknownRead, UnknownReader
from journaled.item import Item
from journaled.remote import protocol as proto

#: how a read is settled: the op's name -> the keyword arguments it may carry (and their types)
SETTLE_OPS: dict[str, dict[str, tuple[type, ...]]] = {
    "commit": {},
    "abort": {"delay": (int, float, type(None))},
    "release": {},
    "reject": {"reason": (str,)},
}


class Session:
    """One client process: its connections and its open reads (``(reader, id) -> Item``)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.connections = 0
        self.reads: dict[tuple[str, int], Item] = {}


def existing_reader(queue: Any, name: str) -> Any:
    """The reader ``name``; never created here (a removed reader stays removed)."""
    if name not in queue.readers():
        raise UnknownReader(f"no reader named {name!r}")
    return queue.reader(name)


def item_meta(item: Item) -> dict[str, Any]:
    """What a reply says of one delivered item besides its payload."""
    return {
        "id": item.id,
        "add_time": item.add_time,
        "expire_at": item.expire_at,
        "error_count": item.error_count,
    }


def fit_reply(items: list[Item]) -> tuple[list[Item], list[Item]]:
    """Split the items a ``get_many`` took into those one reply carries (at least the first)
    and the rest, which the caller gives back."""
    total = 0
    for n, item in enumerate(items):
        total += len(item.data)
        if n and total > proto.MAX_PAYLOAD:
            return items[:n], items[n:]
    return items, []


def carry_out(
    queue: Any,
    session: Session,
    sessions: dict[str, Session],
    lock: threading.Lock,
    op: str,
    header: dict[str, Any],
    payload: bytes,
) -> tuple[dict[str, Any], bytes]:
    """Carry out every request except ``get``/``get_many`` (which wait: remote/server.py).

    ``sessions`` are all the server's sessions and ``lock`` the server's leaf lock guarding them.
    """
    if op in ("put", "put_many"):
        items = [payload] if op == "put" else proto.split(payload, header.get("lens"))
        ttl = proto.field(header, "ttl", (int, float, type(None)), None)
        expire_at = proto.field(header, "expire_at", (int, float, type(None)), None)
        ids = queue.put_many(items, ttl=ttl, expire_at=expire_at)
        if queue.config.sync != "always":
            # the client cannot see our buffer: acknowledged means at least handed to the OS,
            # so its put survives this process being killed (docs/design.md, "Many processes")
            queue.journal.write_out()
        return {"ok": True, "first": ids[0] if ids else -1, "count": len(ids)}, b""
    if op in SETTLE_OPS:
        name, key = proto.field(header, "reader", str), proto.field(header, "id", int)
        kwargs = {
            k: proto.field(header, k, kinds, None) for k, kinds in SETTLE_OPS[op].items() if k in header
        }
        reader = existing_reader(queue, name)
        with lock:
            item = session.reads.pop((name, key), None)
        if item is None:
            raise UnknownRead(f"no open read of id {key} on reader {name!r} by this process")
        getattr(reader, op)(item, **kwargs)
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
                s.reads = {k: v for k, v in s.reads.items() if k[0] != name}
        return {"ok": True, "head": head}, b""
    if op == "reader":
        name, config = (
            proto.field(header, "reader", str),
            proto.field(header, "config", (dict, type(None)), None),
        )
        queue.reader(name, None if config is None else ReaderConfig(**config))
        return {"ok": True}, b""
    if op == "remove_reader":
        queue.remove_reader(proto.field(header, "reader", str))
        return {"ok": True}, b""
    if op == "readers":
        return {"ok": True, "readers": queue.readers()}, b""
    if op == "stats":
        return {"ok": True, "stats": attrs.asdict(queue.stats(), recurse=True)}, b""
    if op == "sync":
        queue.sync()
        return {"ok": True}, b""
    raise proto.ProtocolError(f"unknown op {op!r}")


__all__ = ["SETTLE_OPS", "Session", "carry_out", "existing_reader", "fit_reply", "item_meta"]
