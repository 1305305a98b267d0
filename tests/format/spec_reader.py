"""A minimal reader of journaled's on-disk format, written from docs/format.md alone.

It imports nothing from ``journaled``: it is the "outsider's reader" the spec promises is
possible, and tests/format/test_format_spec.py checks that it agrees with the library byte for byte and
item for item.  The ``[F-n]`` tags name the statements of docs/format.md each piece implements.
Only the ``crc32c`` package and the standard library are used.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, field

from crc32c import crc32c

try:  # section 4.5: zstd from the standard library (3.14) or its backport
    from compression import zstd  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - below 3.14
    from backports import zstd  # type: ignore[import-not-found,no-redef,unused-ignore]

JOURNAL_MAGIC = b"\x89JRNL\r\n\x1a"
CHECKPOINT_MAGIC = b"\x89JCKP\r\n\x1a"
BATCH_MAGIC = b"\x89JSPL\r\n\x1a"
MAX_BODY = (1 << 30) + 24  # [F-12]
NAME_RE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
MS_NAMES_FROM = 10**12


class Unsupported(Exception):
    """A file or record of another format version ([F-6], [F-11])."""


def header_len(name: str) -> int:
    return 38 + len(name)  # [F-5]


# ------------------------------------------------------------------ encoding ([F-5], [F-10])
def encode_header(salt: int, first_id: int, created_ms: int, name: str) -> bytes:
    n = name.encode("ascii")
    body = JOURNAL_MAGIC + struct.pack("<HHIQQH", 1, 38 + len(n), salt, first_id, created_ms, len(n)) + n
    return body + struct.pack("<I", crc32c(body))


def encode_record(salt: int, offset: int, rtype: int, body: bytes) -> bytes:
    rest = struct.pack("<IB", len(body), rtype) + body
    return struct.pack("<I", crc32c(rest, (salt ^ offset) & 0xFFFFFFFF)) + rest


def encode_put(salt: int, offset: int, item_id: int, add_ms: int, expire_ms: int, payload: bytes) -> bytes:
    return encode_record(salt, offset, 1, struct.pack("<QQQ", item_id, add_ms, expire_ms) + payload)


@dataclass(frozen=True)
class Meta:
    """What a PUTX carries besides a PUT's fields (section 4.4)."""

    not_before_ms: int = 0
    producer: int = 0
    sequence: int = 0
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()  # in stored order ([F-40])


def encode_putx_body(meta: Meta, payload: bytes) -> bytes:
    """The part of a PUTX body after ``expire_ms`` (4.4)."""
    key = meta.key or b""
    block = b"".join(
        struct.pack("<BI", len(n.encode("utf-8")), len(v)) + n.encode("utf-8") + v for n, v in meta.headers
    )
    fixed = struct.pack(
        "<QQQHHI", meta.not_before_ms, meta.producer, meta.sequence, len(key), len(meta.headers), len(block)
    )
    return fixed + key + block + payload


def encode_putx(
    salt: int, offset: int, item_id: int, add_ms: int, expire_ms: int, meta: Meta, payload: bytes
) -> bytes:
    body = struct.pack("<QQQ", item_id, add_ms, expire_ms) + encode_putx_body(meta, payload)
    return encode_record(salt, offset, 2, body)


def decode_putx_meta(body: bytes) -> tuple[Meta, bytes] | None:
    """``(meta, payload)`` of a PUTX body, or None when its lengths are inconsistent ([F-39])."""
    if len(body) < 56:
        return None
    not_before, producer, sequence, key_len, count, block_len = struct.unpack_from("<QQQHHI", body, 24)
    if 56 + key_len + block_len > len(body):
        return None
    key = body[56 : 56 + key_len] if key_len else None  # [F-40]: no key, not an empty one
    pos, stop = 56 + key_len, 56 + key_len + block_len
    headers: list[tuple[str, bytes]] = []
    for _ in range(count):
        if pos + 5 > stop:
            return None
        name_len, value_len = struct.unpack_from("<BI", body, pos)
        pos += 5
        if name_len == 0 or pos + name_len + value_len > stop:
            return None
        try:
            name = body[pos : pos + name_len].decode("utf-8")
        except UnicodeDecodeError:
            return None
        if any(name == n for n, _ in headers):
            return None
        headers.append((name, body[pos + name_len : pos + name_len + value_len]))
        pos += name_len + value_len
    if pos != stop:
        return None
    return Meta(not_before, producer, sequence, key, tuple(headers)), body[stop:]


