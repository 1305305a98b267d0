"""A client process's puts and gets carry an item's metadata (issue 25): headers, a key and a
not-before time travel to the owner with a put and back with each item a client gets; bad input
is refused in the client, with the owner's errors, before anything is sent; every put carries the
client's producer tag (producer id, sequence), and a put whose owner died before answering is
made again with the same tag instead of raising ``OwnerLost(outcome_unknown=True)``."""

from __future__ import annotations

import asyncio
import datetime as _dt
import json
import math
import threading
import time
from typing import Any

import pytest

from journaled import JournaledQueue
from journaled.errors import OwnerLost
from journaled.format import metadata
from journaled.item import not_before_ms
from journaled.remote import handlers, routing
from journaled.remote import protocol as proto
from journaled.remote.clientqueue import RemoteQueue
from journaled.remote.connections import Link
from support.child import Child

OWNER = """
import sys
from journaled import JournaledQueue
q = JournaledQueue(sys.argv[1])
q.reader("r")
print("ready", flush=True)
sys.stdin.readline()
q.close()
"""


@pytest.fixture
def client(tmp_path):
    """A client queue of a directory a child process owns (reader ``r`` exists); after the test
    the owner closes and the directory is free for the test to open and look at."""
    d = str(tmp_path / "q")
    owner = Child(OWNER, d, merge_stderr=True)
    try:
        owner.wait_for_line("ready")
        q = JournaledQueue(d)
        assert isinstance(q, RemoteQueue)
        try:
            yield q
        finally:
            q.close()
        owner.send("")
        owner.finish()
    finally:
        owner.stop()


def test_a_client_put_carries_headers_key_and_not_before_both_ways(client) -> None:
    due = time.time() + 0.2
    first = client.put(b"a", headers={"type": b"json", "trace": b"\x00\xff"}, key=b"k-1", not_before=due)
    more = client.put_many([b"b", b"c"], headers={"v": b"2"}, keys=[b"k-2", None])
    plain = client.put(b"d")
    assert more == [first + 1, first + 2] and plain == first + 3
    r = client.reader("r")
    got = [r.get(timeout=60) for _ in range(4)]
    for item in got:
        r.commit(item)
    by_data = {it.data: it for it in got}
    a, b, c, d = (by_data[x] for x in (b"a", b"b", b"c", b"d"))
    assert dict(a.headers) == {"type": b"json", "trace": b"\x00\xff"} and a.key == b"k-1"
    assert a.not_before == math.ceil(due * 1000) / 1000  # the ms the client asked for, rounded up
    assert dict(b.headers) == {"v": b"2"} and b.key == b"k-2" and b.not_before is None
    assert dict(c.headers) == {"v": b"2"} and c.key is None
    assert dict(d.headers) == {} and d.key is None and d.not_before is None
    assert a.id == first and b.id == first + 1


