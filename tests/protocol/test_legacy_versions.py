"""Our encodings against hand-written per-version message classes that are independent of
the JSON specs: kafka-python's older codecs (``kafka.protocol.old``) and aiokafka's
(``aiokafka.protocol``). Each class decodes exactly the bytes we produce for generated
bodies and re-encodes them to the same bytes. This is a second opinion on every layout,
including versions the shipped specs dropped."""

from __future__ import annotations

import importlib
import inspect
import io
import pkgutil

import aiokafka.protocol
import aiokafka.protocol.api
import kafka.protocol.old
import kafka.protocol.old.api
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykfk.protocol import API_SPECS

from .values import body

# Classes that disagree with Kafka's own message JSON (checked in test_spec_crosscheck):
# kafka-python's old DescribeAcls v2 classes are not flexible, though v2 is the first
# flexible version of DescribeAcls; its old DescribeLogDirs v0 request has one int32 of
# partitions per topic where Kafka's spec has an array of them.
_KNOWN_WRONG = {"DescribeAclsRequest_v2", "DescribeAclsResponse_v2", "DescribeLogDirsRequest_v0"}


def _legacy_classes(package, api):
    found = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for cls in vars(module).values():
            if (
                inspect.isclass(cls)
                and issubclass(cls, (api.Request, api.Response))
                and cls.__module__ == module.__name__
                and isinstance(getattr(cls, "API_VERSION", None), int)
                and getattr(cls, "SCHEMA", None) is not None
            ):
                spec = API_SPECS.get(cls.API_KEY)
                if cls.__name__ in _KNOWN_WRONG:
                    continue
                if spec is not None and spec.supports(cls.API_VERSION):
                    kind = "Request" if issubclass(cls, api.Request) else "Response"
                    found.append((spec, kind, cls))
    return sorted(found, key=lambda c: (c[0].api_key, c[1], c[2].API_VERSION))


_KAFKA_PYTHON = _legacy_classes(kafka.protocol.old, kafka.protocol.old.api)
_AIOKAFKA = _legacy_classes(aiokafka.protocol, aiokafka.protocol.api)
_CASES = _KAFKA_PYTHON + _AIOKAFKA
_IDS = [f"kafka-python-{c.__name__}" for _, _, c in _KAFKA_PYTHON] + [
    f"aiokafka-{c.__name__}" for _, _, c in _AIOKAFKA
]


@pytest.mark.parametrize("spec,kind,cls", _CASES, ids=_IDS)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_legacy_class_reads_and_rewrites_our_bytes(spec, kind, cls, data):
    version = cls.API_VERSION
    schema = spec.request if kind == "Request" else spec.response
    value = data.draw(body(schema, version))
    if spec.name == "ApiVersions" and kind == "Response":
        value["error_code"] = 0  # error responses are read in the v0 layout (KIP-511)
    if kind == "Request":
        ours = spec.encode_request(value, version)
    else:
        ours = b"".join(spec.encode_response(value, version))
    stream = io.BytesIO(ours)
    theirs = cls.decode(stream)
    assert stream.tell() == len(ours)
    assert theirs.encode() == ours


def test_legacy_classes_cover_the_old_versions():
    covered = {(s.api_key, c.API_VERSION) for s, _, c in _KAFKA_PYTHON}
    assert {(0, v) for v in range(3)} <= covered  # Produce 0-2
    assert {(1, v) for v in range(4)} <= covered  # Fetch 0-3
    assert {(2, 0), (3, 0), (8, 0), (8, 1), (9, 0)} <= covered
