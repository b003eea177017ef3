import zlib

import pykfk._core as core


def test_known_answers() -> None:
    assert core.crc32(b"123456789") == 0xCBF43926 == zlib.crc32(b"123456789")
    assert core.crc32c(b"123456789") == 0xE3069283
