"""The metadata store interface: what the broker knows about the cluster.

One interface, two backends: ``embedded.py`` (a local file, for a standalone broker) and,
later, ZooKeeper. Reads are synchronous and served from memory, so request handlers never
wait for them; changes are coroutines because a ZooKeeper backend has to wait for the
ensemble. Nothing above ``pykfk/cluster/`` knows which backend runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Protocol, runtime_checkable


@dataclasses.dataclass(frozen=True)
class BrokerInfo:
    """A broker as clients see it in Metadata responses."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclasses.dataclass(frozen=True)
class TopicInfo:
    """A topic: its partition count and per-topic config overrides (Kafka topic names,
    raw string values as given by the client)."""

    name: str
    partitions: int
    replication_factor: int = 1
    configs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    topic_id: str = ""  # 32 hex digits (a UUID), stable for the topic's lifetime


class TopicExistsError(Exception):
    """create_topic for a name that is taken."""


class UnknownTopicError(Exception):
    """A change to a topic that does not exist."""


@runtime_checkable
class MetadataStore(Protocol):
    """Topics, partition counts, per-topic configs, brokers and the controller id."""

    @property
    def cluster_id(self) -> str: ...

    def brokers(self) -> list[BrokerInfo]: ...

    def controller_id(self) -> int: ...

    def topics(self) -> Mapping[str, TopicInfo]: ...

    def get_topic(self, name: str) -> TopicInfo | None: ...

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> TopicInfo: ...

    async def delete_topic(self, name: str) -> None: ...

    async def create_partitions(self, name: str, total: int) -> TopicInfo: ...

    async def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo: ...

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before, even across restarts."""
        ...

    def close(self) -> None: ...
