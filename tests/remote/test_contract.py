"""The owner's contract (remote/contract.py) and the seams around it.

* the server and its handlers use nothing of the queue but ``ServedQueue``/``ServedReader``: an
  object that has only those members is served, every request answered;
* "acknowledged to another process = in the OS" is one queue method, called before every reply
  that acknowledges a put or carries an item;
* one framing module (remote/transport.py) for both ends; the client never imports the server;
* the choice between the owner over the socket and the queue owned here is made in one place
  (``RemoteQueue.call``), and after a takeover every client call works through it.
"""

from __future__ import annotations

import ast
import contextlib
import datetime as _dt
import os
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from journaled import Empty, JournaledQueue, OwnerLost, ReaderConfig, UnknownRead
from journaled.disk.dirlock import DirLock, owner_pid
from journaled.reader import Reader
from journaled.remote import protocol as proto
from journaled.remote.contract import ServedQueue, ServedReader
from journaled.remote.server import serve
from journaled.remote.transport import FrameReader, send_frame, socket_address

TIMEOUT = 120
REMOTE = Path(__file__).resolve().parents[2] / "journaled" / "remote"


def members(protocol: type) -> set[str]:
    """The members a Protocol class lists (its own public names)."""
    return {name for name in vars(protocol) if not name.startswith("_")}


class Only:
    """Exposes only ``allowed`` of ``target`` and logs each use: anything else the server asked
    for would be an ``AttributeError``, i.e. an error reply."""

    def __init__(self, target: Any, allowed: set[str], log: list[str], wrap: dict[str, Any]) -> None:
        self._target, self._allowed, self._log, self._wrap = target, allowed, log, wrap

    def __getattr__(self, name: str) -> Any:
        if name not in self._allowed:
            self._log.append(f"FORBIDDEN {name}")
            raise AttributeError(f"{name!r} is not part of the owner's contract")
        self._log.append(name)
        value = getattr(self._target, name)
        if name in self._wrap:
            return self._wrap[name](value)
        return value


def only_queue(q: JournaledQueue, path: str, log: list[str]) -> Any:
    def reader(method: Any) -> Any:
        return lambda *a, **k: Only(method(*a, **k), members(ServedReader), log, {})

    proxy = Only(q, members(ServedQueue) - {"path"}, log, {"reader": reader})
    proxy.__dict__["path"] = path  # served from another directory: q's own socket is in q.path
    log.append("path")
    return proxy


