"""One owner *host* per queue directory: the owner's lease, renewed in the directory itself.

``flock`` (disk/dirlock.py) keeps two processes of one host from owning a directory, but on a
shared or network file system a lock may be local to each client (sshfs: host B's ``flock``
succeeds while host A holds it).  So the owner also keeps a *lease*, ``.journaled.lease``, a small
CRC-checked text file replaced atomically (docs/format.md, section 9): it names the owner's
host, boot id and pid, a random token for this ownership, and the wall-clock time it was last
renewed.  The owner renews it every ``PERIOD`` seconds (owner/engine.py's lease thread),
re-reading it first: a lease that is not its own any more means another host took the
directory over, and the owner stops writing at once (the engine marks its journal gone).

Another host that finds a lease renewed less than its owner's expiry (``expiry_ms`` in the file)
+ ``MAX_CLOCK_SKEW`` seconds ago (by its own clock) refuses to open: :class:`OwnedElsewhere` (a
:class:`QueueLocked`) naming host and pid, before it writes anything.  An older lease, or one
released by a clean close, may be taken over: the taker writes its own lease, waits more than two
of the previous owner's renewal periods (an owner that was alive after all has renewed meanwhile,
seen the new token and stopped, or has overwritten it, in which case the taker backs off),
renewing its own lease meanwhile, and re-reads it.  Why these figures are safe under the
documented clock skew: docs/design.md, "Shared and network filesystems".  ``EXPIRY`` is 10 s, or
``JOURNALED_LEASE_EXPIRY`` seconds (read once, at import); ``PERIOD`` is a tenth of it.

The host identity is ``socket.gethostname()`` and ``/proc/sys/kernel/random/boot_id``; the
environment variable ``JOURNALED_HOST_ID`` (read in :func:`identity` only) overrides the host
name, for containers that share a hostname and for tests that play two hosts on one machine.
A lease of this very host and boot is judged by ``flock`` alone, as before leases existed; one of
this host but another boot belongs to a process that died with the previous boot.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import secrets
import socket
import threading
import time

import attrs

from journaled.disk import fileio
from journaled.disk.layout import LEASE_FILE
from journaled.errors import QueueDirectoryGone, QueueLocked
from journaled.format.smallfiles import decode_crc_text, encode_crc_text

log = logging.getLogger("journaled")

#: The environment variable that overrides the host name in the lease and the lock file.
HOST_ENV = "JOURNALED_HOST_ID"
#: The environment variable that sets this process's ``EXPIRY`` in seconds (read once, at import).
EXPIRY_ENV = "JOURNALED_LEASE_EXPIRY"
#: The bounds of ``JOURNALED_LEASE_EXPIRY``, and of a lease file's ``expiry_ms`` as a reader
#: honours it: under half a second a loaded machine's scheduling delays alone would expire a live
#: owner's lease; an hour keeps a damaged or hostile lease from locking a directory for good.
MIN_EXPIRY, MAX_EXPIRY = 0.5, 3600.0
_DEFAULT_EXPIRY = 10.0


def _expiry_from_env() -> float:
    raw = os.environ.get(EXPIRY_ENV, "").strip()
    if not raw:
        return _DEFAULT_EXPIRY
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not MIN_EXPIRY <= value <= MAX_EXPIRY:  # also NaN
        raise ValueError(
            f"{EXPIRY_ENV}={raw!r}: the lease expiry must be a number of seconds from "
            f"{MIN_EXPIRY:g} to {MAX_EXPIRY:g}"
        )
    return value


#: Seconds a lease stays valid after its renewal, on the owner's clock (10, or
#: ``JOURNALED_LEASE_EXPIRY``).  Written into the lease (``expiry_ms``): another host judges a
#: lease by the expiry its owner wrote, not by its own setting.
EXPIRY = _expiry_from_env()
#: Seconds between two renewals of a live owner's lease: a tenth of the expiry (1 s by default).
PERIOD = EXPIRY / 10
#: The largest difference between two hosts' clocks the lease tolerates (docs/design.md).
MAX_CLOCK_SKEW = 5.0
#: Seconds a host taking over another host's lease waits before it re-reads it (at least; more
#: when the lease it takes over was renewed less often: :meth:`Lease.confirm_wait`).
CONFIRM = 2 * PERIOD + 0.5

_MAGIC = "journaled-lease 1"
_BOOT_ID = "/proc/sys/kernel/random/boot_id"
_READ_MAX = 4096


@attrs.frozen
class Identity:
    """Who this process is, as a lease and the lock file name it."""

    host: str
    boot: str
    pid: int

    def same_machine(self, host: str | None, boot: str | None) -> bool:
        """Is ``host``/``boot`` this host in its current boot (where ``flock`` decides)?"""
        return host == self.host and boot == self.boot


def _clean(text: str) -> str:
    """One printable token: the file is line-based, and a host name comes from the environment."""
    out = "".join(c if c.isascii() and c.isprintable() and not c.isspace() else "_" for c in text)
    return out[:200] or "?"


def identity() -> Identity:
    """This process's host (``JOURNALED_HOST_ID`` or the host name), boot id and pid."""
    host = os.environ.get(HOST_ENV) or socket.gethostname()
    try:
        with open(_BOOT_ID, encoding="ascii") as f:
            boot = f.read().strip()
    except (OSError, UnicodeDecodeError):
        boot = "unknown"
    return Identity(_clean(host), _clean(boot), os.getpid())


