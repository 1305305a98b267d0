"""Framed records: a batch written from record heads and payloads in bulk is the same batch."""

from __future__ import annotations

import os
from array import array

import pytest

from journaled.disk import intents, spoolfiles
from journaled.disk.spoolfiles import BatchWriter, read_batch
from journaled.format import spoolbatch


def _file(path: str, fill) -> bytes:
    writer = BatchWriter(path, "k")
    fill(writer)
    writer.finish()
    with open(path, "rb") as f:
        return f.read()


def test_framed_records_make_the_same_file_byte_for_byte_as_one_add_per_record(tmp_path):
    payloads = [b"", b"a", b"xyz" * 100, bytes(range(256))]
    for expire in (0, 1, (1 << 64) - 1, 4_000_000_000_123):
        one_by_one = _file(str(tmp_path / f"a{expire}"), lambda w: [w.add(p, expire) for p in payloads])

        def framed(w, expire=expire):
            heads = spoolbatch.record_heads([len(p) for p in payloads], expire)
            w.add_framed(b"".join(heads[12 * i : 12 * i + 12] + p for i, p in enumerate(payloads)), 4)

        assert _file(str(tmp_path / f"b{expire}"), framed) == one_by_one
    assert read_batch(str(tmp_path / "b0"))[1] == [(p, 0, None) for p in payloads]


def test_record_heads_take_int32_lengths_as_they_are_and_refuse_what_a_batch_cannot_hold():
    assert spoolbatch.record_heads(array("i", [3, 0])) == spoolbatch.record_heads([3, 0])
    assert spoolbatch.record_heads([]) == b""
    with pytest.raises(ValueError, match="negative"):
        spoolbatch.record_heads(array("i", [1, -1]))
    with pytest.raises(ValueError, match="too large"):
        spoolbatch.record_heads([spoolbatch.MAX_PAYLOAD + 1])
    with pytest.raises(ValueError, match="64 bits"):
        spoolbatch.record_heads([1], 1 << 64)


def test_a_batch_with_metadata_refuses_framed_version_1_records(tmp_path):
    writer = BatchWriter(str(tmp_path / "v2"), "k", with_meta=True)
    with pytest.raises(ValueError, match="with_meta"):
        writer.add_framed(spoolbatch.record_heads([1]) + b"x", 1)
    writer.discard()
    assert not os.path.exists(tmp_path / "v2")


def test_an_intent_names_only_staged_files_that_are_still_there(tmp_path):
    q = str(tmp_path / "q")
    staging = os.path.join(spoolfiles.spool_dir(q), spoolfiles.STAGING)
    os.makedirs(staging)
    kept, gone = os.path.join(staging, "1-a.part"), os.path.join(staging, "2-b.part")
    open(kept, "wb").close()
    os.symlink(kept, os.path.join(staging, "3-link.part"))
    assert intents.read_intent(q, "s:1") is None
    intents.write_intent(q, "s:1", [kept, gone, os.path.join(staging, "3-link.part")])
    (intent,) = [n for n in os.listdir(staging) if n.endswith(intents.INTENT_SUFFIX)]
    with open(os.path.join(staging, intent), "ab") as f:  # lines no publisher writes
        f.write(b"../../escape.part\n.hidden.part\n")
    assert intents.read_intent(q, "s:1") == [kept]
    assert intents.read_intent(q, "../s:1") is None  # another key, another file
    assert all(n.endswith((".part", ".intent")) for n in os.listdir(staging))
    intents.clear_intent(q, "s:1")
    assert intents.read_intent(q, "s:1") is None