class Client:
    """A raw client speaking the protocol through remote/transport.py (as connections.py does)."""

    def __init__(self, directory: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self.sock.connect(socket_address(fd, directory))
        finally:
            os.close(fd)
        self.frames = FrameReader(self.sock)
        assert self.call({"op": "hello", "version": proto.VERSION, "session": "0123456789abcdef"})["ok"]

    def call(self, header: dict[str, Any], payload: bytes = b"") -> dict[str, Any]:
        send_frame(self.sock, header, payload)
        frame = self.frames.read()
        assert frame is not None
        self.last_payload = frame[1]
        return frame[0]


def test_server_uses_only_the_served_queue_protocol(tmp_path):
    """Every request, served from an object that has nothing but ServedQueue's members (and
    readers with nothing but ServedReader's): all answered, none needs anything else."""
    assert members(ServedQueue) == {
        "name", "path", "closed", "put", "put_many", "write_out", "reader", "reader_settings",
        "set_reader_settings", "readers", "remove_reader", "stats", "sync",
    }  # fmt: skip
    q = JournaledQueue(str(tmp_path / "real"))
    served_dir = str(tmp_path / "served")
    os.mkdir(served_dir, 0o700)
    lock = DirLock.acquire(served_dir)
    log: list[str] = []
    proxy = only_queue(q, served_dir, log)
    server = serve(proxy, lock)
    assert server is not None
    try:
        c = Client(served_dir)
        ok = {"ok": True}
        assert c.call({"op": "reader", "reader": "r", "config": None}) == ok
        assert c.call({"op": "readers"}) == {"ok": True, "readers": ["r"]}
        assert c.call({"op": "reader", "reader": "r", "config": {"max_errors": 3}}) == ok
        assert q.reader_settings("r")["max_errors"] == 3
        assert c.call({"op": "reader_settings", "reader": "r"})["settings"]["max_errors"] == 3
        changed = c.call({"op": "set_reader_settings", "reader": "r", "changes": {"max_age": 9.0}})
        assert changed["settings"]["max_age"] == 9.0 and changed["settings"]["max_errors"] == 3
        assert c.call({"op": "put_many", "lens": [1, 2, 3]}, b"abbccc")["count"] == 3
        assert c.call({"op": "put", "ttl": None}, b"dddd") == {"ok": True, "first": 4, "count": 1}
        got = c.call({"op": "get", "reader": "r", "timeout": 1.0})
        assert (got["id"], c.last_payload) == (1, b"a")
        assert c.call({"op": "commit", "reader": "r", "id": 1}) == ok
        many = c.call({"op": "get_many", "reader": "r", "max_items": 3, "timeout": 1.0})
        assert [m["id"] for m in many["items"]] == [2, 3, 4] and c.last_payload == b"bbcccdddd"
        assert c.call({"op": "abort", "reader": "r", "id": 3, "delay": 0}) == ok  # back to the head
        assert c.call({"op": "release", "reader": "r", "id": 2}) == ok  # and in front of it
        assert c.call({"op": "reject", "reader": "r", "id": 4, "reason": "bad"}) == ok
        again = c.call({"op": "get_many", "reader": "r", "max_items": 2, "timeout": 1.0})
        assert [m["id"] for m in again["items"]] == [2, 3]
        assert c.call({"op": "commit_many", "reader": "r", "ids": [2, 3]}) == ok
        assert c.call({"op": "commit", "reader": "r", "id": 2})["error"] == "UnknownRead"
        assert c.call({"op": "seek", "reader": "r", "position": "earliest"}) == {"ok": True, "head": 1}
        stats = c.call({"op": "stats"})["stats"]
        assert stats["next_id"] == 5 and [r["name"] for r in stats["readers"]] == ["r"]
        assert c.call({"op": "sync"}) == ok
        assert c.call({"op": "get", "reader": "r", "timeout": 0, "block": False})["ok"] is True
        assert c.call({"op": "remove_reader", "reader": "r"}) == ok
        assert c.call({"op": "readers"}) == {"ok": True, "readers": []}
        c.sock.close()
    finally:
        lock.release()  # stops the server first (before_release)
        q.close()
    assert not [entry for entry in log if entry.startswith("FORBIDDEN")], log
    assert set(log) <= members(ServedQueue) | members(ServedReader)


def test_a_reply_that_acknowledges_a_put_or_carries_an_item_comes_after_write_out(tmp_path):
    """ "Acknowledged to another process = in the OS": ``write_out`` follows every ``put_many``
    and every read opened for a client, before the reply (nothing else leaves the owner)."""
    q = JournaledQueue(str(tmp_path / "real"))
    served_dir = str(tmp_path / "served")
    os.mkdir(served_dir, 0o700)
    lock = DirLock.acquire(served_dir)
    log: list[str] = []
    proxy = only_queue(q, served_dir, log)
    server = serve(proxy, lock)
    assert server is not None
    try:
        c = Client(served_dir)
        c.call({"op": "reader", "reader": "r", "config": None})
        for header, payload in [
            ({"op": "put_many", "lens": [1, 1]}, b"ab"),
            ({"op": "get", "reader": "r", "timeout": 1.0}, b""),
            ({"op": "get_many", "reader": "r", "max_items": 5, "timeout": 1.0}, b""),
        ]:
            del log[:]
            assert c.call(header, payload)["ok"] is True
            opened = "put_many" if header["op"] == "put_many" else "get_many"
            assert log[-2:] == [opened, "write_out"], log
        c.sock.close()
    finally:
        lock.release()
        q.close()


def test_journaled_queue_and_reader_have_every_member_of_the_contract():
    """mypy checks the signatures (queue.py passes itself to ``serve``); this checks the names."""
    assert all(hasattr(JournaledQueue, m) or m in ("name", "path") for m in members(ServedQueue))
    assert all(hasattr(Reader, m) for m in members(ServedReader))


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def _calls(path: Path) -> set[str]:
    """Names of attributes called anywhere in a module (``x.sendall(...)`` -> ``sendall``)."""
    tree = ast.parse(path.read_text())
    return {
        n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
    }


def test_client_and_server_share_one_framing_module():
    """Frames are made and read in remote/transport.py (on protocol.py's bytes) only: the server
    and the client's connections both import it, and the client never imports the server."""
    connections = _imports(REMOTE / "connections.py")
    assert not any(m.startswith("journaled.remote.server") for m in connections)
    for module in ("server.py", "connections.py"):
        assert "journaled.remote.transport" in _imports(REMOTE / module), module
    for path in REMOTE.glob("*.py"):
        if path.name in ("transport.py", "protocol.py"):
            continue
        framing = _calls(path) & {"sendall", "encode", "lengths", "decode_header"}
        assert not framing, f"{path.name} frames bytes itself: {framing}"


def test_the_served_queue_is_reached_only_through_the_contract():
    """No module of remote/ reaches into a queue's journal or its reader cores."""
    for path in REMOTE.glob("*.py"):
        tree = ast.parse(path.read_text())
        reached = {
            n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in ("journal", "core")
        }
        assert not reached, f"{path.name} reaches into the queue: {reached}"
        assert "journaled.queue" not in _imports(path) or path.name == "contract.py"


def test_the_owned_here_or_forwarded_choice_is_made_in_one_place():
    """Only ``Route.call`` looks at whether this process owns the queue now; no method of the
    route, the client queue or its readers has a second way of carrying its request out."""
    users: list[str] = []
    for name in ("routing.py", "clientqueue.py", "clientreader.py"):
        tree = ast.parse((REMOTE / name).read_text())
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
                body = ast.walk(fn)
                if any(isinstance(n, ast.Attribute) and n.attr in ("_local", "_here") for n in body):
                    users.append(f"{cls.name}.{fn.name}")
                if any(isinstance(n, ast.ExceptHandler) and "OwnedHere" in ast.dump(n) for n in ast.walk(fn)):
                    users.append(f"{cls.name}.{fn.name} (except OwnedHere)")
    # is_owner/owner_pid read the choice; reconnect and close make and end it; call uses it
    assert sorted(users) == [
        "Route.__init__", "Route.call", "Route.close", "Route.is_owner", "Route.owner_pid", "Route.reconnect",
    ]  # fmt: skip


OWNER = """
import sys
from journaled import JournaledQueue
q = JournaledQueue(sys.argv[1])
q.reader("r")
print("ready", flush=True)
sys.stdin.readline()
q.close()
print("closed", flush=True)
sys.stdin.readline()
"""


@contextlib.contextmanager
def owner_process(d: str) -> Iterator[Callable[[], None]]:
    """Another process owns queue ``d`` until the ``close_owner()`` this yields is called."""
    owner = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(OWNER), d],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdin is not None and owner.stdout is not None
    stdin, stdout = owner.stdin, owner.stdout

    def close_owner() -> None:
        stdin.write("close\n")
        stdin.flush()
        assert stdout.readline().strip() == "closed"

    try:
        assert stdout.readline().strip() == "ready"
        yield close_owner
    finally:
        stdin.close()
        owner.wait(TIMEOUT)


