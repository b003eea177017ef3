"""A reader of the OTLP metrics protobuf (opentelemetry.proto.metrics.v1.MetricsData)
that KIP-714 clients push: gauges and sums with their number data points and
attributes, resource attributes; other metric kinds are skipped. Malformed input raises
``MalformedMetrics``."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_DOUBLE = struct.Struct("<d")
_INT64 = struct.Struct("<q")
# AggregationTemporality of a Sum
DELTA, CUMULATIVE = 1, 2


class MalformedMetrics(ValueError):
    """The payload is not a MetricsData message."""


@dataclass
class DataPoint:
    attributes: dict[str, str]
    value: float


@dataclass
class OtlpMetric:
    name: str
    description: str
    kind: str  # "gauge" or "sum"
    monotonic: bool = False
    temporality: int = 0
    points: list[DataPoint] = field(default_factory=list)


def _varint(data: memoryview, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise MalformedMetrics("truncated or overlong varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _fields(data: memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
    """(field number, wire type, value): ints for varints and fixed, a view for bytes."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        value: int | memoryview
        if wire == _VARINT:
            value, at = _varint(data, at)
        elif wire == _FIXED64:
            if at + 8 > len(data):
                raise MalformedMetrics("truncated fixed64")
            value = int.from_bytes(data[at:at + 8], "little")
            at += 8
        elif wire == _FIXED32:
            if at + 4 > len(data):
                raise MalformedMetrics("truncated fixed32")
            value = int.from_bytes(data[at:at + 4], "little")
            at += 4
        elif wire == _LENGTH:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise MalformedMetrics("length beyond the message")
            value = data[at:at + size]
            at += size
        else:
            raise MalformedMetrics(f"unsupported wire type {wire}")
        if number == 0:
            raise MalformedMetrics("field number 0")
        yield number, wire, value


def _text(value: int | memoryview) -> str:
    if isinstance(value, int):
        raise MalformedMetrics("a string field holds a number")
    return bytes(value).decode("utf-8", "replace")


def _view(value: int | memoryview) -> memoryview:
    if isinstance(value, int):
        raise MalformedMetrics("a message field holds a number")
    return value


def _any_value(data: memoryview) -> str:
    for number, wire, value in _fields(data):
        if number == 1:
            return _text(value)
        if number == 2 and wire == _VARINT:
            return "true" if value else "false"
        if number == 3 and wire == _VARINT:
            return str(_INT64.unpack(int(value).to_bytes(8, "little"))[0]) if isinstance(value, int) else ""
        if number == 4 and wire == _FIXED64 and isinstance(value, int):
            return f"{_DOUBLE.unpack(value.to_bytes(8, 'little'))[0]:g}"
    return ""


def _key_value(data: memoryview) -> tuple[str, str]:
    key = text = ""
    for number, _wire, value in _fields(data):
        if number == 1:
            key = _text(value)
        elif number == 2:
            text = _any_value(_view(value))
    return key, text


def _number_point(data: memoryview) -> DataPoint:
    attributes: dict[str, str] = {}
    number_value = 0.0
    for number, wire, value in _fields(data):
        if number == 7:
            key, text = _key_value(_view(value))
            attributes[key] = text
        elif number == 4 and wire == _FIXED64 and isinstance(value, int):
            number_value = _DOUBLE.unpack(value.to_bytes(8, "little"))[0]
        elif number == 6 and wire == _FIXED64 and isinstance(value, int):
            number_value = float(_INT64.unpack(value.to_bytes(8, "little"))[0])
    return DataPoint(attributes, number_value)


def _metric(data: memoryview) -> OtlpMetric | None:
    metric = OtlpMetric("", "", "")
    for number, wire, value in _fields(data):
        if number == 1:
            metric.name = _text(value)
        elif number == 2:
            metric.description = _text(value)
        elif number in (5, 7) and wire == _LENGTH:  # gauge, sum
            metric.kind = "gauge" if number == 5 else "sum"
            for inner, inner_wire, inner_value in _fields(_view(value)):
                if inner == 1:
                    metric.points.append(_number_point(_view(inner_value)))
                elif inner == 2 and inner_wire == _VARINT and isinstance(inner_value, int):
                    metric.temporality = inner_value
                elif inner == 3 and inner_wire == _VARINT:
                    metric.monotonic = bool(inner_value)
    return metric if metric.kind and metric.name else None


def decode_metrics(payload: bytes) -> tuple[dict[str, str], list[OtlpMetric]]:
    """(resource attributes, metrics) of a MetricsData message."""
    resource: dict[str, str] = {}
    metrics: list[OtlpMetric] = []
    for number, _wire, resource_metrics in _fields(memoryview(payload)):
        if number != 1:
            continue
        for part, _w, value in _fields(_view(resource_metrics)):
            if part == 1:  # Resource
                for attr, _w2, kv in _fields(_view(value)):
                    if attr == 1:
                        key, text = _key_value(_view(kv))
                        resource[key] = text
            elif part == 2:  # ScopeMetrics
                for scoped, _w2, metric_data in _fields(_view(value)):
                    if scoped == 2:
                        metric = _metric(_view(metric_data))
                        if metric is not None:
                            metrics.append(metric)
    return resource, metrics
