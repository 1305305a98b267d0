"""Simulated power loss, ALICE-style: crash states built from a recorded operation log.

A workload runs for real under :class:`~journaled.faults.RecordingOps`, adding markers for
everything it was told is durable ("put acknowledged", "reader created", "checkpoint written").
For a crash after the first ``k`` operations, :func:`crash_state` builds the files a power cut
could leave behind:

* ``strict`` model (POSIX minimum): a file's writes/truncations before its last fsync survive;
  directory entries (create/rename/unlink) survive only if their directory was fsynced later;
  every other operation may or may not have reached the disk (prefix or arbitrary subset).
* ``ordered`` model (ext4 data=ordered): operations persist as a prefix in issue order; every
  fsync makes everything issued before it durable.

In both, the last persisted un-synced write may be torn (a prefix of it), zeroed or garbage.
:func:`check_state` opens a state with the library and checks the promises against the markers.
Used by tests/whole/test_powerloss.py (bounded) and scripts/crash_soak --powerloss (long).
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from journaled.config import QueueConfig
from journaled.disk import fileio
from journaled.errors import Empty
from support.faults import Op, RecordingOps

DATA_OPS = ("write", "truncate")
DIR_OPS = ("create", "rename", "unlink")
TEARS = ("whole", "torn", "zeros", "garbage")


@attrs.frozen
class CrashState:
    """Files (``(relative dir, name) -> bytes``) a crash after ``point`` operations may leave."""

    point: int
    model: str
    files: dict[tuple[str, str], bytes]

    def digest(self) -> bytes:
        h = hashlib.blake2b(digest_size=16)
        for (d, n), data in sorted(self.files.items()):
            h.update(f"{d}/{n}\0{len(data)}\0".encode())
            h.update(data)
        return h.digest()

    def materialize(self, root: str) -> None:
        """Write the state into the (new) directory ``root``."""
        os.makedirs(root, exist_ok=True)
        for (d, n), data in self.files.items():
            directory = os.path.normpath(os.path.join(root, d))
            os.makedirs(directory, exist_ok=True)
            with open(os.path.join(directory, n), "wb") as f:
                f.write(data)


def _durable_flags(ops: list[Op]) -> list[bool]:
    """Which of ``ops`` the strict model guarantees to have persisted."""
    last_fsync: dict[int, int] = {}
    last_dir: dict[str, int] = {}
    for i, op in enumerate(ops):
        if op.kind == "fsync":
            last_fsync[op.ino] = i
        elif op.kind == "fsync_dir":
            last_dir[op.directory] = i
    out = []
    for i, op in enumerate(ops):
        if op.kind in DATA_OPS:
            out.append(i < last_fsync.get(op.ino, -1))
        elif op.kind == "create" or op.kind == "unlink":
            out.append(i < last_dir.get(op.directory, -1))
        elif op.kind == "rename":
            out.append(i < last_dir.get(op.dst_directory, -1) and i < last_dir.get(op.directory, -1))
        else:
            out.append(True)
    return out


def _tear(data: bytes, how: str, rng: random.Random) -> bytes:
    if how == "torn":
        return data[: rng.randrange(len(data))] if data else data
    if how == "zeros":
        return bytes(len(data))
    if how == "garbage":
        return rng.randbytes(len(data))
    return data


def _replay(
    rec: RecordingOps, ops: list[Op], keep: list[bool], tear_at: int, tear: str, rng: random.Random
) -> dict[tuple[str, str], bytes]:
    names = dict(rec.initial_names)
    content = {ino: bytearray(data) for ino, data in rec.initial.items()}
    for i, op in enumerate(ops):
        if not keep[i]:
            continue
        if op.kind == "create":
            names[(op.directory, op.name)] = op.ino
            content.setdefault(op.ino, bytearray())
        elif op.kind == "rename":
            if names.get((op.directory, op.name)) == op.ino:
                del names[(op.directory, op.name)]
            names[(op.dst_directory, op.dst_name)] = op.ino
            content.setdefault(op.ino, bytearray())
        elif op.kind == "unlink":
            if names.get((op.directory, op.name)) == op.ino:
                del names[(op.directory, op.name)]
        elif op.kind == "write":
            buf = content.setdefault(op.ino, bytearray())
            data = _tear(op.data, tear, rng) if i == tear_at else op.data
            if len(buf) < op.offset:
                buf.extend(bytes(op.offset - len(buf)))
            buf[op.offset : op.offset + len(data)] = data
        elif op.kind == "truncate":
            buf = content.setdefault(op.ino, bytearray())
            del buf[op.size :]
            if len(buf) < op.size:
                buf.extend(bytes(op.size - len(buf)))
    return {key: bytes(content.get(ino, b"")) for key, ino in names.items()}


def crash_state(
    rec: RecordingOps, point: int, model: str, choice: str, tear: str, rng: random.Random
) -> CrashState:
    """One state for a crash after ``rec.log[:point]``.

    ``choice`` picks which un-synced operations persisted: ``none``, ``all``, ``prefix`` (a
    random prefix of them) or ``subset`` (each with probability 1/2; strict model only).
    ``tear`` is applied to the last persisted un-synced write.
    """
    ops = [op for op in rec.log[:point] if op.kind != "mark"]
    n = len(ops)
    if model == "strict":
        durable = _durable_flags(ops)
    elif model == "ordered":
        last_sync = max((i for i, op in enumerate(ops) if op.kind in ("fsync", "fsync_dir")), default=-1)
        durable = [i < last_sync for i in range(n)]
    else:
        raise ValueError(f"unknown model {model!r}")
    loose = [i for i in range(n) if not durable[i]]
    if choice == "none":
        chosen: set[int] = set()
    elif choice == "all":
        chosen = set(loose)
    elif choice == "prefix":
        chosen = set(loose[: rng.randint(0, len(loose))])
    elif choice == "subset" and model == "strict":
        chosen = {i for i in loose if rng.random() < 0.5}
    else:
        raise ValueError(f"unknown choice {choice!r} for model {model!r}")
    keep = [durable[i] or i in chosen for i in range(n)]
    writes = [i for i in sorted(chosen) if ops[i].kind == "write"]
    tear_at = writes[-1] if writes else -1
    return CrashState(point, model, _replay(rec, ops, keep, tear_at, tear, rng))


def crash_states(rec: RecordingOps, rng: random.Random, per_point: int = 6) -> Iterator[CrashState]:
    """Crash states at every operation boundary of the log (``per_point`` each, both models)."""
    variants = [
        ("strict", "none", "whole"),
        ("strict", "all", "whole"),
        ("ordered", "all", "whole"),
    ]
    randoms = [
        ("strict", "prefix"),
        ("strict", "subset"),
        ("ordered", "prefix"),
    ]
    for point in range(len(rec.log) + 1):
        if point and rec.log[point - 1].kind == "mark":
            continue  # a marker changes nothing on disk
        for k in range(per_point):
            if k < len(variants):
                model, choice, tear = variants[k]
            else:
                model, choice = rng.choice(randoms)
                tear = rng.choice(TEARS)
            yield crash_state(rec, point, model, choice, tear, rng)


# ------------------------------------------------------------------------------ payloads
def make_payload(seq: int, rng: random.Random, max_filler: int = 120) -> bytes:
    """A self-checking payload: ``seq|hash|filler`` (the hash covers seq and filler)."""
    filler = rng.randbytes(rng.randint(0, max_filler)).hex().encode()
    head = b"%d|" % seq
    return head + hashlib.sha1(head + filler).hexdigest()[:16].encode() + b"|" + filler


def payload_ok(data: bytes) -> bool:
    """True if ``data`` is an intact :func:`make_payload` payload."""
    parts = data.split(b"|", 2)
    if len(parts) != 3:
        return False
    seq, digest, filler = parts
    return hashlib.sha1(seq + b"|" + filler).hexdigest()[:16].encode() == digest


# ------------------------------------------------------------------------------ workloads
Workload = Callable[[str, RecordingOps, random.Random], QueueConfig]


def _drain_some(q: Any, rec: RecordingOps, name: str, n: int, committed: set[int]) -> None:
    r = q.reader(name)
    for _ in range(n):
        try:
            it = r.get(block=False)
        except Empty:
            return
        r.commit(it)
        committed.add(it.id)
        rec.mark(("commit", name, it.id))


def _checkpoint(q: Any, rec: RecordingOps, committed: dict[str, set[int]]) -> None:
    q.checkpoint()
    for name, ids in committed.items():
        rec.mark(("checkpoint", name, frozenset(ids)))


def _run(
    path: str,
    rec: RecordingOps,
    rng: random.Random,
    cfg: QueueConfig,
    *,
    periodic: bool = False,
    archive: bool = False,
    reader_churn: bool = False,
    n: int = 40,
) -> QueueConfig:
    from journaled.queue import JournaledQueue

    committed: dict[str, set[int]] = {"a": set(), "b": set()}
    with fileio.use(rec):
        q = JournaledQueue(path, cfg, name="q")
        for name in committed:
            q.reader(name)
            rec.mark(("reader", name))
        pending: list[tuple[int, bytes]] = []
        seq = 0
        while seq < n:
            batch = [make_payload(seq + k, rng) for k in range(rng.choice((1, 1, 1, 3)))]
            seq += len(batch)
            ids = q.put_many(batch)
            pending.extend(zip(ids, batch))
            if not periodic:
                rec.mark(("acked", tuple(pending)))
                pending = []
            elif rng.random() < 0.3:
                q.sync()
                rec.mark(("acked", tuple(pending)))
                pending = []
            if rng.random() < 0.3:
                name = rng.choice(sorted(committed))
                _drain_some(q, rec, name, rng.randint(1, 8), committed[name])
            if rng.random() < 0.15:
                _checkpoint(q, rec, committed)
                if archive:
                    q.archive()  # deterministic archiving point (normally the background thread)
            if reader_churn and seq == n // 3:
                q.reader("c")
                committed["c"] = set()
                rec.mark(("reader", "c"))
            if reader_churn and seq >= 2 * n // 3 and "b" in committed:
                rec.mark(("removing", "b"))
                q.remove_reader("b")
                del committed["b"]
                rec.mark(("removed", "b"))
        for name in committed:
            _drain_some(q, rec, name, 1000, committed[name])
        _checkpoint(q, rec, committed)
        if archive:
            q.archive()
        q.close()
        rec.mark(("acked", tuple(pending)))
        for name, done_ids in committed.items():
            rec.mark(("checkpoint", name, frozenset(done_ids)))
    return cfg


def wl_always(path: str, rec: RecordingOps, rng: random.Random) -> QueueConfig:
    return _run(path, rec, rng, QueueConfig(sync="always", journal_size=900, checkpoint_interval=3600))


def wl_periodic(path: str, rec: RecordingOps, rng: random.Random) -> QueueConfig:
    cfg = QueueConfig(sync=3600.0, journal_size=900, checkpoint_interval=3600)  # flushed by q.sync() only
    return _run(path, rec, rng, cfg, periodic=True)


def wl_periodic_background(path: str, rec: RecordingOps, rng: random.Random) -> QueueConfig:
    # the real background flusher and checkpointer run concurrently with the workload
    cfg = QueueConfig(sync=0.002, journal_size=900, checkpoint_interval=0.005)
    return _run(path, rec, rng, cfg, periodic=True)


def wl_never(path: str, rec: RecordingOps, rng: random.Random) -> QueueConfig:
    cfg = QueueConfig(sync="never", journal_size=900, checkpoint_interval=3600)
    return _run(path, rec, rng, cfg, periodic=True)


def wl_archive(path: str, rec: RecordingOps, rng: random.Random) -> QueueConfig:
    cfg = QueueConfig(sync="always", journal_size=700, checkpoint_interval=3600, archive_dir="arch")
    return _run(path, rec, rng, cfg, archive=True)


def wl_archive_delete(path: str, rec: RecordingOps, rng: random.Random) -> QueueConfig:
    cfg = QueueConfig(sync="always", journal_size=700, checkpoint_interval=3600)
    return _run(path, rec, rng, cfg, archive=True)  # without archive_dir: passed files are deleted


def wl_readers(path: str, rec: RecordingOps, rng: random.Random) -> QueueConfig:
    cfg = QueueConfig(sync="always", journal_size=900, checkpoint_interval=3600)
    return _run(path, rec, rng, cfg, reader_churn=True)


WORKLOADS: dict[str, Workload] = {
    "always": wl_always,
    "periodic": wl_periodic,
    "periodic_background": wl_periodic_background,
    "never": wl_never,
    "archive": wl_archive,
    "archive_delete": wl_archive_delete,
    "readers": wl_readers,
}


def record(workload: str, path: str, seed: int) -> tuple[RecordingOps, QueueConfig]:
    """Run ``workload`` in the new directory ``path`` under a recorder."""
    os.makedirs(path)
    rec = RecordingOps(path)
    cfg = WORKLOADS[workload](path, rec, random.Random(seed))
    return rec, cfg


# ------------------------------------------------------------------------------ checking
@attrs.define
class Promises:
    """What the workload had been told before the crash point."""

    acked: dict[int, bytes] = attrs.field(factory=dict)
    acked_after: dict[str, int] = attrs.field(factory=dict)  # reader -> first id it must see
    readers: set[str] = attrs.field(factory=set)
    removed: set[str] = attrs.field(factory=set)
    committed: dict[str, set[int]] = attrs.field(factory=dict)
    checkpointed: dict[str, frozenset[int]] = attrs.field(factory=dict)


def promises(rec: RecordingOps, point: int) -> Promises:
    p = Promises()
    for op in rec.log[:point]:
        if op.kind != "mark":
            continue
        what = op.info[0]
        if what == "acked":
            p.acked.update(op.info[1])
        elif what == "reader":
            p.readers.add(op.info[1])
            p.removed.discard(op.info[1])
            p.committed.setdefault(op.info[1], set())
            p.acked_after[op.info[1]] = max(p.acked, default=0) + 1
        elif what == "removing":
            p.readers.discard(op.info[1])  # from here on, either answer is right
        elif what == "removed":
            p.readers.discard(op.info[1])
            p.removed.add(op.info[1])
        elif what == "commit":
            p.committed.setdefault(op.info[1], set()).add(op.info[2])
        elif what == "checkpoint":
            p.checkpointed[op.info[1]] = op.info[2]
    return p


@attrs.define
class Verdict:
    lost: int = 0
    corrupt: int = 0
    order: int = 0
    redelivered_beyond: int = 0
    unusable: int = 0
    reader_lost: int = 0
    reader_resurrected: int = 0
    errors: list[str] = attrs.field(factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.corrupt
            or self.order
            or self.redelivered_beyond
            or self.unusable
            or self.reader_lost
            or self.reader_resurrected
        )


def check_state(path: str, cfg: QueueConfig, p: Promises, v: Verdict) -> None:
    """Open the crash state at ``path`` and check every promise in ``p``; tally into ``v``."""
    from journaled.queue import JournaledQueue

    try:
        q = JournaledQueue(path, cfg, name="q")
    except Exception as exc:  # noqa: BLE001 - any failure to open is a finding
        v.unusable += 1
        v.errors.append(f"open failed: {type(exc).__name__}: {exc}")
        return
    try:
        present = set(q.readers())
        for name in p.readers:
            if name not in present:
                v.reader_lost += 1
                v.errors.append(f"reader {name} lost")
        for name in p.removed & present:
            v.reader_resurrected += 1
            v.errors.append(f"removed reader {name} is back")
        for name in sorted(p.readers & present):
            r = q.reader(name)
            seen: list[int] = []
            while True:
                try:
                    it = r.get(block=False)
                except Empty:
                    break
                if not payload_ok(it.data) or (it.id in p.acked and p.acked[it.id] != it.data):
                    v.corrupt += 1
                    v.errors.append(f"{name}: corrupt item {it.id}")
                if seen and it.id <= seen[-1]:
                    v.order += 1
                    v.errors.append(f"{name}: id {it.id} after {seen[-1]}")
                seen.append(it.id)
                r.commit(it)
            delivered = set(seen)
            start = p.acked_after.get(name, 1)
            done = p.committed.get(name, set())
            for i in p.acked:
                if i >= start and i not in done and i not in delivered:
                    v.lost += 1
                    v.errors.append(f"{name}: acked item {i} lost")
            beyond = delivered & p.checkpointed.get(name, frozenset())
            v.redelivered_beyond += len(beyond)
            if beyond:
                v.errors.append(f"{name}: checkpointed items redelivered {sorted(beyond)[:5]}")
        # still usable: a new put reaches a new reader
        r = q.reader("post-crash-check", None)
        before = q.put(b"after")
        got_item = None
        while True:
            it = r.get(block=False)
            r.commit(it)
            if it.id == before:
                got_item = it
                break
        if got_item is None or got_item.data != b"after":
            v.unusable += 1
    except Exception as exc:  # noqa: BLE001
        v.unusable += 1
        v.errors.append(f"use failed: {type(exc).__name__}: {exc}")
    finally:
        try:
            q.close()
        except Exception as exc:  # noqa: BLE001
            v.unusable += 1
            v.errors.append(f"close failed: {exc}")


@attrs.define
class CampaignStats:
    recorded_ops: int = 0
    states: int = 0
    distinct: int = 0
    acked: int = 0
    verdict: Verdict = attrs.field(factory=Verdict)
    op_counts: dict[str, int] = attrs.field(factory=dict)


def campaign(
    workdir: str,
    workloads: list[str],
    seed: int,
    per_point: int = 6,
    max_distinct: int | None = None,
    stats: CampaignStats | None = None,
) -> CampaignStats:
    """Record each workload, generate crash states at every point, check each distinct one."""
    st = stats or CampaignStats()
    rng = random.Random(seed)
    n = 0
    for w in workloads:
        rec, cfg = record(w, os.path.join(workdir, f"rec-{w}", "q"), rng.randrange(1 << 30))
        st.recorded_ops += sum(1 for op in rec.log if op.kind != "mark")
        for kind, c in rec.counts().items():
            st.op_counts[kind] = st.op_counts.get(kind, 0) + c
        st.acked += len(promises(rec, len(rec.log)).acked)
        seen: set[bytes] = set()
        for state in crash_states(rec, rng, per_point):
            st.states += 1
            d = state.digest()
            if d in seen:
                continue
            seen.add(d)
            if max_distinct is not None and len(seen) > max_distinct:
                break
            st.distinct += 1
            n += 1
            root = os.path.join(workdir, f"s{n}", "q")
            state.materialize(root)
            before = len(st.verdict.errors)
            check_state(root, cfg, promises(rec, state.point), st.verdict)
            if len(st.verdict.errors) > before:
                st.verdict.errors[before:] = [
                    f"[{w} point={state.point} model={state.model}] {e}" for e in st.verdict.errors[before:]
                ]
            shutil.rmtree(os.path.dirname(root), ignore_errors=True)
    return st


# ------------------------------------------------------------------------------ the spool ledger
def ledger_workload(directory: str, rec: RecordingOps, rng: random.Random, n: int = 24) -> None:
    """Adopt ``n`` keys through a spool ledger in ``directory`` (intent, then completion, as the
    adopter writes them), compacting it every few keys, with markers: ``("intended", key, (first,
    count, skip))`` once an intent line returned, ``("adopted", key)`` once its completion did.
    One intent in five is left open across a compaction (an adoption interrupted by a crash)."""
    from journaled.disk.spoolledger import Ledger

    with fileio.use(rec):
        ledger = Ledger(directory)
        first = 1
        for k in range(n):
            key = f"key-{k}-{rng.randrange(1 << 20)}"
            count = rng.randint(1, 4)
            ledger.intend(key, first, count, 0)
            rec.mark(("intended", key, (first, count, 0)))
            first += count
            if k % 5 != 3:
                ledger.complete(key)
                rec.mark(("adopted", key))
            if k % 4 == 3:
                ledger.compact()


def check_ledger_state(directory: str, rec: RecordingOps, point: int) -> list[str]:
    """Load the ledger a crash after ``rec.log[:point]`` left in ``directory`` and check it keeps
    what the workload was told: every adopted key is refused for good, every open intent is still
    open (or adopted); then that the next owner's intent line and compaction are kept too."""
    from journaled.disk.spoolledger import Ledger

    adopted: set[str] = set()
    intents: dict[str, tuple[int, int, int]] = {}
    for op in rec.log[:point]:
        if op.kind == "mark" and op.info[0] == "intended":
            intents[op.info[1]] = op.info[2]
        elif op.kind == "mark" and op.info[0] == "adopted":
            adopted.add(op.info[1])
    errors: list[str] = []

    def check(ledger: Any, when: str) -> None:
        for key in sorted(adopted):
            if not ledger.adopted(key):
                errors.append(f"{when}: adopted key {key} forgotten")
        for key, intent in sorted(intents.items()):
            if key not in adopted and not ledger.adopted(key) and ledger.pending.get(key) != intent:
                errors.append(f"{when}: intent {key} {intent} lost (pending {ledger.pending.get(key)})")

    try:
        check(Ledger(directory), "after the crash")
        # the next owner goes on: a new intent must survive another crash right after it...
        ledger = Ledger(directory)
        ledger.intend("next-life", 10**6, 2, 0)
        intents["next-life"] = (10**6, 2, 0)
        check(Ledger(directory), "after an intent of the next life")
        # ...and so must a completion and a compaction
        ledger.complete("next-life")
        adopted.add("next-life")
        ledger.compact()
        check(Ledger(directory), "after a compaction of the next life")
    except Exception as exc:  # noqa: BLE001 - any failure to read or write it is a finding
        errors.append(f"ledger unusable: {type(exc).__name__}: {exc}")
    return errors
