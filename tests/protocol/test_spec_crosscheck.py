"""Our declarations against the Apache Kafka message JSON specs shipped by kafka-python:
for every version we declare that the spec file still lists, the same fields in the
same order, with the same types, nullability, tags and defaults.

kafka-python ships the Kafka 4.x files, which dropped some old versions (e.g. Produce
0-2, Fetch 0-3); those versions are covered by the golden-frame tests instead.
"""

from __future__ import annotations

import pytest

from pykfk.protocol import API_SPECS
from pykfk.protocol.schema import Field, Schema

from .spec_json import in_range, load_spec, parse_range, shipped, snake_case

_INT_TYPES = {"int8", "int16", "int32", "int64", "uint16", "uint32"}


def _spec_default(field: dict):
    raw = field.get("default")
    if raw is None:
        return None
    if raw == "null":
        return "null"
    kind = field["type"]
    if kind == "bool":
        return raw in ("true", True)
    if kind in _INT_TYPES:
        return int(raw, 0) if isinstance(raw, str) else int(raw)
    if kind == "float64":
        return float(raw)
    return raw


def _our_fields(schema: Schema, version: int) -> list[Field]:
    return [f for f in schema.fields if f.present_in(version)]


def _spec_fields(fields: list, version: int) -> list[dict]:
    return [f for f in fields if in_range(f["versions"], version)]


def _compare(schema: Schema, spec_fields: list, version: int, path: str) -> list[str]:
    problems = []
    ours = _our_fields(schema, version)
    theirs = _spec_fields(spec_fields, version)
    our_names = [f.name for f in ours]
    their_names = [snake_case(f["name"]) for f in theirs]
    if our_names != their_names:
        return [f"{path} v{version}: fields {our_names} != spec {their_names}"]
    for f, s in zip(ours, theirs):
        where = f"{path}.{f.name} v{version}"
        if f.type_name != s["type"]:
            problems.append(f"{where}: type {f.type_name} != {s['type']}")
        if f.nullable_in(version) != in_range(s.get("nullableVersions"), version):
            problems.append(f"{where}: nullable differs")
        spec_tagged = "tag" in s and in_range(s.get("taggedVersions"), version)
        if f.tagged_in(version) != spec_tagged or (spec_tagged and f.tag != s["tag"]):
            problems.append(f"{where}: tag {f.tag} != {s.get('tag')}")
        if (s.get("flexibleVersions") == "none") == f.flexible:
            problems.append(f"{where}: field-level flexibility differs")
        default = _spec_default(s)
        if default is not None:
            expected = None if default == "null" else default
            if f.default != expected:
                problems.append(f"{where}: default {f.default!r} != {expected!r}")
        if f.schema is not None:
            problems += _compare(f.schema, s["fields"], version, f"{path}.{f.name}")
    return problems


def _shipped_versions(spec, kind: str) -> range:
    """Our declared versions that the shipped spec file still describes."""
    low, high = parse_range(load_spec(spec.name + kind)["validVersions"])
    return range(max(low, spec.min_version), min(high, spec.max_version) + 1)


_CASES = [
    (spec, kind, version)
    for spec in shipped(list(API_SPECS.values()))
    for kind in ("Request", "Response")
    for version in _shipped_versions(spec, kind)
]


# kafka-python ships no spec of these: the consumer group protocol's, the delegation
# token APIs (tests/security/test_delegation_tokens.py speaks them on the wire) and the
# share group APIs (tests/share, with confluent-kafka's ShareConsumer).
NOT_SHIPPED = {"ConsumerGroupHeartbeat", "ConsumerGroupDescribe", "CreateDelegationToken", "RenewDelegationToken",
               "ExpireDelegationToken", "DescribeDelegationToken", "ShareGroupHeartbeat", "ShareGroupDescribe",
               "ShareFetch", "ShareAcknowledge", "GetTelemetrySubscriptions", "PushTelemetry",
               "DescribeShareGroupOffsets", "AlterShareGroupOffsets", "DeleteShareGroupOffsets",
               "InitializeShareGroupState", "ReadShareGroupState", "WriteShareGroupState", "DeleteShareGroupState"}


def test_only_the_consumer_group_protocol_apis_lack_a_shipped_spec():
    left_out = {spec.name for spec in API_SPECS.values()} - {spec.name for spec in shipped(list(API_SPECS.values()))}
    assert left_out <= NOT_SHIPPED


@pytest.mark.parametrize(
    "spec,kind,version", _CASES, ids=[f"{s.name}{k}-v{v}" for s, k, v in _CASES]
)
def test_fields_match_spec(spec, kind, version):
    data = load_spec(spec.name + kind)
    assert data["apiKey"] == spec.api_key
    schema = spec.request if kind == "Request" else spec.response
    assert _compare(schema, data["fields"], version, schema.name) == []


@pytest.mark.parametrize("spec", shipped(list(API_SPECS.values())), ids=lambda s: s.name)
def test_flexible_versions_match_spec(spec):
    for kind in ("Request", "Response"):
        flexible = parse_range(load_spec(spec.name + kind)["flexibleVersions"])
        assert spec.flexible_from == (flexible[0] if flexible else None)


def test_every_declared_version_is_checked_somewhere():
    """At least the newest declared version of each API is in the shipped spec range, so
    no API escapes the cross-check entirely."""
    for spec in shipped(list(API_SPECS.values())):
        valid = parse_range(load_spec(spec.name + "Request")["validVersions"])
        assert valid[0] <= spec.max_version <= valid[1], spec.name
