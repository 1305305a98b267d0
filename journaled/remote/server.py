"""The owner's side of sharing a queue with other processes of the same user.

The process that owns a queue directory listens on a Unix domain socket inside it
(``.journaled.sock``, mode 0600, no TCP).  Each accepted connection gets a thread of its own
(at most ``MAX_CONNECTIONS``), so a slow, stuck or blocked client (a ``get`` waiting for items)
delays nobody else.  A peer whose uid (``SO_PEERCRED``) is not ours is refused at once.  Every
request is a frame of remote/protocol.py, read and sent with remote/transport.py (the client's
framing too); a malformed one gets an error reply and the connection is closed, the queue is
never touched by it.  What each request does is in remote/handlers.py; the queue is used only
through the owner's contract, remote/contract.py's ``ServedQueue``.

Clients (remote/connections.py) identify their process with a *session*: every connection of one session
shares its open reads, and when the last of them closes (the process closed the queue, or died)
its open reads are aborted and so delivered again, as kestrel does with a closed connection.

The server stops from ``DirLock.on_release``: after the queue's close has finished every call
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
from journaled.remote.contract import ServedQueue
from journaled.remote.handlers import Session
from journaled.remote.transport import FrameReader, peer_ids, send_frame, socket_address
from journaled.stats import ClientStats

log = logging.getLogger("journaled")

#: connections served at once; more are refused with an error reply
MAX_CONNECTIONS = 256
#: a blocked ``get`` wakes this often to notice its client went away
GET_SLICE = 0.25
#: seconds a connection polls for the next frame before blocking, while frames come quickly
#: (remote/transport.py's ``FrameReader``: within ``SPIN_HOT`` of asking)
SPIN = 0.0001
#: seconds a reply may take to be accepted by a client that does not read (then it is dropped)
SEND_TIMEOUT = 30.0
_TIMEVAL = struct.Struct("ll")


class Server:
    """Serves ``queue`` (an open :class:`~journaled.JournaledQueue`, or anything else that keeps
    the owner's contract of remote/contract.py) on its directory's socket."""

    def __init__(self, queue: ServedQueue, dirlock: DirLock) -> None:
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
        dirlock.on_release(self.stop)
        lifecycle.track(self, None, Server.forget_in_child)
        self._acceptor = threading.Thread(
            target=self._accept_loop, name=f"journaled-{self.name}-serve", daemon=True
        )
        self._acceptor.start()

    @property
    def queue(self) -> ServedQueue:
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
                    send_frame(conn, {"ok": False, "error": "JournaledError", "message": why})
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
                        send_frame(conn, {"ok": True, "name": self.name, "owner": os.getpid()})
                        continue
                except proto.ProtocolError as exc:
                    send_frame(conn, proto.error_reply(exc))
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
            session.connected()
        return session

    def _request(
        self, conn: socket.socket, session: Session, op: str, header: dict[str, Any], payload: bytes
    ) -> bool:
        """Carry out one request and reply; False when the connection must close."""
        try:
            if op in handlers.GET_OPS:
                return self._get(conn, session, op, header)
            reply, out = handlers.carry_out(
                self.queue, session, self._sessions, self._lock, op, header, payload
            )
        except proto.ProtocolError as exc:
            send_frame(conn, proto.error_reply(exc))
            return False
        except Exception as exc:
            reply, out = proto.error_reply(exc), b""
            if isinstance(exc, QueueClosed) and (self._stopping or self.queue.closed):
                reply["closing"] = True  # the owner is going: the client should find the next one
        send_frame(conn, reply, out)
        return True

    def _get(self, conn: socket.socket, session: Session, op: str, header: dict[str, Any]) -> bool:
        """Open reads for a ``get``/``get_many`` and send them; False when the connection must close.
        The wait holds the reader, never the queue: an abandoned queue is still collected."""
        name, timeout, block, most = handlers.get_request(header, op)
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
        reply, out, items = handlers.hand_out(self.queue, session, self._lock, name, reader, items, op)
        try:
            send_frame(conn, reply, out)
        except OSError:
            handlers.take_back(session, self._lock, reader, name, items)  # it never reached the client
            return False
        return True

    def _closed(self, conn: socket.socket, session: Session | None) -> None:
        conn.close()
        reads: list[tuple[str, Item]] = []
        with self._lock:
            self._conns.discard(conn)
            self._threads.discard(threading.current_thread())
            if session is not None:
                reads = session.disconnected()
                if not session.connections:
                    self._sessions = {k: s for k, s in self._sessions.items() if s is not session}
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


def serve(queue: ServedQueue, dirlock: DirLock) -> Server | None:
    """Start serving ``queue`` to other processes; ``None`` (logged) where that is impossible
    (no Unix sockets, something else named like the socket): the queue then works as before,
    other processes get ``QueueLocked``."""
    try:
        return Server(queue, dirlock)
    except (OSError, AttributeError) as exc:
        log.warning("journaled %s: not serving other processes: %s", queue.name, exc)
        return None
