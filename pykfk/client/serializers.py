"""Serializers (the seeds' Encoder/Decoder): turn user objects into record bytes and back.

Any callable ``obj -> bytes`` works as a serializer and ``bytes -> obj`` as a
deserializer; these classes are the common ones. ``None`` passes through untouched, so a
null key or a tombstone value stays null.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

Serializer = Callable[[Any], "bytes | None"]
Deserializer = Callable[["bytes | None"], Any]


class BytesSerializer:
    """bytes, bytearray and memoryview as they are."""

    def __call__(self, obj: Any) -> bytes | None:
        if obj is None or isinstance(obj, bytes):
            return obj
        if isinstance(obj, (bytearray, memoryview)):
            return bytes(obj)
        raise TypeError(f"expected bytes, got {type(obj).__name__}; pass a serializer")


class StringSerializer:
    def __init__(self, encoding: str = "utf-8"):
        self.encoding = encoding

    def __call__(self, obj: Any) -> bytes | None:
        return None if obj is None else str(obj).encode(self.encoding)


class StringDeserializer:
    def __init__(self, encoding: str = "utf-8"):
        self.encoding = encoding

    def __call__(self, data: bytes | None) -> str | None:
        return None if data is None else data.decode(self.encoding)


class JsonSerializer:
    def __call__(self, obj: Any) -> bytes | None:
        return None if obj is None else json.dumps(obj, separators=(",", ":")).encode()


class JsonDeserializer:
    def __call__(self, data: bytes | None) -> Any:
        return None if data is None else json.loads(data)


def as_serializer(serializer: Serializer | None) -> Serializer | None:
    """None means the default (bytes as they are); returned as None so the producer can
    skip the call on its fast path."""
    return serializer
