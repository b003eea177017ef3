"""Kafka frames and headers: size prefix, request header v1/v2, response header v0/v1,
and the ApiVersions fallback answer (apache/kafka RequestHeader.json,
ResponseHeader.json, ApiVersionsResponse.json / KIP-511). Sans-io.

    frame            int32 size (excludes itself), then size bytes
    request header   int16 api_key, int16 api_version, int32 correlation_id,
      v1             int16-length nullable client_id (classic even in flexible versions)
      v2             v1 + tagged-field section (flexible request versions)
    response header  int32 correlation_id
      v0             (non-flexible response versions, and ApiVersions always)
      v1             v0 + tagged-field section (flexible response versions)
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from . import codec
from .messages import API_SPECS
from .schema import ApiSpec, Schema, as_view
from .types import PreEncoded, ProtocolError, Struct, UnsupportedVersionError, read_uvarint

# Kafka's socket.request.max.bytes default (100 MiB): larger frames are refused before
# any buffer is allocated for them.
DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024

API_VERSIONS_KEY = 18
UNSUPPORTED_VERSION = 35  # ErrorCode.UNSUPPORTED_VERSION

_HEADER_FIXED = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_INT32 = struct.Struct(">i")
_SIZE_AND_CORRELATION = struct.Struct(">ii")


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@functools.lru_cache(maxsize=256)
def response_field_encoder(api_key: int, api_version: int, path: tuple[str, ...]) -> Callable[[Any], PreEncoded]:
    """Encodes the value of one nested array field of a response on its own (``path``
    names it from the top, e.g. ("topics", "partitions")), for a handler that caches it
    and hands it back as that field's value (written as is, see PreEncoded)."""
    spec = spec_for(api_key)
    schema: Schema | None = spec.response
    field = None
    for name in path:
        if schema is None:
            raise KeyError(f"{spec.name} response field {name} is inside a non-struct field")
        field = schema.field(name)
        schema = field.schema
    if field is None or not field.is_array:
        raise KeyError(f"{spec.name} response field {'.'.join(path)} is not an array")
    write = codec.field_writer(field, api_version, spec.is_flexible(api_version))

    def encode(value: Any) -> PreEncoded:
        out = bytearray()
        extra: list[Any] = []
        write(out, value, extra)
        if extra:
            raise ValueError(f"{spec.name} field {'.'.join(path)} holds records: not pre-encodable")
        return PreEncoded(out)

    return encode


def spec_for(api_key: int) -> ApiSpec:
    """The declaration of ``api_key``; UnsupportedVersionError for keys pykfk lacks."""
    spec = API_SPECS.get(api_key)
    if spec is None:
        raise UnsupportedVersionError(f"unknown api key {api_key}")
    return spec


def is_flexible(api_key: int, api_version: int) -> bool:
    spec = API_SPECS.get(api_key)
    return spec is not None and spec.is_flexible(api_version)


