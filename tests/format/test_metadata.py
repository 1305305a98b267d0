"""The PUTX metadata codec (journaled.format.metadata) against docs/format.md section 4.4, and
fuzzing: any bytes decode to metadata or to a reason, never to an exception."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journaled.format import metadata
from journaled.format.metadata import META_FIXED_SIZE, NO_HEADERS, Meta, decode, encode, encoded_size

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def names() -> st.SearchStrategy[str]:
    return st.text(min_size=1, max_size=40).filter(
        lambda n: len(n.encode("utf-8")) <= metadata.MAX_HEADER_NAME
    )


def metas() -> st.SearchStrategy[Meta]:
    return st.builds(
        Meta,
        not_before_ms=st.integers(0, 2**64 - 1),
        producer=st.integers(0, 2**64 - 1),
        sequence=st.integers(0, 2**64 - 1),
        key=st.none() | st.binary(min_size=1, max_size=64),
        headers=st.dictionaries(names(), st.binary(max_size=40), max_size=6).map(lambda d: d or NO_HEADERS),
    )


def fixed(key_len: int, count: int, block_len: int) -> bytes:
    return struct.pack("<QQQHHI", 7, 0, 0, key_len, count, block_len)


def header(name: bytes, value: bytes, name_len: int | None = None, value_len: int | None = None) -> bytes:
    nl = len(name) if name_len is None else name_len
    return struct.pack("<BI", nl, len(value) if value_len is None else value_len) + name + value


def test_the_fixed_part_is_32_bytes_in_the_documented_order():
    raw = encode(Meta(not_before_ms=1, producer=2, sequence=3, key=b"kk", headers={"n": b"vvv"}))
    assert META_FIXED_SIZE == 32
    assert struct.unpack_from("<QQQHHI", raw) == (1, 2, 3, 2, 1, 5 + 1 + 3)
    assert raw[32:] == b"kk" + b"\x01\x03\x00\x00\x00" + b"n" + b"vvv"


@given(meta=metas(), payload=st.binary(max_size=50), pad=st.binary(max_size=8))
@FUZZ
def test_decode_inverts_encode_and_the_payload_starts_after_the_block(meta, payload, pad):
    raw = pad + encode(meta) + payload
    assert len(encode(meta)) == encoded_size(meta)
    got = decode(raw, len(pad), len(raw))
    assert not isinstance(got, str)
    back, start = got
    assert back == meta and list(back.headers.items()) == list(meta.headers.items())
    assert raw[start:] == payload


@given(st.binary(max_size=200), st.data())
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_bytes_never_crash_decode_and_what_it_accepts_is_canonical(raw, data):
    at = data.draw(st.integers(0, len(raw)))
    end = data.draw(st.integers(at, len(raw)))
    got = decode(raw, at, end)
    if isinstance(got, str):
        assert got.startswith("PUTX")
        return
    meta, start = got
    assert at + META_FIXED_SIZE <= start <= end
    assert encode(meta) == raw[at:start]  # one encoding per metadata: nothing slips through unread


@given(st.binary(min_size=0, max_size=120))
@FUZZ
def test_header_blocks_of_random_bytes_never_crash_decode(block):
    for count in (0, 1, 2, 7, 65535):
        raw = fixed(0, count, len(block)) + block + b"payload"
        got = decode(raw, 0, len(raw))
        assert isinstance(got, (str, tuple))


@pytest.mark.parametrize(
    "raw, reason",
    [
        (fixed(0, 0, 0)[:31], "PUTX record too short for its metadata"),
        (fixed(9, 0, 0) + b"k" * 8, "PUTX metadata runs past its record"),
        (fixed(0, 0, 9) + b"x" * 8, "PUTX metadata runs past its record"),
        (fixed(0, 2, 7) + header(b"a", b"1"), "PUTX header block is shorter than its count"),
        (
            fixed(0, 1, 14) + header(b"a", b"1") + header(b"b", b"2"),
            "PUTX header block is longer than its headers",
        ),
        (fixed(0, 1, 7) + header(b"a", b"1", value_len=2), "PUTX header runs past its block"),
        (fixed(0, 1, 6) + header(b"", b"1"), "PUTX header runs past its block"),
        (fixed(0, 1, 8) + header(b"\xff\xfe", b"1"), "PUTX header name is not UTF-8"),
        (fixed(0, 2, 14) + header(b"a", b"1") + header(b"a", b"2"), "PUTX header name repeated"),
    ],
    ids=[
        "short",
        "key past",
        "block past",
        "count high",
        "bytes left",
        "value past",
        "empty name",
        "utf8",
        "repeat",
    ],
)
def test_inconsistent_metadata_is_a_reason_not_metadata(raw, reason):
    assert decode(raw, 0, len(raw)) == reason


def test_a_key_len_of_zero_is_no_key_and_empty_values_are_kept():
    raw = fixed(0, 1, 6) + header(b"n", b"") + b"pay"
    got = decode(raw, 0, len(raw))
    assert not isinstance(got, str)
    meta, start = got
    assert meta.key is None and dict(meta.headers) == {"n": b""} and raw[start:] == b"pay"


def test_decoded_headers_are_read_only():
    raw = encode(Meta(headers={"n": b"v"}))
    got = decode(raw, 0, len(raw))
    assert not isinstance(got, str)
    with pytest.raises(TypeError):
        got[0].headers["m"] = b"w"  # type: ignore[index]


def test_empty_means_a_plain_put_says_it_all():
    assert Meta().empty and Meta(headers=NO_HEADERS).empty
    for meta in (Meta(not_before_ms=1), Meta(producer=1), Meta(key=b"k"), Meta(headers={"n": b""})):
        assert not meta.empty