# ------------------------------------------------------------------ directory ([F-1]..[F-3])
def journal_files(directory: str, name: str) -> list[tuple[int, str]]:
    """Candidate journal files of queue ``name``, in numeric order of ``<ms>`` ([F-2], [F-3])."""
    pat = re.compile(re.escape(name) + r"\.([0-9]{1,20})")
    out = []
    for entry in os.listdir(directory):
        m = pat.fullmatch(entry)
        if m:
            out.append((int(m.group(1)), os.path.join(directory, entry)))
    return sorted(out)


def queue_name(directory: str) -> str:
    """[F-1]: the name in journal file names whose bytes prove them journal files; else the
    directory's base name when valid; else ``queue``."""
    names = set()
    for entry in os.listdir(directory):
        m = re.fullmatch(r"(.+)\.([0-9]{1,20})", entry)
        if not m or entry.startswith(".") or not NAME_RE.fullmatch(m.group(1)):
            continue
        with open(os.path.join(directory, entry), "rb") as f:
            head = f.read(1 << 20)
        if parse_header(head, m.group(1), int(m.group(2)))[0] is not None:
            names.add(m.group(1))
    if len(names) == 1:
        return names.pop()
    base = os.path.basename(os.path.abspath(directory))
    return base if NAME_RE.fullmatch(base) and not base.startswith(".") else "queue"


# ------------------------------------------------------------------ header ([F-5]..[F-9])
@dataclass
class Header:
    salt: int
    first_id: int
    created_ms: int
    size: int
    rebuilt: bool = False


def near_magic(buf: bytes) -> bool:
    """The magic with at most 8 of its 64 bits flipped ([F-7], [F-8])."""
    flipped = int.from_bytes(buf[:8].ljust(8, b"\0"), "little") ^ int.from_bytes(JOURNAL_MAGIC, "little")
    return len(buf) >= 8 and bin(flipped).count("1") <= 8


def solve_salt(buf: bytes, off: int) -> int | None:
    """The salt under which the record at ``off`` validates: its CRC is an affine function of
    the seed over GF(2), so one record determines the seed ([F-7])."""
    if len(buf) < off + 9:
        return None
    crc, length = struct.unpack_from("<II", buf, off)
    if length > MAX_BODY or off + 9 + length > len(buf):
        return None
    data = buf[off + 4 : off + 9 + length]
    base = crc32c(data, 0)
    rows = [(crc32c(data, 1 << k) ^ base, 1 << k) for k in range(32)]  # (image, seed) pairs
    want, seed = crc ^ base, 0
    basis: list[tuple[int, int]] = []
    for img, sd in rows:  # Gaussian elimination: reduce each image by the basis so far
        for bimg, bsd in basis:
            if img ^ bimg < img:
                img, sd = img ^ bimg, sd ^ bsd
        if img:
            basis.append((img, sd))
            basis.sort(reverse=True)
    for bimg, bsd in basis:
        if want ^ bimg < want:
            want, seed = want ^ bimg, seed ^ bsd
    return (seed ^ off) & 0xFFFFFFFF if want == 0 else None


