"""Bad metadata on a put gets a clear, typed error and stores nothing (issue 25): header values
that are not bytes, too many or too large headers, a key over its limit, a not-before that is
NaN, infinite or out of range; and what is accepted comes back exactly, read-only."""

from __future__ import annotations

import datetime as dt
import math

import pytest

from journaled import ItemTooLarge, JournaledQueue, QueueConfig
from journaled.format import metadata
from journaled.item import not_before_ms

BAD = [
    (dict(headers={"h": "text"}), TypeError),
    (dict(headers={"h": 1}), TypeError),
    (dict(headers={1: b"v"}), TypeError),
    (dict(headers=[("h", b"v")]), TypeError),
    (dict(headers={"": b"v"}), ValueError),
    (dict(headers={"n" * 256: b"v"}), ValueError),
    (dict(headers={"\ud800": b"v"}), ValueError),
    (dict(headers={f"h{i}": b"" for i in range(metadata.MAX_HEADERS + 1)}), ValueError),
    (dict(headers={"big": bytes(metadata.MAX_HEADER_BYTES)}), ValueError),
    (dict(key=b""), ValueError),
    (dict(key=bytes(metadata.MAX_KEY + 1)), ValueError),
    (dict(key="text"), TypeError),
    (dict(not_before=math.nan), ValueError),
    (dict(not_before=math.inf), ValueError),
    (dict(not_before=-1.0), ValueError),
    (dict(not_before=1e300), ValueError),
    (dict(not_before="soon"), TypeError),
    (dict(delay=math.nan), ValueError),
    (dict(delay=-0.5), ValueError),
    (dict(delay=True), TypeError),
    (dict(delay=1.0, not_before=2e9), ValueError),
]


@pytest.mark.parametrize(("kwargs", "error"), BAD, ids=[repr(k)[:60] for k, _ in BAD])
def test_bad_metadata_raises_a_typed_error_and_stores_nothing(tmp_path, kwargs, error) -> None:
    with JournaledQueue(str(tmp_path / "q"), QueueConfig(sync="never")) as q:
        q.put(b"before")
        with pytest.raises(error):
            q.put(b"x", **kwargs)
        many = {("keys" if k == "key" else k): ([v, None] if k == "key" else v) for k, v in kwargs.items()}
        with pytest.raises(error):
            q.put_many([b"ok", b"bad batch"], **many)
        assert q.stats().next_id == 2 and q.stats().put == 1


def test_put_many_needs_one_key_per_item(tmp_path) -> None:
    with JournaledQueue(str(tmp_path / "q")) as q:
        with pytest.raises(ValueError, match="one key"):
            q.put_many([b"a", b"b"], keys=[b"k"])
        with pytest.raises(TypeError):
            q.put_many([b"a"], keys=b"k")  # a bytes object is not a list of keys
        assert q.stats().next_id == 1


def test_a_payload_that_fits_alone_but_not_with_its_metadata_is_too_large() -> None:
    from journaled.item import check_record_size, put_metas

    class Sized(bytes):  # stands for a payload of a given length without allocating it
        def __new__(cls, n: int) -> Sized:
            obj = super().__new__(cls)
            obj.n = n  # type: ignore[attr-defined]
            return obj

        def __len__(self) -> int:
            return self.n  # type: ignore[attr-defined,no-any-return]

    metas = put_metas([b"x"], 0, None, None, {"h": bytes(1000)}, None, None)
    assert metas is not None and metas[0] is not None
    room = metadata.MAX_PAYLOAD_WITH_META - metadata.encoded_size(metas[0])
    check_record_size(Sized(room), metas[0])  # exactly fits a record body
    with pytest.raises(ItemTooLarge):
        check_record_size(Sized(room + 1), metas[0])


def test_a_not_before_is_rounded_up_to_the_millisecond_never_down() -> None:
    assert not_before_ms(None, 0.0005, 1000) == 1001
    assert not_before_ms(1.0005, None, 0) == 1001
    assert not_before_ms(dt.datetime(2030, 1, 1, 0, 0, 0, 500, tzinfo=dt.timezone.utc), None, 0) % 1000 == 1
    assert not_before_ms(1.0, None, 1000) == 0  # not after now: due at once, no delay stored


def test_accepted_metadata_comes_back_exactly_and_read_only(tmp_path) -> None:
    headers = {"content-type": b"application/json", "ünïcode": b"\x00\xff", "empty": b""}
    with JournaledQueue(str(tmp_path / "q")) as q:
        r = q.reader("r")
        q.put(b"x", headers=headers, key=bytearray(b"k" * metadata.MAX_KEY))
        got = r.get(timeout=5)
        assert dict(got.headers) == headers and list(got.headers) == list(headers)
        assert got.key == b"k" * metadata.MAX_KEY
        with pytest.raises(TypeError):
            got.headers["new"] = b"v"  # type: ignore[index]
