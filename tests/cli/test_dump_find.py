"""``journaled dump`` finds items by key, header, time and id range, and reads only the files the
range needs (a damaged record outside the range is never walked, so never reported)."""

from __future__ import annotations

import json
import os

import pytest

from journaled.cli.main import main
from journaled.disk.layout import journal_path
from journaled.format.metadata import Meta
from journaled.format.record import FileHeader, encode_header, encode_put, encode_putx

SALT = 0x5EED
T0 = 1_800_000_000_000  # ms: 2027-01-15 08:00:00 UTC
PER_FILE = 10


def item(i: int) -> tuple[int, Meta | None]:
    """Item i (1-based): added at T0 + i seconds; keys k0..k2 on even ids; a header on ids
    divisible by 3."""
    headers = {"tenant": b"t%d" % (i % 2)} if i % 3 == 0 else {}
    key = b"k%d" % (i % 3) if i % 2 == 0 else None
    meta = Meta(key=key, headers=headers) if key is not None or headers else None
    return T0 + i * 1000, meta


@pytest.fixture
def queue(tmp_path) -> tuple[str, list[str]]:
    """30 items in three journal files of 10."""
    path = str(tmp_path / "q")
    os.makedirs(path)
    files = []
    for k in range(3):
        first = 1 + k * PER_FILE
        header = FileHeader(salt=SALT, first_id=first, created_ms=T0 + first * 1000 - 1, name="q")
        data = bytearray(encode_header(header))
        for i in range(first, first + PER_FILE):
            add_ms, meta = item(i)
            if meta is None:
                data += encode_put(SALT, len(data), i, add_ms, 0, b"item %d" % i)
            else:
                data += encode_putx(SALT, len(data), i, add_ms, 0, meta, b"item %d" % i)
        files.append(journal_path(path, "q", header.created_ms))
        with open(files[-1], "wb") as f:
            f.write(data)
    return path, files


def dump(capsys, *args: str) -> tuple[int, list[int], str]:
    code = main(["dump", *args, "--json"])
    out, err = capsys.readouterr()
    return code, [json.loads(line)["id"] for line in out.splitlines()], err


def test_by_key_and_by_header(queue, capsys):
    path, _ = queue
    assert dump(capsys, path, "--key", "k1")[1] == [4, 10, 16, 22, 28]
    assert dump(capsys, path, "--header", "tenant=t1")[1] == [3, 9, 15, 21, 27]
    assert dump(capsys, path, "--header", "tenant=t0", "--key", "k0", "--start", "10", "--end", "20")[1] == [
        12,
        18,
    ]
    assert dump(capsys, path, "--key", "nobody")[1] == []


def test_by_time_and_by_id_range(queue, capsys):
    path, _ = queue
    since = str((T0 + 12_000) / 1000)  # seconds since the epoch
    until = "2027-01-15T08:00:15"  # ISO 8601, naive: UTC (T0 + 15 s)
    assert dump(capsys, path, "--since", since, "--until", until)[1] == [12, 13, 14, 15]
    assert dump(capsys, path, "--since", "2027-01-15T09:00:17+01:00")[1] == list(range(17, 31))
    assert dump(capsys, path, "--start", "5", "--end", "8")[1] == [5, 6, 7, 8]
    assert dump(capsys, path, "--start", "5", "--end", "25", "--key", "k2")[1] == [8, 14, 20]


def test_files_outside_the_range_are_never_read_through(queue, capsys):
    path, files = queue
    for f in (files[0], files[2]):  # damage the middle of the first and the last file
        with open(f, "r+b") as fh:
            fh.seek(os.path.getsize(f) // 2)
            fh.write(b"\xff\xff\xff")
    code, ids, err = dump(capsys, path)
    assert code == 1 and "damage" in err  # the whole journal: both damaged spans reported
    code, ids, err = dump(
        capsys, path, "--since", str((T0 + 11_000) / 1000), "--until", str((T0 + 20_000) / 1000)
    )
    assert (code, ids, err) == (0, list(range(11, 21)), "")


def test_a_wrong_time_or_header_is_a_usage_error(queue, capsys):
    path, _ = queue
    for args in (("--since", "yesterday"), ("--until", "nan"), ("--header", "novalue")):
        with pytest.raises(SystemExit) as exited:
            main(["dump", path, *args])
        assert exited.value.code == 2
