"""Bad input is refused with a clear typed error; expiry times in the past expire; the package
face imports whole; the spool ledger stays cheap to consult; the spool never touches entries that
are not ours and never writes through a planted symlink."""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import subprocess
import sys

import pytest

import journaled
from journaled import Empty, JournaledQueue, ReaderConfig
from journaled.offline.scan import JournalScanner
from journaled.owner import adoption

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def delivered(q: JournaledQueue, name: str = "r") -> list[bytes]:
    r = q.reader(name)
    out = []
    while True:
        try:
            item = r.get(block=False)
        except Empty:
            return out
        out.append(item.data)
        r.commit(item)


# ------------------------------------------------------------------ 11: expiry at or before now
PAST_EXPIRIES = [
    0,
    0.0,
    0.0004,  # under one millisecond since the epoch
    dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc),
    dt.datetime(1970, 1, 1),  # naive: local time, at or before the epoch in any time zone east of UTC
    dt.datetime(1970, 1, 1, 0, 0, 0, 500, tzinfo=dt.timezone.utc),
    1.0,
]


@pytest.mark.parametrize("when", PAST_EXPIRIES, ids=repr)
def test_expire_at_at_or_before_now_is_stored_but_never_delivered(qdir, when):
    with JournaledQueue(qdir) as q:
        q.reader("r")
        q.put(b"stale", expire_at=when)
        q.put_many([b"stale2"], expire_at=when)
        q.put(b"fresh")
        assert delivered(q) == [b"fresh"]
    recs = list(JournalScanner(qdir).records())
    assert [r.payload for r in recs] == [b"stale", b"stale2", b"fresh"]
    assert all(r.expire_ms != 0 for r in recs[:2])  # 0 stays the format's "never"
    assert recs[2].expire_ms == 0


def test_an_already_expired_item_goes_to_the_expiry_sink(qdir):
    got: list[bytes] = []
    with JournaledQueue(qdir) as q:
        r = q.reader("r", ReaderConfig(expire_to=lambda item: got.append(item.data)))
        q.put(b"old", expire_at=0)
        with pytest.raises(Empty):
            r.get(block=False)
        q.run_policies()
        assert got == [b"old"]
        assert r.stats().expired == 1


def test_ttl_zero_expires_at_once(qdir):
    with JournaledQueue(qdir) as q:
        q.reader("r")
        q.put(b"x", ttl=0)
        assert delivered(q) == []


def test_a_spooled_batch_expiring_at_zero_is_expired_not_kept_forever(qdir):
    adoption.spool_put(qdir, [b"a"], key="k", expire_at=0)
    with JournaledQueue(qdir) as q:
        q.reader("r")
        assert delivered(q) == []
    (rec,) = JournalScanner(qdir).records()
    assert rec.expire_ms != 0


BAD_TIMES = [
    (-1, ValueError),
    (-0.5, ValueError),
    (math.nan, ValueError),
    (math.inf, ValueError),
    (-math.inf, ValueError),
    (1e300, ValueError),
    (10**30, ValueError),
    ("1", TypeError),
    (b"1", TypeError),
    ([1], TypeError),
    (True, TypeError),
]


@pytest.mark.parametrize(("value", "error"), BAD_TIMES, ids=repr)
@pytest.mark.parametrize("field", ["ttl", "expire_at"])
def test_bad_ttl_or_expire_at_raises_a_clear_error_and_stores_nothing(qdir, field, value, error):
    with JournaledQueue(qdir) as q:
        q.reader("r")
        with pytest.raises(error, match=field):
            q.put(b"x", **{field: value})
        with pytest.raises(error, match=field):
            q.put_many([b"x", b"y"], **{field: value})
        with pytest.raises(error, match=field):
            q.put_many([], **{field: value})
        assert q.put(b"ok") == 1  # no id was consumed
        assert delivered(q) == [b"ok"]


