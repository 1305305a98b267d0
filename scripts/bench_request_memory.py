"""How much a queue owner's resident memory rises while it receives large ``put_many`` requests.

    python scripts/bench_request_memory.py [--mib 200] [--items 200] [--clients 1]

Starts an owner process on a fresh queue (no reader unless ``--reader``: then it keeps the
items in memory), then from
this process, a client, sends ``--clients`` ``put_many`` requests at once (one per thread), each of
``--mib`` MiB in ``--items`` items.  Prints the owner's resident memory before (``VmRSS``), its
peak during the requests (``VmHWM``, reset before them where the kernel allows) and after.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

OWNER = """
import sys, time
from journaled import JournaledQueue, QueueConfig
q = JournaledQueue(sys.argv[1], QueueConfig(sync="never", journal_size=1 << 30, max_item_size=1 << 30))
if sys.argv[2] == "reader":
    q.reader("r")
print("ready", flush=True)
sys.stdin.readline()
q.close()
"""


def status(pid: int) -> dict[str, int]:
    """The owner's memory figures from /proc (kB)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=200, help="MiB per put_many")
    ap.add_argument("--items", type=int, default=200, help="items per put_many")
    ap.add_argument("--clients", type=int, default=1, help="put_many requests sent at once")
    ap.add_argument("--reader", action="store_true", help="the queue has a reader (it keeps the items)")
    args = ap.parse_args()
    from journaled import JournaledQueue

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "q")
        owner = subprocess.Popen(
            [sys.executable, "-c", OWNER, path, "reader" if args.reader else "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert owner.stdout is not None and owner.stdout.readline().strip() == "ready"
            client = JournaledQueue(path)
            assert not client.is_owner
            size = (args.mib << 20) // args.items
            batch = [os.urandom(size)] * args.items
            client.put_many([b"warm-up"])
            time.sleep(0.5)
            try:  # reset the peak to the current size (Linux 4.0+), so it is this run's peak
                with open(f"/proc/{owner.pid}/clear_refs", "w") as f:
                    f.write("5")
            except OSError:
                pass
            before = status(owner.pid)
            errors: list[BaseException] = []

            def put() -> None:
                try:
                    client.put_many(batch)
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=put) for _ in range(args.clients)]
            start = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            took = time.monotonic() - start
            after = status(owner.pid)
            client.close()
        finally:
            if owner.stdin is not None:
                owner.stdin.write("\n")
                owner.stdin.flush()
            owner.wait(60)
    mib = lambda kb: kb / 1024  # noqa: E731
    print(
        f"{args.clients} x put_many of {args.mib} MiB ({args.items} items): owner RSS before "
        f"{mib(before['VmRSS']):.0f} MiB, peak {mib(after['VmHWM']):.0f} MiB "
        f"(+{mib(after['VmHWM'] - before['VmRSS']):.0f} MiB), after {mib(after['VmRSS']):.0f} MiB; "
        f"{took:.2f} s; {len(errors)} refused: {[str(e)[:80] for e in errors]}"
    )


if __name__ == "__main__":
    main()
