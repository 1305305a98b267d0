"""Frames over a Unix socket, for both ends: the owner's server and a client's connections.

remote/protocol.py says what a frame is, as pure code on bytes (its lengths, limits and JSON
header); this module moves frames through a socket: :func:`send_frame`, :class:`FrameReader`,
where a queue directory's socket is (:func:`socket_address`) and who is at the other end
(:func:`peer_ids`).  Both ends import it, so the two can never disagree on framing; the server's
policies (send timeout, how long it polls) stay in remote/server.py.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from typing import Any

from journaled.remote import protocol as proto

#: a frame that came within this many seconds of asking keeps (or turns) a reader's polling on
SPIN_HOT = 0.0002
#: seconds between two looks at how many tasks are runnable (:func:`cores_free`)
IDLE_CHECK = 0.1
_looked = [float("-inf"), True]  # when cores_free last looked, and what it found
_CRED = struct.Struct("3i")
_PLAIN = proto.HEAD.size
_LONG = proto.HEAD.size + proto.LONG_HEAD.size


def socket_address(dir_fd: int, directory: str) -> str:
    """A path to the socket that fits ``sun_path`` (108 bytes) however deep the directory is:
    through ``/proc/self/fd`` where Linux has it."""
    if os.path.isdir(f"/proc/self/fd/{dir_fd}"):
        return f"/proc/self/fd/{dir_fd}/{proto.SOCKET_NAME}"
    return os.path.join(directory, proto.SOCKET_NAME)


def runnable_tasks() -> int | None:
    """How many tasks of the whole machine are runnable now, this one included (the running
    count of ``/proc/loadavg``); None where the system does not say."""
    try:
        with open("/proc/loadavg", "rb") as f:
            return int(f.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return None


def cores_free() -> bool:
    """Whether a poller would take a core nobody else waits for: no more runnable tasks than
    this process has cores (the poller and its client each on one counts as free).  Looked at
    every ``IDLE_CHECK`` seconds at most; True where the system does not say."""
    now = time.monotonic()
    if now - _looked[0] >= IDLE_CHECK:
        running = runnable_tasks()
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        _looked[:] = [now, running is None or running <= (cores or 1)]
    return bool(_looked[1])


def peer_ids(sock: socket.socket) -> tuple[int, int]:
    """``(pid, uid)`` of the process at the other end (``SO_PEERCRED``)."""
    pid, uid, _gid = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
    return pid, uid


#: a payload up to this size is sent in one piece with its header (one ``send``), a larger one
#: from its own buffer (no copy of it)
SMALL_PAYLOAD = 64 << 10


def send_frame(
    sock: socket.socket, header: dict[str, Any] | bytes, payload: bytes | list[bytes] = b""
) -> None:
    """Send one whole message (``OSError`` if the peer went away or the send timed out): a
    plain frame, or a long frame when it is too big for one (remote/protocol.py).  The header
    is a dict, or its JSON bytes already made (``protocol.put_reply``).  A payload may be given
    as its pieces, which are sent one after the other, never joined."""
    head = header if isinstance(header, bytes) else proto.dump_header(header)
    if type(payload) is bytes and len(payload) <= SMALL_PAYLOAD and len(head) <= proto.MAX_HEADER:
        # perf: the usual message, a plain frame sent with one call
        sock.sendall(proto.HEAD.pack(len(head), len(payload)) + head + payload)
        return
    if isinstance(payload, list):
        pieces, size = payload, sum(map(len, payload))
    else:
        pieces, size = [payload], len(payload)
    start = proto.prefix(len(head), size) + head
    if size <= SMALL_PAYLOAD:
        sock.sendall(start + b"".join(pieces))
        return
    sock.sendall(start)
    for piece in pieces:
        sock.sendall(piece)


class FrameReader:
    """Reads whole frames from a socket, several bytes at a time (one ``recv`` per small frame).

    ``spin`` (used on the owner's side only): once two frames in a row came within ``SPIN_HOT``
    seconds of asking, poll the socket for up to ``spin`` seconds before blocking.  A request
    and its reply are a ping-pong between two processes, and on an idle machine waking a thread
    blocked in ``recv`` is a large part of a round trip; a client sending back to back (a loop
    of puts) saves the owner's wake-up.  One slow frame (a consumer working on its item) turns
    the polling off, so a client that pauses between requests never has a core burnt for it,
    and nothing polls while more tasks are runnable than there are cores (:func:`cores_free`):
    on a busy machine a blocked thread wakes quickly anyway and the core is someone else's.
    Clients do not poll: their spinning would take the core the owner needs to answer them.

    ``limits`` bound a long frame (remote/protocol.py): a client accepts large replies, the
    owner only requests it can carry out.  A large payload is read straight into one buffer of
    its exact size.  ``deadline`` (a ``time.monotonic`` time, or ``None``): a frame not whole by
    then raises ``TimeoutError``."""

    def __init__(
        self, sock: socket.socket, spin: float = 0.0, limits: proto.Limits = proto.REPLY_LIMITS
    ) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.spin = spin
        self.limits = limits
        self.deadline: float | None = None
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

    def time_limit(self, deadline: float | None) -> None:
        """Frames must be whole by ``deadline`` (a ``time.monotonic`` time) from now on, or
        raise ``TimeoutError``; ``None``: no limit (the socket is made blocking again)."""
        self.deadline = deadline
        if deadline is None:
            self.sock.settimeout(None)

    def _arm(self) -> None:
        """Bound the next receive by ``deadline``, or raise ``TimeoutError`` once it passed."""
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the frame did not come in time")
            self.sock.settimeout(left)

    def _recv(self, n: int) -> bytes:
        self._arm()
        return self.sock.recv(n)

    def _fill(self, n: int) -> bool:
        if self.spin and not self.buf and self.deadline is None:
            start = time.perf_counter()
            if self.quick >= 2 and cores_free() and not self._poll():
                return False
            if not self.buf:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return False
                self.buf += chunk
            self.quick = self.quick + 1 if time.perf_counter() - start < SPIN_HOT else 0
        while len(self.buf) < n:
            chunk = self._recv(min(max(n - len(self.buf), 65536), 1 << 20))
            if not chunk:
                if self.buf:
                    raise ConnectionResetError("the peer closed the connection mid-frame")
                return False
            self.buf += chunk
        return True

    def announced(self) -> tuple[int, int] | None:
        """The next frame's header and payload lengths (the frame itself is read by
        :meth:`body` or dropped by :meth:`skip`); ``None`` if the peer closed between frames.
        Lengths beyond protocol.py's limits or this reader's ``limits`` raise ``ProtocolError``."""
        if not self._fill(_PLAIN):
            return None
        found = proto.lengths(self.buf[:_PLAIN])
        if found is None:
            self._fill(_LONG)
            found = proto.long_lengths(self.buf[_PLAIN:_LONG], self.limits)
            del self.buf[:_LONG]
        else:
            del self.buf[:_PLAIN]
        return found

    def body(self, hlen: int, plen: int) -> tuple[dict[str, Any], bytes | bytearray]:
        """The header and payload of the frame whose :meth:`announced` were just read.  A payload
        over ``SMALL_PAYLOAD`` is a ``bytearray`` of its own (read into, never copied)."""
        if plen <= SMALL_PAYLOAD:
            self._fill(hlen + plen)
            with memoryview(self.buf) as view:  # one copy of each part, released before the del
                raw, small = bytes(view[:hlen]), bytes(view[hlen : hlen + plen])
            del self.buf[: hlen + plen]
            return proto.decode_header(raw), small
        self._fill(hlen)
        header = proto.decode_header(bytes(self.buf[:hlen]))
        del self.buf[:hlen]
        payload = bytearray(plen)
        have = min(len(self.buf), plen)
        payload[:have] = self.buf[:have]
        del self.buf[:have]
        with memoryview(payload) as view:
            while have < plen:
                self._arm()
                got = self.sock.recv_into(view[have:], min(plen - have, 1 << 20))
                if not got:
                    raise ConnectionResetError("the peer closed the connection mid-frame")
                have += got
        return header, payload

    def skip(self, n: int) -> None:
        """Read and drop the next ``n`` bytes (a frame refused without being stored)."""
        have = min(len(self.buf), n)
        del self.buf[:have]
        scratch = bytearray(min(n - have, 1 << 20))
        with memoryview(scratch) as view:
            while have < n:
                got = self.sock.recv_into(view, min(n - have, len(scratch)))
                if not got:
                    raise ConnectionResetError("the peer closed the connection mid-frame")
                have += got

    def read(self) -> tuple[dict[str, Any], bytes] | None:
        """The next frame's header and payload; ``None`` if the peer closed between frames.
        A frame that breaks protocol.py's limits or JSON rules raises ``ProtocolError``."""
        if not self.buf and not self.spin and self.deadline is None:
            # perf: the usual message (a reply to a client) is one plain frame that one recv
            # brings whole: taken apart here, anything else goes the general way below
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            if len(chunk) > _PLAIN:
                hlen, plen = proto.HEAD.unpack_from(chunk)
                if len(chunk) == _PLAIN + hlen + plen and 2 <= hlen <= proto.MAX_HEADER:
                    return proto.decode_header(chunk[_PLAIN : _PLAIN + hlen]), chunk[_PLAIN + hlen :]
            self.buf += chunk
        found = self.announced()
        if found is None:
            return None
        header, payload = self.body(*found)
        return header, payload if type(payload) is bytes else bytes(payload)


__all__ = [
    "IDLE_CHECK",
    "SMALL_PAYLOAD",
    "SPIN_HOT",
    "FrameReader",
    "cores_free",
    "peer_ids",
    "runnable_tasks",
    "send_frame",
    "socket_address",
]
