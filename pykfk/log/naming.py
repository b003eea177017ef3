"""Legal topic names (Kafka's ``Topic.validate``): a topic name becomes part of its
partitions' directory names, so the rule lives with the log."""

from __future__ import annotations

import re

# 255 (a file name's limit) minus room for "-<partition>" and ".deleted"-style suffixes.
TOPIC_NAME_MAX_LENGTH = 249
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def topic_name_error(name: str | None) -> str | None:
    """Why ``name`` is not a legal topic name, or None when it is."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > TOPIC_NAME_MAX_LENGTH:
        return f"Topic name is illegal, it can't be longer than {TOPIC_NAME_MAX_LENGTH} characters"
    if not _TOPIC_NAME.fullmatch(name):
        return (
            f"Topic name \"{name}\" is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )
    return None