def test_a_datetime_too_far_ahead_raises_value_error(qdir):
    with JournaledQueue(qdir) as q, pytest.raises(ValueError, match="expire_at"):
        q.put(b"x", expire_at=dt.datetime(9999, 12, 31, 23, 59, tzinfo=dt.timezone(-dt.timedelta(hours=23))))


@pytest.mark.parametrize(("value", "error"), BAD_TIMES, ids=repr)
def test_spool_put_refuses_a_bad_expire_at_before_writing(qdir, value, error):
    with pytest.raises(error, match="expire_at"):
        adoption.spool_put(qdir, [b"a"], key="k", expire_at=value)
    assert adoption.pending_batches(qdir) == []


def test_a_sensible_ttl_and_expire_at_still_work(qdir):
    with JournaledQueue(qdir) as q:
        q.reader("r")
        q.put(b"a", ttl=3600)
        q.put(b"b", ttl=1)  # an int
        q.put(b"c", expire_at=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1))
        assert delivered(q) == [b"a", b"b", b"c"]


@pytest.mark.parametrize("bad", [1.5, 1.0, "1", True, False, None, b"\x01"], ids=repr)
@pytest.mark.parametrize("op", ["commit", "abort", "release"])
def test_settling_with_something_that_is_not_an_item_or_int_raises_type_error(qdir, op, bad):
    with JournaledQueue(qdir) as q:
        r = q.reader("r")
        q.put_many([b"zero", b"one"])
        a, b = r.get(block=False), r.get(block=False)
        with pytest.raises(TypeError, match="Item or an int"):
            getattr(r, op)(bad)
        r.commit(a)  # both reads are still open, untouched
        r.commit(b)
        assert r.head == 3 and r.stats().aborted == 0


def test_settling_by_int_id_still_works(qdir):
    with JournaledQueue(qdir) as q:
        r = q.reader("r")
        q.put_many([b"zero", b"one"])
        r.get(block=False), r.get(block=False)
        r.commit(2)
        r.abort(1)
        assert r.get(block=False).error_count == 1


@pytest.mark.parametrize("delay", [-1.0, math.nan, math.inf, 1e300], ids=repr)
def test_an_abort_delay_that_is_no_plan_raises_value_error_and_leaves_the_read_open(qdir, delay):
    # 1e300 s is finite but no due time: refused as a put's due time after the year 9999 is
    with JournaledQueue(qdir) as q:
        r = q.reader("r")
        q.put(b"job")
        item = r.get(block=False)
        with pytest.raises(ValueError, match="delay"):
            r.abort(item, delay=delay)
        r.abort(item, delay=0)  # still open: the refused call changed nothing
        assert r.get(block=False).error_count == 1


@pytest.mark.parametrize("bad", ["no", 0, None], ids=repr)
def test_dedup_that_is_not_a_bool_raises_type_error_and_stores_nothing(qdir, bad):
    with JournaledQueue(qdir, journaled.QueueConfig(dedup_window=60)) as q:
        r = q.reader("r")
        with pytest.raises(TypeError, match="dedup"):
            q.put(b"one", key=b"k", dedup=bad)
        with pytest.raises(TypeError, match="dedup"):
            q.put_many([b"two"], keys=[b"k"], dedup=bad)
        with pytest.raises(TypeError, match="dedup"):
            q.put_many([b"three", b"four"], dedup=bad)
        assert len(r) == 0


# ------------------------------------------------------------------ 12: the package face
def test_every_name_in___all___is_importable():
    for name in journaled.__all__:
        assert hasattr(journaled, name), name
    assert callable(journaled.spool_put)


