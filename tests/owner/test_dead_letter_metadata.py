"""A dead letter keeps what its item was put with: headers, key and not-before travel in the
envelope (docs/format.md section 14), so a redrive or a human sees them."""

from __future__ import annotations

from journaled import DeadLetter, JournaledQueue, QueueConfig, ReaderConfig

QUIET = QueueConfig(checkpoint_interval=3600.0)


def test_rejected_item_reaches_a_queue_sink_with_its_headers_and_key(tmp_path) -> None:
    with JournaledQueue(str(tmp_path / "dlq"), QUIET) as dlq, JournaledQueue(str(tmp_path / "q"), QUIET) as q:
        r = q.reader("r", ReaderConfig(dead_letter=dlq))
        q.put(b"job", headers={"ct": b"json", "trace": b"\x00\xff"}, key=b"job-7")
        r.reject(r.get(block=False), "bad input")
        q.run_policies()
        letter = DeadLetter.decode(dlq.reader("d").get(timeout=5).data)
    assert (letter.data, letter.kind, letter.reason) == (b"job", "rejected", "bad input")
    assert dict(letter.headers) == {"ct": b"json", "trace": b"\x00\xff"}
    assert letter.key == b"job-7"


def test_a_callable_sink_gets_the_item_metadata_on_the_dead_letter(tmp_path) -> None:
    got: list[DeadLetter] = []
    with JournaledQueue(str(tmp_path / "q"), QUIET) as q:
        r = q.reader("r", ReaderConfig(max_errors=1, dead_letter=got.append))
        q.put(b"x", key=b"k", not_before=1.0)  # a time long past: due at once, not stored as a delay
        q.put(b"y", headers={"h": b"v"})
        for _ in range(2):
            r.abort(r.get(timeout=5))
        q.run_policies()
    assert [(d.data, d.key, dict(d.headers)) for d in got] == [(b"x", b"k", {}), (b"y", None, {"h": b"v"})]


def test_an_envelope_without_metadata_decodes_to_empty_headers_and_no_key() -> None:
    plain = DeadLetter(1, b"p", 1.5, None, 0, "expired", "", "r")
    back = DeadLetter.decode(plain.encode())
    assert (back.key, dict(back.headers), back.not_before, back.meta) == (None, {}, None, None)
    assert back == plain


def test_the_envelope_round_trips_not_before_to_the_millisecond() -> None:
    from journaled.format.metadata import Meta

    meta = Meta(not_before_ms=1_700_000_000_123)
    letter = DeadLetter(9, b"d", 2.0, None, 3, "max_errors", "boom", "r", meta)
    assert DeadLetter.decode(letter.encode()).not_before == 1_700_000_000.123
