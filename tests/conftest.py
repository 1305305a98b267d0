"""Fixtures and helpers shared by the test modules.

``qdir`` is on the real disk (tmp_path) for the tests whose point is what the disk does;
``tmpfs_qdir`` and ``scratch_dir`` use tmpfs when there is one, for tests where fsync, rename-over
and truncate only cost time (on ext4 they flush data even without fsync) and play no part in what
is checked.
"""

import contextlib
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator

import pytest

from journaled import Empty, Item, JournaledQueue, QueueConfig

sys.path.insert(0, os.path.dirname(__file__))

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