def test_star_import_gives_every_public_name():
    code = (
        "import journaled\n"
        "ns = {}\n"
        "exec('from journaled import *', ns)\n"
        "missing = [n for n in journaled.__all__ if n not in ns]\n"
        "assert not missing, missing\n"
        "assert ns['spool_put'] is journaled.spool_put\n"
    )
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------------ 12: the ledger stays small to consult
def legacy_ledger(path: str, keys: list[str]) -> None:
    """A ledger written line by line (P then D per key), as every adoption appends it."""
    from crc32c import crc32c

    out = bytearray()
    for n, key in enumerate(keys):
        for body in (f"P {key.encode().hex()} {n} 1 0", f"D {key.encode().hex()}"):
            raw = body.encode("ascii")
            out += raw + b" %08x\n" % crc32c(raw)
    with open(path, "wb") as f:
        f.write(out)


def test_a_long_ledger_is_compacted_and_still_refuses_every_adopted_key(tmpfs_qdir):
    qdir = tmpfs_qdir
    keys = [f"batch-{n}" for n in range(12_000)]
    os.makedirs(adoption.spool_dir(qdir))
    path = os.path.join(adoption.spool_dir(qdir), adoption.LEDGER)
    legacy_ledger(path, keys)
    before = os.path.getsize(path)
    with JournaledQueue(qdir):
        pass
    ledger = adoption.Ledger(adoption.spool_dir(qdir))
    assert ledger.tail_lines == 0  # nothing left to parse line by line
    assert os.path.getsize(path) < before
    for key in (keys[0], keys[5_000], keys[-1]):
        assert ledger.adopted(key)
        assert adoption.spool_put(qdir, [b"again"], key=key) is False
    assert not ledger.adopted("batch-12000")
    assert all(ledger.adopted(k) for k in keys)
    assert not any(ledger.adopted(k + "x") or ledger.adopted("x" + k) for k in keys[1000:1100])
    assert ledger.adopted_keys() == set(keys)
    # a resend that skipped the check is still dropped at adoption
    tmp = adoption.new_temp_path(qdir)
    w = adoption.BatchWriter(tmp, keys[7])
    w.add(b"again")
    w.finish()
    adoption.publish(tmp, qdir)
    assert adoption.spool_put(qdir, [b"new"], key="batch-12000") is True
    with JournaledQueue(qdir) as q:
        q.reader("r")
        assert delivered(q) == [b"new"]
    assert adoption.pending_batches(qdir) == []


def test_adoptions_keep_the_ledger_tail_short(tmpfs_qdir):
    qdir = tmpfs_qdir
    n = adoption.LEDGER_TAIL_LIMIT  # twice that many lines: P and D per batch
    for i in range(n):
        adoption.spool_put(qdir, [b"%d" % i], key=f"k{i}")
    with JournaledQueue(qdir) as q:
        assert len(delivered(q)) == n
        assert adoption.spool_put(qdir, [b"x"], key="late") is True
        q.adopt_spool()
    ledger = adoption.Ledger(adoption.spool_dir(qdir))
    assert ledger.tail_lines <= adoption.LEDGER_TAIL_LIMIT
    assert ledger.adopted_keys() == {f"k{i}" for i in range(n)} | {"late"}
    assert not [e for e in os.listdir(adoption.spool_dir(qdir)) if e.startswith(".")]


def test_compaction_keeps_open_intents_and_every_kind_of_key(tmpfs_qdir):
    d = adoption.spool_dir(tmpfs_qdir)
    os.makedirs(d)
    keys = ["", "ä", "a b", "\n", "z" * 1024, "0", "00", "a", "ab", "b"][1:]
    ledger = adoption.Ledger(d)
    for n, key in enumerate(keys):
        ledger.intend(key, n, 1, 0)
        ledger.complete(key)
    ledger.intend("open", 50, 3, 1)
    ledger.compact()
    again = adoption.Ledger(d)
    assert again.tail_lines == 1  # the open intent, nothing else
    assert again.pending == {"open": (50, 3, 1)}
    assert again.adopted_keys() == set(keys)
    assert all(again.adopted(k) for k in keys) and not again.adopted("open") and not again.adopted("c")
    again.complete("open")
    assert adoption.Ledger(d).adopted_keys() == set(keys) | {"open"}


