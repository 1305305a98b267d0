"""Frames through a socket (remote/transport.py) as both ends use them: plain frames unchanged,
long frames for what a plain one cannot carry, each end's limits checked before any byte of a
message is stored."""

from __future__ import annotations

import socket
import threading

import pytest

from journaled.remote import protocol as proto
from journaled.remote.transport import FrameReader, send_frame


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.settimeout(30)
    b.settimeout(30)
    yield a, b
    a.close()
    b.close()


def sent_bytes(header: dict[str, object], payload: bytes | list[bytes]) -> bytes:
    a, b = socket.socketpair()
    with a, b:

        def send() -> None:
            send_frame(a, header, payload)
            a.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send)
        sender.start()
        out = b""
        while chunk := b.recv(1 << 20):
            out += chunk
        sender.join()
    return out


def test_a_message_a_plain_frame_carries_is_sent_as_before():
    head = b'{"op":"put_many","lens":[3]}'
    assert (
        sent_bytes({"op": "put_many", "lens": [3]}, b"abc") == proto.HEAD.pack(len(head), 3) + head + b"abc"
    )
    big = b"z" * (1 << 20)  # sent from its own buffer, the same bytes on the wire
    assert (
        sent_bytes({"op": "get"}, [big[:10], big[10:]])
        == proto.HEAD.pack(12, len(big)) + b'{"op":"get"}' + big
    )


def test_a_header_or_payload_over_the_plain_limits_travels_as_a_long_frame(pair, monkeypatch):
    monkeypatch.setattr(proto, "MAX_HEADER", 64)
    monkeypatch.setattr(proto, "MAX_PAYLOAD", 1000)
    a, b = pair
    header = {"op": "stats", "names": ["reader-%d" % i for i in range(20)]}
    payload = bytes(range(256)) * 300  # 76,800 bytes: over MAX_PAYLOAD and SMALL_PAYLOAD
    frames = FrameReader(b)
    sender = threading.Thread(target=send_frame, args=(a, header, [payload[:5], payload[5:]]))
    sender.start()
    got = frames.read()
    sender.join()
    assert got == (header, payload) and type(got[1]) is bytes
    send_frame(a, {"op": "next"})  # the stream goes on after it
    assert frames.read() == ({"op": "next"}, b"")
    raw = sent_bytes(header, b"")
    assert proto.HEAD.unpack(raw[: proto.HEAD.size]) == (proto.LONG, 0)


def test_a_long_frame_beyond_the_receiver_s_limits_is_refused_before_it_is_read(pair):
    a, b = pair
    frames = FrameReader(b, limits=proto.Limits(1 << 20, 1000))
    # only the announcement is sent: the refusal cannot have waited for (or stored) the body
    a.sendall(proto.HEAD.pack(proto.LONG, 0) + proto.LONG_HEAD.pack(20, 5000))
    with pytest.raises(proto.ProtocolError, match="more than this end accepts"):
        frames.read()
    a.sendall(proto.HEAD.pack(proto.LONG, 0) + proto.LONG_HEAD.pack(1, 0))
    with pytest.raises(proto.ProtocolError):
        frames.read()


def test_the_owner_accepts_requests_of_one_put_many_and_a_client_replies_of_one_large_item():
    assert proto.REQUEST_LIMITS.payload == proto.MAX_PAYLOAD
    assert proto.REPLY_LIMITS.payload >= 1 << 30  # the largest max_item_size a queue allows
    assert proto.REQUEST_LIMITS.header == proto.REPLY_LIMITS.header == proto.MAX_LONG_HEADER


def test_a_skipped_frame_leaves_the_stream_at_the_next_one(pair):
    a, b = pair
    frames = FrameReader(b, limits=proto.REQUEST_LIMITS)
    payload = b"p" * 300_000
    sender = threading.Thread(
        target=lambda: (send_frame(a, {"op": "put"}, payload), send_frame(a, {"op": "sync"}))
    )
    sender.start()
    hlen, plen = frames.announced()  # type: ignore[misc]
    assert plen == len(payload)
    frames.skip(hlen + plen)
    assert frames.read() == ({"op": "sync"}, b"")
    sender.join()


def test_a_frame_not_whole_by_its_deadline_times_out(pair):
    import time

    a, b = pair
    frames = FrameReader(b)
    frames.time_limit(time.monotonic() + 0.2)
    a.sendall(proto.HEAD.pack(30, 0) + b"{")  # a header begun, never finished
    with pytest.raises(TimeoutError):
        frames.read()
