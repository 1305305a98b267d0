"""``journaled qtest``'s command line: the options, which test uses which, their defaults and
their checks.  A value out of range, or an option the chosen test would ignore, is a
:class:`~journaled.cli.inspection.UsageError` (exit 2) before anything runs."""

from __future__ import annotations

import argparse
from typing import Any

from journaled.cli.inspection import UsageError
from journaled.cli.qtest.run import TESTS, parse_size, parse_sync
from journaled.config import MiB, QueueConfig, ReaderConfig
from journaled.errors import CompressionUnavailable
from journaled.format import compressed

#: The main job: ``journaled qtest`` with no test name runs ``put`` and then ``crash``.
MAIN_JOB = "put+crash"

#: every test can compress its queue and key its items (cli/qtest/keys.py)
_FEATURES = ("compression", "keys", "key_order")
_THREADED = ("size", "batch", "sync", "journal_size", "reader_memory", *_FEATURES)
#: The options each test reads; any other test-specific option given is a usage error.
USES: dict[str, frozenset[str]] = {
    "put": frozenset(("writers", "items", "seconds", "processes", "kill_owner", *_THREADED)),
    "flood": frozenset(("writers", "readers", "seconds", *_THREADED)),
    "timeout": frozenset(("writers", "readers", "seconds", "pause", "get_timeout", *_THREADED)),
    "fanout": frozenset(("readers", "items", "seconds", *_THREADED)),
    "leaky-reader": frozenset(("writers", "readers", "seconds", "abort_rate", "dying", *_THREADED)),
    "crash": frozenset(("cycles", "sync", *_FEATURES)),
}
USES[MAIN_JOB] = USES["put"] | USES["crash"]

# Defaults differ per test so each finishes in seconds on a small machine.
_PER_TEST: dict[str, dict[str, Any]] = {
    "put": {"writers": 4, "readers": 1, "items": 200_000, "seconds": 0.0},
    "flood": {"writers": 2, "readers": 2, "items": 0, "seconds": 5.0},
    "timeout": {"writers": 2, "readers": 16, "items": 0, "seconds": 5.0},
    "fanout": {"writers": 1, "readers": 4, "items": 50_000, "seconds": 0.0},
    "leaky-reader": {"writers": 2, "readers": 4, "items": 0, "seconds": 5.0},
    "crash": {"writers": 1, "readers": 1, "items": 0, "seconds": 0.0},
}
_COMMON: dict[str, Any] = {
    "size": (1024, 1024),
    "batch": 1,
    "sync": 0.05,
    "journal_size": 16.0,
    "reader_memory": 16.0,
    "pause": 0.001,
    "get_timeout": 0.005,
    "abort_rate": 0.1,
    "dying": 2,
    "cycles": 10,
    "processes": 0,
    "kill_owner": False,  # 0: every thread in this process
    "compression": None,  # None: what the queue has stored (none for a new one)
    "keys": 0,  # 0: items without a key
    "key_order": False,
}
#: put with --processes: producer threads per process, and fewer items (each put is a round trip)
_PROCESSES = {"writers": 1, "items": 20_000}
# option -> (lowest allowed, whether the lowest itself is allowed, highest or None)
_RANGES: dict[str, tuple[float, bool, float | None]] = {
    "writers": (1, True, None),
    "readers": (1, True, None),
    "items": (1, True, None),
    "seconds": (0, False, None),
    "batch": (1, True, None),
    # below 64 KiB a journal file holds a few items and the run becomes a file-creation test
    "journal_size": (1 / 16, True, None),
    "reader_memory": (0, False, None),
    "pause": (0, True, None),
    "get_timeout": (0, False, None),
    "abort_rate": (0, True, 1.0),
    "dying": (0, True, None),
    "cycles": (1, True, None),
    "processes": (1, True, 64),
    "keys": (1, True, None),
}


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def apply_defaults(args: argparse.Namespace, test: str) -> None:
    """Check the options given for ``test`` and fill in the rest; UsageError if one is wrong."""
    for key in sorted(_COMMON.keys() | _PER_TEST["put"].keys()):
        value = getattr(args, key)
        if value is None:
            continue
        if key not in USES[test]:
            what = "the main job (put, then crash)" if test == MAIN_JOB else test
            raise UsageError(f"{_flag(key)} does not apply to {what}; see journaled qtest --help")
        if key in _RANGES:
            low, inclusive, high = _RANGES[key]
            if value < low or (value == low and not inclusive) or (high is not None and value > high):
                bound = f"at least {low:g}" if inclusive else f"more than {low:g}"
                if high is not None:
                    bound += f" and at most {high:g}"
                raise UsageError(f"{_flag(key)} must be {bound}, got {value:g}")
    if args.key_order and not args.keys:
        raise UsageError("--key-order needs --keys N (items without a key have no order to keep)")
    if args.compression == "zstd":
        try:  # before anything runs: the library's own error, at once rather than at open
            compressed.require(args.dir or "qtest's queue")
        except CompressionUnavailable as exc:
            raise UsageError(str(exc)) from None
    if args.kill_owner and not args.processes:
        raise UsageError("--kill-owner needs --processes N (the owner is then a process of its own)")
    if args.processes:
        for key, value in _PROCESSES.items():
            if getattr(args, key) is None:
                setattr(args, key, value)
    base = "put" if test == MAIN_JOB else test
    for key, value in {**_COMMON, **_PER_TEST[base]}.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    try:  # the library's own limits (a journal file must hold a header and a record, ...)
        QueueConfig(sync=args.sync, journal_size=int(args.journal_size * MiB))
        ReaderConfig(max_memory=int(args.reader_memory * MiB))
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def sync_words(sync: Any) -> str:
    """``--sync`` as a person would say it."""
    if sync == "always":
        return "fsync on every put"
    if sync == "never":
        return "no fsync (writes left to the OS)"
    return f"fsync every {float(sync) * 1000:g} ms"