@pytest.mark.parametrize("where", ["header", "block"])
def test_a_damaged_key_block_is_reported_not_hidden(tmpfs_qdir, caplog, where):
    d = adoption.spool_dir(tmpfs_qdir)
    os.makedirs(d)
    ledger = adoption.Ledger(d)
    for key in ("k", "k2", "k3"):
        ledger.complete(key)
    ledger.compact()
    ledger.complete("later")
    path = os.path.join(d, adoption.LEDGER)
    raw = bytearray(open(path, "rb").read())
    raw[2 if where == "header" else raw.index(b"\n") + 1] ^= 0x01  # one bit flipped
    open(path, "wb").write(raw)
    with caplog.at_level(logging.ERROR, logger="journaled"):
        assert adoption.Ledger(d).adopted_keys() == {"later"}
    assert "compacted key block damaged" in caplog.text
    assert "damaged line" not in caplog.text  # one report, not one per key


# ------------------------------------------------------------------ 4, 5: entries that are not ours
def snapshot(path: str) -> dict[str, tuple[str, bytes | str | None]]:
    """name -> (kind, content or link target) of every entry in a folder."""
    out: dict[str, tuple[str, bytes | str | None]] = {}
    for name in os.listdir(path):
        p = os.path.join(path, name)
        if os.path.islink(p):
            out[name] = ("link", os.readlink(p))
        elif os.path.isdir(p):
            out[name] = ("dir", tuple(sorted(os.listdir(p))))  # type: ignore[assignment]
        elif os.path.isfile(p):
            with open(p, "rb") as f:
                out[name] = ("file", f.read())
        else:
            out[name] = ("other", None)
    return out


def plant_strays(qdir: str, outside: str) -> None:
    d = adoption.spool_dir(qdir)
    os.makedirs(d, exist_ok=True)
    os.mkdir(os.path.join(d, "x.batch"))  # a directory
    with open(os.path.join(d, "00000000000000000001-1-aa.batch"), "wb") as f:
        f.write(b"someone else's bytes, not a spool batch")  # wrong magic, first in order
    with open(os.path.join(d, "short.batch"), "wb") as f:
        f.write(b"\x89J")
    # a valid batch, but outside the queue and reached only through a symlink
    valid = os.path.join(outside, "valid.batch.tmp")
    w = adoption.BatchWriter(valid, "through-a-link")
    w.add(b"must not be adopted")
    w.finish()
    os.symlink(valid, os.path.join(d, "00000000000000000002-1-bb.batch"))
    os.symlink(os.path.join(outside, "nothing"), os.path.join(d, "dangling.batch"))


def test_stray_spool_entries_never_break_the_open_and_are_left_exactly_as_they_are(qdir, tmp_path, caplog):
    outside = tmp_path / "outside"
    outside.mkdir()
    plant_strays(qdir, str(outside))
    adoption.spool_put(qdir, [b"real"], key="real")
    strays = {k: v for k, v in snapshot(adoption.spool_dir(qdir)).items() if k.endswith(".batch")}
    strays = {k: v for k, v in strays.items() if "-1-" in k or not k[0].isdigit()}
    outside_before = snapshot(str(outside))
    with caplog.at_level(logging.INFO, logger="journaled"):
        with JournaledQueue(qdir) as q:
            q.reader("r")
            assert delivered(q) == [b"real"]
            for _ in range(3):
                q.adopt_spool()
    after = snapshot(adoption.spool_dir(qdir))
    for name, state in strays.items():
        assert after[name] == state, name
    assert not os.path.exists(os.path.join(adoption.spool_dir(qdir), adoption.REJECTED))
    assert snapshot(str(outside)) == outside_before
    assert [r.payload for r in JournalScanner(qdir).records()] == [b"real"]
    for name in strays:  # each said once, not on every pass
        assert sum(name in rec.getMessage() for rec in caplog.records) == 1, name


