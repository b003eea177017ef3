"""The fuzz targets: bytes in, the broker's own error (or nothing) out.

Each target names the exceptions that are a proper refusal; anything else is a finding.
They run under atheris (``python -m fuzz``) and, over the kept corpus, in the tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pykfk._core.errors import CoreError
from pykfk._core.records import (
    convert_legacy,
    decode_records,
    to_legacy,
    validate_and_assign,
    validate_batches,
)
from pykfk._core.wire import decode_produce, decode_request_header
from pykfk.protocol import API_SPECS
from pykfk.protocol.types import ProtocolError
from pykfk.security.sasl import AuthenticationError, SaslServer
from pykfk.security.scram import make_credential
from pykfk.server.dispatch import Registry

_REGISTRY = Registry.default()
# Every (api key, version) the broker serves, as the dispatcher would decode it.
SERVED = [(key, version) for key in sorted(API_SPECS) if (h := _REGISTRY.get(key)) is not None
          for version in range(h.min_version, h.max_version + 1)]
_FLEXIBLE_FROM = {key: _REGISTRY.get(key).flexible_from for key in {k for k, _ in SERVED}}  # type: ignore[union-attr]
_LIMIT = 1 << 20  # decompression bound for the batch targets (a broker uses message.max.bytes)


def request(data: bytes) -> None:
    """The first two bytes pick one served (api key, version); the rest is the frame
    after the fixed header fields, decoded as the dispatcher does."""
    if len(data) < 2:
        return
    api_key, version = SERVED[int.from_bytes(data[:2], "big") % len(SERVED)]
    frame = bytearray(api_key.to_bytes(2, "big") + version.to_bytes(2, "big") + b"\0\0\0\1" + data[2:])
    view = memoryview(frame)
    try:
        _client_id, offset = decode_request_header(view, version >= _FLEXIBLE_FROM[api_key])
        if api_key == 0:
            decode_produce(view, offset, version)
        else:
            API_SPECS[api_key].decode_request(view, offset, version)
    except ProtocolError:
        pass


_CREDENTIAL = make_credential("SCRAM-SHA-256", "pw", 4096, b"salt-for-fuzzing")


async def _lookup(user: str, mechanism: str) -> object:
    return _CREDENTIAL if mechanism == "SCRAM-SHA-256" else None


def sasl(data: bytes) -> None:
    """A login: the first byte picks PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; the rest,
    split at the first 0xff byte, are the client's tokens."""
    if not data:
        return
    mechanism = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")[data[0] % 3]
    server = SaslServer(mechanism, {"alice": "pw"}, _lookup)  # type: ignore[arg-type]
    loop = asyncio.new_event_loop()
    try:
        for token in data[1:].split(b"\xff", 2):
            loop.run_until_complete(server.step(token))
    except AuthenticationError:
        pass
    finally:
        loop.close()


def batches(data: bytes) -> None:
    """Record batches as a producer sends them (validated, offsets assigned in place), as
    a consumer decodes them, and legacy message sets converted both ways."""
    for check in (
        lambda: validate_and_assign(bytearray(data), 0, 0, decompress=True, max_decompressed_size=_LIMIT),
        lambda: validate_batches(data, 0, True, decompress=True, max_decompressed_size=_LIMIT),
        lambda: decode_records(data, max_decompressed_size=_LIMIT),
        lambda: convert_legacy(data, max_decompressed_size=_LIMIT),
        lambda: to_legacy(data, 1, max_decompressed_size=_LIMIT),
    ):
        try:
            check()
        except (CoreError, ValueError):
            pass


TARGETS: dict[str, Callable[[bytes], None]] = {"request": request, "sasl": sasl, "batches": batches}