def parse_header(buf: bytes, name: str, ms: int) -> tuple[Header | None, str]:
    """(header, verdict): verdict is ``ok``, ``rebuilt``, ``unreadable`` (ours, set aside) or
    ``foreign``.  Raises :class:`Unsupported` for another format ([F-6])."""
    hl = header_len(name)
    version = struct.unpack_from("<H", buf, 8)[0] if len(buf) >= 10 else 1
    if len(buf) >= 34:
        magic, version, hlen, salt, first_id, created_ms, nlen = struct.unpack_from("<8sHHIQQH", buf)
        end = 34 + nlen
        crc_ok = end + 4 <= len(buf) and struct.unpack_from("<I", buf, end)[0] == crc32c(buf[:end])
        if magic == JOURNAL_MAGIC and hlen == 38 + nlen and nlen <= 128 and crc_ok:
            if version != 1:
                raise Unsupported(f"journal version {version}")
            return Header(salt, first_id, created_ms, hlen), "ok"
        # [F-7]: rebuild from the records
        near = near_magic(buf)
        puts, _ = walk(buf, salt, hl, len(buf), 0, stop_at_damage=not near)
        if not puts or (not near and puts[0][1] != hl):
            solved = solve_salt(buf, hl)
            puts = walk(buf, solved, hl, len(buf), 0, stop_at_damage=True)[0] if solved is not None else []
            if len(puts) < 2 or puts[1][0] != puts[0][0] + 1 or puts[0][1] != hl:
                puts = []
            salt = solved if solved is not None else salt
        if puts:
            return Header(salt, puts[0][0], ms, hl, rebuilt=True), "rebuilt"
        if buf[:8] == JOURNAL_MAGIC and version != 1:
            raise Unsupported(f"journal version {version} that no record explains")
        if near:
            return None, "unreadable"
    # [F-8]/[F-9]: no magic and no record -- ours only as a creation cut short
    start = buf[:8]
    if ms >= MS_NAMES_FROM and (len(buf) <= hl or not any(start) or JOURNAL_MAGIC.startswith(start)):
        return None, "unreadable"
    return None, "foreign"


# ------------------------------------------------------------------ records ([F-10]..[F-17])
# A valid item: (id, offset, add_ms, expire_ms, payload, meta); meta is None for a PUT.
Rec = tuple[int, int, int, int, bytes, Meta | None]


def decode(buf: bytes, pos: int, salt: int) -> tuple[str, int, Rec | None]:
    """Classify the record at ``pos``: (kind, size, put) where kind is ``put`` (a PUT or a PUTX),
    ``skip``, ``incomplete`` or ``damage`` ([F-16])."""
    avail = len(buf) - pos
    if avail < 9:
        return "incomplete", 0, None
    crc, length, rtype = struct.unpack_from("<IIB", buf, pos)
    if rtype == 0 or length > MAX_BODY or (rtype == 1 and length < 24) or (rtype == 2 and length < 56):
        return "damage", 0, None
    if pos + 9 + length > len(buf):
        return "incomplete", 0, None
    if crc32c(buf[pos + 4 : pos + 9 + length], (salt ^ pos) & 0xFFFFFFFF) != crc:  # [F-14]
        return "damage", 0, None
    if rtype == 1:
        item_id, add_ms, expire_ms = struct.unpack_from("<QQQ", buf, pos + 9)
        return (
            "put",
            9 + length,
            (item_id, pos, add_ms, expire_ms, bytes(buf[pos + 33 : pos + 9 + length]), None),
        )
    if rtype == 2:  # [F-39]: a right CRC over inconsistent metadata is damage all the same
        item_id, add_ms, expire_ms = struct.unpack_from("<QQQ", buf, pos + 9)
        got = decode_putx_meta(bytes(buf[pos + 9 : pos + 9 + length]))
        if got is None:
            return "damage", 0, None
        return "put", 9 + length, (item_id, pos, add_ms, expire_ms, got[1], got[0])
    if rtype == 3:
        return decode_unit(buf, pos, salt, length)
    if rtype & 0x80:
        return "skip", 9 + length, None  # [F-11]
    raise Unsupported(f"record type {rtype}")


