"""The owner's side of sharing a queue with other processes of the same user.

The process that owns a queue directory listens on a Unix domain socket inside it
(``.journaled.sock``, mode 0600, no TCP).  Who may connect, and how many at once, is
remote/admission.py's; each admitted connection is served here, in a thread of its own.  Every
request is a frame of remote/protocol.py, read and sent with remote/transport.py (the client's
framing too); a malformed one gets an error reply and the connection is closed, the queue is
never touched by it.  The memory of requests being received at once is bounded
(``REQUEST_MEMORY``: a large request waits up to ``REQUEST_WAIT`` for room, then is refused,
read and dropped, and the connection goes on; one that stalls mid-frame for ``RECEIVE_TIMEOUT``
ends its connection).  What each request does is in remote/handlers.py; the queue is used only
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
from journaled.errors import Empty, JournaledError, QueueClosed
from journaled.item import Item
from journaled.remote import admission, handlers
from journaled.remote import protocol as proto
from journaled.remote.contract import ServedQueue, ServedReader
from journaled.remote.handlers import Session
from journaled.remote.transport import SMALL_PAYLOAD, FrameReader, send_frame, socket_address
from journaled.stats import ClientStats

log = logging.getLogger("journaled")

#: the largest ``hello`` header (it carries a version, a session id and a pid)
MAX_HELLO = 4096
#: memory for requests being received and carried out at once (those over ``SMALL_PAYLOAD``),
#: each counted at its header plus ``PAYLOAD_COPIES`` times its payload; one alone always fits
REQUEST_MEMORY = 512 << 20
#: copies of a request's payload the owner holds at its peak: the buffer it is read into and the
#: items cut from it, then the items and the journal's write buffer
PAYLOAD_COPIES = 2
#: seconds a request waits for ``REQUEST_MEMORY`` to have room before it is refused
REQUEST_WAIT = 10.0
#: seconds a large request may stall mid-frame before its connection is dropped
RECEIVE_TIMEOUT = 30.0
#: a blocked ``get`` wakes this often to notice its client went away
GET_SLICE = 0.25
#: seconds a connection polls for the next frame before blocking, while frames come quickly
#: (remote/transport.py's ``FrameReader``: within ``SPIN_HOT`` of asking)
SPIN = 0.0001
#: seconds a reply may take to be accepted by a client that does not read (then it is dropped)
SEND_TIMEOUT = 30.0
_TIMEVAL = struct.Struct("ll")


class Budget:
    """Bytes of requests held at once, at most ``total`` (or one request alone, whatever its
    size: the frame limits bound it): :meth:`take` waits for room."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self._cond = threading.Condition(threading.Lock())

    def take(self, n: int, wait: float, stopping: Any) -> bool:
        """Hold ``n`` bytes; False if there was no room within ``wait`` seconds (or ``stopping()``)."""
        deadline = time.monotonic() + wait
        with self._cond:
            while self.used and self.used + n > self.total:
                left = deadline - time.monotonic()
                if left <= 0 or stopping():
                    return False
                self._cond.wait(min(left, GET_SLICE))
            self.used += n
            return True

    def give(self, n: int) -> None:
        """Give back ``n`` bytes held by :meth:`take`."""
        with self._cond:
            self.used -= n
            self._cond.notify_all()


