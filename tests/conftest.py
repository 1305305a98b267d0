"""Fixtures and helpers shared by the test modules.

``qdir`` is on the real disk (tmp_path) for the tests whose point is what the disk does;
``tmpfs_qdir`` and ``scratch_dir`` use tmpfs when there is one, for tests where fsync, rename-over
and truncate only cost time (on ext4 they flush data even without fsync) and play no part in what
is checked.
"""

import contextlib
import fnmatch
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator

import pytest
from hypothesis import settings

from journaled import Empty, Item, JournaledQueue, QueueConfig

sys.path.insert(0, os.path.dirname(__file__))

# The test files whose subject is the same in the compiled and the pure-Python build: what they
# assert is decided by code that exists once (the packaging, the docs, the source read as text,
# mypy, the lease files, --help texts), not by the hot path (journaled/hotpath.py
# COMPILED_MODULES, format/_speedups.c).  The queue operations some of them make on the way are
# covered in both builds by the hot path's own tests.  They get the ``build_independent`` mark
# here, in one place, and CI's pure-Python pass leaves them out (``-m "not build_independent"``;
# pytest's summary counts them as deselected).  Paths are relative to tests/, fnmatch patterns.
# A test that exercises the reader core, the put path, the writer, the format codec or Spark's
# column decode does not belong here, whatever else it checks.
BUILD_INDEPENDENT = (
    "test_packaging.py",  # pyproject's extras, the editable install mypy sees, reference.md
    "test_release_build.py",  # builds its own sdist and wheel (and skips on the pure pass anyway)
    "test_docs_build.py",  # mkdocs --strict
    "test_typing.py",  # mypy --strict over the source
    "test_structure.py",  # the source read as text (ast)
    "test_config_docstrings.py",  # what ReaderConfig's docstring says
    "spark/test_spark_guide.py",  # docs/spark.md's blocks (skip on the pure pass anyway)
    "cli/test_help_for_users.py",  # --help texts
    "cli/test_stat_json_documented.py",  # docs/cli.md's table against stat --json's keys
    "cli/qtest/test_args.py",  # qtest's argument parsing
    "disk/test_lease_file.py",  # the owner's lease file (disk/, never compiled)
    "owner/test_lease_held_by_repair.py",  # repair renews its lease
    "owner/test_sshfs_one_owner.py",  # one owner through an sshfs mount: the lease, not the items
    # the Spark source's offsets and triggers (minOffsetsPerTrigger, maxTriggerDelay, progress,
    # lag, bookmarks): the driver's planning, never compiled; the rows' decoding, which is, is
    # spark/test_spark.py's and spark/test_zspark_*.py's subject, in both passes
    "spark/test_offsets.py",
    # a Spark stream through sshfs: what the shared storage does to the bookmark and archiving
    # (the lease, the mount); the stream's exactly-once over the local disk is spark/test_spark.py's
    "owner/test_sshfs_spark_stream.py",
    "cli/test_port_flood.py",  # the serve ports' admission bounds (cli/httpserver.py, never compiled)
    "cli/test_status_page.py",  # the page as a browser shows it (statuspage.py, status.html)
)

# The C codec's twin tests: each calls the extension (``journaled.format._speedups``, imported
# by itself) and its reference (``format/fallback.py``) directly and compares them, whatever
# JOURNALED_PURE_PYTHON says, so both passes would make the same comparison.  They run in the
# compiled pass and again under the sanitizers (scripts/sanitize_twins.sh), and are marked
# ``build_independent`` like the files above.  Not here: the twin files that also test the
# implementation the switch selects (format/test_speedups.py, format/test_encode_putx.py).
TWINS = (
    "format/test_speedups_crc.py",
    "format/test_speedups_hostile.py",
    "format/test_speedups_keyput2.py",
    "format/test_speedups_meta.py",
    "format/test_speedups_putx.py",
    "format/test_speedups_unit.py",
    "format/test_walk_puts.py",
    "format/test_zread_columns.py",
)
# Not here, though slow and about leases: owner/test_one_owner_host.py (the old owner's put must
# refuse: the put path) and owner/test_sshfs_takeover.py (every acknowledged item survives kill -9:
# the writer).

