"""Loads the Apache Kafka message JSON specs that kafka-python ships as package data
(test-only dependency), so declarations can be checked against them without committing
the specs."""

from __future__ import annotations

import functools
import importlib.resources
import json
import re

_PACKAGE = "kafka.protocol.schemas.resources"
_COMMENT_LINES = re.compile(r"(?m)^\s*//.*\n?")


@functools.cache
def load_spec(message_name: str) -> dict:
    """The JSON of e.g. "ProduceRequest", with comments stripped and commonStructs
    inlined into the fields that reference them."""
    text = importlib.resources.files(_PACKAGE).joinpath(message_name + ".json").read_text()
    data = json.loads(_COMMENT_LINES.sub("", text))
    common = {s["name"]: s["fields"] for s in data.get("commonStructs", [])}

    def inline(fields: list) -> None:
        for field in fields:
            base = field["type"].removeprefix("[]")
            if base in common and "fields" not in field:
                field["fields"] = common[base]
            if "fields" in field:
                inline(field["fields"])

    inline(data.get("fields", []))
    return data


def has_spec(message_name: str) -> bool:
    """Whether kafka-python ships the JSON of ``message_name``."""
    return importlib.resources.files(_PACKAGE).joinpath(message_name + ".json").is_file()


def shipped(specs: list) -> list:
    """The API declarations whose request and response JSON kafka-python ships (it has
    none for the KIP-848 consumer group APIs yet: those are checked against Kafka's
    field layouts in tests/group instead)."""
    return [spec for spec in specs if has_spec(spec.name + "Request") and has_spec(spec.name + "Response")]


def parse_range(spec: str | None) -> tuple[int, int] | None:
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), 0x7FFF
    if "-" in spec:
        lo, hi = spec.split("-")
        return int(lo), int(hi)
    return int(spec), int(spec)


def in_range(spec: str | None, version: int) -> bool:
    rng = parse_range(spec)
    return rng is not None and rng[0] <= version <= rng[1]


def snake_case(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
