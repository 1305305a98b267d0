"""The owner's socket: only its own user gets in, and no message can hurt the owner or others."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import textwrap

import pytest

from journaled import JournaledQueue
from journaled.remote.protocol import HEAD, SOCKET_NAME, VERSION, encode

TIMEOUT = 120


def raw_connect(d: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(TIMEOUT)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        s.connect(f"/proc/self/fd/{fd}/{SOCKET_NAME}")
    finally:
        os.close(fd)
    return s


def read_reply(s: socket.socket) -> dict[str, object] | None:
    """The next reply's header, or None once the owner closed the connection."""
    buf = b""
    while len(buf) < HEAD.size:
        chunk = s.recv(HEAD.size - len(buf))
        if not chunk:
            return None
        buf += chunk
    hlen, plen = HEAD.unpack(buf)
    body = b""
    while len(body) < hlen + plen:
        chunk = s.recv(hlen + plen - len(body))
        if not chunk:
            return None
        body += chunk
    header: dict[str, object] = json.loads(body[:hlen])
    return header


def closed_by_owner(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def hello(s: socket.socket) -> None:
    s.sendall(encode({"op": "hello", "version": VERSION, "session": "0123456789abcdef", "pid": os.getpid()}))
    reply = read_reply(s)
    assert reply is not None and reply["ok"] is True


GARBAGE = [
    b"\xff" * 64,  # lengths far beyond the limits
    struct.pack(">II", 5, 0) + b"\x00\x01\x02\x03\x04",  # header not JSON
    struct.pack(">II", 2, 0) + b"[]",  # JSON, not an object
    encode({"op": "put_many"}),  # before hello
]

AFTER_HELLO = [
    encode({"op": "put_many", "lens": [5, 5]}, b"abc"),  # lens do not cover the payload
    encode({"op": "put_many", "lens": "x"}, b"abc"),
    encode({"op": "get", "reader": 7}),  # wrong type
    encode({"op": "commit", "reader": "r", "id": True}),  # a bool is not an id
    encode({"op": "format_disk"}),  # unknown op
    encode({"nop": 1}),
]


@pytest.mark.parametrize("garbage", GARBAGE + AFTER_HELLO)
def test_a_malformed_message_gets_an_error_and_the_owner_carries_on(tmp_path, garbage):
    d = str(tmp_path / "q")
    with JournaledQueue(d) as q:
        r = q.reader("r")
        q.put(b"before")
        s = raw_connect(d)
        if garbage in AFTER_HELLO:
            hello(s)
        s.sendall(garbage)
        reply = read_reply(s)
        assert reply is not None and reply["ok"] is False and reply["error"] == "JournaledError"
        assert closed_by_owner(s)
        s.close()
        # nothing stored changed, the owner still serves others
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from journaled import JournaledQueue as Q; "
                "q = Q(sys.argv[1]); print(q.put(b'after')); q.close()",
                d,
            ],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert child.returncode == 0, child.stderr
        assert [r.get(timeout=5).data, r.get(timeout=5).data] == [b"before", b"after"]
        assert q.stats().health.ok


def test_a_client_stuck_mid_message_does_not_stall_the_others(tmp_path):
    d = str(tmp_path / "q")
    with JournaledQueue(d) as q:
        stuck = raw_connect(d)
        hello(stuck)
        stuck.sendall(encode({"op": "put_many", "lens": [10]}, b"0123456789")[:-4])  # never finished
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from journaled import JournaledQueue as Q; "
                "q = Q(sys.argv[1]); print(q.put_many([b'x'] * 3)); q.close()",
                d,
            ],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert child.stdout.strip() == "[1, 2, 3]"
        stuck.close()
        assert q.stats().put == 3


def test_the_socket_is_private_to_the_owner_user(tmp_path):
    d = str(tmp_path / "q")
    with JournaledQueue(d):
        st = os.stat(os.path.join(d, SOCKET_NAME), follow_symlinks=False)
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o600
        assert st.st_uid == os.geteuid()
    assert not os.path.exists(os.path.join(d, SOCKET_NAME))  # removed by close


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a child as another user")
def test_a_client_of_another_user_is_refused_even_when_it_can_reach_the_socket():
    base = tempfile.mkdtemp(prefix="journaled-uid-")
    d = os.path.join(base, "q")
    try:
        with JournaledQueue(d) as q:
            # make the socket reachable, so that the peer-credential check is what refuses
            os.chmod(base, 0o755)
            os.chmod(d, 0o711)
            os.chmod(os.path.join(d, SOCKET_NAME), 0o777)
            hello = encode({"op": "hello", "version": VERSION, "session": "0123456789abcdef", "pid": 1})
            put = encode({"op": "put_many", "lens": [4]}, b"evil")
            code = textwrap.dedent(
                f"""
                import os, socket, sys
                os.setgid(65534); os.setuid(65534)
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(60)
                s.connect({os.path.join(d, SOCKET_NAME)!r})
                try:
                    s.sendall({hello + put!r})
                except OSError:
                    pass
                data = b""
                while True:
                    try:
                        chunk = s.recv(4096)
                    except OSError:
                        break
                    if not chunk:
                        break
                    data += chunk
                print("refused" if b'"ok":false' in data and b'"ok":true' not in data else "ACCEPTED", data)
                """
            )
            child = subprocess.run(
                [sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=TIMEOUT
            )
            assert child.returncode == 0, child.stderr
            assert child.stdout.startswith("refused"), child.stdout
            assert q.stats().put == 0
            assert q.stats().clients == ()
    finally:
        shutil.rmtree(base)
