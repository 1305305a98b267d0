"""Which connections the owner serves, and how many at once (remote/server.py serves them).

The owner accepts connections on its socket in one thread and gives each admitted connection a
thread of its own, so a slow, stuck or blocked client delays nobody else.  Before a connection
costs anything beyond its descriptor it is checked here: a peer whose uid (``SO_PEERCRED``) is
not ours is refused at once, and so is any connection past one of the owner's limits, each
refused with an error reply naming it (docs/design.md, "Many processes, one queue"):
connections (``MAX_CONNECTIONS``, fewer under a low ``RLIMIT_NOFILE``: :func:`connection_limit`),
descriptors (``FD_RESERVE`` always left to the journal and the rest of the process), threads (a
connection the process cannot start one for is refused, and the accept loop goes on after a
pause) and connections that have not said hello (``MAX_PENDING``, each closed after
``HELLO_TIMEOUT``; a new one pushes out the oldest).  What an admitted connection may then ask,
and the memory its requests take, is the server's business.
"""

from __future__ import annotations

import logging
import os
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from journaled.disk import lifecycle
from journaled.remote.transport import peer_ids, send_frame

log = logging.getLogger("journaled")

#: connections served at once; more are refused with an error reply (fewer under a low
#: ``RLIMIT_NOFILE``: :func:`connection_limit`)
MAX_CONNECTIONS = 256
#: descriptors never taken by a connection: the journal's files, checkpoints, rotation, and
#: whatever else the owner's process opens
FD_RESERVE = 64
#: connections that have not said hello yet; one more closes the oldest of them
MAX_PENDING = 32
#: seconds a new connection has to complete its ``hello`` before it is closed
HELLO_TIMEOUT = 10.0
#: the accept loop's pause after a failure (doubled while they last, up to the second value)
ACCEPT_PAUSE = (0.05, 1.0)
#: seconds :meth:`Admission.end_connections` waits for the connections' threads to finish
STOP_WAIT = 2.0