def decode_request_header(frame: Any) -> tuple[RequestHeader, int]:
    """Parse the request header at the start of ``frame`` (no size prefix). Returns the
    header and the offset of the body.

    The tagged-field section of header v2 is read when the api's declaration says the
    version is flexible (versions above the declared maximum follow the same rule, so an
    ApiVersions v4+ request still yields its correlation id). For unknown api keys only
    the v1 part is read; the caller answers or closes without looking at the body.
    """
    view = as_view(frame)
    try:
        api_key, api_version, correlation_id, n = _HEADER_FIXED.unpack_from(view, 0)
    except struct.error as exc:
        raise ProtocolError(f"request header truncated: {len(view)} bytes") from exc
    pos = 10
    if n >= 0:
        end = pos + n
        if end > len(view):
            raise ProtocolError(f"client_id length {n} runs past the frame")
        try:
            client_id: str | None = str(view[pos:end], "utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError("client_id is not valid UTF-8") from exc
        pos = end
    elif n == -1:
        client_id = None
    else:
        raise ProtocolError(f"negative client_id length {n}")
    if is_flexible(api_key, api_version):
        pos = _skip_tagged_fields(view, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def _skip_tagged_fields(view: memoryview, pos: int) -> int:
    try:
        count, pos = read_uvarint(view, pos)
        for _ in range(count):
            _tag, pos = read_uvarint(view, pos)
            size, pos = read_uvarint(view, pos)
            pos += size
            if pos > len(view):
                raise ProtocolError("header tagged field runs past the frame")
    except IndexError as exc:
        raise ProtocolError("request header tagged fields truncated") from exc
    return pos


def response_header_size(api_key: int, api_version: int) -> int:
    """Bytes of the response header (after the size prefix): 4, or 5 with tagged fields."""
    return 4 + spec_for(api_key).response_header_version(api_version)


def decode_request(frame: Any) -> tuple[RequestHeader, Struct]:
    """Header and body of a whole request frame (no size prefix) in one call."""
    header, offset = decode_request_header(frame)
    return header, spec_for(header.api_key).decode_request(frame, offset, header.api_version)


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> list[Any]:
    """A whole response frame as chunks, in wire order: ``bytes`` with the 4-byte size
    prefix and header first, then body bytes interleaved with pass-through record chunks
    (FileRegion for sendfile, or large bytes/bytearray/memoryview given as records, not
    copied). The size prefix counts every chunk. Test a chunk with
    ``type(chunk) is FileRegion``; everything else is bytes-like."""
    spec = spec_for(api_key)
    encode = spec.response_encoder(api_version)
    out = bytearray(_SIZE_AND_CORRELATION.pack(0, correlation_id))
    if spec.response_header_version(api_version):
        out.append(0)
    extra: list[Any] = []
    try:
        encode(out, body, extra)
    except (struct.error, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise ValueError(f"cannot encode {spec.name} v{api_version} response: {exc}") from exc
    size = len(out) - 4 + codec.extra_size(extra)
    out[0:4] = _INT32.pack(size)
    return codec.chunks_from(out, extra)


def encode_api_versions_fallback(
    correlation_id: int, api_ranges: Mapping[int, tuple[int, int]] | Iterable[tuple[int, int, int]]
) -> bytes:
    """The answer to an ApiVersions request of a version the broker does not support:
    response header v0 and a v0-layout body (error_code UNSUPPORTED_VERSION, then the
    supported (api_key, min_version, max_version) list), so any client can read it and
    retry with a version both sides know (KIP-511). ``api_ranges`` is a mapping
    ``{api_key: (min, max)}`` or an iterable of triples; it should include key 18."""
    if isinstance(api_ranges, Mapping):
        triples = [(k, lo, hi) for k, (lo, hi) in sorted(api_ranges.items())]
    else:
        triples = [(r[0], r[1], r[2]) for r in api_ranges]
    body = bytearray(struct.pack(">ihi", correlation_id, UNSUPPORTED_VERSION, len(triples)))
    for key, lo, hi in triples:
        body += struct.pack(">hhh", key, lo, hi)
    return _INT32.pack(len(body)) + bytes(body)


# ---------------------------------------------------------------- client side


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: Any
) -> bytes:
    """A whole request frame (size prefix, header v1/v2, body), for pykfk's own clients
    and tests."""
    spec = spec_for(api_key)
    payload = spec.encode_request(body, api_version)
    if client_id is None:
        cid = b"\xff\xff"
    else:
        raw = client_id.encode("utf-8")
        cid = struct.pack(">h", len(raw)) + raw
    header = struct.pack(">hhi", api_key, api_version, correlation_id) + cid
    if spec.request_header_version(api_version) == 2:
        header += b"\x00"
    return _INT32.pack(len(header) + len(payload)) + header + payload


def decode_response(api_key: int, api_version: int, frame: Any) -> tuple[int, Struct]:
    """(correlation_id, body) of a response frame without its size prefix."""
    spec = spec_for(api_key)
    view = as_view(frame)
    try:
        (correlation_id,) = _INT32.unpack_from(view, 0)
    except struct.error as exc:
        raise ProtocolError("response header truncated") from exc
    pos = 4
    if spec.response_header_version(api_version):
        pos = _skip_tagged_fields(view, pos)
    return correlation_id, spec.decode_response(view, pos, api_version)


class FrameSplitter:
    """Cuts a byte stream into frames. ``feed(data)`` returns the complete frames
    (memoryviews over private writable bytearrays, without size prefix; a frame's
    ``records`` views are therefore writable in place). A negative size or one above
    ``max_frame_size`` raises ProtocolError before anything is allocated for it."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE):
        self.max_frame_size = max_frame_size
        self._pending = bytearray()

    def feed(self, data: Any) -> list[memoryview]:
        self._pending += data
        frames = []
        pending = self._pending
        pos = 0
        while len(pending) - pos >= 4:
            (size,) = _INT32.unpack_from(pending, pos)
            if size < 0 or size > self.max_frame_size:
                raise ProtocolError(f"frame size {size} outside 0..{self.max_frame_size}")
            if len(pending) - pos - 4 < size:
                break
            frames.append(
                memoryview(pending[pos + 4 : pos + 4 + size])
            )  # a slice is a fresh bytearray
            pos += 4 + size
        if pos:
            del pending[:pos]
        return frames

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._pending)
