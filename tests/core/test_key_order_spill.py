"""Key order under memory pressure (issue 39 point 1; docs/design.md, "Key order", spilling): a
busy key's backlog never holds back items of other keys or items without a key that are still on
disk.  Items held behind a busy key past a bound (a quarter of ``max_memory``) are dropped from
memory and read back from the journal, in id order, when their key frees; memory stays bounded,
a checkpoint never skips a spilled item, and a crash replays it.  Compiled and pure alike.
"""

from __future__ import annotations

import os
import shutil

import pytest
from test_key_order import ready

from journaled import Empty, JournaledQueue, QueueConfig, ReaderConfig, UnknownRead

FAST = QueueConfig(sync="never", checkpoint_interval=3600.0)
SMALL = 8_000  # max_memory: room for ~30 items of 50 bytes in memory


def hot_key_then_others(q, hot: int = 2000, others: int = 20) -> tuple[list[int], list[int]]:
    """``hot`` items of key ``hot`` (the first is taken and held open by the caller), then
    ``others`` items of other keys and without a key: on disk behind the hot key's backlog."""
    hot_ids = q.put_many([b"%050d" % i for i in range(hot)], keys=[b"hot"] * hot)
    keys = [None if i % 2 else b"k%d" % i for i in range(others)]
    other_ids = q.put_many([b"o%049d" % i for i in range(others)], keys=keys)
    return hot_ids, other_ids


def test_a_hot_key_does_not_hold_back_other_keys_items_on_disk(qdir):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(key_order=True, max_memory=SMALL))
        hot_ids, other_ids = hot_key_then_others(q)
        first = r.get(block=False)
        assert first.id == hot_ids[0]  # held open: every later item of "hot" waits behind it
        got = ready(r)
        assert sorted(it.id for it in got) == other_ids, (
            f"{len(got)} of the {len(other_ids)} items of other keys delivered while key 'hot' is busy "
            f"(items behind keys: {r.stats().items_behind_keys}, charged {r.core.charged()} of {SMALL})"
        )


def drain_in_order(r, first) -> list:
    """Commit ``first``, then every item as it comes (get with block=False until Empty);
    returns every item delivered, in delivery order."""
    r.commit(first)
    out = []
    while True:
        got = ready(r)
        if not got:
            return out
        for it in got:
            out.append(it)
            r.commit(it)


def test_a_hot_keys_spilled_items_come_back_in_id_order_once_each_within_memory(qdir):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(key_order=True, max_memory=SMALL))
        hot_ids, other_ids = hot_key_then_others(q)
        first = r.get(block=False)
        others = ready(r)
        assert r.stats().items_behind_keys == len(hot_ids) - 1  # spilled ones counted too
        assert r.core.keys.spilled > len(hot_ids) // 2, "the hot key's backlog was not spilled"
        assert r.core.charged() <= SMALL // 4 + 300, "the lines took more than their share"
        assert r.stats().items_in_memory < 40  # spilled items are on disk, not in memory
        for it in others:
            r.commit(it)
        seen = [first.id] + [it.id for it in drain_in_order(r, first)]
        assert seen == hot_ids, "the hot key's items out of id order, lost or repeated"
        assert r.stats().items_behind_keys == 0 and r.stats().backlog_items == 0


def test_a_busy_key_holds_back_only_itself_when_keys_interleave_under_small_memory(qdir):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(key_order=True, max_memory=1))  # every lined item spills
        n = 600
        keys = [b"busy" if i % 3 == 0 else (None if i % 3 == 1 else b"k%d" % (i % 5)) for i in range(n)]
        put = q.put_many([b"%020d" % i for i in range(n)], keys=keys)
        busy = r.get(block=False)
        assert busy.key == b"busy"
        delivered = [busy.id]
        while True:  # everything but the busy key goes out, each other key in id order
            got = ready(r)
            if not got:
                break
            for it in got:
                delivered.append(it.id)
                r.commit(it)
        not_busy = [i for i, k in zip(put, keys) if k != b"busy"]
        assert sorted(delivered[1:]) == not_busy
        rest = [it.id for it in drain_in_order(r, busy)]
        assert rest == [i for i, k in zip(put, keys) if k == b"busy"][1:]