def test_the_owner_stores_each_client_put_with_its_producer_tag_in_sequence(tmp_path) -> None:
    d = str(tmp_path / "q")
    owner = Child(OWNER, d, merge_stderr=True)
    try:
        owner.wait_for_line("ready")
        with JournaledQueue(d) as client:
            client.put(b"a")
            client.put_many([b"b", b"c"], headers={"h": b"1"})
            client.put(b"d", key=b"x")
            client.put_many([])
        owner.send("")
        owner.finish()
    finally:
        owner.stop()
    with JournaledQueue(d) as q:  # the owner now: it reads what the first owner stored
        items = q.reader("r").get_many(10, timeout=0)
    # the tags are in the records; a reader sees none (a tag-only item reads back as a plain Item)
    from journaled.offline.scan import JournalScanner

    tags = [(r.meta.producer, r.meta.sequence) for r in JournalScanner(d).records()]
    assert items[0].meta is None
    producer = tags[0][0]
    assert 0 < producer < 1 << 63
    assert tags == [(producer, 1), (producer, 2), (producer, 3), (producer, 4)]
    assert [it.data for it in items] == [b"a", b"b", b"c", b"d"]
    assert dict(items[1].headers) == {"h": b"1"} and items[3].key == b"x"


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"headers": {"h": "text"}}, TypeError),
        ({"headers": {b"h": b"v"}}, TypeError),
        ({"headers": {"": b"v"}}, ValueError),
        ({"headers": {f"h{i}": b"" for i in range(metadata.MAX_HEADERS + 1)}}, ValueError),
        ({"headers": {"big": b"x" * metadata.MAX_HEADER_BYTES}}, ValueError),
        ({"headers": [("h", b"v")]}, TypeError),
        ({"key": b""}, ValueError),
        ({"key": b"k" * (metadata.MAX_KEY + 1)}, ValueError),
        ({"key": "text"}, TypeError),
        ({"not_before": float("nan")}, ValueError),
        ({"not_before": float("inf")}, ValueError),
        ({"not_before": 1e15}, ValueError),
        ({"not_before": "soon"}, TypeError),
        ({"delay": -1}, ValueError),
        ({"delay": 1, "not_before": time.time()}, ValueError),
        ({"not_before": _dt.datetime(9999, 12, 31, 23, 59, tzinfo=_dt.timezone.utc)}, None),
        ({"ttl": float("nan")}, ValueError),
    ],
)
def test_bad_metadata_is_refused_in_the_client_and_nothing_is_sent(monkeypatch, kwargs, error) -> None:
    q = RemoteQueue.__new__(RemoteQueue)
    RemoteQueue.__init__(q, _NoLink(), None, _no_owner)  # type: ignore[arg-type]
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(
        q, "call", lambda header, *a, **k: sent.append(header) or ({"first": 1, "count": 1}, b"", 0)
    )
    if error is None:  # the latest accepted time: it goes through
        q.put(b"x", **kwargs)
        assert len(sent) == 1
        return
    with pytest.raises(error):
        q.put(b"x", **kwargs)
    many = {("keys" if k == "key" else k): ([v, v] if k == "key" else v) for k, v in kwargs.items()}
    with pytest.raises(error):
        q.put_many([b"x", b"y"], **many)
    assert sent == []


def test_keys_of_a_client_put_many_are_one_per_item(monkeypatch) -> None:
    q = RemoteQueue(_NoLink(), None, _no_owner)  # type: ignore[arg-type]
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(
        q, "call", lambda header, *a, **k: sent.append(header) or ({"first": 1, "count": 1}, b"", 0)
    )
    with pytest.raises(ValueError):
        q.put_many([b"x", b"y"], keys=[b"k"])
    with pytest.raises(TypeError):
        q.put_many([b"x"], keys=b"k")  # type: ignore[arg-type]
    assert sent == []


class _NoLink:
    """A link that is never used (the tests replace ``call``)."""

    directory = "/nonexistent"
    name = "q"
    owner_pid = 0

    def kill(self) -> None:
        pass


def _no_owner() -> Any:
    raise OwnerLost("no owner in this test")


def test_an_older_clients_untagged_requests_are_still_served() -> None:
    q = _Recording()
    reply, _ = handlers.carry_out(
        q, handlers.Session(1), {}, threading.Lock(), "put", proto.PUT_REQUEST, b"a"
    )  # type: ignore[arg-type]
    assert reply == {"ok": True, "first": 10, "count": 1}
    assert q.calls == [("put", b"a")]


def test_a_put_request_passes_its_tag_and_metadata_to_the_queue() -> None:
    q = _Recording()
    header = {
        "op": "put_many",
        "lens": [1, 1],
        "tag": [7, 40],
        "not_before": 1_764_100_000_123,
        "headers": {"h": proto.text(b"\x00v")},
        "keys": [proto.text(b"k"), None],
    }
    reply, _ = handlers.carry_out(q, handlers.Session(1), {}, threading.Lock(), "put_many", header, b"ab")  # type: ignore[arg-type]
    assert reply == {"ok": True, "first": 10, "count": 2}
    ((op, kwargs),) = q.calls
    assert op == "put_many" and kwargs["producer"] == (7, 40) and kwargs["keys"] == [b"k", None]
    assert kwargs["headers"] == {"h": b"\x00v"}
    assert math.ceil(kwargs["not_before"] * 1000) == 1_764_100_000_123  # exactly the client's ms


def test_a_retried_put_whose_items_were_stored_before_answers_their_ids() -> None:
    q = _Recording(ids=[10, 4])
    header = {"op": "put_many", "lens": [1, 1], "tag": [7, 40]}
    reply, _ = handlers.carry_out(q, handlers.Session(1), {}, threading.Lock(), "put_many", header, b"ab")  # type: ignore[arg-type]
    assert reply["ids"] == [10, 4]
    assert json.loads(handlers.put_reply([10, 4])) == {"ok": True, "first": 10, "count": 2, "ids": [10, 4]}
    assert json.loads(handlers.put_reply([10, 11])) == {"ok": True, "first": 10, "count": 2}


