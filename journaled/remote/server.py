"""The owner's side of sharing a queue with other processes of the same user.

The process that owns a queue directory listens on a Unix domain socket inside it
(``.journaled.sock``, mode 0600, no TCP).  Each accepted connection gets a thread of its own
(at most ``MAX_CONNECTIONS``), so a slow, stuck or blocked client (a ``get`` waiting for items)
delays nobody else.  A peer whose uid (``SO_PEERCRED``) is not ours is refused at once.  Every
request is a frame of remote/protocol.py; a malformed one gets an error reply and the connection
is closed, the queue is never touched by it.

Clients (remote/connections.py) identify their process with a *session*: every connection of one session
shares its open reads, and when the last of them closes (the process closed the queue, or died)
its open reads are aborted and so delivered again, as kestrel does with a closed connection.

The server stops from ``DirLock.before_release``: after the queue's close has finished every call
in flight (they reply, or fail with ``QueueClosed``, which tells a client nothing was done) and
before the directory can belong to someone else, so it never unlinks another owner's socket.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import stat
import struct
import threading
import time
import weakref
from typing import Any

from journaled.disk import fileio, lifecycle
from journaled.disk.dirlock import DirLock
from journaled.errors import Empty, QueueClosed
from journaled.item import Item
from journaled.remote import handlers
from journaled.remote import protocol as proto
from journaled.remote.handlers import Session
from journaled.stats import ClientStats

log = logging.getLogger("journaled")

#: connections served at once; more are refused with an error reply
MAX_CONNECTIONS = 256
#: a blocked ``get`` wakes this often to notice its client went away
GET_SLICE = 0.25
#: seconds a connection polls for the next frame before blocking, while frames come quickly
SPIN = 0.0001
#: a frame that came within this many seconds of asking keeps (or turns) the polling on
SPIN_HOT = 0.0002
#: seconds a reply may take to be accepted by a client that does not read (then it is dropped)
SEND_TIMEOUT = 30.0
_CRED = struct.Struct("3i")
_TIMEVAL = struct.Struct("ll")


def socket_address(dir_fd: int, directory: str) -> str:
    """A path to the socket that fits ``sun_path`` (108 bytes) however deep the directory is:
    through ``/proc/self/fd`` where Linux has it."""
    if os.path.isdir(f"/proc/self/fd/{dir_fd}"):
        return f"/proc/self/fd/{dir_fd}/{proto.SOCKET_NAME}"
    return os.path.join(directory, proto.SOCKET_NAME)


def peer_ids(sock: socket.socket) -> tuple[int, int]:
    """``(pid, uid)`` of the process at the other end (``SO_PEERCRED``)."""
    pid, uid, _gid = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
    return pid, uid


class FrameReader:
    """Reads whole frames from a socket, several bytes at a time (one ``recv`` per small frame).

    ``spin`` (used on the owner's side only): once two frames in a row came within ``SPIN_HOT``
    seconds of asking, poll the socket for up to ``spin`` seconds before blocking.  A request
    and its reply are a ping-pong between two processes, and on an idle machine waking a thread
    blocked in ``recv`` is a large part of a round trip; a client sending back to back (a loop
    of puts) saves the owner's wake-up.  One slow frame (a consumer working on its item) turns
    the polling off, so a client that pauses between requests never has a core burnt for it.
    Clients do not poll: their spinning would take the core the owner needs to answer them."""

    def __init__(self, sock: socket.socket, spin: float = 0.0) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.spin = spin
        self.quick = 0  # frames in a row that came within SPIN_HOT of asking

    def _poll(self) -> bool:
        """Poll for the next bytes for up to ``spin`` seconds; False if the peer closed meanwhile."""
        deadline = time.perf_counter() + self.spin
        while True:
            try:
                chunk = self.sock.recv(65536, socket.MSG_DONTWAIT)
            except BlockingIOError:
                if time.perf_counter() < deadline:
                    continue
                return True
            if chunk:
                self.buf += chunk
                return True
            return False

    def _fill(self, n: int) -> bool:
        if self.spin and not self.buf:
            start = time.perf_counter()
            if self.quick >= 2 and not self._poll():
                return False
            if not self.buf:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return False
                self.buf += chunk
            self.quick = self.quick + 1 if time.perf_counter() - start < SPIN_HOT else 0
        while len(self.buf) < n:
            chunk = self.sock.recv(min(max(n - len(self.buf), 65536), 1 << 20))
            if not chunk:
                if self.buf:
                    raise ConnectionResetError("the peer closed the connection mid-frame")
                return False
            self.buf += chunk
        return True

    def read(self) -> tuple[dict[str, Any], bytes] | None:
        """The next frame's header and payload; ``None`` if the peer closed between frames."""
        if not self._fill(proto.HEAD.size):
            return None
        hlen, plen = proto.lengths(bytes(self.buf[: proto.HEAD.size]))
        end = proto.HEAD.size + hlen + plen
        self._fill(end)
        header = proto.decode_header(bytes(self.buf[proto.HEAD.size : proto.HEAD.size + hlen]))
        payload = bytes(self.buf[proto.HEAD.size + hlen : end])
        del self.buf[:end]
        return header, payload


class Server:
    """Serves ``queue`` (an open :class:`~journaled.JournaledQueue`) on its directory's socket."""

    def __init__(self, queue: Any, dirlock: DirLock) -> None:
        self._queue = weakref.ref(queue)  # an abandoned queue must still be collected and closed
        self.name = queue.name
        self._lock = threading.Lock()  # a leaf: guards the sessions and connection set only
        self._sessions: dict[str, Session] = {}
        self._conns: set[socket.socket] = set()
        self._busy: set[socket.socket] = set()  # carrying out a request: answered before stop closes it
        self._threads: set[threading.Thread] = set()
        self._stopping = False
        self._dir_fd = os.open(queue.path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0))
        try:
            self._address = socket_address(self._dir_fd, queue.path)
            self._socket_path = os.path.join(queue.path, proto.SOCKET_NAME)
            self._listener = self._bind()
        except BaseException:
            os.close(self._dir_fd)
            raise
        dirlock.before_release.append(self.stop)
        lifecycle.track(self, None, Server.forget_in_child)
        self._acceptor = threading.Thread(
            target=self._accept_loop, name=f"journaled-{self.name}-serve", daemon=True
        )
        self._acceptor.start()

    @property
    def queue(self) -> Any:
        """The queue served (``QueueClosed`` once it was collected)."""
        queue = self._queue()
        if queue is None:
            raise QueueClosed("the queue was closed")
        return queue

    def _bind(self) -> socket.socket:
        try:
            st = os.stat(proto.SOCKET_NAME, dir_fd=self._dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISSOCK(st.st_mode):
                raise FileExistsError(
                    f"{proto.SOCKET_NAME} in {self.queue.path} is not a socket: not serving"
                )
            fileio.ops.unlink(self._socket_path)  # a dead owner's: we hold the lock
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket is born 0600: nobody else can even connect
        try:
            listener.bind(self._address)
        except BaseException:
            listener.close()
            raise
        finally:
            os.umask(old)
        listener.listen(64)
        return listener

    # ------------------------------------------------------------------ connections
    def _accept_loop(self) -> None:
        lifecycle.mark_background()
        while not self._stopping:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                if self._stopping:
                    return
                time.sleep(0.05)  # EMFILE and the like: do not spin
                continue
            try:
                pid, uid = peer_ids(conn)
            except OSError:
                conn.close()
                continue
            with self._lock:
                refused = uid != os.geteuid() or len(self._conns) >= MAX_CONNECTIONS or self._stopping
                if not refused:
                    self._conns.add(conn)
            if refused:
                why = "peer uid is not the queue owner's" if uid != os.geteuid() else "too many connections"
                log.warning("journaled %s: refused a connection from pid %d: %s", self.name, pid, why)
                try:
                    conn.settimeout(0.5)
                    conn.sendall(proto.encode({"ok": False, "error": "JournaledError", "message": why}))
                except OSError:
                    pass
                conn.close()
                continue
            thread = threading.Thread(
                target=self._serve, args=(conn, pid), name="journaled-conn", daemon=True
            )
            with self._lock:
                self._threads.add(thread)
            thread.start()

    def _serve(self, conn: socket.socket, pid: int) -> None:
        lifecycle.mark_background()
        session: Session | None = None
        try:
            # blocking, with a send timeout: a client that never reads its replies is dropped
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _TIMEVAL.pack(int(SEND_TIMEOUT), 0))
            frames = FrameReader(conn, SPIN)
            while not self._stopping:
                try:
                    frame = frames.read()  # stop() wakes it with shutdown()
                    if frame is None:
                        return
                    header, payload = frame
                    op = proto.field(header, "op", str)
                    if session is None:
                        if op != "hello":
                            raise proto.ProtocolError("the first message must be 'hello'")
                        session = self._hello(header, pid)
                        self._send(conn, {"ok": True, "name": self.name, "owner": os.getpid()})
                        continue
                except proto.ProtocolError as exc:
                    self._send(conn, proto.error_reply(exc))
                    return
                with self._lock:
                    self._busy.add(conn)
                try:
                    if not self._request(conn, session, op, header, payload):
                        return
                finally:
                    with self._lock:
                        self._busy.discard(conn)
        except OSError:
            return  # the client went away mid-reply
        except Exception as exc:  # never let a client take the owner down
            log.error("journaled %s: connection from pid %d failed: %r", self.name, pid, exc)
        finally:
            self._closed(conn, session)

    def _hello(self, header: dict[str, Any], pid: int) -> Session:
        if proto.field(header, "version", int) != proto.VERSION:
            raise proto.ProtocolError(f"protocol version {header.get('version')!r} is not {proto.VERSION}")
        key = proto.field(header, "session", str)
        if not 8 <= len(key) <= 64:
            raise proto.ProtocolError("bad session id")
        with self._lock:
            session = self._sessions.get(f"{pid}:{key}")
            if session is None:
                session = self._sessions[f"{pid}:{key}"] = Session(pid)
            session.connections += 1
        return session

    def _send(self, conn: socket.socket, header: dict[str, Any], payload: bytes = b"") -> None:
        conn.sendall(proto.encode(header, payload))

    def _request(
        self, conn: socket.socket, session: Session, op: str, header: dict[str, Any], payload: bytes
    ) -> bool:
        """Carry out one request and reply; False when the connection must close."""
        try:
            if op in ("get", "get_many"):
                return self._get(conn, session, header, many=op == "get_many")
            reply, out = handlers.carry_out(
                self.queue, session, self._sessions, self._lock, op, header, payload
            )
        except proto.ProtocolError as exc:
            self._send(conn, proto.error_reply(exc))
            return False
        except Exception as exc:
            reply, out = proto.error_reply(exc), b""
            if isinstance(exc, QueueClosed) and (self._stopping or self.queue.closed):
                reply["closing"] = True  # the owner is going: the client should find the next one
        self._send(conn, reply, out)
        return True

    def _get(self, conn: socket.socket, session: Session, header: dict[str, Any], *, many: bool) -> bool:
        name = proto.field(header, "reader", str)
        timeout = proto.field(header, "timeout", (int, float, type(None)), None)
        block = proto.field(header, "block", bool, True)
        most = proto.field(header, "max_items", int) if many else 1
        if timeout is not None and not timeout >= 0:
            raise ValueError("'timeout' must be a non-negative number")
        reader = handlers.existing_reader(self.queue, name)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            # in slices: a client that goes away while waiting must not keep a waiter in line
            left = GET_SLICE if deadline is None else min(GET_SLICE, deadline - time.monotonic())
            try:
                items: list[Item] = reader.get_many(most, max(left, 0.0), block=block and left > 0)
                break
            except Empty:
                if not block or (deadline is not None and time.monotonic() >= deadline):
                    raise
                if self._stopping or _peer_gone(conn):
                    return False
        items, excess = handlers.fit_reply(items)
        for item in reversed(excess):  # more than one reply carries: back to the head, newest first
            reader.release(item)
        try:
            # An item leaves this process only once its record is in the OS: a kill -9 of this
            # process must not unmake an item another process already holds (its id would be
            # given to a later put).  In-process readers need no such step: they die with us.
            self.queue.journal.write_out()
        except BaseException:
            for item in reversed(items):
                reader.release(item)
            raise
        with self._lock:
            for item in items:
                session.reads[(name, item.id)] = item
        try:
            if many:
                metas = [handlers.item_meta(item) for item in items]
                self._send(
                    conn,
                    {"ok": True, "items": metas, "lens": [len(it.data) for it in items]},
                    b"".join(it.data for it in items),
                )
            else:
                self._send(conn, dict(handlers.item_meta(items[0]), ok=True), items[0].data)
        except OSError:
            for item in reversed(items):  # each goes back to the head: the newest first
                with self._lock:
                    mine = session.reads.pop((name, item.id), None) is item
                if mine:
                    reader.release(item)  # it never reached the client: no error to count
            return False
        return True

    def _closed(self, conn: socket.socket, session: Session | None) -> None:
        conn.close()
        reads: list[tuple[str, Item]] = []
        with self._lock:
            self._conns.discard(conn)
            self._threads.discard(threading.current_thread())
            if session is not None:
                session.connections -= 1
                if session.connections == 0:
                    self._sessions = {k: s for k, s in self._sessions.items() if s is not session}
                    # each abort goes to the head: the newest first keeps them in id order
                    reads = sorted(((k[0], it) for k, it in session.reads.items()), key=lambda r: -r[1].id)
                    session.reads.clear()
        for name, item in reads:  # the process closed or died with these open: deliver them again
            try:
                self.queue.reader(name).abort(item)
            except Exception:  # UnknownRead (timed out meanwhile), QueueClosed (we are closing)
                pass

    # ------------------------------------------------------------------ state and end
    def clients(self) -> tuple[ClientStats, ...]:
        """One entry per connected process: pid, connections, open reads per reader."""
        with self._lock:
            out = []
            for s in self._sessions.values():
                per: dict[str, int] = {}
                for rname, _ in s.reads:
                    per[rname] = per.get(rname, 0) + 1
                out.append(ClientStats(pid=s.pid, connections=s.connections, open_reads=per))
        return tuple(sorted(out, key=lambda c: c.pid))

    def stop(self) -> None:
        """Stop serving: no new connections, every connection closed (their open reads aborted),
        the socket file removed.  Called while the directory is still ours."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
            conns, threads = list(self._conns), list(self._threads)
        lifecycle.untrack(self)
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
        except OSError:
            pass
        self._listener.close()
        try:
            fileio.ops.unlink(self._socket_path)
        except OSError:
            pass

        def shut(socks: list[socket.socket]) -> None:
            for conn in socks:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        with self._lock:
            busy = set(self._busy)
        shut([c for c in conns if c not in busy])  # idle ones wake from recv and end
        me = threading.current_thread()
        deadline = time.monotonic() + 2.0
        for thread in threads + [self._acceptor]:
            # a busy one answers its request (the queue refuses new work now), then sees _stopping
            if thread is not me and thread.ident is not None:  # (an unstarted one sees _stopping)
                thread.join(max(0.0, deadline - time.monotonic()))
        shut(list(busy))
        os.close(self._dir_fd)

    def forget_in_child(self) -> None:
        """In a forked child: close our copies of the descriptors, touch nothing shared."""
        self._stopping = True
        for sock in [self._listener, *self._conns]:
            sock.close()  # close(2) only: shutdown() would end the parent's connections too
        try:
            os.close(self._dir_fd)
        except OSError:
            pass


def _peer_gone(conn: socket.socket) -> bool:
    poller = select.poll()
    poller.register(conn, select.POLLIN | select.POLLHUP | select.POLLERR)
    for _fd, events in poller.poll(0):
        if events & (select.POLLHUP | select.POLLERR):
            return True
        if events & select.POLLIN:
            try:
                return conn.recv(1, socket.MSG_PEEK) == b""
            except BlockingIOError:
                return False
            except OSError:
                return True
    return False


def serve(queue: Any, dirlock: DirLock) -> Server | None:
    """Start serving ``queue`` to other processes; ``None`` (logged) where that is impossible
    (no Unix sockets, something else named like the socket): the queue then works as before,
    other processes get ``QueueLocked``."""
    try:
        return Server(queue, dirlock)
    except (OSError, AttributeError) as exc:
        log.warning("journaled %s: not serving other processes: %s", queue.name, exc)
        return None
