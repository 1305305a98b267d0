"""The C codec's CRC32C is the crc32c package's for every length, seed and alignment.

``_speedups.c`` computes each record's CRC itself (section crc32c).  With the SSE 4.2 instruction it
runs three registers over three adjacent stripes of a block at once and joins them with tables that
shift a register by a stripe's worth of zero bytes (long rounds of 3 x 256 bytes, then short ones of
3 x 80, then one register for the rest); without it, slicing-by-8 tables.  No entry point exposes
the raw CRC, so it is checked where it lands: the CRC field the compiled ``encode_puts`` writes, which
covers the record from its length field on (29 bytes of fields and the payload), seeded by the file's
salt XOR the record's offset.  That field must be the crc32c package's over the same bytes and seed,
and the whole record the pure-Python reference's, for every CRC length from 29 (an empty payload: no
record is shorter) to 2100 -- every round boundary below it and the serial tail's every remainder --
at each of 16 start offsets in the buffer, and for lengths up to 4 MiB.  The data and seeds are
pseudo-random from fixed seeds, so a run is repeatable and a wrong entry in any shift table is met
(each of the ~30,000 joins below looks up one entry of each table at random).
"""

from __future__ import annotations

import random

import pytest
from crc32c import crc32c

from journaled.format import fallback, speedups
from journaled.format.record import PUT_OVERHEAD, RECORD_LENGTH_AT

try:
    from journaled.format import _speedups as native
except ImportError:  # not built: nothing compiled to check
    native = None  # type: ignore[assignment]
else:  # configured even when JOURNALED_PURE_PYTHON=1 left it unconfigured (idempotent)
    assert speedups.adopt(native) is None

needs_native = pytest.mark.skipif(native is None, reason="the compiled extension is not built")

#: bytes of a PUT record the CRC covers besides the payload (the length, type and PUT fields)
CRC_FIELDS = PUT_OVERHEAD - RECORD_LENGTH_AT
#: start offsets tried inside the output buffer: every address residue the 8-byte loads can meet
PREFIXES = range(16)
#: CRC lengths between the exhaustive range and a few MiB: round boundaries of both stripe sizes
#: (3 x 256 = 768, 3 x 80 = 240) and of powers of two, give or take one
LARGE = sorted(
    {2101, 2303, 2304, 2305, 4095, 4096, 4097, 3 * 768 + 239, 3 * 768 + 240, 3 * 768 + 241}
    | {768 * k + d for k in (10, 85, 1365) for d in (-1, 0, 1, 239, 240, 241)}
    | {2**k + d for k in (16, 20, 22) for d in (-1, 0, 1)}
    | {3 * 2**20 + 13}
)


def encode_one(encode, salt: int, offset: int, payload: bytes, prefix: int) -> bytearray:
    """``prefix`` zero bytes, then the PUT of ``payload`` at ``offset`` that ``encode`` appends."""
    out = bytearray(prefix)
    encode(salt, offset, 7, 1_700_000_000_000, 0, [payload], out)
    return out


def assert_crc_is_the_packages(salt: int, offset: int, payload: bytes, prefix: int) -> None:
    out = encode_one(native.encode_puts, salt, offset, payload, prefix)
    body = bytes(out[prefix + RECORD_LENGTH_AT :])
    assert len(body) == CRC_FIELDS + len(payload)
    stored = int.from_bytes(out[prefix : prefix + 4], "little")
    want = crc32c(body, (salt ^ offset) & 0xFFFFFFFF)
    assert stored == want, (
        f"CRC over {len(body)} bytes at buffer offset {prefix + RECORD_LENGTH_AT}, seed "
        f"{(salt ^ offset) & 0xFFFFFFFF:#010x}: C wrote {stored:#010x}, crc32c says {want:#010x}"
    )


@needs_native
def test_the_c_crc_is_the_packages_for_every_length_to_2100_at_every_start_offset():
    # fresh bytes for every case: each stripe's register, hence each table index, is then random
    # (slices of one buffer would give the stripes after the first only a few distinct registers)
    rng = random.Random(0xC3C3)
    wrong = []
    for length in range(CRC_FIELDS, 2101):
        for prefix in PREFIXES:
            salt, offset = rng.getrandbits(32), rng.getrandbits(40)
            payload = rng.randbytes(length - CRC_FIELDS)
            try:
                assert_crc_is_the_packages(salt, offset, payload, prefix)
            except AssertionError as exc:
                wrong.append(str(exc).splitlines()[0])
    assert wrong == [], f"{len(wrong)} wrong CRCs, the first: {wrong[:3]}"


@needs_native
@pytest.mark.parametrize("length", LARGE)
def test_the_c_crc_is_the_packages_for_long_records(length):
    rng = random.Random(length)
    payload = rng.randbytes(length - CRC_FIELDS)
    for prefix in (0, 1, 5, 12):
        assert_crc_is_the_packages(rng.getrandbits(32), rng.getrandbits(40), payload, prefix)


@needs_native
def test_the_c_encoder_writes_the_references_bytes_around_every_round_boundary():
    """The whole record, not only its CRC, is the pure-Python reference's (which calls the crc32c
    package) for CRC lengths one either side of every multiple of both round sizes up to 2 rounds
    past the longest, and at each start offset."""
    rng = random.Random(0xB0B)
    lengths = sorted(
        {r * k + d for r in (240, 768) for k in range(1, 8) for d in (-8, -1, 0, 1, 7, 8)}
        | {768 * j + 240 * k + d for j in (1, 2) for k in (1, 2) for d in (-1, 0, 1)}
    )
    for length in lengths:
        payload = rng.randbytes(length - CRC_FIELDS)
        for prefix in PREFIXES:
            salt, offset = rng.getrandbits(32), rng.getrandbits(40)
            c_out = encode_one(native.encode_puts, salt, offset, payload, prefix)
            py_out = encode_one(fallback.encode_puts, salt, offset, payload, prefix)
            assert c_out == py_out, (length, prefix, bytes(c_out[prefix : prefix + 4]).hex())


@needs_native
def test_a_batch_of_records_each_gets_its_own_crc_wherever_it_starts():
    """Consecutive records start at every alignment in one buffer; each CRC is seeded by its own
    offset."""
    rng = random.Random(0xBA7C4)
    payloads = [rng.randbytes(rng.choice((0, 1, 100, 211, 739, 1024, 1500, 5000))) for _ in range(200)]
    salt, base = rng.getrandbits(32), rng.getrandbits(40)
    c_out, py_out = bytearray(b"x" * 3), bytearray(b"x" * 3)
    c_offsets = native.encode_puts(salt, base, 1, 2, 3, payloads, c_out)
    py_offsets = fallback.encode_puts(salt, base, 1, 2, 3, payloads, py_out)
    assert c_offsets == py_offsets
    assert c_out == py_out
