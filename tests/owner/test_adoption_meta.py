"""Spool batches of version 2: the owner adopts their items with their keys, headers and
not-before times, as ``put_many`` would store them (PUTX records), exactly once."""

from __future__ import annotations

import journaled
from journaled.format.metadata import Meta
from journaled.format.record import PutX
from journaled.offline.scan import JournalScanner
from journaled.owner import adoption


def _spool(qdir: str, key: str, records) -> None:
    tmp = adoption.new_temp_path(qdir)
    w = adoption.BatchWriter(tmp, key, with_meta=True)
    for rec in records:
        w.add(*rec)
    w.finish()
    adoption.publish(tmp, qdir)


def test_adopted_items_keep_their_keys_headers_and_not_before(qdir):
    later = Meta(not_before_ms=4_000_000_000_000)
    _spool(
        qdir,
        "b1",
        [
            (b"a", 0, Meta(key=b"ka", headers={"h": b"1"})),
            (b"b", 0, None),
            (b"c", 4_100_000_000_000, later),
            (b"d", 4_100_000_000_000, Meta(key=b"kd")),
        ],
    )
    with journaled.JournaledQueue(qdir) as q:
        r = q.reader("r", journaled.ReaderConfig(start="earliest"))
        first, second = r.get(timeout=5), r.get(timeout=5)
        assert (first.data, first.key, dict(first.headers)) == (b"a", b"ka", {"h": b"1"})
        assert (second.data, second.key, dict(second.headers)) == (b"b", None, {})
    recs = list(JournalScanner(qdir).records())
    assert [r.payload for r in recs] == [b"a", b"b", b"c", b"d"]
    assert [type(r) is PutX for r in recs] == [True, False, True, True]
    assert recs[2].meta.not_before_ms == 4_000_000_000_000
    assert recs[2].expire_ms == recs[3].expire_ms == 4_100_000_000_000
    assert recs[3].meta.key == b"kd"
    assert adoption.pending_batches(qdir) == []


def test_an_interrupted_version_2_adoption_appends_only_the_missing_items_with_their_metadata(qdir):
    with journaled.JournaledQueue(qdir) as q:
        q.put(b"before")
        first = q.put(b"x", key=b"k0")  # as if the batch's first item had landed before a crash
    _spool(qdir, "b1", [(b"x", 0, Meta(key=b"k0")), (b"y", 0, Meta(key=b"k1", headers={"n": b"2"}))])
    adoption.Ledger(adoption.spool_dir(qdir)).intend("b1", first, 2, 0)
    with journaled.JournaledQueue(qdir):
        pass
    recs = list(JournalScanner(qdir).records())
    assert [(r.payload, getattr(r, "meta", None) and r.meta.key) for r in recs] == [
        (b"before", None),
        (b"x", b"k0"),
        (b"y", b"k1"),
    ]
    assert dict(recs[2].meta.headers) == {"n": b"2"}
    assert adoption.Ledger(adoption.spool_dir(qdir)).adopted("b1")
