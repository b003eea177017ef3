"""Struct: a decoded Kafka message as a dict of field names with attribute access."""

from typing import Any

class Struct(dict[str, Any]):
    """A dict of snake_case field names with attribute access (``req.topics[0].topic``).
    Decoded structs hold every field the declaration knows, with defaults for fields
    absent in the decoded version. Plain dicts are accepted wherever a Struct is expected
    for encoding."""

    def __getattr__(self, name: str) -> Any: ...
    def __setattr__(self, name: str, value: Any) -> None: ...
    def __delattr__(self, name: str) -> None: ...
