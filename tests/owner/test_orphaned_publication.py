"""A publication of several spool batches (the Spark sink's commit) whose publisher died between
its renames is finished by the queue's owner once its intent has been left alone for
``intents.ORPHAN_AGE``: the intent is the commit point, so the batch arrives whole or not at all."""

from __future__ import annotations

import os
import time

from journaled import JournaledQueue, ReaderConfig
from journaled.disk import intents
from journaled.disk.spoolfiles import STAGING, BatchWriter, new_temp_path, publish, spool_dir


def staged_part(qdir: str, key: str, payloads: list[bytes]) -> str:
    tmp = new_temp_path(qdir, STAGING)
    writer = BatchWriter(tmp, key)
    for p in payloads:
        writer.add(p)
    writer.finish()
    final = os.path.join(os.path.dirname(tmp), os.path.basename(tmp)[1:].removesuffix(".tmp") + ".part")
    os.rename(tmp, final)
    return final


def half_published(qdir: str, age: float) -> str:
    """Three parts under one intent, the first renamed into the spool, then the publisher died."""
    parts = [staged_part(qdir, f"sink:7:{i}", [b"%d-%d" % (i, j) for j in range(3)]) for i in range(3)]
    intents.write_intent(qdir, "sink:7", parts)
    publish(parts[0], qdir)
    (intent,) = [
        os.path.join(spool_dir(qdir), STAGING, n)
        for n in os.listdir(os.path.join(spool_dir(qdir), STAGING))
        if n.endswith(intents.INTENT_SUFFIX)
    ]
    then = time.time() - age
    os.utime(intent, (then, then))
    return intent


def everything(q: JournaledQueue) -> list[bytes]:
    r = q.reader("all", ReaderConfig(start="earliest"))
    out = []
    while True:
        try:
            out.append(r.get(timeout=0.5).data)
        except Exception:
            return out


def test_the_owner_finishes_a_publication_left_half_done(tmp_path) -> None:
    qdir = str(tmp_path / "q")
    JournaledQueue(qdir).close()
    intent = half_published(qdir, intents.ORPHAN_AGE + 5)
    with JournaledQueue(qdir) as q:
        got = everything(q)
    assert sorted(got) == sorted(b"%d-%d" % (i, j) for i in range(3) for j in range(3))
    assert not os.path.exists(intent)


def test_a_fresh_intent_is_left_to_its_publisher(tmp_path) -> None:
    qdir = str(tmp_path / "q")
    JournaledQueue(qdir).close()
    intent = half_published(qdir, 0)
    with JournaledQueue(qdir) as q:
        got = everything(q)
    assert sorted(got) == [b"0-0", b"0-1", b"0-2"]  # only what its publisher renamed
    assert os.path.exists(intent)


def test_finishing_tolerates_a_publisher_that_renamed_a_part_meanwhile(tmp_path) -> None:
    qdir = str(tmp_path / "q")
    JournaledQueue(qdir).close()
    intent = half_published(qdir, intents.ORPHAN_AGE + 5)
    parts = sorted(p for p in os.listdir(os.path.join(spool_dir(qdir), STAGING)) if p.endswith(".part"))
    publish(os.path.join(spool_dir(qdir), STAGING, parts[0]), qdir)  # the publisher, one step ahead
    assert intents.finish_intent(intent, qdir) == 1
    assert not os.path.exists(intent)
