"""A client's round trip kept short (issue 26, point 6) without changing what goes over the wire:
the usual put's request and reply are the very bytes the JSON encoder makes, a one-item request is
stored with the queue's ``put`` and in the OS before its reply, and a client's connections wait
with kernel time limits (no ``poll(2)`` before each send and receive)."""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
from typing import Any

import pytest

from journaled import JournaledQueue
from journaled.remote import connections, handlers, transport
from journaled.remote import protocol as proto
from journaled.remote.connections import REPLY_MARGIN, Link
from journaled.remote.transport import FrameReader, send_frame
from support.child import Child

OWNER = """
import sys
from journaled import JournaledQueue
q = JournaledQueue(sys.argv[1])
q.reader("r")
print("ready", flush=True)
sys.stdin.readline()
q.close()
"""


def json_of(header: dict[str, Any]) -> bytes:
    return json.dumps(header, separators=(",", ":"), allow_nan=False).encode()


def test_a_plain_put_request_is_the_json_of_its_header() -> None:
    assert proto.dump_header(proto.PUT_REQUEST) == json_of({"op": "put"})
    assert proto.PUT_REQUEST == {"op": "put"}


@pytest.mark.parametrize(("first", "count"), [(0, 1), (-1, 0), (7, 3), (2**62, 1)])
def test_the_put_reply_is_the_json_the_encoder_makes(first: int, count: int) -> None:
    assert proto.put_reply(first, count) == json_of({"ok": True, "first": first, "count": count})


class Recording:
    """The part of the owner's contract a put uses, recording the calls in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.next_id = 10

    def put(self, data: bytes, *, expire_at: float | None = None, ttl: float | None = None) -> int:
        self.calls.append(("put", (data, expire_at, ttl)))
        self.next_id += 1
        return self.next_id - 1

    def put_many(
        self, items: list[bytes], *, expire_at: float | None = None, ttl: float | None = None
    ) -> list[int]:
        self.calls.append(("put_many", (items, expire_at, ttl)))
        first, self.next_id = self.next_id, self.next_id + len(items)
        return list(range(first, self.next_id))

    def write_out(self) -> None:
        self.calls.append(("write_out", None))


@pytest.mark.parametrize(
    ("op", "header", "payload"),
    [
        ("put", {"op": "put"}, b"one"),
        ("put_many", {"op": "put_many", "lens": [3], "ttl": 5.0}, b"one"),
    ],
)
def test_a_request_of_one_item_is_stored_with_put_and_written_out_before_the_reply(
    op: str, header: dict[str, Any], payload: bytes
) -> None:
    q = Recording()
    session = handlers.Session(1)
    reply, out = handlers.carry_out(q, session, {}, threading.Lock(), op, header, payload)  # type: ignore[arg-type]
    assert reply == {"ok": True, "first": 10, "count": 1} and out == b""
    assert q.calls == [("put", (b"one", None, header.get("ttl"))), ("write_out", None)]


def test_a_request_of_several_items_is_stored_with_one_put_many_and_written_out() -> None:
    q = Recording()
    first, count = handlers.put(q, "put_many", {"op": "put_many", "lens": [1, 2]}, b"abc")  # type: ignore[arg-type]
    assert (first, count) == (10, 2)
    assert q.calls == [("put_many", ([b"a", b"bc"], None, None)), ("write_out", None)]


def raw_exchange(sock: socket.socket, header: dict[str, Any], payload: bytes = b"") -> dict[str, Any]:
    send_frame(sock, header, payload)
    frame = FrameReader(sock).read()
    assert frame is not None
    return frame[0]


def test_an_owner_answers_puts_of_every_form_with_their_ids(tmp_path) -> None:
    with JournaledQueue(str(tmp_path / "q")) as q:
        r = q.reader("r")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(60)
        with sock:
            sock.connect(os.path.join(q.path, proto.SOCKET_NAME))
            hello = {"op": "hello", "version": proto.VERSION, "session": "0123456789abcdef", "pid": 1}
            assert raw_exchange(sock, hello)["ok"] is True
            assert raw_exchange(sock, proto.PUT_REQUEST, b"a") == {"ok": True, "first": 1, "count": 1}
            assert raw_exchange(sock, {"op": "put", "ttl": None}, b"b") == {
                "ok": True,
                "first": 2,
                "count": 1,
            }
            many = {"op": "put_many", "lens": [1, 1], "ttl": None, "expire_at": None}
            assert raw_exchange(sock, many, b"cd") == {"ok": True, "first": 3, "count": 2}
            assert raw_exchange(sock, {"op": "put_many", "lens": []}) == {"ok": True, "first": -1, "count": 0}
        assert [r.get(timeout=0).data for _ in range(4)] == [b"a", b"b", b"c", b"d"]


def time_limits(sock: socket.socket) -> tuple[float, float]:
    def seconds(opt: int) -> float:
        whole, micro = struct.unpack("ll", sock.getsockopt(socket.SOL_SOCKET, opt, struct.calcsize("ll")))
        return whole + micro / 1e6

    return seconds(socket.SO_RCVTIMEO), seconds(socket.SO_SNDTIMEO)


def test_a_client_connection_waits_with_kernel_time_limits_not_a_python_timeout(
    tmp_path, monkeypatch
) -> None:
    d = str(tmp_path / "q")
    owner = Child(OWNER, d, merge_stderr=True)
    try:
        owner.wait_for_line("ready")
        link = Link(d)
        try:
            assert link.call({"op": "readers"})[0]["readers"] == ["r"]
            (sock,) = link._idle
            assert sock.gettimeout() is None  # blocking: no poll(2) before each send and recv
            assert time_limits(sock) == (REPLY_MARGIN, REPLY_MARGIN)
            monkeypatch.setattr(connections, "REPLY_MARGIN", 2.5)
            link.call({"op": "readers"}, wait=1.0)
            assert time_limits(sock) == (3.5, 3.5)
            link.call({"op": "readers"}, wait=0.4)  # a wait counts in whole seconds, rounded up
            assert time_limits(sock) == (3.5, 3.5)
            link.call({"op": "readers"}, wait=1.2)
            assert time_limits(sock) == (4.5, 4.5)
            assert link.call(proto.PUT_REQUEST, b"x", is_put=True)[0] == {"ok": True, "first": 1, "count": 1}
        finally:
            link.kill()
        owner.send("")
        owner.finish()
    finally:
        owner.stop()


class Wire:
    """A socket's receiving end fed from a list of chunks, recording each ``recv``'s flags."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.flags: list[int] = []

    def recv(self, n: int, flags: int = 0) -> bytes:
        self.flags.append(flags)
        if flags & socket.MSG_DONTWAIT and not self.chunks:
            raise BlockingIOError
        return self.chunks.pop(0)[:n] if self.chunks else b""


