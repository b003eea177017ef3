"""Remote topic names and cycle prevention, after MirrorMaker 2's replication policies
(KIP-382 ``DefaultReplicationPolicy`` and ``IdentityReplicationPolicy``).

- ``default``: ``orders`` of cluster ``east`` is ``east.orders`` in the target. A topic
  whose name carries the target's alias in its chain of prefixes (``west.orders`` seen in
  ``east`` when mirroring to ``west``) came from the target, so it is never mirrored
  back: two mirrors east->west and west->east run without a loop.
- ``identity``: names are kept, so names cannot tell where a record came from. The
  mirror then marks each record it copies with the header ``ORIGIN_HEADER`` (the alias of
  the cluster it was first written to; an existing mark is kept) and never copies a
  record whose mark names the target. That one header is the only change to a record.
"""

from __future__ import annotations

__all__ = ["ORIGIN_HEADER", "Headers", "ReplicationPolicy"]

ORIGIN_HEADER = "pykfk.mirror.origin"

# Record headers as confluent-kafka gives and takes them.
Headers = list[tuple[str, str | bytes | None]]


class ReplicationPolicy:
    """Maps source topic names to target names for one source -> target pair."""

    def __init__(self, kind: str, source_alias: str, target_alias: str, separator: str = "."):
        if kind not in ("default", "identity"):
            raise ValueError(f"unknown replication policy {kind!r}")
        self.kind = kind
        self.source_alias = source_alias
        self.target_alias = target_alias
        self.separator = separator

    @property
    def marks_records(self) -> bool:
        """Whether records carry the origin header (identity naming only)."""
        return self.kind == "identity"

    def remote_topic(self, topic: str) -> str:
        if self.kind == "identity":
            return topic
        return f"{self.source_alias}{self.separator}{topic}"

    def is_cycle(self, topic: str) -> bool:
        """Does ``topic`` (a source topic) come from the target, at any hop? MM2 walks
        the prefixes the same way: ``a.b.orders`` came from ``a`` through ``b``."""
        if self.kind == "identity":
            return False
        head, sep, rest = topic.partition(self.separator)
        while sep:
            if head == self.target_alias:
                return True
            head, sep, rest = rest.partition(self.separator)
        return False

    def origin_of(self, headers: Headers | None) -> str | None:
        """The origin mark of a record (identity naming), if it has one."""
        for key, value in headers or ():
            if key == ORIGIN_HEADER and value is not None:
                return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        return None