# Under pytest-xdist the workers take files in the order they are collected (CI passes
# ``--no-loadscope-reorder``: by default ``--dist loadfile`` hands out the files with the most
# tests first, which sent the release build, one test of two and a half minutes, out last), so a
# long file collected last makes one worker finish minutes after the others.  These files, the
# longest first (their summed ``--durations`` in a compiled pass), are handed out first; a
# serial run keeps the collection order.
SLOW_FIRST = (
    "spark/test_spark.py",  # ~200 s in all, its session's setup included
    "spark/test_spark_guide.py",  # ~160 s
    "test_release_build.py",  # 130-150 s, one test
    "spark/test_offsets.py",  # ~110 s
    "owner/test_sshfs_spark_stream.py",  # ~70 s
    "test_readme.py",  # ~60 s
    "test_packaging.py",  # ~50 s
    "spark/test_zspark_stream.py",  # ~45 s in the pure pass
    "whole/test_powerloss.py",
    "cli/test_port_flood.py",
    "whole/test_queue_model.py",
    "core/test_key_order_spill_model.py",
    "whole/test_queue_model_procs.py",
    "log/test_corruption.py",
    "owner/test_one_owner_host.py",
    "whole/test_crash_kill.py",
    "whole/test_concurrency.py",
    "owner/test_sshfs_takeover.py",
    "owner/test_lease_held_by_repair.py",
    "test_typing.py",
)

TESTS = os.path.dirname(os.path.abspath(__file__))


def _first_match(path: str, patterns) -> int | None:
    """Index of the first of ``patterns`` that ``path`` (relative to tests/) matches, else None."""
    for i, pattern in enumerate(patterns):
        if fnmatch.fnmatch(path, pattern):
            return i
    return None


def pytest_collection_modifyitems(config, items):
    """Marks the build-independent tests (by path, from the table above), and under pytest-xdist
    hands the slowest files out first."""
    paths = {}
    for item in items:
        path = os.path.relpath(str(item.path), TESTS).replace(os.sep, "/")
        paths[item.nodeid] = path
        if _first_match(path, BUILD_INDEPENDENT) is not None or _first_match(path, TWINS) is not None:
            item.add_marker(pytest.mark.build_independent)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker collects; the order must be the same
        slow = len(SLOW_FIRST)

        def rank(item) -> int:
            i = _first_match(paths[item.nodeid], SLOW_FIRST)
            return slow if i is None else i

        items.sort(key=rank)  # stable: collection order within a rank


# No per-example deadline (hypothesis' default is 200 ms of wall time): the suite runs beside
# other work (two xdist workers on two cores, other test runs), where a process may wait a third
# of a second for a core; a pure-codec example once took 320 ms, then 0.08 ms when rerun, and
# hypothesis failed the test as flaky.  Tests about time measure it themselves.  A test's own
# @settings still wins; so does --hypothesis-profile.
settings.register_profile("journaled", deadline=None)
settings.load_profile("journaled")

# tmpfs when there is one, else None (the system's temporary directory).
SHM = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


@contextlib.contextmanager
def scratch_dir(prefix: str, fallback: str | None = None) -> Iterator[str]:
    """A fresh directory on tmpfs when there is one (else under ``fallback``), removed after."""
    d = tempfile.mkdtemp(prefix=prefix, dir=SHM if SHM is not None else fallback)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def ready_items(reader) -> Iterator[Item]:
    """Every item ``reader`` can hand out without waiting, opened one at a time (each is got only
    after the caller's loop body for the previous one has run)."""
    while True:
        try:
            yield reader.get(block=False)
        except Empty:
            return


@pytest.fixture
def qdir(tmp_path):
    """A fresh, empty queue directory."""
    d = tmp_path / "q"
    return str(d)


@pytest.fixture
def jq(qdir):
    """An open queue (sync="never") in ``qdir``, closed after the test."""
    with JournaledQueue(qdir, QueueConfig(sync="never")) as q:
        yield q


class Boom(Exception):
    """The exception a test's consumer code raises on purpose."""


@pytest.fixture
def tmpfs_qdir(tmp_path):
    """A fresh, empty queue directory on tmpfs when there is one (else like ``qdir``)."""
    if SHM is None:
        yield str(tmp_path / "q")
        return
    with scratch_dir("journaled-test-") as root:
        yield os.path.join(root, "q")


@pytest.fixture
def quiet():
    """Silence journaled's log below CRITICAL (tests that provoke many expected warnings)."""
    logger = logging.getLogger("journaled")
    old = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(old)