@attrs.frozen
class Lease:
    """A lease as read from the directory.  ``renewed`` is epoch seconds on the owner's clock;
    ``damaged``: the file did not decode (then ``renewed`` is its mtime and the host unknown)."""

    host: str
    boot: str
    pid: int
    token: str
    renewed: float
    released: bool = False
    damaged: bool = False
    #: the owner's ``EXPIRY`` and ``PERIOD`` as it wrote them (this process's where absent)
    expiry: float = EXPIRY
    period: float = PERIOD

    def age(self, now: float | None = None) -> float:
        """Seconds since the renewal, by this host's clock (negative under clock skew)."""
        return (time.time() if now is None else now) - self.renewed

    def valid_for(self) -> float:
        """How old, by this host's clock, the lease may get before another host may take over:
        its owner's expiry plus ``MAX_CLOCK_SKEW``."""
        return self.expiry + MAX_CLOCK_SKEW

    def live(self, now: float | None = None) -> bool:
        """Not released, and renewed recently enough that its owner may still be writing."""
        return not self.released and self.age(now) <= self.valid_for()

    def confirm_wait(self) -> float:
        """Seconds a host taking this lease over waits before re-reading it: more than two of its
        owner's renewal periods (an owner alive after all renews, sees the new token and stops,
        or overwrites it), and never less than this process's ``CONFIRM``."""
        return max(CONFIRM, 2 * self.period + 0.5)

    def describe(self, now: float | None = None) -> str:
        """``owned by HOST pid P (lease renewed Ns ago)``."""
        age = max(0.0, self.age(now))
        if self.damaged:
            return f"owned by an unknown host (lease file damaged, written {age:.0f}s ago)"
        state = "released" if self.released else "renewed"
        return f"owned by {self.host} pid {self.pid} (lease {state} {age:.0f}s ago)"


class OwnedElsewhere(QueueLocked):
    """Another host holds a live lease on the directory (a :class:`QueueLocked`), or a running
    process of this host does through another mount of it (``other_mount``: its lock is not
    visible through this path)."""

    def __init__(self, path: str, lease: Lease, other_mount: bool = False) -> None:
        super().__init__(path, lease.pid or None)
        self.host = lease.host
        self.lease = lease
        who = (
            "a running process of this host owns it through another mount of the directory"
            if other_mount
            else "a process on another host owns it"
        )
        self.args = (
            f"queue directory {path!r} is {lease.describe()}: {who}; "
            f"it can be taken over once the lease is {lease.valid_for():g}s old",
        )


class LeaseLost(QueueDirectoryGone):
    """This owner's lease was taken over by another host, or could not be renewed in time."""


def lease_path(directory: str) -> str:
    return os.path.join(directory, LEASE_FILE)


