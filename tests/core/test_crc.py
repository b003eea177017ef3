"""pykfk._core.crc: CRC-32 (zlib) and CRC-32C (Kafka magic 2) against independent oracles.

Oracles: zlib.crc32, the crc32c PyPI package, and the bit-at-a-time pykfk._reference.crc.
Every implementation the CPU can run is reached through the ``_crc*_using`` hooks.
"""

from __future__ import annotations

import array
import itertools
import mmap
import os
import platform
import random
import re
import subprocess
import sys
import textwrap
import zlib
from collections.abc import Callable
from pathlib import Path

import crc32c as crc32c_pkg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pykfk
import pykfk._core.crc as core
import pykfk._reference.crc as reference

CrcFunction = Callable[..., int]
CHECK_INPUT = b"123456789"
MAX_LENGTH = 4096
ALIGNMENTS = 16


def _using(function: CrcFunction, features: frozenset[str]) -> CrcFunction:
    def crc(buf: object, start: int = 0, end: int | None = None, value: int = 0) -> int:
        return function(features, buf, start, end, value)

    return crc


def _implementations(
    default: CrcFunction, portable: CrcFunction, using: CrcFunction, feature_sets: list[set[str]]
) -> list[object]:
    """Every distinct code path: the dispatch, the tables, and each accelerated level."""
    available = core.hardware_features()
    params = [pytest.param(default, id="dispatch"), pytest.param(portable, id="portable")]
    for features in feature_sets:
        if features <= available:
            frozen = frozenset(features)
            params.append(pytest.param(_using(using, frozen), id="+".join(sorted(features))))
    return params


# Accelerated levels, from the one-feature fallback up to what the dispatch picks.
CRC32_PATHS = _implementations(
    core.crc32, core.crc32_portable, core._crc32_using,
    [{"pclmulqdq"}, {"pclmulqdq", "vpclmulqdq"}],
)
CRC32C_PATHS = _implementations(
    core.crc32c, core.crc32c_portable, core._crc32c_using,
    [{"sse4.2"}, {"sse4.2", "pclmulqdq"}],
)


def _oracle_crc32c(data: bytes | memoryview, value: int = 0) -> int:
    return crc32c_pkg.crc32c(data, value)


@pytest.fixture(scope="module")
def sweep_buffer() -> bytes:
    return random.Random(0x5EED).randbytes(MAX_LENGTH + ALIGNMENTS)


@pytest.fixture(scope="module")
def crc32_expected(sweep_buffer: bytes) -> list[list[int]]:
    view = memoryview(sweep_buffer)
    return [[zlib.crc32(view[a:a + n]) for n in range(MAX_LENGTH + 1)] for a in range(ALIGNMENTS)]


@pytest.fixture(scope="module")
def crc32c_expected(sweep_buffer: bytes) -> list[list[int]]:
    view = memoryview(sweep_buffer)
    return [
        [_oracle_crc32c(view[a:a + n]) for n in range(MAX_LENGTH + 1)] for a in range(ALIGNMENTS)
    ]


def _mismatches(crc: CrcFunction, buf: bytes, expected: list[list[int]]) -> list[tuple[int, int]]:
    return [
        (a, n)
        for a in range(ALIGNMENTS)
        for n in range(MAX_LENGTH + 1)
        if crc(buf, a, a + n) != expected[a][n]
    ]


# --- known answers ---------------------------------------------------------------------


def test_check_values_match_the_standard_and_the_oracles() -> None:
    # The "check" values of both CRCs: CRC-32 of "123456789" is 0xCBF43926, CRC-32C 0xE3069283.
    assert zlib.crc32(CHECK_INPUT) == 0xCBF43926
    assert crc32c_pkg.crc32c(CHECK_INPUT) == 0xE3069283
    for module in (core, reference):
        assert module.crc32(CHECK_INPUT) == 0xCBF43926
        assert module.crc32c(CHECK_INPUT) == 0xE3069283
        assert module.crc32_portable(CHECK_INPUT) == 0xCBF43926
        assert module.crc32c_portable(CHECK_INPUT) == 0xE3069283


@pytest.mark.parametrize("crc", CRC32C_PATHS)
def test_crc32c_known_answers(crc: CrcFunction) -> None:
    # Test vectors from RFC 3720 (iSCSI) appendix B.4, which uses CRC-32C.
    assert crc(bytes(32)) == 0x8A9136AA
    assert crc(b"\xff" * 32) == 0x62A8AB43
    assert crc(bytes(range(32))) == 0x46DD794E
    assert crc(bytes(range(31, -1, -1))) == 0x113FDB5C
    assert crc(b"") == 0


