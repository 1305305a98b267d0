"""The child process of ``journaled qtest crash``: it owns one queue, puts and consumes, and
reports every event to the parent over stdout (never through the directory under test):

    R                  queue opened (it is usable after this restart)
    P seq              put started            A seq id     put acknowledged durable
    G id seq ok [key]  got (ok: payload hash verified by the worker; the key if it has one)
    C id               commit started         D id         committed
    S                  checkpoint started  K   checkpoint written (every D before its S is covered)

The parent (cli/qtest/crash.py) kills it with SIGKILL at a random moment, or the worker kills itself
just before or after its Nth write, fsync or rename inside the library (:class:`KillOps`).
Started either by forking the parent (:class:`Forked`, cheap) or as
``python -m journaled.cli.qtest.crash_worker PATH MODE SEED START_SEQ [KILL_AT] [NAME] [OPTIONS]``.

OPTIONS (:func:`worker_options`): ``zstd`` compresses the queue, ``keys=N`` keys each item with
one of N keys, ``order`` makes reader ``c`` keep order per key and run :data:`ORDERED_CONSUMERS`
competing consumer threads (each emits ``C`` before its commit, which is when the parent unmarks
the key).
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import sys
import threading
import time
import traceback

from journaled.cli.qtest.keys import choose_keys
from journaled.config import QueueConfig, ReaderConfig
from journaled.disk import fileio
from journaled.disk.fileio import FileOps
from journaled.errors import Empty
from journaled.queue import JournaledQueue

#: The queue name the crash test uses (in its own directory or next to qtest's queue).
QUEUE = "crash"
#: consumer threads of reader ``c`` under ``--key-order`` (one otherwise: nothing to compete)
ORDERED_CONSUMERS = 3


def worker_options(compression: str | None, keys: int, key_order: bool) -> str:
    """The OPTIONS word for the worker: ``-`` for none, else e.g. ``zstd,keys=20,order``."""
    words = (["zstd"] if compression == "zstd" else []) + ([f"keys={keys}"] if keys else [])
    return ",".join(words + (["order"] if key_order else [])) or "-"


def parse_options(text: str) -> tuple[str | None, int, bool]:
    """``(compression, keys, key_order)`` from :func:`worker_options`'s word."""
    words = set(text.split(",")) - {"-", ""}
    keys = next((int(w[5:]) for w in words if w.startswith("keys=")), 0)
    return ("zstd" if "zstd" in words else None), keys, "order" in words


def payload(seq: int, rng: random.Random) -> bytes:
    """A self-checking payload: ``seq|hash|filler``."""
    filler = rng.randbytes(rng.randint(0, 300)).hex().encode()
    head = b"%d|" % seq
    return head + hashlib.sha1(head + filler).hexdigest()[:16].encode() + b"|" + filler


def check_payload(data: bytes) -> tuple[int, bool]:
    """``(seq, intact)`` of a :func:`payload` (``(-1, False)`` if it is not one)."""
    parts = data.split(b"|", 2)
    if len(parts) != 3:
        return -1, False
    try:
        seq = int(parts[0])
    except ValueError:
        return -1, False
    return seq, hashlib.sha1(parts[0] + b"|" + parts[2]).hexdigest()[:16].encode() == parts[1]


class KillOps(FileOps):
    """SIGKILL this process just before or just after the Nth operation of one kind."""

    def __init__(self, kind: str, nth: int, after: bool) -> None:
        self.kind, self.nth, self.after, self.seen = kind, nth, after, 0

    def _point(self, kind: str, when_after: bool) -> None:
        if kind == self.kind and when_after == self.after:
            if not when_after:
                self.seen += 1
            if self.seen == self.nth:
                os.kill(os.getpid(), signal.SIGKILL)

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> int:
        self._point("write", False)
        n = super().write(fd, data)
        self._point("write", True)
        return n

    def fdatasync(self, fd: int) -> None:
        self._point("fsync", False)
        super().fdatasync(fd)
        self._point("fsync", True)

    def fsync(self, fd: int) -> None:
        self._point("fsync", False)
        super().fsync(fd)
        self._point("fsync", True)

    def rename(self, src: str, dst: str) -> None:
        self._point("rename", False)
        super().rename(src, dst)
        self._point("rename", True)