def read_lease(directory: str) -> Lease | None:
    """The directory's lease, ``None`` if it has none.  Never writes, never raises on bad bytes."""
    path = lease_path(directory)
    try:
        fd = fileio.open_nofollow(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link planted under the name: never followed, never live
            return None
        raise
    try:
        st = os.fstat(fd)
        raw = os.pread(fd, _READ_MAX, 0)
    finally:
        os.close(fd)
    fields: dict[str, str] = {}
    lines = decode_crc_text(raw, _MAGIC)
    for line in lines or ():
        key, _, value = line.partition(" ")
        fields[key] = value
    try:
        return Lease(
            host=fields["host"],
            boot=fields["boot"],
            pid=int(fields["pid"]),
            token=fields["token"],
            renewed=int(fields["renewed_ms"]) / 1000,
            released=fields.get("released", "0") == "1",
            expiry=_bounded(fields.get("expiry_ms"), EXPIRY, MIN_EXPIRY, MAX_EXPIRY),
            period=_bounded(fields.get("period_ms"), PERIOD, MIN_EXPIRY / 10, MAX_EXPIRY / 10),
        )
    except (KeyError, ValueError):
        return Lease("?", "?", 0, "", st.st_mtime, damaged=True)


def _bounded(ms: str | None, default: float, low: float, high: float) -> float:
    """A lease's ``expiry_ms``/``period_ms`` in seconds, within the bounds any writer obeys."""
    return default if ms is None else min(max(int(ms) / 1000, low), high)


def _encode(me: Identity, token: str, released: bool) -> bytes:
    lines = [
        f"host {me.host}",
        f"boot {me.boot}",
        f"pid {me.pid}",
        f"token {token}",
        f"renewed_ms {int(time.time() * 1000)}",
        f"period_ms {int(PERIOD * 1000)}",
        f"expiry_ms {int(EXPIRY * 1000)}",
        f"released {int(released)}",
    ]
    return encode_crc_text(_MAGIC, lines)


def _alive(pid: int) -> bool:
    """``pid`` runs: a zombie (killed, not yet reaped by its parent) does not, though ``kill(pid,
    0)`` still finds it; it holds no lock and writes nothing (Linux says so in /proc)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass  # another user's process: alive unless /proc says it is a zombie
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # "pid (comm) state ...": comm may hold spaces and parentheses, so split at the last ")"
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True  # no /proc (not Linux), or the process just went: kill said it was there


def refuse_if_foreign(directory: str, me: Identity, lease: Lease | None, locked: bool = False) -> None:
    """Raise :class:`OwnedElsewhere` if ``lease`` is another host's (or boot's) and live.

    ``locked``: this process holds the directory's ``flock`` now.  A live lease of this host
    whose process still runs is then refused too: that owner's lock is invisible here, so the
    directory was reached through another mount of it (an sshfs or NFS mount of a local path)."""
    if lease is None:
        return
    if me.same_machine(lease.host, lease.boot):
        if locked and lease.pid != me.pid and lease.live() and _alive(lease.pid):
            raise OwnedElsewhere(directory, lease, other_mount=True)
        return
    if lease.host == me.host and not lease.damaged:
        return  # this host, an earlier boot: its processes are gone
    if lease.live():
        raise OwnedElsewhere(directory, lease)


class LeaseHolder:
    """This process's lease on ``directory``: taken at open, renewed, released at close."""

    def __init__(self, directory: str, me: Identity) -> None:
        self.directory = directory
        self.me = me
        self.token = secrets.token_hex(8)
        self.renewed_at = time.monotonic()  # of the last successful write
        self.renewals = 0
        self.lost = False

    def _write(self, released: bool = False) -> None:
        fileio.write_atomic(lease_path(self.directory), _encode(self.me, self.token, released), 0o600)
        self.renewed_at = time.monotonic()

    def _ours(self, lease: Lease | None) -> bool:
        return lease is not None and lease.token == self.token and not lease.damaged

    def take(self, previous: Lease | None) -> None:
        """Write this owner's lease (after :func:`refuse_if_foreign` passed).  Taking over a lease
        another host wrote waits :meth:`Lease.confirm_wait` seconds and re-reads it: a host that
        wrote after us keeps the directory (:class:`OwnedElsewhere`), and ours is withdrawn by it.

        The wait may be longer than this process's own ``EXPIRY`` (the previous owner renewed less
        often): our lease is renewed every ``PERIOD`` meanwhile, each time only if it is still
        ours, so that neither a third host nor this process's own staleness checks (the engine's,
        :class:`KeptRenewed`'s) take it for expired."""
        self._write()
        if previous is None or self.me.same_machine(previous.host, previous.boot):
            return
        wait = previous.confirm_wait()
        log.warning(
            "queue directory %s: taking over from %s; confirming in %.1f s",
            self.directory,
            previous.describe(),
            wait,
        )
        deadline = time.monotonic() + wait
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(left, PERIOD))
            now = read_lease(self.directory)
            if not self._ours(now):
                self.lost = True
                raise OwnedElsewhere(self.directory, now if now is not None else previous)
            if time.monotonic() < deadline:
                self._write()

    def renew(self) -> None:
        """Re-read the lease, then renew it if it is still ours; :class:`LeaseLost` if not."""
        if self.lost:
            raise self.lost_error(None)
        now = read_lease(self.directory)
        if not self._ours(now):
            self.lost = True
            raise self.lost_error(now)
        self._write()
        self.renewals += 1

    def lost_error(self, lease: Lease | None) -> LeaseLost:
        """The :class:`LeaseLost` that says who holds the directory now (``lease``, as read)."""
        who = "nobody (the lease file was removed)" if lease is None else lease.describe()
        return LeaseLost(
            errno.EBUSY,
            f"this owner's lease was taken over: the directory is now {who}; the queue refuses "
            "writes: close it",
            self.directory,
        )

    def release(self) -> None:
        """Mark the lease released (another host may take over at once), if it is still ours."""
        if self.lost:
            return
        try:
            if self._ours(read_lease(self.directory)):
                self._write(released=True)
        except OSError as exc:
            log.warning("queue directory %s: could not release the lease: %s", self.directory, exc)
        self.lost = True