def test_after_a_takeover_every_client_call_is_carried_out_here(tmp_path):
    """A client that became the owner carries its calls out on the queue it owns now, with
    the same results and errors as at a remote owner."""
    d = str(tmp_path / "q")
    with owner_process(d) as close_owner:
        q = JournaledQueue(d)
        assert not q.is_owner
        r = q.reader("r")
        q.put_many([b"a", b"b"])
        before = r.get(timeout=5)  # opened under the first owner
        close_owner()
        # the first call notices the owner left and takes over
        assert q.put(b"c", expire_at=_dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(hours=1)) == 3
        assert q.is_owner and owner_pid(d) == os.getpid()
        with pytest.raises(OwnerLost):
            r.commit(before)
        assert q.put_many([b"d", b"e"], ttl=3600) == [4, 5]
        q.reader("s", ReaderConfig(start="latest"))
        assert q.readers() == ["r", "s"]
        first = r.get(timeout=5)
        assert (first.id, first.data) == (1, b"a")  # the read lost with the owner is delivered again
        r.abort(first, delay=0)
        items = r.get_many(10, timeout=5)
        assert [it.id for it in items] == [1, 2, 3, 4, 5]
        r.release(items[0])
        r.reject(items[1], "bad")
        r.commit_many(items[2:4])
        with pytest.raises(UnknownRead):
            r.commit_many([items[2]])
        r.commit(items[4])
        again = r.get(timeout=5)
        assert again.id == 1 and again.error_count == 1
        r.commit(again)
        with pytest.raises(Empty):
            r.get(timeout=0)
        assert r.seek("earliest") == 1
        assert len(r) == 5 and r.stats().open_reads == 0
        stats = q.stats()
        assert stats.next_id == 6 and [x.name for x in stats.readers] == ["r", "s"]
        q.sync()
        q.remove_reader("s")
        assert q.readers() == ["r"]
        q.close()