@pytest.mark.parametrize("crc", CRC32_PATHS)
def test_crc32_known_answers(crc: CrcFunction) -> None:
    assert crc(CHECK_INPUT) == 0xCBF43926
    assert crc(b"The quick brown fox jumps over the lazy dog") == 0x414FA339
    assert crc(b"") == 0


# --- every length at every alignment -----------------------------------------------------


@pytest.mark.parametrize("crc", CRC32_PATHS)
def test_crc32_every_length_and_alignment(
    crc: CrcFunction, sweep_buffer: bytes, crc32_expected: list[list[int]]
) -> None:
    assert _mismatches(crc, sweep_buffer, crc32_expected) == []


@pytest.mark.parametrize("crc", CRC32C_PATHS)
def test_crc32c_every_length_and_alignment(
    crc: CrcFunction, sweep_buffer: bytes, crc32c_expected: list[list[int]]
) -> None:
    assert _mismatches(crc, sweep_buffer, crc32c_expected) == []


# Where the implementations change strategy: CRC-32C stream groups of 6 x 4096/512/64/16
# bytes, CRC-32 folding from 64 (128-bit) and 256 bytes (512-bit), and 2 groups of each.
BOUNDARIES = sorted({6 * 4096, 6 * 512, 6 * 64, 6 * 16, 64, 256} | {12 * 4096, 12 * 512, 512})
BOUNDARY_LENGTHS = sorted({n + d for n in BOUNDARIES for d in range(-9, 10)})


@pytest.mark.parametrize(
    ("paths", "oracle"),
    [pytest.param(CRC32_PATHS, zlib.crc32, id="crc32"),
     pytest.param(CRC32C_PATHS, _oracle_crc32c, id="crc32c")],
)
def test_strategy_boundaries(paths: list[object], oracle: CrcFunction) -> None:
    data = random.Random(99).randbytes(max(BOUNDARY_LENGTHS) + 8)
    view = memoryview(data)
    for param in paths:
        crc = param.values[0]  # type: ignore[attr-defined]
        for n in BOUNDARY_LENGTHS:
            for a in (0, 1, 3, 7):
                assert crc(data, a, a + n, 0x1234) == oracle(view[a:a + n], 0x1234), (param, n, a)


def test_memoryview_slices_match_start_end(
    sweep_buffer: bytes, crc32_expected: list[list[int]], crc32c_expected: list[list[int]]
) -> None:
    view = memoryview(sweep_buffer)
    for a in range(ALIGNMENTS):
        for n in range(0, MAX_LENGTH + 1, 61):
            assert core.crc32(view[a:a + n]) == crc32_expected[a][n]
            assert core.crc32c(view[a:a + n]) == crc32c_expected[a][n]


@pytest.mark.parametrize(
    "size",
    [core.GIL_RELEASE_BYTES_TABLES - 1, core.GIL_RELEASE_BYTES_TABLES, 1 << 20,
     (1 << 20) + 4095 * 3 + 7, core.GIL_RELEASE_BYTES],
)
def test_sizes_around_and_above_the_gil_threshold(size: int) -> None:
    data = random.Random(size).randbytes(size)
    assert core.crc32(data) == zlib.crc32(data)
    assert core.crc32c(data) == _oracle_crc32c(data)
    assert core.crc32_portable(data) == zlib.crc32(data)
    assert core.crc32c_portable(data) == _oracle_crc32c(data)


# --- chaining --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("crc", "oracle"),
    [
        pytest.param(core.crc32, zlib.crc32, id="crc32"),
        pytest.param(core.crc32c, _oracle_crc32c, id="crc32c"),
        pytest.param(core.crc32_portable, zlib.crc32, id="crc32-portable"),
        pytest.param(core.crc32c_portable, _oracle_crc32c, id="crc32c-portable"),
    ],
)
@settings(max_examples=100, deadline=None)
@given(size=st.integers(0, 20_000), cuts=st.lists(st.floats(0, 1), max_size=4),
       seed=st.integers(0, 0xFFFFFFFF))
def test_chaining_equals_one_pass(
    crc: CrcFunction, oracle: CrcFunction, size: int, cuts: list[float], seed: int
) -> None:
    data = random.Random(seed).randbytes(size)
    bounds = [0, *sorted(int(c * size) for c in cuts), size]
    value = seed
    for start, end in itertools.pairwise(bounds):
        value = crc(data, start, end, value)
    assert value == oracle(data, seed)


def test_chaining_mixes_paths() -> None:
    data = random.Random(7).randbytes(5000)
    head = core.crc32c_portable(data, 0, 1234)
    assert core.crc32c(data, 1234, value=head) == _oracle_crc32c(data)
    head = core.crc32_portable(data, 0, 777)
    assert core.crc32(data, 777, value=head) == zlib.crc32(data)