class KeptRenewed:
    """Renews a :class:`LeaseHolder` every ``PERIOD`` seconds on a thread of its own for as long
    as a ``with`` block runs: for a tool that owns the directory without an owner's lease thread
    (offline ``journaled repair``), so that a run longer than the lease's expiry does not let
    another host take the directory over while it still writes.

    Call :meth:`check` before each write: it raises :class:`LeaseLost` once the lease was taken
    over, or was last renewed more than ``EXPIRY`` seconds ago by this process's monotonic clock
    (the thread was starved, or renewals fail): another host may own the directory by then."""

    def __init__(self, holder: LeaseHolder | None) -> None:
        self.holder = holder
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: OSError | None = None

    def start(self) -> None:
        """Start renewing (nothing to do without a holder).  Call once; then :meth:`stop`."""
        if self.holder is not None and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="journaled-lease-keeper", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop renewing and wait for the thread (before the lease is released).  Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> KeptRenewed:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        holder = self.holder
        assert holder is not None
        while not self._stop.wait(PERIOD):
            try:
                holder.renew()
            except LeaseLost:
                return  # holder.lost is set: check() raises from now on
            except OSError as exc:  # check() fences once the lease is EXPIRY old
                self._failure = exc
                log.warning("queue directory %s: lease renewal failed: %s", holder.directory, exc)
            else:
                self._failure = None

    def check(self) -> None:
        """Raise :class:`LeaseLost` if this process may no longer own the directory."""
        holder = self.holder
        if holder is None:
            return
        if holder.lost:
            raise holder.lost_error(read_lease(holder.directory))
        stale = time.monotonic() - holder.renewed_at
        if stale > EXPIRY:
            why = f" ({self._failure})" if self._failure is not None else ""
            raise LeaseLost(
                errno.EBUSY,
                f"this process's lease was last renewed {stale:.1f} s ago, more than its {EXPIRY:g} s "
                f"expiry{why}: another host may own the directory now; nothing more is written",
                holder.directory,
            )
