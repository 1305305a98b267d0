"""A single put with a key or headers builds its ``Meta`` and its readers' ``MetaItem`` through the
put path's slot builders, and checks its headers and encodes their block in one pass
(``metadata.checked_headers``): the objects, records and errors are those of the general path
(issue 37, the put with metadata's speed)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import attrs
import pytest

from journaled import JournaledQueue
from journaled.format import metadata
from journaled.format.metadata import NO_HEADERS, Meta
from journaled.item import MetaItem, put_headers
from journaled.owner import putpath


def test_the_meta_builder_makes_the_object_the_constructor_makes():
    built = putpath.new_meta(5, 6, 7, b"k", NO_HEADERS)
    made = Meta(5, 6, 7, b"k", NO_HEADERS)
    assert type(built) is Meta and built == made and attrs.asdict(built) == attrs.asdict(made)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        built.key = b"other"  # type: ignore[misc]


def test_the_meta_item_builder_makes_the_object_the_constructor_makes():
    meta = Meta(key=b"k")
    built = putpath.new_meta_item(3, b"data", 1.5, None, meta)
    made = MetaItem(3, b"data", 1.5, None, 0, meta)
    assert type(built) is MetaItem and built == made and attrs.asdict(built) == attrs.asdict(made)
    assert (built.key, dict(built.headers), built.not_before, built.error_count) == (b"k", {}, None, 0)


def test_a_put_with_a_key_and_headers_hands_readers_the_item_the_constructor_makes(tmp_path):
    with JournaledQueue(tmp_path / "q") as q:
        r = q.reader("r")
        item_id = q.put(b"x", key=b"k1", headers={"ct": b"json"})
        got = r.get(timeout=0)
    assert type(got) is MetaItem
    assert got == MetaItem(item_id, b"x", got.add_time, None, 0, Meta(key=b"k1", headers={"ct": b"json"}))


class Repeating(Mapping[str, bytes]):
    """A mapping whose ``items()`` names one header twice (the second value is the one it holds)."""

    def __getitem__(self, name: str) -> bytes:
        return b"second"

    def __iter__(self) -> Iterator[str]:
        return iter(["h"])

    def __len__(self) -> int:
        return 1

    def items(self):  # type: ignore[override]
        return [("h", b"first"), ("h", b"second")]


@pytest.mark.parametrize(
    "headers",
    [{"ct": b"json", "é": b"", "n": bytearray(b"ba")}, {"m": memoryview(b"mv")}, {}, Repeating()],
)
def test_checked_headers_keeps_what_put_headers_keeps_and_encodes_that(headers):
    hdrs, block = metadata.checked_headers(headers)
    assert hdrs == put_headers(headers)
    assert block == metadata.header_block(hdrs)
    assert metadata.encode(Meta(key=b"k", headers=hdrs)) == metadata.encode_parts(
        0, 0, 0, b"k", len(hdrs), block
    )


def test_a_single_put_with_headers_stores_the_record_put_many_stores(tmp_path):
    with JournaledQueue(tmp_path / "one") as one, JournaledQueue(tmp_path / "two") as two:
        r1, r2 = one.reader("r"), two.reader("r")
        one.put(b"p", headers=Repeating(), key=b"k")
        two.put_many([b"p"], headers=Repeating(), keys=[b"k"])
        a, b = r1.get(timeout=0), r2.get(timeout=0)
    assert a.meta == b.meta and dict(a.headers) == {"h": b"second"}