def decode_unit(buf: bytes, pos: int, salt: int, length: int) -> tuple[str, int, Rec | None]:
    """A PUTZ whose CRC verified (section 4.5): ``("unit", size, None)`` with its items in
    ``UNITS[pos]``, or damage ([F-45])."""
    if length < 17:
        return "damage", 0, None
    first_id, count, codec, raw_len = struct.unpack_from("<QIBI", buf, pos + 9)
    if codec != 1:
        raise Unsupported(f"codec {codec}")  # [F-44]
    if count == 0 or raw_len > 1 << 20 or raw_len < 33 * count:
        return "damage", 0, None
    d = zstd.ZstdDecompressor()
    try:
        raw = d.decompress(bytes(buf[pos + 26 : pos + 9 + length]), max_length=raw_len + 1)
    except zstd.ZstdError:
        return "damage", 0, None
    if len(raw) != raw_len or not d.eof or d.unused_data:
        return "damage", 0, None
    inner_salt, at, items = (salt ^ pos) & 0xFFFFFFFF, 0, []  # [F-43]
    while at < raw_len:
        kind, size, put = decode(raw, at, inner_salt)
        if kind != "put" or put is None or put[0] != first_id + len(items):
            return "damage", 0, None
        items.append((put[0], pos) + put[2:])  # an item of a unit stands where the unit stands
        at += size
    if len(items) != count:
        return "damage", 0, None
    UNITS[pos] = items
    return "unit", 9 + length, None


#: The items of the last units decoded, by offset (walk reads them right after decode).
UNITS: dict[int, list[Rec]] = {}


@dataclass
class Span:
    offset: int
    resume: int | None
    kind: str  # "incomplete" or "damage" at the first byte
    expected: int


def walk(
    buf: bytes, salt: int, pos: int, end: int, expected: int, stop_at_damage: bool = False
) -> tuple[list[Rec], list[Span]]:
    """The valid PUTs of one file and its damaged spans, skipping exactly the damage ([F-13],
    [F-18])."""
    buf = buf[:end]
    puts: list[Rec] = []
    spans: list[Span] = []
    while pos < end:
        kind, size, put = decode(buf, pos, salt)
        if kind == "put":
            assert put is not None
            if put[0] >= expected:  # [F-13]: a smaller id is skipped, a larger one accepted
                puts.append(put)
                expected = put[0] + 1
            pos += size
            continue
        if kind == "unit":
            for put in UNITS.pop(pos):
                if put[0] >= expected:  # [F-43], [F-13]
                    puts.append(put)
                    expected = put[0] + 1
            pos += size
            continue
        if kind == "skip":
            pos += size
            continue
        if stop_at_damage:
            break
        nxt = None
        for cand in range(pos + 1, end - 25):  # [F-16]: every offset, a PUT or PUTX with id >= expected
            if buf[cand + 8] not in (1, 2, 3):
                continue
            try:
                k, _, p = decode(buf, cand, salt)
            except Unsupported:
                continue
            if k == "put" and p is not None and p[0] >= expected:
                nxt = cand
                break
            if k == "unit" and UNITS.pop(cand)[-1][0] >= expected:  # [F-45]: its last id
                nxt = cand
                break
        spans.append(Span(pos, nxt, kind, expected))
        if nxt is None:
            break
        pos = nxt
    return puts, spans


def torn(buf: bytes, span: Span) -> bool:
    """[F-17]: an interrupted append -- nothing valid after it, and incomplete or all zeros."""
    return span.resume is None and (span.kind == "incomplete" or not any(buf[span.offset :]))


@dataclass
class QueueRead:
    puts: list[Rec] = field(default_factory=list)
    lost: list[tuple[int, int]] = field(default_factory=list)  # [F-19]
    files: list[tuple[int, Header | None, str]] = field(default_factory=list)


