"""Embedded metadata store: a standalone broker's topics and configs in one JSON file.

The file lives in the first log dir as ``pykfk-metadata.json`` and is rewritten whole on
every change, atomically (write a temp file, fsync, rename, fsync the dir), so a crash
leaves either the old or the new version. Layout::

    {"version": 1,
     "cluster_id": "<22 chars, base64 of a UUID as Kafka writes it>",
     "producer_id_block_end": 1000,
     "topics": {"<name>": {"partitions": 8, "replication_factor": 1,
                            "topic_id": "<32 hex>", "configs": {"retention.ms": "1000"}}}}

Producer ids are handed out from blocks (Kafka's ProducerIdManager does the same): the
end of the current block is persisted before any id of it is used, so ids are never
reused after a restart, at the cost of skipping the rest of a block.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Mapping

from pykfk.cluster.metadata import (
    BrokerInfo,
    PartitionState,
    TopicExistsError,
    TopicInfo,
    UnknownTopicError,
)

METADATA_FILE = "pykfk-metadata.json"
FORMAT_VERSION = 1
PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdManager block size


class MetadataFileError(Exception):
    """The metadata file exists but cannot be read as a pykfk metadata file."""


class EmbeddedMetadataStore:
    """MetadataStore of a single broker that is its own controller."""

    def __init__(self, directory: str, broker: BrokerInfo):
        self.path = os.path.join(directory, METADATA_FILE)
        self._directory = directory
        self._broker = broker
        self._topics: dict[str, TopicInfo] = {}
        self._next_producer_id = 0
        self._producer_id_block_end = 0
        self._cluster_id = ""
        os.makedirs(directory, exist_ok=True)
        self._load()

    # -- reads -----------------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    def brokers(self) -> list[BrokerInfo]:
        return [self._broker]

    def set_broker(self, broker: BrokerInfo) -> None:
        """Update the advertised address (known only after binding when port 0 is used)."""
        self._broker = broker

    def controller_id(self) -> int:
        return self._broker.node_id

    def topics(self) -> Mapping[str, TopicInfo]:
        return dict(self._topics)

    def get_topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        info = self._topics.get(topic)
        if info is None or not 0 <= partition < info.partitions:
            return None
        me = self._broker.node_id
        return PartitionState(me, 0, (me,))

    # -- changes ---------------------------------------------------------------------

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> TopicInfo:
        return self.create_topic_now(name, partitions, replication_factor, configs)

    def create_topic_now(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> TopicInfo:
        """Synchronous create (the embedded store never waits); used by auto-creation."""
        if name in self._topics:
            raise TopicExistsError(name)
        info = TopicInfo(name, partitions, replication_factor, dict(configs), uuid.uuid4().hex)
        self._topics[name] = info
        self._save()
        return info

    async def delete_topic(self, name: str) -> None:
        if self._topics.pop(name, None) is None:
            raise UnknownTopicError(name)
        self._save()

    async def create_partitions(self, name: str, total: int) -> TopicInfo:
        info = self._require(name)
        info = TopicInfo(name, total, info.replication_factor, info.configs, info.topic_id)
        self._topics[name] = info
        self._save()
        return info

    async def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo:
        info = self._require(name)
        info = TopicInfo(name, info.partitions, info.replication_factor, dict(configs), info.topic_id)
        self._topics[name] = info
        self._save()
        return info

    async def allocate_producer_id(self) -> int:
        return self.allocate_producer_id_now()

    def allocate_producer_id_now(self) -> int:
        if self._next_producer_id >= self._producer_id_block_end:
            self._producer_id_block_end = self._next_producer_id + PRODUCER_ID_BLOCK_SIZE
            self._save()
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        return producer_id

    def close(self) -> None:
        pass

    # -- file ------------------------------------------------------------------------

    def _require(self, name: str) -> TopicInfo:
        info = self._topics.get(name)
        if info is None:
            raise UnknownTopicError(name)
        return info

    def _load(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            self._cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            self._save()
            return
        except (OSError, ValueError) as exc:
            raise MetadataFileError(f"{self.path}: cannot read metadata: {exc}") from exc
        try:
            if data.get("version") != FORMAT_VERSION:
                raise ValueError(f"unsupported version {data.get('version')!r}")
            self._cluster_id = str(data["cluster_id"])
            self._producer_id_block_end = int(data.get("producer_id_block_end", 0))
            # Ids of the block that was in use before the restart are never handed out again.
            self._next_producer_id = self._producer_id_block_end
            for name, entry in data.get("topics", {}).items():
                self._topics[name] = TopicInfo(
                    name,
                    int(entry["partitions"]),
                    int(entry.get("replication_factor", 1)),
                    {str(k): str(v) for k, v in entry.get("configs", {}).items()},
                    str(entry.get("topic_id") or uuid.uuid4().hex),
                )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise MetadataFileError(f"{self.path}: malformed metadata: {exc}") from exc

    def _save(self) -> None:
        data = {
            "version": FORMAT_VERSION,
            "cluster_id": self._cluster_id,
            "producer_id_block_end": self._producer_id_block_end,
            "topics": {
                t.name: {
                    "partitions": t.partitions,
                    "replication_factor": t.replication_factor,
                    "topic_id": t.topic_id,
                    "configs": dict(t.configs),
                }
                for t in self._topics.values()
            },
        }
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self._directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
