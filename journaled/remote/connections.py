"""A process's connections to the owner of a queue it does not own (remote/server.py is the other end).

:class:`Link` is one client process's way to the owner: a pool of Unix-socket connections (one
per thread calling at once, so a blocked ``get`` on one thread never delays a ``put`` on
another), all of one *session*, so they share the process's open reads.  A call is one request
and one reply on one connection.  Frames go through remote/transport.py, the module the server
uses too.

**Limits.**  At most :data:`POOL_IDLE` idle connections are kept (the rest are closed when
their call ends), so the idle pools of many processes cannot fill the owner's connection
limit.  A thread that needs an *extra* connection while others of the session are in use and
cannot open one (the owner refused it: too many connections) waits for one of the session's
own connections to come free, up to :data:`POOL_WAIT` seconds, then raises
:class:`~journaled.errors.JournaledError` saying so; the session and its open reads are
untouched either way.

**Deadlines.**  Opening a connection (connect and hello) has the ``timeout`` the link was made
with; every request has :data:`REPLY_MARGIN` seconds, beyond the wait it asks the owner for (in
whole seconds, rounded up), to be sent and answered.  An owner that lets a deadline pass
(stopped, wedged) is taken for lost: the call raises :class:`OwnerLost` naming the deadline.

**Loss.**  When the owner goes away mid-call the call raises :class:`OwnerLost`
(``outcome_unknown`` set when a put or a settling of reads was sent but not answered: it may
or may not have been carried out) and the link is dead: the queue object above it
(remote/clientqueue.py) reconnects.  A reply this process cannot read (it breaks the frame
limits) is not a loss: that connection is closed and the call raises ``ProtocolError``.

**Whom it talks to.**  The socket is found through the directory's descriptor and must be a
socket (``lstat``: never a symbolic link, nor a file of another user) served by the process
whose pid the directory's lock file holds, of this user; anything else raises
:class:`UnsafeDirectory` and nothing in the directory is touched.
"""

from __future__ import annotations

import errno
import math
import os
import secrets
import socket
import stat
import struct
import threading
import time
from typing import Any

from journaled.disk import lifecycle
from journaled.disk.dirlock import LOCK_FILE
from journaled.errors import OwnerBusy, OwnerLost, QueueClosed, QueueForked, UnsafeDirectory
from journaled.remote import protocol as proto
from journaled.remote.transport import FrameReader, peer_ids, send_frame, socket_address

#: idle connections kept per process; more are open only while more threads call at once
POOL_IDLE = 2
#: seconds a call waits for one of its session's connections when the owner refuses another
POOL_WAIT = 30.0
#: seconds between two attempts at an extra connection while a call waits for one
_RECONNECT_PAUSE = 1.0
#: seconds a request may take to be sent and answered, beyond the wait it asks for
REPLY_MARGIN = 30.0
#: requests that settle open reads: never made again on another owner (the reads died with the
#: one they were opened under); sent but not answered, their outcome is unknown
SETTLE_OPS = frozenset({"commit", "commit_many", "abort", "release", "reject"})
_TIMEVAL = struct.Struct("ll")


class _Refused(ConnectionError):
    """The owner answered a new connection with a refusal (its connection limit)."""