def test_a_takeover_client_waiting_in_get_is_woken_by_its_own_put(tmp_path):
    """Carried out here, a ``get`` waits in the owned queue itself (no slices, no socket)."""
    d = str(tmp_path / "q")
    with owner_process(d) as close_owner:
        q = JournaledQueue(d)
        r = q.reader("r")
        close_owner()
        assert q.readers() == ["r"] and q.is_owner
        got: list[bytes] = []
        waiter = threading.Thread(target=lambda: got.append(r.get(timeout=TIMEOUT).data))
        waiter.start()
        q.put(b"x")
        waiter.join(TIMEOUT)
        assert got == [b"x"]
        q.close()


CLIENT_RECONFIGURES = """
import sys
from journaled import JournaledQueue, ReaderConfig
q = JournaledQueue(sys.argv[1])
assert not q.is_owner
q.reader("workers", ReaderConfig(max_errors=2, retry_delay=0.01))
q.close()
"""


def test_a_clients_reader_config_never_drops_the_owners_dead_letter_queue(tmp_path):
    """A worker naming only plain settings changes those, durably; the sinks it cannot send (the
    owner's dead-letter queue) stay stored and in use, so a poison item still lands there."""
    d, dead_dir = str(tmp_path / "jobs"), str(tmp_path / "dead")
    with JournaledQueue(dead_dir) as dead, JournaledQueue(d) as q:
        r = q.reader("workers", ReaderConfig(max_errors=5, dead_letter=dead))
        subprocess.run([sys.executable, "-c", CLIENT_RECONFIGURES, d], check=True, timeout=TIMEOUT)
        stored = q.reader_settings("workers")
        assert stored["max_errors"] == 2 and stored["retry_delay"] == 0.01
        assert stored["dead_letter"] == {"queue": "../dead"}
        assert r.config.dead_letter is dead
        q.put(b"poison")
        for _ in range(2):
            r.abort(r.get(timeout=5))
        letters = dead.reader("letters")
        assert letters.get(timeout=5).data.endswith(b"poison")
