"""Sans-io Kafka wire protocol: primitive types, message declarations, a table-driven
codec and framing. No sockets, no asyncio."""

from .framing import (
    RequestHeader,
    decode_request,
    decode_request_header,
    decode_response,
    encode_api_versions_fallback,
    encode_request,
    encode_response,
    response_header_size,
)
from .messages import API_SPECS
from .schema import ApiSpec, Field, Schema
from .types import FileRegion, ProtocolError, Struct, UnsupportedVersionError

__all__ = [
    "API_SPECS",
    "ApiSpec",
    "Field",
    "FileRegion",
    "ProtocolError",
    "RequestHeader",
    "Schema",
    "Struct",
    "UnsupportedVersionError",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "encode_api_versions_fallback",
    "encode_request",
    "encode_response",
    "response_header_size",
]
