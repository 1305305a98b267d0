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
_CRED = struct.Struct("3i")


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


def send_frame(sock: socket.socket, header: dict[str, Any], payload: bytes = b"") -> None:
    """Send one whole frame (``OSError`` if the peer went away or the send timed out)."""
    sock.sendall(proto.encode(header, payload))


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
        """The next frame's header and payload; ``None`` if the peer closed between frames.
        A frame that breaks protocol.py's limits or JSON rules raises ``ProtocolError``."""
        if not self._fill(proto.HEAD.size):
            return None
        hlen, plen = proto.lengths(bytes(self.buf[: proto.HEAD.size]))
        end = proto.HEAD.size + hlen + plen
        self._fill(end)
        header = proto.decode_header(bytes(self.buf[proto.HEAD.size : proto.HEAD.size + hlen]))
        payload = bytes(self.buf[proto.HEAD.size + hlen : end])
        del self.buf[:end]
        return header, payload


__all__ = ["SPIN_HOT", "FrameReader", "peer_ids", "send_frame", "socket_address"]