def worker(
    path: str, mode: str, seed: int, start_seq: int, kill_at: str, name: str = QUEUE, options: str = "-"
) -> None:
    """Own the queue and run a producer and a consumer thread (or, with key order, several)
    until killed."""
    compression, nkeys, key_order = parse_options(options)
    # Ctrl-C in a terminal reaches the whole process group: the parent ends this child itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out_lock = threading.Lock()

    def emit(line: str) -> None:
        with out_lock:
            os.write(1, (line + "\n").encode())

    if kill_at:
        kind, nth, when = kill_at.split(":")
        fileio.ops = KillOps(kind, int(nth), when == "after")
    # "never" hands each put to the OS before returning: that alone must survive kill -9
    sync: float | str = {"always": "always", "never": "never"}.get(mode, 0.02)
    cfg = QueueConfig(sync=sync, journal_size=8192, checkpoint_interval=3600, compression=compression)  # type: ignore[arg-type]
    q = JournaledQueue(path, cfg, name=name)
    q.reader("c", ReaderConfig(key_order=key_order))
    q.reader("fan")  # never consumed until the final drain: fan-out must not lose either
    emit("R")

    def produce() -> None:
        seq = start_seq
        prng = random.Random(seed + 1)
        krng = random.Random(seed + 3)
        while True:
            batch = [payload(seq + k, prng) for k in range(prng.choice((1, 1, 2, 5)))]
            for k in range(len(batch)):
                emit(f"P {seq + k}")
            keys = choose_keys(krng, nkeys, len(batch)) if nkeys else None
            ids = q.put_many(batch, keys=keys, dedup=False)
            if mode == "periodic":
                q.sync()
            for k, i in enumerate(ids):
                emit(f"A {seq + k} {i}")
            seq += len(batch)
            time.sleep(prng.random() * 0.003)

    def consume(k: int = 0) -> None:
        r = q.reader("c")
        crng = random.Random(seed + 2 + 1000 * k)
        n = 0
        while True:
            try:
                it = r.get(timeout=0.05)
            except Empty:
                continue
            s, ok = check_payload(it.data)
            key = "" if it.key is None else " " + it.key.decode("latin-1")
            emit(f"G {it.id} {s} {int(ok)}{key}")
            emit(f"C {it.id}")
            r.commit(it)
            emit(f"D {it.id}")
            n += 1
            if n % crng.randint(3, 12) == 0:
                emit("S")  # another consumer may commit during it: covered are the Ds before this
                q.checkpoint()
                emit("K")

    consumers = ORDERED_CONSUMERS if key_order else 1
    threads = [threading.Thread(target=produce, daemon=True)]
    threads += [threading.Thread(target=consume, args=(k,), daemon=True) for k in range(consumers)]
    for t in threads:
        t.start()
    while True:
        time.sleep(1)


class Forked:
    """A worker forked from this (single-threaded) process: journaled is already imported, so a
    restart costs a fork instead of a Python start-up.  Mimics the bits of Popen the parent uses."""

    def __init__(
        self, path: str, mode: str, seed: int, start_seq: int, kill_at: str, name: str, options: str = "-"
    ) -> None:
        r, w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            try:
                os.close(r)
                os.close(err_r)
                os.dup2(w, 1)
                os.dup2(err_w, 2)
                worker(path, mode, seed, start_seq, kill_at, name, options)
            except BaseException:  # noqa: BLE001 - the parent reads it from the pipe
                traceback.print_exc()
            finally:
                os._exit(1)
        os.close(w)
        os.close(err_w)
        self.pid = pid
        self.fd = r
        self.err_fd = err_r
        self.returncode: int | None = None
        os.set_blocking(err_r, False)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def stderr_text(self) -> str:
        chunks = []
        try:
            while True:
                c = os.read(self.err_fd, 65536)
                if not c:
                    break
                chunks.append(c)
        except BlockingIOError:
            pass
        os.close(self.err_fd)
        os.close(self.fd)
        return b"".join(chunks).decode(errors="replace")

    def drain_stderr(self) -> None:
        try:
            while os.read(self.err_fd, 65536):
                pass
        except BlockingIOError:
            pass


if __name__ == "__main__":
    _path, _mode, _seed, _start, *_rest = sys.argv[1:]
    _kill_at = _rest[0] if _rest else ""
    _name = _rest[1] if len(_rest) > 1 else QUEUE
    worker(_path, _mode, int(_seed), int(_start), _kill_at, _name, _rest[2] if len(_rest) > 2 else "-")