# --- the reference module --------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300), value=st.integers(0, 0xFFFFFFFF))
def test_reference_agrees_on_small_inputs(data: bytes, value: int) -> None:
    assert reference.crc32(data, value=value) == core.crc32(data, value=value)
    assert reference.crc32(data, value=value) == zlib.crc32(data, value)
    assert reference.crc32c(data, value=value) == core.crc32c(data, value=value)
    assert reference.crc32c(data, value=value) == _oracle_crc32c(data, value)


@given(data=st.binary(max_size=64), start=st.integers(-3, 70), end=st.integers(-3, 70))
def test_reference_and_core_agree_on_ranges(data: bytes, start: int, end: int) -> None:
    for name in ("crc32", "crc32c"):
        ours, theirs = getattr(core, name), getattr(reference, name)
        try:
            expected = theirs(data, start, end)
        except ValueError:
            with pytest.raises(ValueError):
                ours(data, start, end)
        else:
            assert ours(data, start, end) == expected


# --- buffers and arguments -------------------------------------------------------------


def _buffer_kinds(payload: bytes) -> list[object]:
    mapped = mmap.mmap(-1, len(payload))
    mapped.write(payload)
    return [
        payload,
        bytearray(payload),
        memoryview(payload),                      # read-only
        memoryview(bytearray(payload)),           # writable
        memoryview(b"xx" + payload + b"yy")[2:-2],
        mapped,
        array.array("B", payload),
    ]


@pytest.mark.parametrize("name", ["crc32", "crc32c", "crc32_portable", "crc32c_portable"])
def test_every_buffer_kind(name: str) -> None:
    payload = random.Random(3).randbytes(300_000)  # above GIL_RELEASE_BYTES_TABLES too
    crc = getattr(core, name)
    expected = getattr(reference, name)(payload, 0, 100)
    oracle = _oracle_crc32c if name.startswith("crc32c") else zlib.crc32
    expected_full = oracle(payload)
    for buf in _buffer_kinds(payload):
        assert crc(buf, 0, 100) == expected, type(buf)
        assert crc(buf) == expected_full, type(buf)
    wide = array.array("I", range(1000))  # multi-byte items: the CRC is over the raw bytes
    assert crc(wide) == crc(wide.tobytes())


@pytest.mark.parametrize("name", ["crc32", "crc32c", "crc32_portable", "crc32c_portable"])
def test_non_contiguous_buffers_are_rejected(name: str) -> None:
    crc = getattr(core, name)
    with pytest.raises(BufferError, match="contiguous"):
        crc(memoryview(b"abcdefgh")[::2])
    with pytest.raises(TypeError):
        crc("text is not a buffer")
    with pytest.raises(TypeError):
        crc(None)


def test_mmap_is_released_after_the_call() -> None:
    mapped = mmap.mmap(-1, 100_000)
    core.crc32c(mapped)
    core.crc32(mapped, 10, 50_000)
    mapped.close()  # raises BufferError if an export was leaked


@pytest.mark.parametrize("name", ["crc32", "crc32c", "crc32_portable", "crc32c_portable"])
@pytest.mark.parametrize(
    ("start", "end"), [(-1, None), (0, 11), (11, None), (5, 4), (0, -1), (-5, -1), (3, 2)]
)
def test_bad_ranges_raise_value_error(name: str, start: int, end: int | None) -> None:
    with pytest.raises(ValueError, match="outside a buffer of 10 bytes"):
        getattr(core, name)(bytes(10), start, end)


def test_range_edges_are_accepted() -> None:
    data = b"0123456789"
    assert core.crc32c(data, 10) == 0
    assert core.crc32c(data, 4, 4) == 0
    assert core.crc32c(data, 0, 10) == core.crc32c(data)
    assert core.crc32(data, 3, 7) == zlib.crc32(data[3:7])


def test_value_must_be_unsigned_32_bit() -> None:
    with pytest.raises(OverflowError):
        core.crc32c(b"x", value=1 << 32)
    with pytest.raises(OverflowError):
        core.crc32(b"x", value=-1)
    assert core.crc32(b"x", value=0xFFFFFFFF) == zlib.crc32(b"x", 0xFFFFFFFF)


def test_unknown_feature_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown CPU feature 'avx9'"):
        core._crc32_using({"avx9"}, b"")