def read_queue(directory: str, name: str | None = None) -> QueueRead:
    """Every item the spec says a salvaging reader delivers, in order, with the ids lost."""
    name = name or queue_name(directory)
    out = QueueRead()
    found = []
    unreadable_before: list[int] = []  # per unreadable file: how many readable files precede it
    for ms, path in journal_files(directory, name):
        with open(path, "rb") as f:
            data = f.read()
        header, verdict = parse_header(data, name, ms)
        out.files.append((ms, header, verdict))
        if header is not None:
            found.append((ms, header, data))
        elif verdict == "unreadable":
            unreadable_before.append(len(found))
    expected = 0
    last_ids: list[int] = []  # per readable file: its last valid PUT's id, else first_id - 1
    for k, (ms, header, data) in enumerate(found):
        expected = max(expected, header.first_id)
        puts, spans = walk(data, header.salt, header.size, len(data), expected)
        nxt_first = found[k + 1][1].first_id if k + 1 < len(found) else None
        for span in spans:
            before = [p[0] for p in puts if p[1] < span.offset]
            after = [p[0] for p in puts if span.resume is not None and p[1] >= span.resume]
            lo = before[-1] + 1 if before else span.expected
            hi = after[0] if after else nxt_first
            if hi is not None and hi > lo:
                out.lost.append((lo, hi - 1))
        out.puts.extend(puts)
        last_ids.append(puts[-1][0] if puts else header.first_id - 1)
        if puts:
            expected = puts[-1][0] + 1
    # [F-19]: an unreadable file held the ids after the last valid PUT of the readable file
    # before it, up to the first id of the readable file after it (unknown without both)
    for k in unreadable_before:
        if 0 < k < len(found) and last_ids[k - 1] + 1 < found[k][1].first_id:
            out.lost.append((last_ids[k - 1] + 1, found[k][1].first_id - 1))
    return out


# ------------------------------------------------------------------ checkpoints ([F-23]..[F-27])
@dataclass
class Checkpoint:
    head: int
    file_ms: int
    file_offset: int
    done: list[int]
    errors: list[tuple[int, int]]
    flags: int
    version: int = 1
    counts: list[int] = field(default_factory=list)


def decode_checkpoint(buf: bytes) -> Checkpoint | None:
    """None for anything that is not a valid version-1 or version-2 checkpoint ([F-22], [F-23])."""
    if len(buf) < 48:
        return None
    magic, version, flags, head, file_ms, off, n_done, n_err = struct.unpack_from("<8sHHQQQII", buf)
    if magic != CHECKPOINT_MAGIC or version not in (1, 2):
        return None
    end = 44 + 8 * n_done + 12 * n_err  # where version 2's counters block starts
    n_counts = 0
    if version == 2:
        if len(buf) < end + 8:
            return None
        n_counts = struct.unpack_from("<I", buf, end)[0]
    if len(buf) != end + 4 + (4 + 8 * n_counts if version == 2 else 0):
        return None
    if struct.unpack_from("<I", buf, len(buf) - 4)[0] != crc32c(buf[:-4]):
        return None
    done = list(struct.unpack_from(f"<{n_done}Q", buf, 44))
    errors = [struct.unpack_from("<QI", buf, 44 + 8 * n_done + 12 * k) for k in range(n_err)]
    counts = list(struct.unpack_from(f"<{n_counts}Q", buf, end + 4))
    return Checkpoint(head, file_ms, off, done, [(int(i), int(c)) for i, c in errors], flags, version, counts)


def encode_checkpoint(
    head: int,
    file_ms: int,
    file_offset: int,
    done: list[int],
    errors: list[tuple[int, int]],
    flags: int = 0,
    version: int = 1,
    counts: list[int] | None = None,
) -> bytes:
    body = struct.pack(
        "<8sHHQQQII", CHECKPOINT_MAGIC, version, flags, head, file_ms, file_offset, len(done), len(errors)
    )
    body += struct.pack(f"<{len(done)}Q", *done) + b"".join(struct.pack("<QI", i, c) for i, c in errors)
    if counts is not None:
        body += struct.pack(f"<I{len(counts)}Q", len(counts), *counts)
    return body + struct.pack("<I", crc32c(body))