class Link:
    """Connections to the owner of ``directory`` (raises ``OSError`` if nobody serves it,
    :class:`UnsafeDirectory` if what answers is not this directory's owner); ``timeout`` is the
    deadline, in seconds, of opening each connection (connect and hello)."""

    def __init__(self, directory: str, timeout: float = 10.0) -> None:
        self.directory = directory
        self.timeout = timeout
        self.session = secrets.token_hex(8)
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)  # a connection came back, or the link died
        self._idle: list[socket.socket] = []
        self._busy: set[socket.socket] = set()
        self._limits: dict[socket.socket, float] = {}  # each open connection's time limit now
        self._next_try = 0.0  # refused: no new connection tried before then (by any thread)
        self.dead = False
        self.forked = False
        self.owner_pid = -1
        self.name = ""
        sock = self._connect()  # fail now, not at the first call
        self._idle.append(sock)
        lifecycle.track(self, None, Link.forget_in_child)

    def _connect(self) -> socket.socket:
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)  # the user named this path
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            _check_socket_file(fd, self.directory)
            try:
                sock.connect(socket_address(fd, self.directory))
            except TimeoutError:
                raise TimeoutError(f"no connection within {self.timeout:.1f} s (connect deadline)") from None
            pid, uid = peer_ids(sock)
            if uid != os.geteuid():  # a socket another user planted: never talk to it
                raise UnsafeDirectory(
                    errno.EPERM, f"the queue's socket is served by uid {uid}", self.directory
                )
            if pid == os.getpid():  # the owner is this process (a lock file without its pid)
                raise PermissionError("the queue is owned by this very process")
            locker = _lock_pid(fd)
            if locker is None:
                # an owner taking the directory over empties the lock file, then writes its pid,
                # while the one leaving may still answer: changing hands, not a planted socket
                raise ConnectionRefusedError(
                    errno.ECONNREFUSED, f"the lock file names no owner yet (pid {pid} answers)"
                )
            if locker != pid:  # a socket reached through a name swapped in: another queue's
                raise UnsafeDirectory(
                    errno.EPERM,
                    f"the queue's socket is served by pid {pid}, not by the directory's owner ({locker})",
                    self.directory,
                )
            hello = {"op": "hello", "version": proto.VERSION, "session": self.session, "pid": os.getpid()}
            try:
                reply, _ = _exchange(sock, hello)
            except TimeoutError:
                raise TimeoutError(
                    f"pid {pid} did not answer within {self.timeout:.1f} s (hello deadline)"
                ) from None
            if not reply.get("ok"):
                raise _Refused(str(reply.get("message")))
            self.owner_pid, self.name = int(reply["owner"]), str(reply["name"])
        except BaseException:
            sock.close()
            raise
        finally:
            os.close(fd)
        return sock

    def _take(self) -> socket.socket:
        """An idle connection, a new one, or (refused while others are in use) the first of
        the session's own to come free within :data:`POOL_WAIT`."""
        deadline = time.monotonic() + POOL_WAIT
        refusal: BaseException | None = None
        while True:
            with self._lock:
                if refusal is not None:
                    self._freed.wait_for(
                        lambda: self._idle or self.dead or not self._busy,
                        min(_RECONNECT_PAUSE, max(0.0, deadline - time.monotonic())),
                    )
                self._check_usable()
                if self._idle:
                    sock = self._idle.pop()
                    self._busy.add(sock)
                    return sock
                others = bool(self._busy)
                now = time.monotonic()
                if refusal is not None and others and now < self._next_try and now < deadline:
                    continue  # another thread tried a moment ago: one refused attempt at a time
                self._next_try = now + _RECONNECT_PAUSE
            if refusal is not None and time.monotonic() >= deadline:
                raise OwnerBusy(
                    f"no connection to the owner of {self.directory} came free within {POOL_WAIT:g} s "
                    f"(this process has {len(self._busy)} in use, a new one was refused: {refusal}); "
                    f"nothing was sent"
                )
            try:
                sock = self._connect()
            except UnsafeDirectory:
                raise  # what answers is not this queue's owner: this call is refused, nothing ends
            except (OSError, proto.ProtocolError) as exc:
                if not others:  # nothing of this session is connected: the owner is gone
                    self.kill()
                    raise _lost(self.directory, exc, False) from exc
                refusal = exc  # the others still work: wait for one of them
                continue
            with self._lock:
                if self.dead:
                    sock.close()
                    self._check_usable()
                self._busy.add(sock)
            return sock

    def _check_usable(self) -> None:
        if self.forked:
            raise QueueForked(
                f"queue {self.directory!r} was opened by the process this one was forked from: open it here"
            )
        if self.dead:
            raise OwnerLost(f"the owner of {self.directory} went away")

    def _give_back(self, sock: socket.socket, keep: bool) -> None:
        with self._lock:
            self._busy.discard(sock)
            kept = keep and not self.dead and len(self._idle) < POOL_IDLE
            if kept:
                self._idle.append(sock)
            else:
                self._limits.pop(sock, None)
            self._freed.notify_all()
        if not kept:
            sock.close()

    def call(
        self, header: dict[str, Any], payload: bytes = b"", *, is_put: bool = False, wait: float = 0.0
    ) -> tuple[dict[str, Any], bytes]:
        """Send one request, return the reply (or raise the error the owner reported).  ``wait``
        is how long the owner may take on purpose (a blocking get's timeout): the reply's
        deadline is that, rounded up to whole seconds, plus :data:`REPLY_MARGIN`."""
        sock = self._take()
        sent = False
        try:
            # a wait counted in whole seconds: the limit of a loop of gets stays put (set once)
            limit = math.ceil(wait) + REPLY_MARGIN
            if self._limits.get(sock) != limit:
                _time_limit(sock, limit)
                self._limits[sock] = limit
            send_frame(sock, header, payload)
            sent = True
            reply, data = _exchange(sock, None)
        except proto.ProtocolError as exc:
            self._drop_keeping_session(sock)  # out of step: this connection only, the session stays
            raise proto.ProtocolError(
                f"a reply of the owner of {self.directory} could not be read ({exc}); not retried"
            ) from exc
        except OSError as exc:
            self._give_back(sock, False)
            self.kill()
            if isinstance(exc, (TimeoutError, BlockingIOError)):  # BlockingIOError: SO_RCVTIMEO passed
                which = "reply" if sent else "request"
                exc = TimeoutError(f"no {which} within {limit:.1f} s ({which} deadline)")
            raise _lost(
                self.directory, exc, sent and (is_put or header.get("op") in SETTLE_OPS), is_put
            ) from exc
        self._give_back(sock, True)
        if not reply.get("ok"):
            if reply.get("closing"):
                # the owner is closing: the call was refused before it did anything
                self.kill()
                raise OwnerLost(f"the owner of {self.directory} is closing: {reply.get('message')}")
            proto.raise_error(reply)
        return reply, data

    def _drop_keeping_session(self, sock: socket.socket) -> None:
        """Close ``sock``; if it was the session's last connection, open another first (the
        session ends with its last connection, and its reads with it), or end the link."""
        with self._lock:
            last = not self._idle and self._busy == {sock}
        spare = None
        if last:
            try:
                spare = self._connect()
            except (OSError, proto.ProtocolError):
                pass
        self._give_back(sock, False)
        if spare is not None:
            self._give_back_new(spare)
        elif last:
            self.kill()  # the reads are gone with the session: the next call reconnects

    def _give_back_new(self, sock: socket.socket) -> None:
        with self._lock:
            if self.dead:
                sock.close()
                return
            self._idle.append(sock)
            self._freed.notify_all()

    def kill(self) -> None:
        """Close every connection (the session ends: the owner aborts its open reads)."""
        with self._lock:
            self.dead = True
            socks, self._idle = self._idle + list(self._busy), []
            self._limits.clear()
            busy = set(self._busy)
            self._freed.notify_all()
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for sock in socks:
            if sock not in busy:
                sock.close()
        lifecycle.untrack(self)

    def forget_in_child(self) -> None:
        """A forked child must not use, nor end, the parent's session: every call there raises
        :class:`QueueForked`."""
        self.forked = self.dead = True
        for sock in self._idle + list(self._busy):
            sock.close()  # close(2) only, the parent's connections stay up
        self._idle, self._busy, self._limits = [], set(), {}
        self._lock = threading.Lock()  # the parent's may have been held by another thread
        self._freed = threading.Condition(self._lock)


