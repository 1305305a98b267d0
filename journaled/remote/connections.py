"""A process's connections to the owner of a queue it does not own (remote/server.py is the other end).

:class:`Link` is one client process's way to the owner: a pool of Unix-socket connections (one
per thread calling at once, so a blocked ``get`` on one thread never delays a ``put`` on
another), all of one *session*, so they share the process's open reads.  A call is one request
and one reply on one connection.  When the owner goes away mid-call the call raises
:class:`OwnerLost` (``outcome_unknown`` set when a put or a settling of reads was sent but not
answered: it may or may not have been carried out) and the link is dead: the queue object above
it (remote/clientqueue.py) reconnects.  Frames go through remote/transport.py, the module the
server uses too.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
from typing import Any

from journaled.disk import lifecycle
from journaled.errors import OwnerLost, QueueClosed
from journaled.remote import protocol as proto
from journaled.remote.transport import FrameReader, peer_ids, send_frame, socket_address

#: idle connections kept per process (more may be open while more threads call at once)
POOL_SIZE = 8
#: requests that settle open reads: never made again on another owner (the reads died with the
#: one they were opened under); sent but not answered, their outcome is unknown
SETTLE_OPS = frozenset({"commit", "commit_many", "abort", "release", "reject"})


class Link:
    """Connections to the owner of ``directory`` (raises ``OSError`` if nobody serves it)."""

    def __init__(self, directory: str, timeout: float | None = None) -> None:
        self.directory = directory
        self.timeout = timeout  # seconds any one socket operation may take (None: no limit)
        self.session = secrets.token_hex(8)
        self._lock = threading.Lock()
        self._idle: list[socket.socket] = []
        self._busy: set[socket.socket] = set()
        self.dead = False
        self.owner_pid = -1
        self.name = ""
        sock = self._connect()  # fail now, not at the first call
        self._idle.append(sock)
        lifecycle.track(self, None, Link.forget_in_child)

    def _connect(self) -> socket.socket:
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(socket_address(fd, self.directory))
            pid, uid = peer_ids(sock)
            if uid != os.geteuid():  # a socket another user planted: never talk to it
                raise PermissionError(f"the queue's socket in {self.directory} belongs to uid {uid}")
            if pid == os.getpid():  # the owner is this process (a lock file without its pid)
                raise PermissionError("the queue is owned by this very process")
            reply, _ = _exchange(
                sock, {"op": "hello", "version": proto.VERSION, "session": self.session, "pid": os.getpid()}
            )
            if not reply.get("ok"):
                raise ConnectionRefusedError(str(reply.get("message")))
            self.owner_pid, self.name = int(reply["owner"]), str(reply["name"])
        except BaseException:
            sock.close()
            raise
        finally:
            os.close(fd)
        return sock

    def call(
        self, header: dict[str, Any], payload: bytes = b"", *, is_put: bool = False
    ) -> tuple[dict[str, Any], bytes]:
        """Send one request, return the reply (or raise the error the owner reported)."""
        with self._lock:
            if self.dead:
                raise OwnerLost(f"the owner of {self.directory} went away")
            sock = self._idle.pop() if self._idle else None
        if sock is None:
            try:
                sock = self._connect()
            except OSError as exc:
                self.kill()
                raise _lost(self.directory, exc, False) from exc
        with self._lock:
            self._busy.add(sock)
        sent = False
        try:
            send_frame(sock, header, payload)
            sent = True
            reply, data = _exchange(sock, None)
        except (OSError, proto.ProtocolError) as exc:
            with self._lock:
                self._busy.discard(sock)
            sock.close()
            self.kill()
            raise _lost(
                self.directory, exc, sent and (is_put or header.get("op") in SETTLE_OPS), is_put
            ) from exc
        with self._lock:
            self._busy.discard(sock)
            if self.dead or len(self._idle) >= POOL_SIZE:
                sock.close()
            else:
                self._idle.append(sock)
        if not reply.get("ok"):
            if reply.get("closing"):
                # the owner is closing: the call was refused before it did anything
                self.kill()
                raise OwnerLost(f"the owner of {self.directory} is closing: {reply.get('message')}")
            proto.raise_error(reply)
        return reply, data

    def kill(self) -> None:
        """Close every connection (the session ends: the owner aborts its open reads)."""
        with self._lock:
            self.dead = True
            socks, self._idle = self._idle + list(self._busy), []
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for sock in socks:
            if sock not in self._busy:
                sock.close()
        lifecycle.untrack(self)

    def forget_in_child(self) -> None:
        """A forked child must not use, nor end, the parent's session."""
        self.dead = True
        for sock in self._idle + list(self._busy):
            sock.close()  # close(2) only, the parent's connections stay up
        self._idle, self._busy = [], set()


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
