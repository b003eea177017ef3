"""Embedded metadata store: a standalone broker's topics and configs in one JSON file.

The file lives in the first log dir as ``pykfk-metadata.json`` and is rewritten whole on
every change, atomically (write a temp file, fsync, rename, fsync the dir), so a crash
leaves either the old or the new version. Memory takes a change only once the file with
it is durable: a write that fails (a full disk, an I/O error) leaves the store as it was
and raises MetadataWriteError (KAFKA_STORAGE_ERROR), so the request is refused and
nothing is half made. Layout::

    {"version": 1,
     "cluster_id": "<22 chars, base64 of a UUID as Kafka writes it>",
     "producer_id_block_end": 1000,
     "topics": {"<name>": {"partitions": 8, "replication_factor": 1,
                            "topic_id": "<32 hex>", "configs": {"retention.ms": "1000"}}},
     "users": {"<name>": {"SCRAM-SHA-256": "salt=...,stored_key=...,server_key=...,iterations=4096"}},
     "acls": [[resource type, name, pattern type, principal, host, operation, permission], ...],
     "quotas": [[[["user", "<name or null>"], ["client-id", ...]], {"producer_byte_rate": 1e6}], ...],
     "broker_configs": {"<default>": {"log.retention.ms": "60000"}, "0": {...}},
     "entity_configs": {"client-metrics": {"<name>": {"metrics": "...", "interval.ms": "500"}}},
     "delegation_tokens": {"<token id>": {Kafka's token JSON, as in ZooKeeper's /delegation_token/tokens}}}

The store is the metadata of a cluster of one: this broker is the controller and the
leader of every partition, with itself as the only in-sync replica, so the replica
manager above it runs the same code as on a ZooKeeper cluster. Listeners hear of every
topic change at once (synchronously), before the changing call returns.

Producer ids are handed out from blocks (Kafka's ProducerIdManager does the same): the
end of the current block is persisted before any id of it is used, so ids are never
reused after a restart, at the cost of skipping the rest of a block. A block that could
not be saved is not used: no id is handed out until one is.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import logging
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pykfk.cluster.metadata import (
    BROKER_ENTITIES,
    BrokerInfo,
    MetadataWriteError,
    PartitionState,
    TopicExistsError,
    TopicInfo,
    UnknownTopicError,
    notify_listeners,
)
from pykfk.errors import ErrorCode
from pykfk.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from pykfk.security.quotas import Entity
from pykfk.security.tokens import TokenInfo

log = logging.getLogger("pykfk.cluster")

METADATA_FILE = "pykfk-metadata.json"
FORMAT_VERSION = 1
PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdManager block size
# The attributes the file holds: a change names the new values of those it alters.
_PERSISTED = ("_cluster_id", "_producer_id_block_end", "_topics", "_users", "_quotas", "_entity_configs", "_acls",
              "_tokens")


class MetadataFileError(Exception):
    """The metadata file exists but cannot be read as a pykfk metadata file."""


# Leader epoch of every partition of a cluster of one: no election ever moves leadership.
LEADER_EPOCH = 0


@functools.lru_cache(maxsize=4)
def _leader_state(me: int) -> PartitionState:
    """The state of every partition on broker ``me``, which leads them all: one shared
    (immutable) object, not one built per call (Metadata reads all of a topic's)."""
    return PartitionState(me, LEADER_EPOCH, (me,))


class EmbeddedMetadataStore:
    """MetadataStore of a single broker, whose controller is a LocalController
    (``local_controller.py``). Loop-affine."""

    # States are not ZooKeeper writes: no zxid to compare a registration against.
    registration_zxid = -1

    def __init__(self, directory: str, broker: BrokerInfo):
        self.path = os.path.join(directory, METADATA_FILE)
        self._directory = directory
        self._broker = broker
        self._leader = _leader_state(broker.node_id)
        self._listeners: list[Callable[[str, Any], None]] = []
        self._topics: dict[str, TopicInfo] = {}
        self._next_producer_id = 0
        self._producer_id_block_end = 0
        self._cluster_id = ""
        self._users: dict[str, dict[str, str]] = {}
        self._acls: list[AclBinding] = []
        self.acl_version = 0
        self._quotas: dict[Entity, dict[str, float]] = {}
        self.quota_version = 0
        # Entity type -> name -> settings; each type's dict is replaced on a change.
        self._entity_configs: dict[str, dict[str, dict[str, str]]] = {}
        self._tokens: dict[str, TokenInfo] = {}
        os.makedirs(directory, exist_ok=True)
        self._load()

    # -- reads -----------------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def broker(self) -> BrokerInfo:
        """This broker as clients see it."""
        return self._broker

    def brokers(self) -> list[BrokerInfo]:
        return [self._broker]

    def get_broker(self, broker_id: int) -> BrokerInfo | None:
        return self._broker if broker_id == self._broker.node_id else None

    def live_broker_ids(self) -> set[int]:
        return {self._broker.node_id}

    def shutdown_requests(self) -> dict[int, bytes]:
        return {}

    def delete_requests(self) -> set[str]:
        """Deletions here complete before the call returns: none is ever pending."""
        return set()

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
        return self._leader

    def topic_states(self, topic: str, start: int, end: int) -> list[PartitionState | None]:
        """Every partition of a topic shares the one leader state: a 10,000-partition
        topic's states are one list of 10,000 references to it, made in microseconds."""
        info = self._topics.get(topic)
        count = max(end - start, 0)
        if info is None:
            return [None] * count
        low, high = max(start, 0), min(end, info.partitions)
        if low >= high:
            return [None] * count
        return [None] * (low - start) + [self._leader] * (high - low) + [None] * (end - high)

    # -- membership (a cluster of one) ----------------------------------------------

    async def register_broker(self, broker: BrokerInfo | None = None, *, stale_wait_s: float | None = None) -> None:
        """Take the advertised address, known only once the listener is bound when it
        asks for port 0. Nobody else can hold this broker id."""
        if broker is not None:
            self._broker = broker
            self._leader = _leader_state(broker.node_id)

    def registration_lost(self) -> bool:
        return False

    async def request_controlled_shutdown(self) -> None:
        """No other broker could take over a partition: nothing to hand over."""

    def add_listener(self, listener: Callable[[str, Any], None]) -> None:
        """``listener(kind, key)`` hears ``("topic", name)`` after every topic change."""
        self._listeners.append(listener)

    def _notify(self, kind: str, key: Any) -> None:
        notify_listeners(self._listeners, kind, key)

    async def wait_for(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Every change is applied before its call returns: nothing to wait for."""
        return condition()

    async def update_isr(self, topic: str, partition: int, state: PartitionState, expected_version: int) -> PartitionState:
        """The ISR of a cluster of one is always {this broker}: nothing to store."""
        return self.partition_state(topic, partition) or state

    async def read_state(self, topic: str, partition: int) -> PartitionState | None:
        return self.partition_state(topic, partition)

    # -- changes ---------------------------------------------------------------------

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str],
        *, assignment: Mapping[int, Sequence[int]] | None = None,
    ) -> TopicInfo:
        # A cluster of one: an explicit assignment can only name this broker (CreateTopics
        # refuses unknown broker ids), which is where every replica goes anyway.
        if name in self._topics:
            raise TopicExistsError(name)
        info = TopicInfo(name, partitions, replication_factor, dict(configs), uuid.uuid4().hex)
        self._replace(info, f"create topic {name}")
        return info

    async def delete_topic(self, name: str) -> None:
        self._require(name)
        self._commit(f"delete topic {name}", _topics={n: t for n, t in self._topics.items() if n != name})
        self._notify("topic", name)

    async def create_partitions(self, name: str, total: int) -> TopicInfo:
        info = self._require(name)
        info = TopicInfo(name, total, info.replication_factor, info.configs, info.topic_id)
        self._replace(info, f"add partitions to {name}")
        return info

    async def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo:
        info = self._require(name)
        info = TopicInfo(name, info.partitions, info.replication_factor, dict(configs), info.topic_id)
        self._replace(info, f"alter configs of topic {name}")
        return info

    def _replace(self, info: TopicInfo, change: str) -> None:
        self._commit(change, _topics={**self._topics, info.name: info})
        self._notify("topic", info.name)

    async def scram_credentials(self, users: list[str] | None = None) -> dict[str, dict[str, str]]:
        names = self._users if users is None else [u for u in users if u in self._users]
        return {name: dict(self._users[name]) for name in names}

    async def alter_scram_credentials(self, user: str, upserts: Mapping[str, str], deletions: list[str]) -> None:
        credentials = {m: c for m, c in self._users.get(user, {}).items() if m not in deletions}
        credentials.update(upserts)
        users = {name: creds for name, creds in self._users.items() if name != user}
        if credentials:
            users[user] = credentials
        self._commit(f"alter credentials of user {user}", _users=users)

    async def delegation_tokens(self, token_ids: list[str] | None = None) -> dict[str, TokenInfo]:
        if token_ids is None:
            return dict(self._tokens)
        return {i: self._tokens[i] for i in token_ids if i in self._tokens}

    def delegation_token_end(self, token_id: str) -> int | None:
        token = self._tokens.get(token_id)
        return None if token is None else min(token.expiry_ms, token.max_ms)

    async def store_delegation_token(self, token: TokenInfo) -> None:
        self._commit(f"store delegation token {token.token_id}", _tokens={**self._tokens, token.token_id: token})

    async def remove_delegation_tokens(self, token_ids: list[str]) -> None:
        gone = set(token_ids)
        self._commit("remove delegation tokens", _tokens={i: t for i, t in self._tokens.items() if i not in gone})

    def client_quotas(self) -> Mapping[Entity, Mapping[str, float]]:
        return self._quotas

    async def alter_client_quotas(self, entity: Entity, updates: Mapping[str, float], removals: list[str]) -> None:
        values = {k: v for k, v in self._quotas.get(entity, {}).items() if k not in removals}
        values.update(updates)
        quotas = {e: v for e, v in self._quotas.items() if e != entity}
        if values:
            quotas[entity] = values
        self._commit(f"alter quotas of {entity}", _quotas=quotas)
        self.quota_version += 1
        self._notify("quota", entity)

    def entity_configs(self, entity_type: str) -> Mapping[str, Mapping[str, str]]:
        return self._entity_configs.get(entity_type, {})

    async def alter_entity_configs(self, entity_type: str, name: str, configs: Mapping[str, str]) -> None:
        entities = {e: c for e, c in self._entity_configs.get(entity_type, {}).items() if e != name}
        if configs:
            entities[name] = dict(configs)
        self._commit(f"alter configs of {entity_type} {name}",
                     _entity_configs={**self._entity_configs, entity_type: entities})
        if entity_type == BROKER_ENTITIES:
            self._notify("broker_config", name)
        else:
            self._notify("entity_config", (entity_type, name))

    def broker_configs(self, entity: str) -> Mapping[str, str]:
        return self.entity_configs(BROKER_ENTITIES).get(entity, {})

    async def alter_broker_configs(self, entity: str, configs: Mapping[str, str]) -> None:
        await self.alter_entity_configs(BROKER_ENTITIES, entity, configs)

    def acls(self) -> list[AclBinding]:
        return list(self._acls)

    async def create_acls(self, bindings: list[AclBinding]) -> None:
        self._commit("create ACLs", _acls=self._acls + [b for b in dict.fromkeys(bindings) if b not in self._acls])
        self.acl_version += 1

    async def delete_acls(self, bindings: list[AclBinding]) -> None:
        gone = set(bindings)
        self._commit("delete ACLs", _acls=[b for b in self._acls if b not in gone])
        self.acl_version += 1

    async def allocate_producer_id(self) -> int:
        return self.allocate_producer_id_now()

    def allocate_producer_id_now(self) -> int:
        """The next producer id; its block is in the file before any id of it is used
        (MetadataWriteError when it cannot be saved, and no id is handed out)."""
        if self._next_producer_id >= self._producer_id_block_end:
            end = self._next_producer_id + PRODUCER_ID_BLOCK_SIZE
            self._commit("claim a producer id block", _producer_id_block_end=end)
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
            try:
                self._write(self._persisted())
            except OSError as exc:
                raise MetadataFileError(f"{self.path}: cannot write metadata: {exc.strerror or exc}") from None
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
            self._users = {str(user): {str(m): str(c) for m, c in creds.items()}
                           for user, creds in data.get("users", {}).items()}
            self._quotas = {tuple((str(t), None if n is None else str(n)) for t, n in entity):
                            {str(k): float(v) for k, v in values.items()}
                            for entity, values in data.get("quotas", [])}
            entity_configs = {BROKER_ENTITIES: data.get("broker_configs", {}), **data.get("entity_configs", {})}
            self._entity_configs = {str(kind): {str(name): {str(k): str(v) for k, v in configs.items()}
                                                for name, configs in entities.items()}
                                    for kind, entities in entity_configs.items()}
            self._tokens = {str(i): TokenInfo.from_json(json.dumps(doc))
                            for i, doc in data.get("delegation_tokens", {}).items()}
            self._acls = [AclBinding(ResourceType(a[0]), str(a[1]), PatternType(a[2]), str(a[3]), str(a[4]),
                                     Operation(a[5]), Permission(a[6])) for a in data.get("acls", [])]
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

    def _persisted(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _PERSISTED}

    def _commit(self, change: str, **new: Any) -> None:
        """Make ``change`` durable, then apply it: ``new`` maps attributes of
        ``_PERSISTED`` to their new values (new objects: the current ones are not
        touched). The file is written with them first, and memory takes them only once
        it is durable, so a failed write leaves the store exactly as it was: one line in
        the log, and MetadataWriteError (KAFKA_STORAGE_ERROR) for the request."""
        state = self._persisted()
        assert set(new) <= set(state), set(new) - set(state)
        state.update(new)
        try:
            self._write(state)
        except OSError as exc:
            log.warning("metadata not saved, nothing changed (%s): %s: %s", change, self.path, exc.strerror or exc)
            raise MetadataWriteError(ErrorCode.KAFKA_STORAGE_ERROR,
                                     f"the metadata change could not be saved: {exc.strerror or exc}") from None
        for name, value in new.items():
            setattr(self, name, value)

    def _write(self, state: Mapping[str, Any]) -> None:
        """Replace the file with ``state`` (the attributes of ``_PERSISTED``), durably.
        Raises OSError; a temp file left by a failed write is removed (on a full disk it
        holds the space the next write needs)."""
        data = {
            "version": FORMAT_VERSION,
            "cluster_id": state["_cluster_id"],
            "producer_id_block_end": state["_producer_id_block_end"],
            "topics": {
                t.name: {
                    "partitions": t.partitions,
                    "replication_factor": t.replication_factor,
                    "topic_id": t.topic_id,
                    "configs": dict(t.configs),
                }
                for t in state["_topics"].values()
            },
            "users": state["_users"],
            "quotas": [[[list(pair) for pair in entity], values] for entity, values in state["_quotas"].items()],
            "broker_configs": state["_entity_configs"].get(BROKER_ENTITIES, {}),
            "entity_configs": {kind: entities for kind, entities in state["_entity_configs"].items()
                               if kind != BROKER_ENTITIES},
            "acls": [[int(b.resource_type), b.name, int(b.pattern_type), b.principal, b.host, int(b.operation),
                      int(b.permission)] for b in state["_acls"]],
            "delegation_tokens": {i: json.loads(t.to_json()) for i, t in state["_tokens"].items()},
        }
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        dir_fd = os.open(self._directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
