"""The ``metrics.listener`` address, checked when the config is read (no imports: the
config module uses it)."""

from __future__ import annotations

import urllib.parse


def parse_listener(value: str) -> tuple[str, int]:
    """``http://HOST:PORT`` -> (host, port); ValueError for anything else. Both must be
    given: the endpoint binds where it is told, never on every interface by omission."""
    url = urllib.parse.urlsplit(value.strip())
    if url.scheme != "http":
        raise ValueError(f"expected http://HOST:PORT, got {value!r}")
    if url.path not in ("", "/") or url.query or url.fragment or url.username or url.password:
        raise ValueError(f"expected http://HOST:PORT without a path, got {value!r}")
    try:
        port = url.port
    except ValueError:
        raise ValueError(f"bad port in {value!r}") from None
    if not url.hostname or port is None:
        raise ValueError(f"expected http://HOST:PORT with both given, got {value!r}")
    return url.hostname, port