def test_a_checkpoint_never_passes_a_spilled_item_and_a_crash_replays_it(qdir):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(key_order=True, max_memory=SMALL))
        hot_ids, other_ids = hot_key_then_others(q, hot=300)
        first = r.get(block=False)
        for it in ready(r):
            r.commit(it)  # the other keys' items: committed past the spilled ones
        assert r.core.keys.spilled
        q.checkpoint()
        snap = qdir + ".crash"  # the directory as a crash leaves it
        shutil.copytree(qdir, snap, ignore=shutil.ignore_patterns(".journaled.lock", ".journaled.sock"))
    shutil.rmtree(qdir)
    os.rename(snap, qdir)
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r")
        assert r.stats().backlog_items == len(hot_ids)  # the open one and every spilled one
        again = r.get(block=False)
        assert again.id == first.id
        assert [it.id for it in drain_in_order(r, again)] == hot_ids[1:]


def test_an_abort_with_a_delay_keeps_the_retried_item_ahead_of_its_spilled_key(qdir):
    from journaled.core import retry
    from support.clock import FakeClock

    clock = FakeClock()
    saved, retry.CLOCK = retry.CLOCK, clock
    try:
        with JournaledQueue(qdir, FAST) as q:
            r = q.reader("r", ReaderConfig(key_order=True, max_memory=SMALL))
            hot_ids, other_ids = hot_key_then_others(q, hot=200)
            r.abort(r.get(block=False), delay=5)
            assert sorted(it.id for it in ready(r)) == other_ids  # the hot key waits for its first
            assert r.core.keys.spilled
            clock.advance(5.01)
            retried = ready(r)
            assert [it.id for it in retried] == [hot_ids[0]] and retried[0].error_count == 1
            assert [it.id for it in drain_in_order(r, retried[0])] == hot_ids[1:]
    finally:
        retry.CLOCK = saved


@pytest.mark.parametrize("how", ["reject", "dead_letter"])
def test_leaving_frees_the_key_for_its_next_spilled_item(qdir, how):
    sunk: list = []
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(key_order=True, max_memory=1, max_errors=1, dead_letter=sunk.append))
        hot_ids = q.put_many([b"%050d" % i for i in range(300)], keys=[b"hot"] * 300)
        first = r.get(block=False)
        assert ready(r) == [] and r.core.keys.spilled == len(hot_ids) - 1
        if how == "reject":
            r.reject(first, reason="bad")
        else:
            r.abort(first)  # max_errors=1: to the dead letters
        nxt = ready(r)
        assert [it.id for it in nxt] == [hot_ids[1]]
        assert [it.id for it in drain_in_order(r, nxt[0])] == hot_ids[2:]
        q.run_policies()
        assert [d.id for d in sunk] == [first.id]


def test_spilled_items_that_expire_free_their_key_when_read_back(qdir):
    from journaled.core import retry
    from support.clock import FakeClock

    clock = FakeClock()
    saved, retry.CLOCK = retry.CLOCK, clock
    try:
        with JournaledQueue(qdir, FAST) as q:
            r = q.reader("r", ReaderConfig(key_order=True, max_memory=SMALL))
            plain1 = q.put_many([b"%050d" % i for i in range(40)], keys=[b"hot"] * 40)
            dying = q.put_many([b"%050d" % i for i in range(40)], keys=[b"hot"] * 40, ttl=1)
            plain2 = q.put_many([b"%050d" % i for i in range(40)], keys=[b"hot"] * 40)
            first = r.get(block=False)
            assert ready(r) == [] and r.core.keys.spilled > 40  # the expiring ones among them
            clock.advance(2)
            assert [it.id for it in drain_in_order(r, first)] == plain1[1:] + plain2
            assert r.core.expired == len(dying)
    finally:
        retry.CLOCK = saved


def test_switching_key_order_off_gives_spilled_items_back_in_id_order(qdir):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(key_order=True, max_memory=SMALL))
        hot_ids, other_ids = hot_key_then_others(q, hot=300)
        first = r.get(block=False)
        for it in ready(r):
            r.commit(it)
        assert r.core.keys.spilled
        q.set_reader_settings("r", {"key_order": False})
        rest = []
        while True:
            got = ready(r)
            if not got:
                break
            rest += got
            for it in got:
                r.commit(it)
        assert [it.id for it in rest] == hot_ids[1:]
        r.commit(first)


def test_lowering_max_memory_live_spills_the_lines_down_to_their_new_share(qdir):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(key_order=True, max_memory=1 << 20))
        hot_ids, other_ids = hot_key_then_others(q, hot=1000)
        first = r.get(block=False)
        for it in ready(r):
            r.commit(it)
        assert r.core.keys.spilled == 0 and r.core.charged() > SMALL
        q.set_reader_settings("r", {"max_memory": SMALL})
        assert r.core.keys.charge() <= SMALL // 4 and r.stats().items_behind_keys == len(hot_ids) - 1
        assert [it.id for it in drain_in_order(r, first)] == hot_ids[1:]