def _check_socket_file(dir_fd: int, directory: str) -> None:
    """Refuse a socket name that is a link, not a socket, or another user's (nothing removed)."""
    try:
        st = os.stat(proto.SOCKET_NAME, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "the queue is not served (no socket)", directory) from None
    path = os.path.join(directory, proto.SOCKET_NAME)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeDirectory(errno.ELOOP, "the queue's socket is a symbolic link: not followed", path)
    if not stat.S_ISSOCK(st.st_mode):
        raise UnsafeDirectory(errno.EPERM, "the queue's socket name is not a socket: left alone", path)
    if st.st_uid != os.geteuid():
        raise UnsafeDirectory(errno.EPERM, f"the queue's socket belongs to uid {st.st_uid}", path)


def _lock_pid(dir_fd: int) -> int | None:
    """The pid the directory's lock file holds (its owner's), read without following a link."""
    try:
        fd = os.open(LOCK_FILE, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return int(os.pread(fd, 32, 0).decode().strip() or 0) or None
    except (ValueError, OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


def _lost(directory: str, exc: BaseException, unknown: bool, is_put: bool = False) -> OwnerLost:
    if unknown and is_put:
        lost = OwnerLost(
            f"the owner of {directory} went away during a put, which may or may not "
            f"have been stored ({exc}); a retry may store it twice"
        )
    elif unknown:
        lost = OwnerLost(
            f"the owner of {directory} went away after a commit/abort/release/reject reached it, "
            f"which may or may not have been carried out ({exc}); the read is not open any more"
        )
    else:
        lost = OwnerLost(f"the owner of {directory} went away ({exc}); the call may be retried")
    lost.outcome_unknown = unknown
    return lost


def _time_limit(sock: socket.socket, seconds: float) -> None:
    """Each send and receive on ``sock`` fails (``BlockingIOError``) once it waited ``seconds``:
    kernel timeouts (``SO_SNDTIMEO``/``SO_RCVTIMEO``) on a blocking socket, so no ``poll(2)``
    precedes every send and receive as with a Python socket timeout."""
    if sock.gettimeout() is not None:
        sock.settimeout(None)
    whole = int(seconds)
    limit = _TIMEVAL.pack(whole, max(int((seconds - whole) * 1e6), 0 if whole else 1000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, limit)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, limit)


def _exchange(sock: socket.socket, header: dict[str, Any] | None) -> tuple[dict[str, Any], bytes]:
    if header is not None:
        send_frame(sock, header)
    frame = FrameReader(sock).read()  # the owner sends nothing but the one reply
    if frame is None:
        raise ConnectionResetError("the owner closed the connection")
    return frame


def closed_error(directory: str) -> QueueClosed:
    """What a call on a closed client raises."""
    return QueueClosed(f"queue {directory!r} is closed (in this process)")
