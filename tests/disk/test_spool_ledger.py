"""The spool ledger (disk/spoolfiles.py, used by the adopter in owner/adoption.py and by
``spool_put``): every adopted key is refused for good, through any number of compactions, and
its appends and compactions survive a power loss at any point (tests/support/powerloss.py)."""

from __future__ import annotations

import os
import random

import pytest

from conftest import scratch_dir
from journaled import JournaledQueue, QueueConfig, spool_put
from journaled.disk.spoolfiles import SPOOL_DIR
from journaled.disk.spoolledger import LEDGER, LEDGER_TAIL_LIMIT, Ledger
from support import powerloss as pl
from support.faults import RecordingOps


def _ledger_dir(tmp_path) -> str:
    d = str(tmp_path / "spool")
    os.makedirs(d)
    return d


def test_a_second_and_third_compaction_still_refuse_every_key_adopted_before_the_first(tmp_path):
    d = _ledger_dir(tmp_path)
    ledger = Ledger(d)
    keys: list[str] = []
    for round_ in range(3):
        for k in range(10):
            key = f"r{round_}-{k} é/ key"  # any UTF-8, spaces and slashes included
            ledger.intend(key, 100 * round_ + k, 1, 0)
            ledger.complete(key)
            keys.append(key)
        ledger.intend(f"open-{round_}", 1000 + round_, 2, 1)  # left open across the compaction
        ledger.compact()
        for fresh in (ledger, Ledger(d)):
            assert all(fresh.adopted(k) for k in keys), round_
            assert fresh.adopted_keys() == set(keys)
            assert {k: v for k, v in fresh.pending.items()} == {
                f"open-{r}": (1000 + r, 2, 1) for r in range(round_ + 1)
            }
            assert not fresh.adopted("never-seen")
    with open(os.path.join(d, LEDGER), "rb") as f:
        assert f.read().startswith(b"K 30 ")  # one block: the earlier blocks were folded in


def test_keys_adopted_through_the_queue_stay_refused_across_automatic_compactions(tmp_path):
    qdir = str(tmp_path / "q")
    cfg = QueueConfig(sync="always", checkpoint_interval=3600.0)
    n = 3 * LEDGER_TAIL_LIMIT // 2 + 5  # two lines per adoption: compacted at least twice
    with JournaledQueue(qdir, cfg, name="q") as q:
        for k in range(n):
            assert spool_put(qdir, [b"%d" % k], key=f"k{k}")
            q.adopt_spool()
    with open(os.path.join(qdir, SPOOL_DIR, LEDGER), "rb") as f:
        raw = f.read()
    assert raw.startswith(b"K ") and raw.count(b"\n") < LEDGER_TAIL_LIMIT + n // 2
    assert not any(spool_put(qdir, [b"again"], key=f"k{k}") for k in range(n))
    with JournaledQueue(qdir, cfg, name="q") as q:
        assert q.adopt_spool() == 0


def test_the_next_intent_after_a_torn_ledger_line_is_kept(tmp_path):
    # A crash during an append leaves part of a line without its newline; the next owner's
    # line must not be glued to it (that would lose an intent whose items then land twice).
    d = _ledger_dir(tmp_path)
    ledger = Ledger(d)
    ledger.intend("a", 1, 1, 0)
    ledger.complete("a")
    with open(os.path.join(d, LEDGER), "ab") as f:
        f.write(b"P 62 2 3 0 1234")  # torn: no CRC end, no newline
    ledger = Ledger(d)
    assert ledger.adopted("a") and ledger.pending == {}
    ledger.intend("b", 2, 3, 0)
    again = Ledger(d)
    assert again.pending == {"b": (2, 3, 0)} and again.adopted("a")


@pytest.fixture
def fastdir(tmp_path):
    with scratch_dir("ledger-pl-", str(tmp_path)) as d:
        yield d


@pytest.mark.usefixtures("quiet")
def test_ledger_appends_and_compactions_survive_a_power_loss_at_every_point(fastdir):
    root = os.path.join(fastdir, "rec", "spool")
    os.makedirs(root)
    rec = RecordingOps(root)
    pl.ledger_workload(root, rec, random.Random(7))
    counts = rec.counts()
    assert counts["rename"] >= 5 and counts["fsync_dir"] >= 5 and counts["write"] >= 40
    rng = random.Random(8)
    seen: set[bytes] = set()
    errors: list[str] = []
    for n, state in enumerate(pl.crash_states(rec, rng, per_point=8)):
        digest = state.digest()
        if digest in seen:
            continue
        seen.add(digest)
        d = os.path.join(fastdir, f"s{n}", "spool")
        state.materialize(d)
        errors += [
            f"[point={state.point} {state.model}] {e}" for e in pl.check_ledger_state(d, rec, state.point)
        ]
    assert errors == []
    assert len(seen) > 100