def connection_limit() -> int:
    """How many connections the owner serves at once: ``MAX_CONNECTIONS``, or half of what
    ``RLIMIT_NOFILE`` leaves beyond ``FD_RESERVE`` when that is fewer."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(0, min(MAX_CONNECTIONS, (soft - FD_RESERVE) // 2))


class Admission:
    """Accepts connections on ``listener`` and runs ``serve(conn, peer_pid)`` for each one it
    admits, in a thread of its own; ``serve`` calls :meth:`spoke` once the peer said hello,
    holds :meth:`busy` while it carries out a request, and ends with :meth:`finished`."""

    def __init__(
        self, name: str, listener: socket.socket, serve: Callable[[socket.socket, int], None]
    ) -> None:
        self.name = name
        self._listener = listener
        self._serve = serve
        self._lock = threading.Lock()  # a leaf: guards the four sets below and ``stopping``
        self._conns: set[socket.socket] = set()
        self._pending: dict[socket.socket, int] = {}  # not past hello yet, oldest first -> pid
        self._busy: set[socket.socket] = set()  # carrying out a request: answered before it is closed
        self._threads: set[threading.Thread] = set()
        #: set once by :meth:`stop_accepting`; the connections' loops end when they see it
        self.stopping = False
        self._acceptor = threading.Thread(
            target=self._accept_loop, name=f"journaled-{name}-serve", daemon=True
        )

    def start(self) -> None:
        """Start accepting connections."""
        self._acceptor.start()

    # ------------------------------------------------------------------ accepting
    def _accept_loop(self) -> None:
        lifecycle.mark_background()
        pause = 0.0
        while not self.stopping:
            try:
                conn, _ = self._listener.accept()
            except OSError as exc:
                if self.stopping:
                    return
                pause = self._pause(pause, f"cannot accept a connection: {exc}")  # EMFILE and the like
                continue
            try:
                started = self._admit(conn)
            except Exception as exc:  # never let one connection end the loop
                conn.close()
                started = False
                log.error("journaled %s: admitting a connection failed: %r", self.name, exc)
            if started:
                pause = 0.0
            else:
                pause = self._pause(pause, "a connection was refused for want of resources")

    def _pause(self, pause: float, why: str) -> float:
        """Sleep after an accept-loop failure, longer while they last; logged when they start."""
        if not pause:
            log.warning("journaled %s: %s; accepting again after a pause", self.name, why)
        pause = min(max(pause * 2, ACCEPT_PAUSE[0]), ACCEPT_PAUSE[1])
        time.sleep(pause)
        return pause

    def _admit(self, conn: socket.socket) -> bool:
        """Serve ``conn`` in a thread of its own, or refuse it; False when the owner lacked the
        resources for it (the accept loop then pauses)."""
        try:
            pid, uid = peer_ids(conn)
        except OSError:
            conn.close()
            return True
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        evict: socket.socket | None = None
        short = False  # of descriptors: the accept loop pauses
        with self._lock:
            if uid != os.geteuid():
                why = "peer uid is not the queue owner's"
            elif self.stopping:
                why = "the owner is closing"
            elif soft != resource.RLIM_INFINITY and conn.fileno() >= soft - FD_RESERVE:
                # descriptors are given lowest first: this one's number says how many are taken
                why, short = f"the owner is short of file descriptors (RLIMIT_NOFILE {soft})", True
            elif len(self._conns) >= connection_limit():
                why = f"too many connections (the owner serves at most {connection_limit()})"
            else:
                why = ""
                if len(self._pending) >= MAX_PENDING:
                    evict = next(iter(self._pending))
                    self._pending.pop(evict)
                self._conns.add(conn)
                self._pending[conn] = pid
        if evict is not None:
            log.warning(
                "journaled %s: closed the oldest of %d connections that have not said hello",
                self.name,
                MAX_PENDING,
            )
            shut([evict])
        if why:
            self._refuse(conn, pid, why)
            return not short
        thread = threading.Thread(target=self._serve, args=(conn, pid), name="journaled-conn", daemon=True)
        with self._lock:
            self._threads.add(thread)
        try:
            thread.start()
        except (RuntimeError, MemoryError) as exc:  # a pids limit, no memory for a stack
            with self._lock:
                self._threads.discard(thread)
                self._conns.discard(conn)
                self._pending.pop(conn, None)
            self._refuse(conn, pid, f"the owner cannot start a thread for the connection ({exc})")
            return False
        return True

    def _refuse(self, conn: socket.socket, pid: int, why: str) -> None:
        log.warning("journaled %s: refused a connection from pid %d: %s", self.name, pid, why)
        try:
            conn.settimeout(0.5)
            send_frame(conn, {"ok": False, "error": "JournaledError", "message": why})
        except OSError:
            pass
        conn.close()

    # ------------------------------------------------------------------ a connection's life
    def spoke(self, conn: socket.socket) -> None:
        """``conn`` said hello: never the oldest silent connection closed for a newcomer."""
        with self._lock:
            self._pending.pop(conn, None)

    @contextmanager
    def busy(self, conn: socket.socket) -> Iterator[None]:
        """While ``conn`` carries out a request: :meth:`end_connections` lets it answer first."""
        with self._lock:
            self._busy.add(conn)
        try:
            yield
        finally:
            with self._lock:
                self._busy.discard(conn)

    def finished(self, conn: socket.socket) -> None:
        """Close ``conn``, served on the calling thread, and forget both."""
        conn.close()
        with self._lock:
            self._conns.discard(conn)
            self._pending.pop(conn, None)
            self._threads.discard(threading.current_thread())

    # ------------------------------------------------------------------ end
    def stop_accepting(self) -> bool:
        """Set :attr:`stopping` and close the listener; False if it was done already."""
        with self._lock:
            if self.stopping:
                return False
            self.stopping = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
        except OSError:
            pass
        self._listener.close()
        return True

    def end_connections(self) -> None:
        """Close every connection after :meth:`stop_accepting`: idle ones at once, a busy one
        once it answered its request (or after ``STOP_WAIT`` seconds)."""
        with self._lock:
            conns, threads, busy = list(self._conns), list(self._threads), set(self._busy)
        shut([c for c in conns if c not in busy])  # idle ones wake from recv and end
        me = threading.current_thread()
        deadline = time.monotonic() + STOP_WAIT
        for thread in threads + [self._acceptor]:
            # a busy one answers its request (the queue refuses new work now), then sees stopping
            if thread is not me and thread.ident is not None:  # (an unstarted one sees stopping)
                thread.join(max(0.0, deadline - time.monotonic()))
        shut(list(busy))

    def forget_in_child(self) -> None:
        """In a forked child: close our copies of the sockets, touch nothing shared."""
        self.stopping = True
        for sock in [self._listener, *self._conns]:
            sock.close()  # close(2) only: shutdown() would end the parent's connections too


def shut(socks: list[socket.socket]) -> None:
    """Wake each socket's thread from ``recv`` (it ends): the peer sees the connection close."""
    for conn in socks:
        try:
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
