"""Declarations of Kafka messages: Field, Schema (a struct), ApiSpec (one API, request
and response), and Struct, the decoded value.

Declarations mirror apache/kafka ``clients/src/main/resources/common/message/*.json``:
field order is wire order, types use the spec's spelling ("int32", "string",
"[]int32", "[]TopicData" with nested fields, "records"), and version ranges use the
spec's syntax ("0+", "3-7", "none")::

    Field("transactional_id", "string", "3+", nullable="3+", default=None)
    Field("topic_data", "[]TopicProduceData", "0+", fields=[...])

Encoding and decoding plans are compiled per version on first use by ``codec.py``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from . import codec
from .fields import _OPEN, Field, Schema, parse_versions
from .types import ProtocolError, Struct, UnsupportedVersionError

__all__ = ["_OPEN", "ApiSpec", "Field", "Schema", "as_view", "parse_versions"]


class ApiSpec:
    """One Kafka API: key, name, the versions pykfk can encode and decode, the first
    flexible version, and request/response declarations.

    ``response_header_v0`` is the ApiVersions quirk: its response header stays v0 even in
    flexible versions (KIP-511; ApiVersionsResponse.json) so a client can always read it.
    """

    __slots__ = (
        "api_key",
        "flexible_from",
        "max_version",
        "min_version",
        "name",
        "request",
        "response",
        "response_header_v0",
    )

    def __init__(
        self,
        api_key: int,
        name: str,
        *,
        versions: str,
        flexible: str | None,
        request: Sequence[Field],
        response: Sequence[Field],
        response_header_v0: bool = False,
    ):
        self.api_key = api_key
        self.name = name
        self.min_version, self.max_version = parse_versions(versions)
        self.flexible_from: int | None = (
            parse_versions(flexible)[0] if flexible not in (None, "none") else None
        )
        self.request = Schema(name + "Request", request)
        self.response = Schema(name + "Response", response)
        self.response_header_v0 = response_header_v0

    # -------------------------------------------------------------- version rules

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def is_flexible(self, version: int) -> bool:
        return self.flexible_from is not None and version >= self.flexible_from

    def request_header_version(self, version: int) -> int:
        """2 for flexible versions (adds a tagged-field section), else 1."""
        return 2 if self.is_flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        """1 for flexible versions (adds a tagged-field section), else 0."""
        return 1 if self.is_flexible(version) and not self.response_header_v0 else 0

    def _check(self, version: int) -> None:
        if not self.supports(version):
            raise UnsupportedVersionError(
                f"{self.name} v{version} is not declared (have {self.min_version}-{self.max_version})"
            )

    # -------------------------------------------------------------- compiled plans

    def request_decoder(self, version: int) -> codec.Decoder:
        self._check(version)
        return codec.decoder(self.request, version, self.is_flexible(version))

    def response_decoder(self, version: int) -> codec.Decoder:
        self._check(version)
        return codec.decoder(self.response, version, self.is_flexible(version))

    def request_encoder(self, version: int) -> codec.Encoder:
        self._check(version)
        return codec.encoder(self.request, version, self.is_flexible(version))

    def response_encoder(self, version: int) -> codec.Encoder:
        self._check(version)
        return codec.encoder(self.response, version, self.is_flexible(version))

    # -------------------------------------------------------------- whole bodies

    def decode_request(self, buf: Any, offset: int, version: int) -> Struct:
        """Decode a request body that runs from ``offset`` to the end of ``buf`` (a frame
        without its size prefix). ``records`` fields are memoryview slices of ``buf``."""
        return _decode_whole(
            self.request_decoder(version), buf, offset, self.name, version, "request"
        )

    def decode_response(self, buf: Any, offset: int, version: int) -> Struct:
        return _decode_whole(
            self.response_decoder(version), buf, offset, self.name, version, "response"
        )

    def encode_request(self, body: Any, version: int) -> bytes:
        """The request body alone (no header, no size prefix)."""
        out = bytearray()
        extra: list[Any] = []
        _encode(self.request_encoder(version), out, body, extra, self.name, version)
        return b"".join(
            c if isinstance(c, bytes) else bytes(c) for c in codec.chunks_from(out, extra)
        )

    def encode_response(self, body: Any, version: int) -> list[Any]:
        """The response body alone as chunks: bytes, and FileRegion / large buffers passed
        through uncopied, in wire order."""
        out = bytearray()
        extra: list[Any] = []
        _encode(self.response_encoder(version), out, body, extra, self.name, version)
        return codec.chunks_from(out, extra)

    def __repr__(self) -> str:
        return f"ApiSpec({self.api_key}, {self.name!r}, {self.min_version}-{self.max_version})"


# Exceptions a compiled decoder raises on bytes that do not fit the declaration:
# struct.error (short fixed-width read), IndexError (short varint), ProtocolError.
_DECODE_ERRORS = (struct.error, IndexError, OverflowError, ProtocolError)


def as_view(buf: Any) -> memoryview:
    view = buf if type(buf) is memoryview else memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def _decode_whole(
    decode: codec.Decoder, buf: Any, offset: int, name: str, version: int, kind: str
) -> Struct:
    view = as_view(buf)
    try:
        value, end = decode(view, offset)
    except _DECODE_ERRORS as exc:
        if isinstance(exc, ProtocolError):
            raise ProtocolError(f"{name} v{version} {kind}: {exc}") from exc
        raise ProtocolError(f"{name} v{version} {kind} is truncated ({exc})") from exc
    if end != len(view):
        raise ProtocolError(f"{name} v{version} {kind} has {len(view) - end} trailing bytes")
    return value


def _encode(
    encode: codec.Encoder, out: bytearray, body: Any, extra: list[Any], name: str, version: int
) -> None:
    try:
        encode(out, body, extra)
    except (struct.error, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise ValueError(f"cannot encode {name} v{version}: {exc}") from exc
