"""What a directory holds, byte for byte: to check that an operation changed nothing in it."""

from __future__ import annotations

import os


def every_file(path: str) -> dict[str, tuple[int, int, int, bytes]]:
    """Each entry under ``path``: (mode, size, mtime_ns, bytes of a regular file)."""
    found = {}
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            full = os.path.join(root, name)
            st = os.lstat(full)
            data = b""
            if os.path.isfile(full) and not os.path.islink(full):
                with open(full, "rb") as f:
                    data = f.read()
            found[os.path.relpath(full, path)] = (st.st_mode, st.st_size, st.st_mtime_ns, data)
    return found
