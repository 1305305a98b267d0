"""The attacker of tests/cli/test_port_flood.py, run as a process of its own:
``port_flood.py SECONDS REOPEN N PORT...`` opens N connections to each port at once (half idle,
half sending a request's headers a line a second: slowloris) and, if REOPEN is 1, opens again
every one the server closes, at once, for SECONDS; it prints ``flooding`` once every connection
was asked for, and at the end one JSON line of figures.  Its own descriptor limit is raised to
fit (the server's is not)."""

from __future__ import annotations

import errno
import json
import resource
import selectors
import socket
import sys
import time


def main() -> None:
    seconds, reopen, n = float(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3])
    ports = [int(p) for p in sys.argv[4:]]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n * len(ports) + 100
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    sel = selectors.DefaultSelector()
    figures = {"opened": 0, "reopened": 0, "failed": 0, "closed_by_server": 0}
    started: set[int] = set()  # the slow connections that sent their request line

    def connect(port: int, slow: bool) -> None:
        s = socket.socket()
        s.setblocking(False)
        err = s.connect_ex(("127.0.0.1", port))
        if err not in (0, errno.EINPROGRESS):
            figures["failed"] += 1
            s.close()
            return
        figures["opened"] += 1
        sel.register(s, selectors.EVENT_READ, (port, slow))

    for port in ports:
        for i in range(n):
            connect(port, i % 2 == 1)
    print("flooding", flush=True)
    end = time.monotonic() + seconds
    next_line = time.monotonic()
    while time.monotonic() < end:
        for key, _ in sel.select(0.2):  # readable: the server answered or closed it
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            sel.unregister(sock)
            started.discard(sock.fileno())
            sock.close()
            figures["closed_by_server"] += 1
            if reopen:
                figures["reopened"] += 1
                connect(*key.data)
        if time.monotonic() >= next_line:  # the slow half sends one more header line
            next_line += 1.0
            for key in list(sel.get_map().values()):
                port, slow = key.data
                if slow:
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        sock.send(b"X-a: b\r\n" if sock.fileno() in started else b"GET / HTTP/1.1\r\n")
                        started.add(sock.fileno())
                    except OSError:
                        pass
    figures["open_at_end"] = len(sel.get_map())
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