@pytest.mark.parametrize("tag", [[1], [1, "2"], "7:1", [1, 2, 3], [True, 1]])
def test_a_malformed_tag_is_a_protocol_error(tag) -> None:
    with pytest.raises(proto.ProtocolError):
        handlers.put_extras({"op": "put", "tag": tag})


def test_the_tagged_put_header_is_the_json_the_encoder_makes() -> None:
    for producer, seq in [(1, 0), ((1 << 63) - 1, (1 << 64) - 1), (12345, 678)]:
        header = proto.tagged_put(producer, seq)
        assert proto.dump_header(header) == json.dumps(header, separators=(",", ":")).encode()


class _Recording:
    """A served queue that records the puts it is asked for."""

    def __init__(self, ids: list[int] | None = None) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.ids = ids

    def put(self, data: bytes, *, expire_at: Any = None, ttl: Any = None) -> int:
        self.calls.append(("put", data))
        return 10

    def put_many(self, items: list[bytes], **kwargs: Any) -> list[int]:
        self.calls.append(("put_many", kwargs))
        return self.ids if self.ids is not None else list(range(10, 10 + len(items)))

    def write_out(self) -> None:
        pass


def test_sequences_of_puts_from_many_threads_are_never_shared(monkeypatch) -> None:
    q = RemoteQueue(_NoLink(), None, _no_owner)  # type: ignore[arg-type]
    tags: list[tuple[int, int, int]] = []
    lock = threading.Lock()

    def call(header: dict[str, Any], payload: bytes = b"", **kwargs: Any) -> Any:
        producer, first = header["tag"]
        with lock:
            tags.append((producer, first, len(header.get("lens", [0]))))
        return {"first": 1, "count": 1}, b"", 0

    monkeypatch.setattr(q, "call", call)

    def work() -> None:
        for n in range(200):
            q.put(b"x") if n % 2 else q.put_many([b"a", b"b", b"c"])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seqs = sorted(s for _, first, n in tags for s in range(first, first + n))
    assert len({p for p, _, _ in tags}) == 1
    assert seqs == list(range(1, 1 + len(seqs))) and len(seqs) == 4 * (100 + 300)


class _DyingLink(_NoLink):
    """A link whose owner dies after the request reached it, ``deaths`` times, then answers."""

    def __init__(self, log: list[dict[str, Any]], deaths: int) -> None:
        self.log, self.deaths = log, deaths

    def call(self, header: dict[str, Any], payload: bytes = b"", **kwargs: Any) -> Any:
        self.log.append(dict(header))
        if len(self.log) <= self.deaths:
            lost = OwnerLost("the owner died during the put")
            lost.outcome_unknown = True
            raise lost
        return {"ok": True, "first": 5, "count": len(header.get("lens", [0]))}, b""


def test_a_put_whose_owner_died_unanswered_is_made_again_with_the_same_tag(monkeypatch) -> None:
    log: list[dict[str, Any]] = []
    q = RemoteQueue(_DyingLink(log, 2), None, _no_owner)  # type: ignore[arg-type]
    monkeypatch.setattr(
        q._route, "reconnect", lambda generation: setattr(q._route, "_generation", generation + 1)
    )
    assert q.put(b"x") == 5
    assert q.put_many([b"a", b"b"], headers={"h": b"v"}) == [5, 6]
    assert [h["tag"] for h in log] == [log[0]["tag"]] * 3 + [[log[0]["tag"][0], 2]]
    assert log[3]["headers"] == {"h": proto.text(b"v")}


def test_a_put_with_no_next_owner_in_time_raises_outcome_unknown(monkeypatch) -> None:
    log: list[dict[str, Any]] = []
    q = RemoteQueue(_DyingLink(log, 1), None, _no_owner)  # type: ignore[arg-type]
    monkeypatch.setattr(routing, "PUT_RETRY", 0.05)

    def nobody(generation: int) -> None:
        raise OwnerLost("no owner yet")

    monkeypatch.setattr(q._route, "reconnect", nobody)
    with pytest.raises(OwnerLost) as caught:
        q.put(b"x")
    assert caught.value.outcome_unknown is True and "no next owner answered" in str(caught.value)
    assert len(log) == 1


