"""The owner's limits: every reply fits what a client accepts, every resource the server takes
is bounded (connections, descriptors, threads, connections before hello, request memory), and a
client's open reads are kept exactly."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import Any

import attrs
import pytest

from journaled import JournaledQueue, QueueConfig
from journaled.remote import admission
from journaled.remote import protocol as proto
from journaled.remote import server as server_mod
from journaled.remote.transport import FrameReader, send_frame, socket_address

TIMEOUT = 60.0


def until(test: Any, timeout: float = TIMEOUT) -> None:
    """Poll ``test()`` until it holds (or fail after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not test():
        assert time.monotonic() < deadline, "the condition did not come true in time"
        time.sleep(0.01)


def connect(directory: str, timeout: float = TIMEOUT) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        sock.connect(socket_address(fd, directory))
    finally:
        os.close(fd)
    return sock


class Client:
    """One raw connection of a session, speaking the protocol through remote/transport.py."""

    def __init__(self, directory: str, session: str = "0123456789abcdef", timeout: float = TIMEOUT) -> None:
        self.sock = connect(directory, timeout)
        self.frames = FrameReader(self.sock)
        self.payload = b""
        reply = self.call({"op": "hello", "version": proto.VERSION, "session": session})
        assert reply["ok"], reply

    def call(self, header: dict[str, Any], payload: bytes = b"") -> dict[str, Any]:
        send_frame(self.sock, header, payload)
        frame = self.frames.read()
        assert frame is not None, "the owner closed the connection"
        self.payload = frame[1]
        return frame[0]

    def close(self) -> None:
        self.sock.close()


def owned(path: str, **config: Any) -> JournaledQueue:
    q = JournaledQueue(path, QueueConfig(**config)) if config else JournaledQueue(path)
    assert q.is_owner
    return q


def open_reads(q: JournaledQueue) -> list[dict[str, int]]:
    return [dict(c.open_reads) for c in q.stats().clients]


# ---------------------------------------------------------------------- replies that fit
def test_a_get_many_larger_than_a_reply_is_trimmed_and_the_rest_is_given_back_at_once(tmp_path):
    q = owned(str(tmp_path / "q"))
    r = q.reader("r")
    q.put_many([b"x%d" % i for i in range(20000)])
    c = Client(q.path)
    try:
        reply = c.call({"op": "get_many", "reader": "r", "max_items": 20000, "timeout": 5.0})
        assert reply["ok"], reply
        sent = [m["id"] for m in reply["items"]]
        assert 0 < len(sent) < 20000 and sent == list(range(1, len(sent) + 1))
        assert proto.split(c.payload, reply["lens"])[:2] == [b"x0", b"x1"]
        # given back before the reply went out, not when the session ends
        st = r.stats()
        assert (st.open_reads, st.items_waiting) == (len(sent), 20000 - len(sent))
        nxt = c.call({"op": "get_many", "reader": "r", "max_items": 1, "timeout": 5.0})
        assert [m["id"] for m in nxt["items"]] == [len(sent) + 1]
    finally:
        c.close()
        q.close()


def test_the_largest_get_many_reply_header_fits_a_plain_frame():
    from journaled.remote import handlers

    worst = {"id": 2**63, "add_time": -1.2345678901234567e300, "expire_at": -1.2345678901234567e300}
    meta = dict(worst, error_count=2**32)
    reply = {
        "ok": True,
        "items": [meta] * handlers.MAX_REPLY_ITEMS,
        "lens": [2**30] * handlers.MAX_REPLY_ITEMS,
    }
    assert len(proto.dump_header(reply)) <= proto.MAX_HEADER


def test_an_item_larger_than_a_plain_frame_is_delivered_whole(tmp_path):
    big = os.urandom(1 << 20) * 260  # 260 MiB: over the 256 MiB of a plain frame
    q = owned(str(tmp_path / "q"), max_item_size=300 << 20, journal_size=512 << 20)
    r = q.reader("r")
    q.put(big)
    q.put(b"next")
    c = Client(q.path)
    try:
        reply = c.call({"op": "get", "reader": "r", "timeout": 5.0})
        assert reply["ok"] and reply["id"] == 1
        assert c.payload == big
        del big
        assert c.call({"op": "commit", "reader": "r", "id": 1}) == {"ok": True}
        assert c.call({"op": "get", "reader": "r", "timeout": 5.0})["id"] == 2 and c.payload == b"next"
        assert r.stats().open_reads == 1
    finally:
        c.close()
        q.close()


def test_an_item_larger_than_a_client_accepts_is_refused_and_stays_at_the_head(tmp_path, monkeypatch):
    q = owned(str(tmp_path / "q"))
    r = q.reader("r")
    q.put(b"y" * 5000)
    monkeypatch.setattr(proto, "REPLY_LIMITS", proto.Limits(proto.MAX_LONG_HEADER, 4096), raising=False)
    c = Client(q.path)
    try:
        for op, extra in (("get", {}), ("get_many", {"max_items": 5})):
            reply = c.call(dict({"op": op, "reader": "r", "timeout": 5.0}, **extra))
            assert reply["error"] == "ItemTooLarge" and "4096" in reply["message"]
            st = r.stats()
            assert (st.open_reads, st.items_waiting, st.aborted) == (0, 1, 0)
        assert open_reads(q) == [{}]
    finally:
        c.close()
        q.close()


def test_stats_larger_than_a_plain_header_are_returned(tmp_path, monkeypatch):
    """The stats of thousands of readers pass ``MAX_HEADER``; scaled down here."""
    q = owned(str(tmp_path / "q"))
    for i in range(12):
        q.reader(f"reader-{i:04d}")
    monkeypatch.setattr(proto, "MAX_HEADER", 4096)
    assert len(json.dumps(attrs.asdict(q.stats(), recurse=True))) > 4096
    c = Client(q.path)
    try:
        stats = c.call({"op": "stats"})["stats"]
        assert [r["name"] for r in stats["readers"]] == [f"reader-{i:04d}" for i in range(12)]
        assert c.call({"op": "readers"})["ok"]  # the connection goes on
    finally:
        c.close()
        q.close()


# ---------------------------------------------------------------------- a removed reader
@pytest.mark.parametrize("remover", ["owner", "client"])
def test_a_removed_reader_stays_removed_when_a_process_holding_its_reads_leaves(tmp_path, remover):
    q = owned(str(tmp_path / "q"))
    q.reader("r")
    q.reader("keep")
    q.put_many([b"a", b"b"])
    c = Client(q.path)
    other = Client(q.path, session="fedcba9876543210")
    try:
        assert c.call({"op": "get", "reader": "r", "timeout": 5.0})["id"] == 1
        assert c.call({"op": "get", "reader": "keep", "timeout": 5.0})["id"] == 1
        if remover == "owner":
            q.remove_reader("r")
        else:
            assert other.call({"op": "remove_reader", "reader": "r"}) == {"ok": True}
            assert open_reads(q) == [{"keep": 1}, {}]
        c.close()
        until(lambda: len(q.stats().clients) == 1)
        assert q.readers() == ["keep"]
        assert not any(n.endswith(".read.r") for n in os.listdir(q.path))
        keep = q.reader("keep").stats()  # the other reader's read was aborted as always
        assert (keep.open_reads, keep.items_waiting, keep.aborted) == (0, 2, 1)
    finally:
        c.close()
        other.close()
        q.close()


# ---------------------------------------------------------------------- threads, hello, connections
class FailingThreads:
    """The ``threading`` module, but starting a connection's thread fails ``fail`` times."""

    def __init__(self, fail: int) -> None:
        self.fail = fail

    def __getattr__(self, name: str) -> Any:
        return getattr(threading, name)

    def Thread(self, *args: Any, **kwargs: Any) -> threading.Thread:  # noqa: N802 (the module's name)
        thread = threading.Thread(*args, **kwargs)
        if kwargs.get("name") == "journaled-conn" and self.fail > 0:
            self.fail -= 1

            def start() -> None:
                raise RuntimeError("can't start new thread")

            thread.start = start  # type: ignore[method-assign]
        return thread


def test_a_connection_without_a_thread_is_refused_and_the_owner_goes_on_accepting(tmp_path, monkeypatch):
    q = owned(str(tmp_path / "q"))
    monkeypatch.setattr(admission, "threading", FailingThreads(2))
    try:
        for _ in range(2):
            s = connect(q.path)
            frame = FrameReader(s).read()
            assert frame is not None and frame[0]["ok"] is False
            assert "thread" in frame[0]["message"]
            s.close()
        c = Client(q.path, timeout=30.0)
        assert c.call({"op": "put_many", "lens": [2]}, b"ok")["count"] == 1
        c.close()
    finally:
        q.close()


def test_a_connection_that_does_not_say_hello_in_time_is_closed(tmp_path, monkeypatch):
    monkeypatch.setattr(admission, "HELLO_TIMEOUT", 0.5)
    q = owned(str(tmp_path / "q"))
    try:
        silent = connect(q.path, timeout=30.0)
        trickle = connect(q.path, timeout=30.0)
        start = time.monotonic()
        trickle.sendall(proto.HEAD.pack(40, 0))  # a hello begun, never finished
        assert silent.recv(1) == b""
        assert trickle.recv(1) == b""
        assert time.monotonic() - start < 30.0
        until(lambda: not q.stats().clients)
        c = Client(q.path)  # a client that speaks at once is served as before
        assert c.call({"op": "readers"}) == {"ok": True, "readers": []}
        c.close()
    finally:
        q.close()


def test_silent_connections_never_lock_a_speaking_client_out(tmp_path, monkeypatch):
    monkeypatch.setattr(admission, "MAX_CONNECTIONS", 8)
    monkeypatch.setattr(admission, "MAX_PENDING", 4, raising=False)
    q = owned(str(tmp_path / "q"))
    silent = [connect(q.path) for _ in range(8)]
    try:

        def speaks() -> bool:
            try:
                c = Client(q.path, timeout=5.0)
            except (AssertionError, OSError):
                return False
            c.close()
            return True

        until(speaks, timeout=30.0)
    finally:
        for s in silent:
            s.close()
        q.close()


def test_a_refused_connection_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(admission, "MAX_CONNECTIONS", 2)
    q = owned(str(tmp_path / "q"))
    kept = [Client(q.path, session=f"{i:016d}") for i in range(2)]
    try:
        s = connect(q.path)
        frame = FrameReader(s).read()
        assert frame is not None and frame[0]["ok"] is False
        assert "too many connections" in frame[0]["message"] and "2" in frame[0]["message"]
        s.close()
        assert kept[0].call({"op": "readers"})["ok"]  # the sessions served go on
    finally:
        for c in kept:
            c.close()
        q.close()


OWNER_WITH_FEW_DESCRIPTORS = """
import os, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from journaled import JournaledQueue
q = JournaledQueue(sys.argv[1])
q.reader("r")
print("listening", flush=True)
for line in sys.stdin:
    if line.strip() == "put":
        try:
            q.put(b"x" * 100)
            q.sync()
            print("put ok", flush=True)
        except Exception as exc:
            print("put failed", exc, flush=True)
"""


def test_a_connection_flood_leaves_the_owner_its_descriptors(tmp_path):
    from support.child import Child

    d = str(tmp_path / "q")
    os.mkdir(d, 0o700)
    owner = Child(OWNER_WITH_FEW_DESCRIPTORS, d, merge_stderr=True)
    flood: list[Client] = []
    try:
        owner.wait_for_line("listening")
        for i in range(100):
            try:
                flood.append(Client(d, session=f"{i:016d}", timeout=2.0))
            except (AssertionError, OSError):
                pass
        reserve = getattr(server_mod, "FD_RESERVE", 64)
        in_use = len(os.listdir(f"/proc/{owner.proc.pid}/fd"))
        assert 0 < len(flood) and 128 - in_use >= reserve, (len(flood), in_use)
        owner.send("put")
        owner.wait_for_line("put ")
        assert "put ok" in owner.lines, owner.lines[-5:]
    finally:
        for c in flood:
            c.close()
        owner.kill()


# ---------------------------------------------------------------------- request memory
def test_a_request_that_would_pass_the_memory_budget_waits_then_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(server_mod, "REQUEST_MEMORY", 1 << 20, raising=False)
    monkeypatch.setattr(server_mod, "REQUEST_WAIT", 0.5, raising=False)
    q = owned(str(tmp_path / "q"))
    r = q.reader("r")
    slow = Client(q.path, session="a" * 16)
    other = Client(q.path, session="b" * 16)
    try:
        # a put of 800 KiB whose payload is only half sent holds its share while it arrives
        held = proto.encode({"op": "put_many", "lens": [800 << 10]}, b"s" * (800 << 10))
        slow.sock.sendall(held[: len(held) // 2])
        until(lambda: getattr(q.server, "request_bytes", 1))  # it holds its share
        reply = other.call({"op": "put_many", "lens": [600 << 10]}, b"o" * (600 << 10))
        assert reply["ok"] is False and "REQUEST_MEMORY" in reply["message"], reply
        assert len(r) == 0  # nothing was stored
        assert other.call({"op": "put_many", "lens": [5]}, b"small")["count"] == 1  # still usable
        slow.sock.sendall(held[len(held) // 2 :])
        assert slow.frames.read()[0]["ok"] is True  # type: ignore[index]
        assert len(r) == 2
        assert other.call({"op": "put_many", "lens": [600 << 10]}, b"o" * (600 << 10))["ok"]
    finally:
        slow.close()
        other.close()
        q.close()


def test_a_large_request_that_stalls_mid_frame_is_dropped_and_gives_its_memory_back(tmp_path, monkeypatch):
    monkeypatch.setattr(server_mod, "RECEIVE_TIMEOUT", 0.5, raising=False)
    q = owned(str(tmp_path / "q"))
    r = q.reader("r")
    stalled = Client(q.path, session="a" * 16, timeout=30.0)
    try:
        held = proto.encode({"op": "put_many", "lens": [800 << 10]}, b"s" * (800 << 10))
        stalled.sock.sendall(held[: len(held) // 2])  # and never the rest
        assert stalled.sock.recv(1) == b""  # dropped by the owner
        until(lambda: not q.stats().clients)
        assert q.server is not None and getattr(q.server, "request_bytes", 0) == 0
        assert len(r) == 0
        c = Client(q.path, session="b" * 16)
        assert c.call({"op": "put_many", "lens": [800 << 10]}, b"o" * (800 << 10))["count"] == 1
        c.close()
    finally:
        stalled.close()
        q.close()


# ---------------------------------------------------------------------- open reads kept exactly
def test_settled_reads_and_reads_of_others_keep_each_session_exact(tmp_path):
    q = owned(str(tmp_path / "q"))
    r = q.reader("r")
    q.put_many([b"%d" % i for i in range(1, 8)])
    a = Client(q.path, session="a" * 16)
    b = Client(q.path, session="b" * 16)
    try:
        got_a = [
            m["id"] for m in a.call({"op": "get_many", "reader": "r", "max_items": 4, "timeout": 5})["items"]
        ]
        got_b = [
            m["id"] for m in b.call({"op": "get_many", "reader": "r", "max_items": 2, "timeout": 5})["items"]
        ]
        assert (got_a, got_b) == ([1, 2, 3, 4], [5, 6])
        assert sorted(open_reads(q), key=lambda d: -d.get("r", 0)) == [{"r": 4}, {"r": 2}]
        # a read of another process is refused and stays that process's
        assert a.call({"op": "commit", "reader": "r", "id": 5})["error"] == "UnknownRead"
        assert a.call({"op": "abort", "reader": "r", "id": 99})["error"] == "UnknownRead"
        reply = a.call({"op": "commit_many", "reader": "r", "ids": [1, 2, 6, 42]})
        assert reply["error"] == "UnknownRead" and "6" in reply["message"] and "42" in reply["message"]
        assert a.call({"op": "release", "reader": "r", "id": 3}) == {"ok": True}
        assert a.call({"op": "commit", "reader": "r", "id": 1})["error"] == "UnknownRead"  # settled
        assert sorted(open_reads(q), key=lambda d: d["r"]) == [{"r": 1}, {"r": 2}]
        assert r.stats().open_reads == 3
        assert b.call({"op": "commit", "reader": "r", "id": 6}) == {"ok": True}
        # a leaving session aborts exactly what it still holds: 4 (a), then 5 stays b's
        a.close()
        until(lambda: len(q.stats().clients) == 1)
        st = r.stats()
        assert (st.committed, st.aborted, st.open_reads, st.items_waiting) == (3, 1, 1, 3)
        assert open_reads(q) == [{"r": 1}]
    finally:
        a.close()
        b.close()
        q.close()


def test_a_seek_takes_back_every_session_s_reads_and_a_leaving_session_aborts_none_of_them(tmp_path):
    q = owned(str(tmp_path / "q"))
    r = q.reader("r")
    q.put_many([b"a", b"b", b"c"])
    a = Client(q.path, session="a" * 16)
    b = Client(q.path, session="b" * 16)
    try:
        assert a.call({"op": "get", "reader": "r", "timeout": 5})["id"] == 1
        assert b.call({"op": "get", "reader": "r", "timeout": 5})["id"] == 2
        assert b.call({"op": "seek", "reader": "r", "position": "earliest"}) == {"ok": True, "head": 1}
        assert open_reads(q) == [{}, {}]
        assert a.call({"op": "commit", "reader": "r", "id": 1})["error"] == "UnknownRead"
        again = a.call({"op": "get_many", "reader": "r", "max_items": 1, "timeout": 5})
        assert [m["id"] for m in again["items"]] == [1] and again["items"][0]["error_count"] == 0
        b.close()
        until(lambda: len(q.stats().clients) == 1)
        st = r.stats()
        assert (st.aborted, st.open_reads, st.items_waiting) == (0, 1, 2)
        a.close()
        until(lambda: not q.stats().clients)
        st = r.stats()
        assert (st.aborted, st.open_reads, st.items_waiting) == (1, 0, 3)
    finally:
        a.close()
        b.close()
        q.close()