def to_deliver(puts: list[Rec], ck: Checkpoint | None, now_ms: int) -> list[int]:
    """[F-31] [F-41]: the ids a reader reopened at checkpoint ``ck`` delivers now, in order: not
    expired, and due (a not-before at or before now); one not due yet holds nothing back."""
    head = ck.head if ck is not None else 0
    done = {i for i in ck.done if i >= head} if ck is not None else set()

    def due(p: Rec) -> bool:
        not_before = p[5].not_before_ms if p[5] is not None else 0
        if p[3] and p[3] <= max(now_ms, not_before):
            return False  # expired, or expires before it is ever due
        return not_before <= now_ms

    return [p[0] for p in puts if p[0] >= head and p[0] not in done and due(p)]


# ------------------------------------------------------------------ small text files ([F-28], [F-29])
def decode_crc_text(raw: bytes, magic: str) -> list[str] | None:
    body, sep, tail = raw.rpartition(b"crc32c ")
    if not sep or not tail.endswith(b"\n"):
        return None
    try:
        if int(tail[:-1], 16) != crc32c(body):
            return None
        lines = body.decode("ascii").split("\n")
    except (ValueError, UnicodeDecodeError):
        return None
    if lines[-1] != "" or lines[0] != magic:
        return None
    return lines[1:-1]


def encode_crc_text(magic: str, lines: list[str]) -> bytes:
    body = ("\n".join([magic, *lines]) + "\n").encode("ascii")
    return body + b"crc32c %08x\n" % crc32c(body)


# ------------------------------------------------------------------ spool ([F-30], [F-31])
def decode_batch(raw: bytes) -> tuple[str, list[tuple[bytes, int]]] | None:
    if len(raw) < 12 + 16 or raw[:8] != BATCH_MAGIC:
        return None
    version, klen = struct.unpack_from("<HH", raw, 8)
    if version != 1 or struct.unpack_from("<I", raw, len(raw) - 4)[0] != crc32c(raw[:-4]):
        return None
    key = raw[12 : 12 + klen].decode("utf-8")
    pos, out = 12 + klen, []
    while True:
        (length,) = struct.unpack_from("<I", raw, pos)
        if length == 0xFFFFFFFF:
            (count,) = struct.unpack_from("<Q", raw, pos + 4)
            return (key, out) if count == len(out) and pos + 16 == len(raw) else None
        (expire,) = struct.unpack_from("<Q", raw, pos + 4)
        out.append((raw[pos + 12 : pos + 12 + length], expire))
        pos += 12 + length


def ledger_adopted(raw: bytes) -> set[str]:
    """Keys the ledger says were adopted (block keys plus ``D`` lines; a torn last line ignored)."""
    keys: set[str] = set()
    pos = 0
    first = True
    while pos < len(raw):
        nl = raw.find(b"\n", pos)
        if nl < 0:
            break  # a torn last line
        body, _, crc = raw[pos:nl].rpartition(b" ")
        pos = nl + 1
        if not crc or int(crc, 16) != crc32c(body):
            first = False
            continue
        parts = body.decode("ascii").split(" ")
        if first and parts[0] == "K":
            count, length, bcrc = int(parts[1]), int(parts[2]), int(parts[3], 16)
            block = raw[pos : pos + length]
            if crc32c(block) == bcrc:
                keys.update(
                    bytes.fromhex(k).decode("utf-8") for k in block.decode("ascii").split("\n")[:count]
                )
            pos += length
        elif parts[0] == "D":
            keys.add(bytes.fromhex(parts[1]).decode("utf-8"))
        first = False
    return keys