def test_a_fifo_named_like_a_batch_does_not_block_the_open(qdir):
    adoption.spool_put(qdir, [b"real"], key="real")
    fifo = os.path.join(adoption.spool_dir(qdir), "0-fifo.batch")
    os.mkfifo(fifo)  # opening it for reading would wait for a writer
    code = (
        "import sys, journaled\n"
        "with journaled.JournaledQueue(sys.argv[1]) as q:\n"
        "    r = q.reader('r')\n"
        "    print(r.get(timeout=5).data.decode())\n"
    )
    env = dict(os.environ, PYTHONPATH=ROOT)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, qdir], env=env, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail("opening the queue blocked on a FIFO in spool/")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "real"
    assert os.path.exists(fifo) and not os.path.isfile(fifo)


def test_a_damaged_batch_of_ours_is_still_set_aside(qdir):
    adoption.spool_put(qdir, [b"a"], key="k")
    (path,) = adoption.pending_batches(qdir)
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        f.write(b"\x00")
    with JournaledQueue(qdir):
        pass
    assert os.listdir(os.path.join(adoption.spool_dir(qdir), adoption.REJECTED)) == [os.path.basename(path)]


def test_a_ledger_replaced_by_a_symlink_is_never_written_through(qdir, tmp_path):
    target = tmp_path / "victim"
    target.write_bytes(b"precious")
    d = adoption.spool_dir(qdir)
    os.makedirs(d)
    os.symlink(str(target), os.path.join(d, adoption.LEDGER))
    with pytest.raises(OSError, match="symbolic link"):
        adoption.spool_put(qdir, [b"a"], key="k")
    tmp = adoption.new_temp_path(qdir)  # a producer that does not consult the ledger
    w = adoption.BatchWriter(tmp, "k")
    w.add(b"a")
    w.finish()
    adoption.publish(tmp, qdir)
    with JournaledQueue(qdir) as q:  # the open does not fail: adoption waits
        assert q.adopt_spool() == 0
    assert len(adoption.pending_batches(qdir)) == 1
    assert target.read_bytes() == b"precious"
    assert os.path.islink(os.path.join(d, adoption.LEDGER))


def test_a_planted_ledger_temp_symlink_is_never_written_through(tmpfs_qdir, tmp_path):
    qdir = tmpfs_qdir
    target = tmp_path / "victim"
    target.write_bytes(b"precious")
    d = adoption.spool_dir(qdir)
    os.makedirs(d)
    legacy_ledger(os.path.join(d, adoption.LEDGER), [f"k{i}" for i in range(adoption.LEDGER_TAIL_LIMIT + 1)])
    os.symlink(str(target), os.path.join(d, ".ledger.tmp"))
    with JournaledQueue(qdir):
        pass
    assert target.read_bytes() == b"precious"
    assert adoption.spool_put(qdir, [b"x"], key="k3") is False


@pytest.mark.parametrize("kind", ["link-to-dir", "dangling-link", "file"])
def test_a_damaged_batch_stays_put_when_rejected_is_not_a_real_folder(qdir, tmp_path, kind):
    outside = tmp_path / "outside"
    outside.mkdir()
    adoption.spool_put(qdir, [b"a"], key="k")
    (path,) = adoption.pending_batches(qdir)
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        f.write(b"\x00")
    rejected = os.path.join(adoption.spool_dir(qdir), adoption.REJECTED)
    if kind == "file":
        with open(rejected, "wb") as f:
            f.write(b"not a folder")
    else:
        os.symlink(str(outside) if kind == "link-to-dir" else str(outside / "gone"), rejected)
    with JournaledQueue(qdir) as q:
        assert q.adopt_spool() == 0
    assert adoption.pending_batches(qdir) == [path]
    assert os.listdir(outside) == []
