"""Spool batch files of version 2 (disk/spoolfiles.py, docs/format.md section 12): records that
carry an item's metadata round-trip, version 1 batches are written and read as before, and
damage to a version 2 batch is refused, never half-read."""

from __future__ import annotations

import os
import struct

import pytest
from crc32c import crc32c

from journaled.disk import spoolfiles
from journaled.disk.spoolfiles import BatchWriter, read_batch
from journaled.errors import CorruptJournal
from journaled.format import metadata
from journaled.format.metadata import Meta
from journaled.format.spoolbatch import NotABatch

META = Meta(not_before_ms=4_000_000_000_000, key=b"order-17", headers={"type": b"json", "trace": b"\x00\xff"})


def _write(path: str, records, *, with_meta: bool = True, key: str = "k") -> bytes:
    w = BatchWriter(path, key, with_meta=with_meta)
    for rec in records:
        w.add(*rec)
    w.finish()
    with open(path, "rb") as f:
        return f.read()


def _rewrite(path: str, raw: bytes) -> None:
    """Store ``raw`` with its CRC made right again: damage the CRC alone cannot catch."""
    body = raw[:-4]
    with open(path, "wb") as f:
        f.write(body + struct.pack("<I", crc32c(body)))


def test_version_2_batch_round_trips_payloads_expiries_and_metadata(tmp_path):
    path = str(tmp_path / "b")
    records = [
        (b"plain", 0, None),
        (b"with meta", 123, META),
        (b"", 0, Meta(key=b"k")),
        (b"empty meta is plain", 5, Meta()),
    ]
    raw = _write(path, records, key="batch é")
    assert struct.unpack_from("<H", raw, 8) == (2,)
    key, got = read_batch(path)
    assert key == "batch é"
    assert got == [
        (b"plain", 0, None),
        (b"with meta", 123, META),
        (b"", 0, Meta(key=b"k")),
        (b"empty meta is plain", 5, None),
    ]
    assert dict(got[1][2].headers) == {"type": b"json", "trace": b"\x00\xff"}


def test_version_2_record_layout_is_lengths_then_metadata_then_payload(tmp_path):
    path = str(tmp_path / "b")
    raw = _write(path, [(b"pay", 9, META)], key="k")
    meta = metadata.encode(META)
    start = 8 + 2 + 2 + 1
    assert raw[start : start + 16] == struct.pack("<IQI", 3, 9, len(meta))
    assert raw[start + 16 : start + 16 + len(meta)] == meta
    assert raw[start + 16 + len(meta) : start + 19 + len(meta)] == b"pay"
    assert raw[start + 19 + len(meta) :][:12] == struct.pack("<IQ", 0xFFFFFFFF, 1)


def test_version_1_batches_are_written_byte_for_byte_as_before_and_read_without_metadata(tmp_path):
    path = str(tmp_path / "b")
    raw = _write(path, [(b"a", 0), (b"bc", 7)], with_meta=False, key="k")
    body = b"\x89JSPL\r\n\x1a" + struct.pack("<HH", 1, 1) + b"k"
    body += struct.pack("<IQ", 1, 0) + b"a" + struct.pack("<IQ", 2, 7) + b"bc"
    body += struct.pack("<IQ", 0xFFFFFFFF, 2)
    assert raw == body + struct.pack("<I", crc32c(body))
    assert read_batch(path) == ("k", [(b"a", 0, None), (b"bc", 7, None)])


def test_a_version_1_writer_refuses_metadata_and_a_version_2_writer_refuses_what_a_put_refuses(tmp_path):
    w = BatchWriter(str(tmp_path / "v1"), "k")
    with pytest.raises(ValueError, match="with_meta"):
        w.add(b"x", 0, Meta(key=b"k"))
    w.add(b"x", 0, Meta())  # nothing to carry: a plain record
    w.discard()
    w = BatchWriter(str(tmp_path / "v2"), "k", with_meta=True)
    with pytest.raises(ValueError, match="key"):
        w.add(b"x", 0, Meta(key=b"k" * (metadata.MAX_KEY + 1)))
    with pytest.raises(ValueError, match="headers"):
        w.add(b"x", 0, Meta(headers={f"h{i}": b"" for i in range(metadata.MAX_HEADERS + 1)}))
    assert w.count == 0
    w.discard()
    assert not os.path.exists(str(tmp_path / "v2"))


def test_every_single_byte_flip_of_a_version_2_batch_is_refused(tmp_path):
    path = str(tmp_path / "b")
    raw = _write(path, [(b"one", 0, META), (b"two", 3, None)])
    for at in range(len(raw)):
        damaged = bytearray(raw)
        damaged[at] ^= 0x01
        with open(path, "wb") as f:
            f.write(damaged)
        with pytest.raises((CorruptJournal, NotABatch)):
            read_batch(path)


def test_every_truncation_of_a_version_2_batch_is_refused(tmp_path):
    path = str(tmp_path / "b")
    raw = _write(path, [(b"one", 0, META), (b"two", 3, None)])
    for cut in range(8, len(raw)):
        with open(path, "wb") as f:
            f.write(raw[:cut])
        with pytest.raises(CorruptJournal):
            read_batch(path)


def test_metadata_that_does_not_parse_is_damage_even_with_a_right_crc(tmp_path):
    path = str(tmp_path / "b")
    raw = _write(path, [(b"pay", 0, META)])
    start = 8 + 2 + 2 + 1 + 16  # the record's metadata
    # the header count says one more header than the block holds
    count_at = start + 8 + 8 + 8 + 2
    damaged = bytearray(raw)
    damaged[count_at] += 1
    _rewrite(path, bytes(damaged))
    with pytest.raises(CorruptJournal, match="header block"):
        read_batch(path)
    # a metadata length shorter than the metadata itself
    damaged = bytearray(raw)
    struct.pack_into("<I", damaged, start - 4, metadata.META_FIXED_SIZE)
    _rewrite(path, bytes(damaged))
    with pytest.raises(CorruptJournal):
        read_batch(path)


def test_metadata_beyond_a_puts_limits_is_refused_when_read(tmp_path):
    """A batch another writer made, CRC and all, whose key is longer than any put may store."""
    path = str(tmp_path / "b")
    meta = metadata.encode(Meta(key=b"k" * (metadata.MAX_KEY + 1)))
    body = b"\x89JSPL\r\n\x1a" + struct.pack("<HH", 2, 1) + b"k"
    body += struct.pack("<IQI", 1, 0, len(meta)) + meta + b"x" + struct.pack("<IQ", 0xFFFFFFFF, 1)
    _rewrite(path, body + b"\0\0\0\0")
    with pytest.raises(CorruptJournal, match="key"):
        read_batch(path)


def test_a_batch_version_past_2_is_refused(tmp_path):
    path = str(tmp_path / "b")
    raw = bytearray(_write(path, [(b"x", 0, None)]))
    struct.pack_into("<H", raw, 8, 3)
    _rewrite(path, bytes(raw))
    with pytest.raises(CorruptJournal, match="version 3"):
        read_batch(path)
    assert spoolfiles.read_batch_key(path) == "k"