def frame(header: dict[str, Any], payload: bytes = b"") -> bytes:
    return proto.encode(header, payload)


@pytest.mark.parametrize(
    "chunks",
    [
        [frame({"ok": True}, b"one") + frame({"ok": True, "n": 2}, b"two")],  # two in one recv
        [
            frame({"ok": True}, b"one")[:5],
            frame({"ok": True}, b"one")[5:] + frame({"ok": True, "n": 2}, b"two"),
        ],
        [frame({"ok": True}, b"one"), frame({"ok": True, "n": 2}, b"two")],
    ],
    ids=["together", "cut", "one per recv"],
)
def test_frames_read_the_same_however_the_bytes_arrive(chunks: list[bytes]) -> None:
    frames = FrameReader(Wire(chunks))  # type: ignore[arg-type]
    assert frames.read() == ({"ok": True}, b"one")
    assert frames.read() == ({"ok": True, "n": 2}, b"two")
    assert frames.read() is None


def test_a_frame_whose_lengths_break_the_limits_is_refused_when_it_arrives_whole() -> None:
    bad = proto.HEAD.pack(1, 0) + b"{"  # a header shorter than any JSON object
    with pytest.raises(proto.ProtocolError):
        FrameReader(Wire([bad])).read()  # type: ignore[arg-type]


@pytest.mark.parametrize(("runnable", "polls"), [(1, True), (64, False)])
def test_the_owner_polls_only_while_no_task_waits_for_a_core(monkeypatch, runnable: int, polls: bool) -> None:
    monkeypatch.setattr(transport, "runnable_tasks", lambda: runnable)
    monkeypatch.setattr(transport, "IDLE_CHECK", 0.0)
    monkeypatch.setattr(transport.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    wire = Wire([frame({"op": "readers"})])
    frames = FrameReader(wire, spin=0.001)  # type: ignore[arg-type]
    frames.quick = 2  # the last two requests came at once: a client sending back to back
    assert frames.read() == ({"op": "readers"}, b"")
    assert (socket.MSG_DONTWAIT in wire.flags) is polls


def test_the_machine_says_how_many_tasks_are_runnable() -> None:
    running = transport.runnable_tasks()
    assert running is None or running >= 1  # this test's own thread runs


@pytest.mark.parametrize(
    "header",
    [{"ok": True}, {"ok": 1}, {"ok": 1.0}, {"ok": False}, {"ok": True, "first": 1}, {"op": "put"}, {}],
)
def test_every_header_is_the_json_the_encoder_makes(header: dict[str, Any]) -> None:
    assert proto.dump_header(header) == json_of(header)
