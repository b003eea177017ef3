"""Kafka's ``sasl.jaas.config`` values: ``<LoginModule> <flag> key="value" ...;``.

The options are what pykfk reads: ``username`` / ``password`` (the broker's own login to
other brokers) and, for PLAIN, one ``user_<name>="<password>"`` per user allowed in.
"""

from __future__ import annotations

import dataclasses
import re

_HEAD = re.compile(r"\s*([A-Za-z_$][\w.$]*)\s+(required|requisite|sufficient|optional)\b", re.IGNORECASE)
_OPTION = re.compile(r'\s*([\w.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


class JaasError(ValueError):
    """A ``sasl.jaas.config`` value that does not parse."""


@dataclasses.dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str]

    @property
    def plain_users(self) -> dict[str, str]:
        """PLAIN's ``user_<name>="<password>"`` options as {name: password}."""
        return {k[len("user_"):]: v for k, v in self.options.items() if k.startswith("user_") and len(k) > 5}


def parse_jaas(text: str) -> JaasEntry:
    """The single login module of a ``sasl.jaas.config`` value."""
    head = _HEAD.match(text)
    if head is None:
        raise JaasError("expected '<LoginModule> required option=\"value\" ...;'")
    options: dict[str, str] = {}
    pos = head.end()
    while True:
        option = _OPTION.match(text, pos)
        if option is None:
            break
        quoted, bare = option.group(2), option.group(3)
        options[option.group(1)] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
        pos = option.end()
    rest = text[pos:].strip()
    if rest != ";":
        raise JaasError(f"unexpected text {rest[:40]!r}" if rest else "missing ';' at the end")
    return JaasEntry(head.group(1), head.group(2).lower(), options)
