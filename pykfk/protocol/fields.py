"""Field and Schema, the vocabulary of the message declarations (the spec JSON's fields
and structs), and version ranges in the spec's syntax. ``schema.py`` builds ApiSpecs of
them and ``codec.py`` compiles them; this module needs neither.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from . import types as t
from .types import Decoder, Encoder

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
        self.decoders: dict[tuple[int, bool], Decoder] = {}
        self.encoders: dict[tuple[int, bool], Encoder] = {}

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def __repr__(self) -> str:
        return f"Schema({self.name!r})"