def test_gil_release_thresholds() -> None:
    accelerated = {"sse4.2", "pclmulqdq"} <= core.hardware_features()
    assert core.GIL_RELEASE_BYTES_TABLES == 256 * 1024
    assert core.GIL_RELEASE_BYTES == (4 << 20 if accelerated else core.GIL_RELEASE_BYTES_TABLES)
    core._set_gil_release_bytes(0)
    try:
        # every call now releases the GIL, on every path
        assert core.crc32c(CHECK_INPUT) == 0xE3069283
        assert core.crc32_portable(CHECK_INPUT) == 0xCBF43926
        with pytest.raises(ValueError):
            core._set_gil_release_bytes(-1)
    finally:
        core._set_gil_release_bytes(None)


# --- CPU detection and lazy initialisation -----------------------------------------------


def _cpuinfo_flags() -> set[str]:
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


@pytest.mark.skipif(
    platform.machine() != "x86_64" or not os.path.exists("/proc/cpuinfo"),
    reason="CPU flags are read from /proc/cpuinfo on x86-64 Linux",
)
def test_hardware_features_match_the_cpu() -> None:
    flags = _cpuinfo_flags()
    expected = set()
    if "sse4_2" in flags:
        expected.add("sse4.2")
    if "pclmulqdq" in flags:
        expected.add("pclmulqdq")
        if "vpclmulqdq" in flags and "avx512f" in flags:
            expected.add("vpclmulqdq")
    assert core.hardware_features() == expected
    assert reference.hardware_features() == frozenset()


def test_first_use_from_many_threads_at_once() -> None:
    # A fresh process, so the tables and the dispatch are built by the racing threads.
    script = textwrap.dedent(
        """
        import threading, zlib
        import pykfk._core.crc as core
        data = bytes(range(256)) * 300
        want32, want32c = zlib.crc32(data), 0x%08X
        barrier = threading.Barrier(8)
        results = []
        def work():
            barrier.wait()
            results.append((core.crc32c(data, 0, 77), core.crc32(data), core.crc32c(data)))
        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        assert len(results) == 8
        assert all(r == (results[0][0], want32, want32c) for r in results), results
        print("ok")
        """  # noqa: UP031 - braces in the script would need escaping
        % _oracle_crc32c(bytes(range(256)) * 300)
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# --- the constants hard-coded in crc32.c ------------------------------------------------

CRC32_C = Path(pykfk.__file__).resolve().parent.parent / "src" / "_core" / "crc32.c"


@pytest.mark.skipif(not CRC32_C.exists(), reason="needs the source checkout (src/_core/crc32.c)")
def test_folding_constants() -> None:
    """Every constant in crc32.c is x^n mod P for the exponent its comment gives."""
    source = CRC32_C.read_text()
    p32 = reference.normal_poly(reference.CRC32_POLY)
    p32c = reference.normal_poly(reference.CRC32C_POLY)

    def r64(n: int) -> str:
        return f"0x{reference.reflected64(reference.xpow_mod(n, p32)):016x}"

    # CRC-32C stream joining: c_shifts_<block>[m-1] = x^(8*m*block - 33) mod P, reflected.
    tables = re.findall(r"c_shifts_(\d+)\[C_STREAMS\] = \{([^}]*)\}", source)
    assert {int(block) for block, _ in tables} == {4096, 512, 64, 16}
    for block, body in tables:
        found = [int(v, 16) for v in re.findall(r"0x[0-9a-f]+", body)]
        derived = [
            reference.reflected32(reference.xpow_mod(8 * m * int(block) - 33, p32c))
            for m in range(1, 7)
        ]
        assert found == derived, block

    # CRC-32 folding by F bits: lane multipliers x^(64+F-1) and x^(F-1), reflected 64-bit.
    folds = re.findall(
        r"k(\d+) = (?:_mm512_broadcast_i32x4\(\s*)?FOLD_CONSTANTS\((0x[0-9a-f]+)ull, "
        r"(0x[0-9a-f]+)ull\)",
        source,
    )
    assert {int(bits) for bits, _, _ in folds} == {2048, 512, 384, 256, 128}
    for bits, low_lane, high_lane in folds:
        f = int(bits)
        assert (low_lane, high_lane) == (r64(64 + f - 1), r64(f - 1)), bits

    # Barrett reduction: x^95, x^63, mu = floor(x^64 / P) and P, the last two >> 31.
    assert f"x95 = _mm_set_epi64x(0, (long long){r64(95)}ull)" in source
    assert f"x63 = _mm_set_epi64x(0, (long long){r64(63)}ull)" in source
    mu = reference.poly_divmod(1 << 64, p32)[0]
    assert f"mu = _mm_set_epi64x(0, 0x{reference.reflected64(mu) >> 31:x}ll)" in source
    assert f"poly = _mm_set_epi64x(0, 0x{reference.reflected64(p32) >> 31:x}ll)" in source
