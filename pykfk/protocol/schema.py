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
from collections.abc import Iterable, Sequence
from typing import Any

from . import codec
from . import types as t
from .types import ProtocolError, Struct, UnsupportedVersionError

_UNSET: Any = object()
_OPEN = 0x7FFF  # upper end of an open range ("3+"); versions are int16 on the wire


def parse_versions(spec: str | tuple[int, int | None] | None) -> tuple[int, int]:
    """'3+' -> (3, 32767), '0-2' -> (0, 2), '5' -> (5, 5), 'none' / None -> empty."""
    if spec is None or spec == "none":
        return (1, 0)
    if isinstance(spec, tuple):
        lo, hi = spec
        return (lo, _OPEN if hi is None else hi)
    if spec.endswith("+"):
        return (int(spec[:-1]), _OPEN)
    if "-" in spec:
        lo_s, hi_s = spec.split("-")
        return (int(lo_s), int(hi_s))
    return (int(spec), int(spec))


def _in(rng: tuple[int, int], version: int) -> bool:
    return rng[0] <= version <= rng[1]


class Field:
    """One field of a struct, as in the spec JSON.

    ``type_name`` is the spec type string; struct and struct-array types carry ``fields``.
    ``nullable`` is the nullableVersions range; ``tag``/``tagged`` declare a tagged field
    (KIP-482) for the tagged versions; ``flexible=False`` keeps the classic encoding even
    in flexible versions (the spec's field-level "flexibleVersions": "none", used only by
    the request header's ClientId). ``default`` is the spec default (type default if
    omitted: 0, "", b"", False, None for records and structs, an empty tuple for
    arrays), used for absent versions when decoding and missing keys when encoding.
    """

    __slots__ = (
        "default",
        "element",
        "flexible",
        "is_array",
        "name",
        "nullable",
        "schema",
        "tag",
        "tagged",
        "type_name",
        "versions",
    )

    def __init__(
        self,
        name: str,
        type_name: str,
        versions: str = "0+",
        *,
        nullable: str | None = None,
        default: Any = _UNSET,
        tag: int | None = None,
        tagged: str | None = None,
        flexible: bool = True,
        fields: Sequence[Field] | None = None,
    ):
        self.name = name
        self.type_name = type_name
        self.versions = parse_versions(versions)
        self.nullable = parse_versions(nullable)
        self.tag = tag
        self.tagged = parse_versions(
            tagged if tagged is not None else (versions if tag is not None else None)
        )
        self.flexible = flexible
        is_array = type_name.startswith("[]")
        base = type_name[2:] if is_array else type_name
        if base in t.PRIMITIVES:
            if fields:
                raise ValueError(f"{name}: a {type_name} field takes no nested fields")
            self.schema: Schema | None = None
            self.element: t.Primitive | Schema = t.PRIMITIVES[base]
        else:
            if not fields:
                raise ValueError(f"{name}: struct type {base} needs fields")
            self.schema = Schema(base, fields)
            self.element = self.schema
        self.is_array = is_array
        if default is _UNSET:
            if is_array:
                default = ()
            elif self.schema is not None:
                default = None
            else:
                default = self.element.default  # type: ignore[union-attr]
        self.default = default

    def present_in(self, version: int) -> bool:
        return _in(self.versions, version)

    def nullable_in(self, version: int) -> bool:
        return _in(self.nullable, version)

    def tagged_in(self, version: int) -> bool:
        return self.tag is not None and _in(self.tagged, version)

    def __repr__(self) -> str:
        return f"Field({self.name!r}, {self.type_name!r})"


class Schema:
    """A struct declaration: the spec's struct name and its ordered fields. Compiled
    encoders/decoders are cached per (version, flexible) by codec.py."""

    __slots__ = ("decoders", "encoders", "fields", "name")

    def __init__(self, name: str, fields: Iterable[Field]):
        self.name = name
        self.fields = tuple(fields)
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise ValueError(f"{name}: duplicate field names")
        self.decoders: dict[tuple[int, bool], codec.Decoder] = {}
        self.encoders: dict[tuple[int, bool], codec.Encoder] = {}

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def __repr__(self) -> str:
        return f"Schema({self.name!r})"


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