EPILOG = """tests:
  (none)        the main job: put, then crash --cycles 10 (about half a minute)
  put           N threads put as fast as they can, then one reader drains and validates;
                with --processes N, N client processes (--writers producer threads and a
                consumer each) use a queue an owner process serves; --kill-owner kills that
                owner with SIGKILL midway and the workers take the queue over
  flood         W writers and R consumer threads (get + commit) at once for --seconds
  timeout       slow writers (--pause) and a stampede of readers with short --get-timeout
  fanout        one writer, K named readers each draining everything
  leaky-reader  consumers abort --abort-rate of reads, --dying consumers die holding reads;
                the queue is reopened and everything must be committed exactly once
  crash         a child process puts and consumes and is killed with SIGKILL at random
                moments, --cycles times; every restart and a final drain check that every
                acknowledged put is delivered, intact and in order

An option the chosen test does not use is an error.  Exit status: 0 validated, 1 a check
failed, 2 usage error, 130 interrupted (Ctrl-C; the summary shows what was measured so far).
Examples:
  journaled qtest                                  # put (200k x 1 KiB), then crash --cycles 10
  journaled qtest flood --writers 4 --readers 4 --size 100-4096 --seconds 10
  journaled qtest put --sync always --threads 8 --items 20000 --json
  journaled qtest put --processes 4 --kill-owner   # 4 client processes, owner killed midway
  journaled qtest crash --cycles 200
  journaled qtest put --batch 100 --compression zstd   # compressed units; bytes on disk shown
  journaled qtest flood --keys 50 --key-order --readers 8   # per-key order checked live
"""


def add_qtest_arguments(p: argparse.ArgumentParser) -> None:
    """Every option of ``journaled qtest``; test-specific ones default to None (= not given)."""
    p.add_argument(
        "test",
        nargs="?",
        default=None,
        choices=TESTS,
        help="which test (default: the main job, put then crash)",
    )
    p.add_argument(
        "--threads",
        "--writers",
        dest="writers",
        type=int,
        default=None,
        help="producer threads (put 4, others 2; fanout always 1; put --processes: 1 per process)",
    )
    p.add_argument(
        "--readers",
        type=int,
        default=None,
        help="consumer threads; for fanout, named readers (flood 2, timeout 16, fanout 4)",
    )
    p.add_argument(
        "--items",
        type=int,
        default=None,
        help="items to put in total for put/fanout (200000 / 50000; put --processes 20000)",
    )
    p.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="how long writers run (flood/timeout/leaky-reader: 5); for put/fanout a cap",
    )
    p.add_argument(
        "--size",
        type=parse_size,
        default=None,
        help="payload bytes, N or MIN-MAX (uniform); at least 20 (default 1024)",
    )
    p.add_argument("--batch", type=int, default=None, help="items per put_many call (default 1: put)")
    p.add_argument(
        "--sync",
        type=parse_sync,
        default=None,
        help="always | never | SECONDS of periodic fsync (default 0.05; crash: a mix)",
    )
    p.add_argument(
        "--journal-size", type=float, default=None, help="MiB per journal file, at least 0.0625 (default 16)"
    )
    p.add_argument(
        "--reader-memory",
        type=float,
        default=None,
        help="MiB of items a reader keeps in memory before reading back from disk (16)",
    )
    p.add_argument("--pause", type=float, default=None, help="timeout: writer sleep per put (0.001)")
    p.add_argument("--get-timeout", type=float, default=None, help="timeout: get timeout (0.005)")
    p.add_argument("--abort-rate", type=float, default=None, help="leaky-reader: fraction aborted (0.1)")
    p.add_argument("--dying", type=int, default=None, help="leaky-reader: consumers that die (2)")
    p.add_argument("--cycles", type=int, default=None, help="crash: kill/restart cycles (10)")
    p.add_argument(
        "--processes",
        type=int,
        default=None,
        help="put: producers and consumers in N client processes of an owner process "
        "(1-64; then --writers is per process, default 1, and --items 20000)",
    )
    p.add_argument(
        "--kill-owner",
        action="store_true",
        default=None,
        help="put --processes: SIGKILL the owner process midway; the workers take over",
    )
    p.add_argument(
        "--compression",
        choices=("zstd", "none"),
        default=None,
        help="compress the queue's put_many batches (--batch N > 1) with zstd; none: plain "
        "(default: what a --dir queue has stored, else plain); the summary shows the bytes on disk",
    )
    p.add_argument(
        "--keys",
        type=int,
        default=None,
        help="give each item one of N keys (a seeded choice per item; default: no keys)",
    )
    p.add_argument(
        "--key-order",
        action="store_true",
        default=None,
        help="readers keep order per key (ReaderConfig(key_order=True)); the consumers then "
        "check that no key has two items open at once and each key's items come in id order",
    )
    p.add_argument("--seed", type=int, default=1, help="random seed for sizes, bodies and kill times")
    p.add_argument(
        "--dir",
        default=None,
        help="queue directory (default: a fresh temporary one, removed); items already "
        "in it are skipped, not validated",
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary queue directory")
    p.add_argument("--json", action="store_true", help="one JSON object per test instead of the summary")
    p.add_argument("--no-progress", action="store_true", help="no progress bar even on a terminal")
