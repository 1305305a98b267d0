"""Where a compressed queue's put_many spends its time, and what zstd's parameters change.

    python scripts/bench_zput.py breakdown   # put_many CPU per item: plain, zstd, zstd with compress stubbed
    python scripts/bench_zput.py params      # zstd parameters: ratio and CPU per record on two data sets

``breakdown`` puts 300,000 of bench_compression's JSON log lines in batches of 1000 under
``sync="never"`` and reports the putting thread's CPU time per item (best of 4, the cases taken in
turn): the plain queue, the zstd queue, and the zstd queue whose compress call is replaced by a
function returning a fifth of its input (everything but the compression).  ``params`` compresses the
inner bytes of 1000-record units (as the writer builds them) of two data sets, the log lines and
JSON access events (URLs, user agents, IPs, UUIDs: another shape), with each set of parameters, and
reports the compressed fraction and the CPU time per record (best of 5).  CPU time, not wall time:
on a machine shared with other work it is the steadier figure; ``uptime`` is printed beside.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_compression import lines  # noqa: E402

from journaled import JournaledQueue, QueueConfig  # noqa: E402
from journaled.format import compressed  # noqa: E402
from journaled.format.speedups import encode_puts  # noqa: E402

PATHS = (
    "/api/v1/orders", "/api/v1/orders/{id}", "/api/v1/users/{id}/profile", "/static/js/app.{h}.js",
    "/login", "/search?q={q}", "/api/v2/cart/{id}/items", "/health", "/img/p/{id}.webp",
)  # fmt: skip
AGENTS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/120.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148",
    "curl/8.4.0",
    "python-requests/2.31.0",
    "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0",
)
QUERIES = "shoes red blue cheap laptop phone case charger usb cable book gift".split()


def access_events(n: int, seed: int = 2) -> list[bytes]:
    """JSON access events of ~250 B: another realistic shape than the log lines."""
    rnd = random.Random(seed)
    t = 1_764_000_000.0
    out = []
    for _ in range(n):
        t += rnd.expovariate(500)
        path = rnd.choice(PATHS).format(
            id=rnd.randrange(10**6), h="%08x" % rnd.getrandbits(32), q=rnd.choice(QUERIES)
        )
        event = {
            "t": round(t, 3),
            "ip": "10.%d.%d.%d" % (rnd.randrange(4), rnd.randrange(256), rnd.randrange(256)),
            "m": rnd.choice(("GET", "GET", "GET", "POST", "PUT")),
            "p": path,
            "s": rnd.choice((200, 200, 200, 304, 404, 500)),
            "b": rnd.randrange(50000),
            "dur": round(rnd.lognormvariate(3, 1), 2),
            "ua": rnd.choice(AGENTS),
            "trace": str(uuid.UUID(int=rnd.getrandbits(128))),
        }
        out.append(json.dumps(event, separators=(",", ":")).encode())
    return out


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def breakdown(n: int) -> None:
    items = lines(n)
    real = compressed._compress

    def run(compression: str | None, stub: bool) -> float:
        compressed._compress = (lambda z, data: bytes(len(data) // 5)) if stub else real
        d = tempfile.mkdtemp(prefix="bench_zput_")
        try:
            cfg = QueueConfig(compression=compression, sync="never")
            with JournaledQueue(os.path.join(d, "q"), cfg, name="q") as q:
                q.reader("r")
                cpu = time.thread_time()
                for k in range(0, n, 1000):
                    q.put_many(items[k : k + 1000])
                return (time.thread_time() - cpu) / n * 1e9
        finally:
            compressed._compress = real
            shutil.rmtree(d)

    cases = {"plain": (None, False), "zstd": ("zstd", False), "zstd, compress stubbed": ("zstd", True)}
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(4):
        for name, (compression, stub) in cases.items():
            best[name] = min(best[name], run(compression, stub))
    print("  ".join(f"{name}: {ns:.0f} ns/item" for name, ns in best.items()))
    print(f"so compression costs {best['zstd'] - best['zstd, compress stubbed']:.0f} ns/item   [{load()}]")


def params(n: int) -> None:
    z = compressed.require("<bench>")
    P = z.CompressionParameter

    def units(items: list[bytes]) -> list[bytes]:
        out = []
        for k in range(0, len(items), 1000):
            inner = bytearray()
            encode_puts(0x5A5A1234 ^ k, 0, 1 + k, 1_764_000_000_000 + k, 0, items[k : k + 1000], inner)
            out.append(bytes(inner))
        return out

    sets = {"log lines": units(lines(n)), "access events": units(access_events(n))}
    configs: dict[str, dict[Any, int]] = {
        "level 1": {P.compression_level: 1},
        "level 1, windowLog 17": {P.compression_level: 1, P.window_log: 17},
        "level 1, hashLog 12, minMatch 6": {P.compression_level: 1, P.hash_log: 12, P.min_match: 6},
        "level 1, hashLog 13, minMatch 7": {P.compression_level: 1, P.hash_log: 13, P.min_match: 7},
        "level 1, hashLog 12, minMatch 7, windowLog 17": {
            P.compression_level: 1,
            P.hash_log: 12,
            P.min_match: 7,
            P.window_log: 17,
        },  # fmt: skip
        "level 1, targetLength 2": {P.compression_level: 1, P.target_length: 2},
        "level -1": {P.compression_level: -1},
    }
    comps = {name: z.ZstdCompressor(options=opts) for name, opts in configs.items()}
    ratio = {
        name: {
            s: sum(len(c.compress(u, mode=c.FLUSH_FRAME)) for u in data) / sum(map(len, data))
            for s, data in sets.items()
        }
        for name, c in comps.items()
    }
    best = {name: dict.fromkeys(sets, float("inf")) for name in comps}
    for _ in range(5):
        for name, c in comps.items():
            for s, data in sets.items():
                cpu = time.thread_time()
                for u in data:
                    c.compress(u, mode=c.FLUSH_FRAME)
                best[name][s] = min(best[name][s], time.thread_time() - cpu)
    for name in comps:
        print(
            f"{name:46s} "
            + "   ".join(
                f"{s}: {ratio[name][s]:.3f}, {best[name][s] / n * 1e9:.0f} ns, "
                f"{best[name][s] / best['level 1'][s]:.2f} of level 1's time"
                for s in sets
            )
        )
    print(f"[{load()}]")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("breakdown", "params"))
    ap.add_argument("--items", type=int, default=0, help="items (default 300,000 / 50,000)")
    args = ap.parse_args()
    print("load at start:", load())
    if args.what == "breakdown":
        breakdown(args.items or 300_000)
    else:
        params(args.items or 50_000)


if __name__ == "__main__":
    main()