def test_reading_spilled_items_back_keeps_the_reader_within_max_memory(qdir):
    mem = 30_000
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(key_order=True, max_memory=mem))
        keys = [b"hot"] * 1500 + [b"k%d" % (i % 97) for i in range(3000)]
        put = q.put_many([b"x" * 100] * len(keys), keys=keys)
        opened: list = []
        seen: list[int] = []
        most = 0
        while True:  # eight reads open at a time, the oldest settled first
            try:
                it = r.get(block=False)
            except Empty:
                if not opened:
                    break
                r.commit(opened.pop(0))
                continue
            seen.append(it.id)
            opened.append(it)
            if len(opened) > 8:
                r.commit(opened.pop(0))
            most = max(most, r.core.charged())
        assert sorted(seen) == put
        assert most <= mem + 8 * 300, f"charged {most} bytes with max_memory={mem}"


def test_a_read_error_while_reading_a_spilled_item_back_strands_nothing(qdir):
    import errno

    from journaled.disk import fileio

    class FailingPread(fileio.FileOps):
        armed = False

        def pread(self, fd: int, size: int, offset: int) -> bytes:
            if self.armed:
                raise OSError(errno.EIO, "injected read error")
            return super().pread(fd, size, offset)

    ops = FailingPread()
    with fileio.use(ops), JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(key_order=True, max_memory=1))  # every lined item spills
        hot_ids = q.put_many([b"%050d" % i for i in range(50)], keys=[b"hot"] * 50)
        first = r.get(block=False)
        assert ready(r) == [] and r.core.keys.spilled == len(hot_ids) - 1
        ops.armed = True
        r.commit(first)  # the key is free: its next item is to be read back, not yet read
        with pytest.raises(OSError):
            r.get(block=False)
        ops.armed = False
        assert r.stats().open_reads == 0 and r.stats().items_behind_keys == len(hot_ids) - 1
        nxt = ready(r)
        assert [it.id for it in nxt] == [hot_ids[1]]
        assert [it.id for it in drain_in_order(r, nxt[0])] == hot_ids[2:]


def test_retention_drops_the_spilled_items_it_archived_and_keeps_the_rest_in_order(tmpfs_qdir):
    retain = QueueConfig(sync="never", journal_size=400, checkpoint_interval=3600.0, retention_bytes=800)
    with JournaledQueue(tmpfs_qdir, retain, name="q") as q:
        r = q.reader("r", ReaderConfig(key_order=True, max_memory=1, start="earliest"))
        with q._files.lock:  # the background archiving pass waits: retention meets this state
            hot_ids = q.put_many([b"%02d" % i + b"p" * 38 for i in range(60)], keys=[b"hot"] * 60)
            first = r.get(block=False)
            assert ready(r) == [] and r.core.keys.spilled == len(hot_ids) - 1
        q.archive()
        keep = q.journal.files[0].first_id
        assert 2 < keep < 59
        assert r.stats().items_behind_keys == hot_ids[-1] - keep + 1
        with pytest.raises(UnknownRead):
            r.commit(first)  # archived while open: retention took the read, and so freed the key
        rest = ready(r)
        assert [it.id for it in rest] == [keep]
        assert [it.id for it in drain_in_order(r, rest[0])] == list(range(keep + 1, hot_ids[-1] + 1))


def test_a_spilled_item_damaged_on_disk_is_lost_as_read_behind_would_find_it(qdir, caplog):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(key_order=True, max_memory=1))  # every lined item spills
        hot_ids = q.put_many([b"%050d" % i for i in range(20)], keys=[b"hot"] * 20)
        first = r.get(block=False)
        assert ready(r) == [] and r.core.keys.spilled == len(hot_ids) - 1
        at = q.journal.locate(hot_ids[1])  # damage the record of the key's next item, spilled
        path = next(f.path for f in q.journal.files if f.ms == at.ms)
        with open(path, "r+b") as f:
            f.seek(at.offset + 30)
            byte = f.read(1)
            f.seek(at.offset + 30)
            f.write(bytes([byte[0] ^ 0xFF]))
        r.commit(first)
        nxt = ready(r)
        assert [it.id for it in nxt] == [hot_ids[2]], "the damaged item was delivered, or the key stuck"
        assert [it.id for it in drain_in_order(r, nxt[0])] == hot_ids[3:]
        assert r.stats().backlog_items == 0
        assert f"items {hot_ids[1]}..{hot_ids[1]} are lost" in caplog.text
