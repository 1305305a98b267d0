"""Test machinery, kept out of the runtime package (nothing under journaled/ imports it).

* ``faults``: :class:`~support.faults.RecordingOps` (records every write/fsync/rename through the
  ``journaled.disk.fileio`` seam) and :class:`~support.faults.FaultyOps` (fails the Nth operation of a
  kind with ENOSPC/EIO).
* ``powerloss``: ALICE-style crash states built from a recording, and the workloads whose
  promises are checked in each state.

Tests import it as ``support`` (pytest puts ``tests/`` on ``sys.path``, as ``tests`` is not a
package); scripts/crash_soak puts ``tests/`` on ``sys.path`` itself.
"""