class Server:
    """Serves ``queue`` (an open :class:`~journaled.JournaledQueue`, or anything else that keeps
    the owner's contract of remote/contract.py) on its directory's socket."""

    def __init__(self, queue: ServedQueue, dirlock: DirLock) -> None:
        self._queue = weakref.ref(queue)  # an abandoned queue must still be collected and closed
        self.name = queue.name
        self._lock = threading.Lock()  # a leaf: guards the sessions only
        self._sessions: dict[str, Session] = {}
        self._budget = Budget(REQUEST_MEMORY)
        self._foreign_before = dirlock.foreign_before
        self._dir_fd = os.open(queue.path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0))
        try:
            self._address = socket_address(self._dir_fd, queue.path)
            self._socket_path = os.path.join(queue.path, proto.SOCKET_NAME)
            self._admission = admission.Admission(self.name, self._bind(), self._serve)
        except BaseException:
            os.close(self._dir_fd)
            raise
        dirlock.on_release(self.stop)
        lifecycle.track(self, None, Server.forget_in_child)
        self._admission.start()

    @property
    def queue(self) -> ServedQueue:
        """The queue served (``QueueClosed`` once it was collected)."""
        queue = self._queue()
        if queue is None:
            raise QueueClosed("the queue was closed")
        return queue

    @property
    def request_bytes(self) -> int:
        """Bytes of large requests being received or carried out now (``REQUEST_MEMORY`` bounds it)."""
        return self._budget.used

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
            if self._foreign_before:  # another host's: nothing here can tell whether it is dead
                raise FileExistsError(
                    f"{proto.SOCKET_NAME} in {self.queue.path} was left by an owner on another host "
                    "and is never deleted from here: not serving (remove it by hand once that owner "
                    "is known to be gone)"
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

    # ------------------------------------------------------------------ a connection
    def _serve(self, conn: socket.socket, pid: int) -> None:
        lifecycle.mark_background()
        session: Session | None = None
        try:
            # blocking once past hello, with a send timeout: a client that never reads its
            # replies is dropped
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _TIMEVAL.pack(int(SEND_TIMEOUT), 0))
            frames = FrameReader(conn, SPIN, proto.REQUEST_LIMITS)
            frames.time_limit(time.monotonic() + admission.HELLO_TIMEOUT)
            try:
                session = self._greet(conn, frames, pid)
            except proto.ProtocolError as exc:
                send_frame(conn, proto.error_reply(exc))
                return
            except TimeoutError:
                log.warning(
                    "journaled %s: closed a connection from pid %d that did not say hello within %g s",
                    self.name, pid, admission.HELLO_TIMEOUT,
                )  # fmt: skip
                return
            if session is None:
                return
            send_frame(conn, {"ok": True, "name": self.name, "owner": os.getpid()})
            while not self._admission.stopping:
                if not self._next(conn, frames, session):
                    return
        except OSError:
            return  # the client went away mid-reply
        except Exception as exc:  # never let a client take the owner down
            log.error("journaled %s: connection from pid %d failed: %r", self.name, pid, exc)
        finally:
            self._closed(conn, session)

    def _greet(self, conn: socket.socket, frames: FrameReader, pid: int) -> Session | None:
        """Read the connection's ``hello`` (within ``admission.HELLO_TIMEOUT``): its session (the caller
        answers), or None if the peer closed first."""
        found = frames.announced()
        if found is None:
            return None
        if found[0] > MAX_HELLO or found[1]:
            raise proto.ProtocolError("the first message must be 'hello'")
        header, _ = frames.body(*found)
        if proto.field(header, "op", str) != "hello":
            raise proto.ProtocolError("the first message must be 'hello'")
        self._admission.spoke(conn)
        frames.time_limit(None)
        return self._hello(header, pid)

    def _next(self, conn: socket.socket, frames: FrameReader, session: Session) -> bool:
        """Read, carry out and answer the next request; False when the connection must close."""
        try:
            found = frames.announced()  # stop() wakes it with shutdown()
            if found is None:
                return False
            hlen, plen = found
            cost = hlen + PAYLOAD_COPIES * plen if hlen + plen > SMALL_PAYLOAD else 0
            admitted = not cost or self._budget.take(cost, REQUEST_WAIT, lambda: self._admission.stopping)
            try:
                got = self._receive(conn, frames, session, found, admitted, cost)
                if got is None:
                    return False
                if not admitted:
                    refused = JournaledError(
                        f"the owner is busy with other large requests (server.REQUEST_MEMORY, "
                        f"{REQUEST_MEMORY} bytes at once) and a request of {hlen + plen} bytes found "
                        f"no room within {REQUEST_WAIT:g} s; nothing was done, it may be made again"
                    )
                    send_frame(conn, proto.error_reply(refused))
                    return True
                header, payload = got
                op = proto.field(header, "op", str)
                with self._admission.busy(conn):
                    return self._request(conn, session, op, header, payload)
            finally:
                if cost and admitted:
                    self._budget.give(cost)
        except proto.ProtocolError as exc:
            send_frame(conn, proto.error_reply(exc))
            return False

    def _receive(
        self,
        conn: socket.socket,
        frames: FrameReader,
        session: Session,
        lengths: tuple[int, int],
        admitted: bool,
        large: int,
    ) -> tuple[dict[str, Any], bytes | bytearray] | None:
        """The rest of a request whose ``lengths`` were read: its header and payload (``admitted``)
        or nothing (read and dropped).  A ``large`` one that stalls ``RECEIVE_TIMEOUT`` seconds
        mid-frame ends the connection (None), so it never holds its memory for good."""
        if large:
            conn.settimeout(RECEIVE_TIMEOUT)
        try:
            if admitted:
                return frames.body(*lengths)
            frames.skip(sum(lengths))
            return {}, b""
        except TimeoutError:
            log.warning(
                "journaled %s: dropped a connection of pid %d: its request of %d bytes stalled "
                "mid-frame for %g s",
                self.name, session.pid, sum(lengths), RECEIVE_TIMEOUT,
            )  # fmt: skip
            return None
        finally:
            if large:
                conn.settimeout(None)

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
        self,
        conn: socket.socket,
        session: Session,
        op: str,
        header: dict[str, Any],
        payload: bytes | bytearray,
    ) -> bool:
        """Carry out one request and reply; False when the connection must close."""
        try:
            if op in handlers.GET_OPS:
                return self._get(conn, session, op, header)
            reply: dict[str, Any] | bytes
            if op in handlers.PUT_OPS:  # perf: the usual request, its reply made without JSON
                reply, out = handlers.put_reply(handlers.put_ids(self.queue, op, header, payload)), b""
            else:
                reply, out = handlers.carry_out(
                    self.queue, session, self._sessions, self._lock, op, header, payload
                )
        except proto.ProtocolError as exc:
            send_frame(conn, proto.error_reply(exc))
            return False
        except Exception as exc:
            error = proto.error_reply(exc)
            if isinstance(exc, QueueClosed) and (self._admission.stopping or self.queue.closed):
                error["closing"] = True  # the owner is going: the client should find the next one
            reply, out = error, b""
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
                if self._admission.stopping or _peer_gone(conn):
                    return False
        reply, out, items = handlers.hand_out(self.queue, session, self._lock, name, reader, items, op)
        try:
            send_frame(conn, reply, out)
        except OSError:
            handlers.take_back(session, self._lock, reader, name, items)  # it never reached the client
            return False
        return True

    def _closed(self, conn: socket.socket, session: Session | None) -> None:
        self._admission.finished(conn)
        reads: list[tuple[ServedReader, Item]] = []
        with self._lock:
            if session is not None:
                reads = session.disconnected()
                if not session.connections:
                    self._sessions = {k: s for k, s in self._sessions.items() if s is not session}
        for reader, item in reads:  # the process closed or died with these open: deliver them again
            try:
                reader.abort(item)
            except Exception:  # UnknownRead (timed out meanwhile), QueueClosed (closing, removed)
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

    def read_holders(self) -> dict[tuple[str, int], int]:
        """``(reader, id) -> pid`` of every read a connected process holds open."""
        with self._lock:
            return {key: s.pid for s in self._sessions.values() for key in s.reads}

    def stop(self) -> None:
        """Stop serving: no new connections, every connection closed (their open reads aborted),
        the socket file removed.  Called while the directory is still ours."""
        if not self._admission.stop_accepting():
            return
        lifecycle.untrack(self)
        try:
            fileio.ops.unlink(self._socket_path)
        except OSError:
            pass
        self._admission.end_connections()
        os.close(self._dir_fd)

    def forget_in_child(self) -> None:
        """In a forked child: close our copies of the descriptors, touch nothing shared."""
        self._admission.forget_in_child()
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