def test_a_put_whose_owner_stopped_answering_but_lives_is_not_made_again(monkeypatch) -> None:
    class Wedged(_DyingLink):
        def call(self, header: dict[str, Any], payload: bytes = b"", **kwargs: Any) -> Any:
            self.log.append(dict(header))
            lost = OwnerLost("no reply within 6.0 s (reply deadline)")
            lost.outcome_unknown = True
            raise lost from TimeoutError("no reply within 6.0 s (reply deadline)")

    log: list[dict[str, Any]] = []
    q = RemoteQueue(Wedged(log, 1), None, _no_owner)  # type: ignore[arg-type]
    monkeypatch.setattr(q._route, "reconnect", lambda generation: None)
    with pytest.raises(OwnerLost) as caught:
        q.put(b"x")
    assert caught.value.outcome_unknown is True and len(log) == 1


DEDUP_OWNER = """
import sys
from journaled import JournaledQueue, QueueConfig
q = JournaledQueue(sys.argv[1], QueueConfig(dedup_window=600))
q.reader("r")
print("ready", flush=True)
sys.stdin.readline()
q.close()
"""


def test_a_request_made_again_with_its_tag_is_answered_with_the_ids_stored_the_first_time(tmp_path) -> None:
    d = str(tmp_path / "q")
    owner = Child(DEDUP_OWNER, d, merge_stderr=True)
    try:
        owner.wait_for_line("ready")
        link = Link(d)
        try:
            many = {"op": "put_many", "lens": [1, 1], "tag": [99, 10]}
            first = link.call(many, b"ab", is_put=True)[0]
            again = link.call(many, b"ab", is_put=True)[0]
            assert first == again == {"ok": True, "first": 1, "count": 2}
            # sequences 10 and 11 are stored (ids 1, 2), 12 is not: it gets id 4, after another
            # producer's item, and the reply lists the ids
            assert link.call(proto.tagged_put(5, 1), b"c", is_put=True)[0]["first"] == 3
            wider = {"op": "put_many", "lens": [1, 1, 1], "tag": [99, 10]}
            reply = link.call(wider, b"abd", is_put=True)[0]
            assert reply == {"ok": True, "first": 1, "count": 3, "ids": [1, 2, 4]}
            single = proto.tagged_put(99, 13)
            assert link.call(single, b"e", is_put=True)[0]["first"] == 5
            assert link.call(single, b"e", is_put=True)[0]["first"] == 5
        finally:
            link.kill()
        with JournaledQueue(d) as client:
            assert client.put(b"f", key=b"k") == client.put(b"f again", key=b"k") == 6
            assert client.put(b"g", key=b"k", dedup=False) == 7
            assert client.put_many([b"h", b"i"], keys=[b"k", b"k2"]) == [6, 8]
            with pytest.raises(TypeError):
                client.put(b"x", dedup=None)  # type: ignore[arg-type]
            r = client.reader("r")
            got = [it.data for it in r.get_many(100, timeout=60)]
            assert got == [b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"i"]
        owner.send("")
        owner.finish()
    finally:
        owner.stop()


def test_a_clients_aput_and_aput_many_take_the_same_keywords(client) -> None:
    async def put_both() -> tuple[int, list[int]]:
        return (
            await client.aput(b"a", headers={"h": b"1"}, key=b"ka"),
            await client.aput_many([b"b"], keys=[b"kb"], delay=0.01),
        )

    first, more = asyncio.run(put_both())
    assert more == [first + 1]
    r = client.reader("r")
    a, b = r.get(timeout=60), r.get(timeout=60)
    assert (a.data, dict(a.headers), a.key) == (b"a", {"h": b"1"}, b"ka")
    assert (b.data, b.key) == (b"b", b"kb") and b.not_before is not None
    with pytest.raises(ValueError):
        asyncio.run(client.aput(b"x", key=b""))


def test_the_owner_stores_exactly_the_not_before_millisecond_a_client_sends() -> None:
    for ms in [
        1,
        999,
        1_000,
        1_764_100_000_123,
        1_764_100_000_999,
        253_402_300_799_000,
        *range(10**12, 10**12 + 2000),
    ]:
        sent = handlers.put_extras({"op": "put", "not_before": ms})["not_before"]
        assert not_before_ms(sent, None, 0) == ms
