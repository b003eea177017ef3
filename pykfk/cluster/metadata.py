"""The metadata store interface: what the broker knows about the cluster.

One interface, two backends: ``embedded.py`` (a local file, for a standalone broker) and
``zookeeper.py`` (a cluster of brokers, Kafka's own znodes). Reads are synchronous and served from memory, so request handlers never
wait for them; changes are coroutines because a ZooKeeper backend has to wait for the
ensemble. Nothing above ``pykfk/cluster/`` knows which backend runs.

The interface is split by concern, one Protocol each: ``TopicStore`` (topics and
partitions), ``MembershipStore`` (brokers, the controller, this broker's registration),
``ConfigStore`` (entity configs: dynamic broker settings, client quotas),
``SecurityStore`` (ACLs, SCRAM credentials, delegation tokens) and ``ProducerIdStore``;
``StoreEvents`` (listeners) is common to all. ``ClusterView`` is the topics with the
brokers that hold them, ``MetadataStore`` the whole store. A caller takes the narrowest
of them that has what it uses; both backends implement every one (``node.py`` holds
each as a ``MetadataStore``, so mypy checks that).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pykfk.errors import KafkaError

if TYPE_CHECKING:
    from pykfk.security.acl import AclBinding
    from pykfk.security.quotas import Entity
    from pykfk.security.tokens import TokenInfo


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """One advertised listener of a broker."""

    listener: str
    security_protocol: str
    host: str
    port: int


@dataclasses.dataclass(frozen=True)
class BrokerInfo:
    """A broker as clients see it in Metadata responses. ``host``/``port`` are its
    PLAINTEXT (else first) endpoint; ``endpoints`` every advertised listener: a client
    is given the address of the listener it came in on."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: tuple[Endpoint, ...] = ()

    def address(self, listener: str) -> tuple[str, int] | None:
        """host and port of ``listener``; None when the broker has no such listener.
        A broker registered without endpoints serves every listener at host:port."""
        for endpoint in self.endpoints:
            if endpoint.listener == listener:
                return endpoint.host, endpoint.port
        return None if self.endpoints else (self.host, self.port)


@dataclasses.dataclass(frozen=True)
class PartitionAssignment:
    """A partition's replicas and, while it moves to new brokers (KIP-455), the replicas
    being added and removed. During a move ``replicas`` is the union of the target and
    the original replicas, target first (Kafka's order), so brokers being added follow
    the leader like any replica until the controller shrinks the set to the target."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)

    def reassigned_to(self, target: Sequence[int]) -> PartitionAssignment:
        """The move from the original replicas to ``target`` (Kafka's ``reassignTo``): a
        partition already moving keeps its original replicas, so a new target, or the
        original one (a cancellation), is measured from them."""
        original = self.original
        replicas = tuple(dict.fromkeys((*target, *original)))
        return PartitionAssignment(replicas, tuple(r for r in replicas if r not in original),
                                   tuple(r for r in replicas if r not in target))


@dataclasses.dataclass(frozen=True)
class TopicInfo:
    """A topic: its partition count and per-topic config overrides (Kafka topic names,
    raw string values as given by the client)."""

    name: str
    partitions: int
    replication_factor: int = 1
    configs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    topic_id: str = ""  # 32 hex digits (a UUID), stable for the topic's lifetime
    # Partition id -> replica broker ids, the preferred leader first. Empty for the
    # embedded store, where the single broker holds every partition.
    assignment: Mapping[int, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    # Partitions being moved (KIP-455) -> the replicas being added / removed; their
    # ``assignment`` holds both (see PartitionAssignment).
    adding_replicas: Mapping[int, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    removing_replicas: Mapping[int, tuple[int, ...]] = dataclasses.field(default_factory=dict)

    def replicas(self, partition: int, default: int) -> tuple[int, ...]:
        """The replicas of ``partition``; ``(default,)`` when there is no assignment."""
        return tuple(self.assignment.get(partition, (default,)))

    def partition_assignment(self, partition: int, default: int) -> PartitionAssignment:
        """The replicas of ``partition`` with the move under way, if any."""
        return PartitionAssignment(self.replicas(partition, default),
                                   tuple(self.adding_replicas.get(partition, ())),
                                   tuple(self.removing_replicas.get(partition, ())))

    def reassigning_partitions(self) -> list[int]:
        return sorted(set(self.adding_replicas) | set(self.removing_replicas))


NO_LEADER = -1


@dataclasses.dataclass(frozen=True)
class PartitionState:
    """Leader, leader epoch and in-sync replicas of one partition (Kafka's LeaderAndIsr,
    the JSON of ``/brokers/topics/<t>/partitions/<p>/state``). ``version`` is the znode
    version it was read with (-1: not from ZooKeeper), for conditional updates; ``zxid``
    the ZooKeeper transaction that last wrote it (-1: unknown), which tells whether it
    was written before or after a broker's current registration."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int = 0
    version: int = -1
    zxid: int = -1


class TopicExistsError(Exception):
    """create_topic for a name that is taken."""


class UnknownTopicError(Exception):
    """A change to a topic that does not exist."""


# Config entity types: Kafka's names, ``/config/<type>/<name>`` in ZooKeeper. Dynamic
# broker settings (names: a broker id, or "<default>"), and client-metrics subscriptions
# (KIP-714; names: the subscription's).
BROKER_ENTITIES = "brokers"
CLIENT_METRICS_ENTITIES = "client-metrics"
GROUP_ENTITIES = "groups"  # share groups' configs (GROUP resources, KIP-932)
ENTITY_TYPES = (BROKER_ENTITIES, CLIENT_METRICS_ENTITIES, GROUP_ENTITIES)
DEFAULT_ENTITY = "<default>"  # Kafka's name of an entity type's default


class MetadataWriteError(KafkaError):
    """A metadata change the store could not make durable: none of it was applied, in
    memory or in the store, and the store logged why. ``code`` answers the request, as
    Kafka answers a metadata write that failed: KAFKA_STORAGE_ERROR when the local file
    could not be written, REQUEST_TIMED_OUT when ZooKeeper could not be reached in time
    (the change may still be applied once it can), UNKNOWN_SERVER_ERROR when ZooKeeper
    refused it. InitProducerId answers COORDINATOR_LOAD_IN_PROGRESS instead, as Kafka's
    brokers do while they have no block of producer ids to hand out (clients retry it)."""


# A store listener: ``listener(kind, key)`` with kind "topic" (key: the name),
# "partition" (key: (topic, partition)), "broker", "controller", "session", "quota"
# (key: the quota entity), "broker_config" (key: a broker id as text, or "<default>") or
# "entity_config" (key: (entity type, name), for the other config entity types).
StoreListener = Callable[[str, Any], None]

log = logging.getLogger("pykfk.cluster")


def notify_listeners(listeners: list[StoreListener], kind: str, key: Any) -> None:
    """Tell every listener of a change; one failing listener does not stop the others
    (the copy lets a listener remove itself)."""
    for listener in list(listeners):
        try:
            listener(kind, key)
        except Exception:
            log.exception("metadata listener failed on %s %r", kind, key)


class StoreEvents(Protocol):
    """Change notifications, common to every concern of the store."""

    def add_listener(self, listener: StoreListener) -> None: ...

    async def wait_for(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``condition()`` holds after some change, or the timeout."""
        ...


class TopicStore(Protocol):
    """Topics and partitions: topic names, partition counts, replica assignments and
    per-topic configs; each partition's leader, leader epoch and ISR. Listeners hear
    "topic" (key: the name), "partition" (key: (topic, partition)) and "delete_topic"."""

    def topics(self) -> Mapping[str, TopicInfo]: ...

    def get_topic(self, name: str) -> TopicInfo | None: ...

    def delete_requests(self) -> set[str]:
        """Topics marked for deletion and not deleted yet."""
        ...

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        """Leader and ISR of a partition; None when unknown (no such partition, or the
        controller has not elected a leader yet)."""
        ...

    def topic_states(self, topic: str, start: int, end: int) -> list[PartitionState | None]:
        """``partition_state(topic, p)`` for each p in ``range(start, end)``, as one list:
        what a Metadata of a whole topic reads, in one call rather than one per partition."""
        ...

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str],
        *, assignment: Mapping[int, Sequence[int]] | None = None,
    ) -> TopicInfo:
        """``assignment``: each partition's replicas, the first the preferred leader
        (CreateTopics' explicit assignment); None: the store places them."""
        ...

    async def delete_topic(self, name: str) -> None: ...

    async def create_partitions(self, name: str, total: int) -> TopicInfo: ...

    async def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo: ...

    async def update_isr(
        self, topic: str, partition: int, state: PartitionState, expected_version: int
    ) -> PartitionState:
        """A leader's ISR change, conditional on the state version it last saw."""
        ...

    async def read_state(self, topic: str, partition: int) -> PartitionState | None: ...


class MembershipStore(Protocol):
    """Broker membership: the cluster id, the registered brokers, the controller, this
    broker's registration and its controlled shutdown. Listeners hear "broker" (key: its
    id), "controller", "controlled_shutdown" and "session"."""

    # The store transaction that registered this broker (ZooKeeper's czxid; -1 without
    # one): partition states written before it predate this run of the broker.
    registration_zxid: int

    @property
    def cluster_id(self) -> str: ...

    @property
    def broker(self) -> BrokerInfo:
        """This broker, as registered."""
        ...

    def brokers(self) -> list[BrokerInfo]: ...

    def get_broker(self, broker_id: int) -> BrokerInfo | None: ...

    def live_broker_ids(self) -> set[int]: ...

    def controller_id(self) -> int: ...

    def shutdown_requests(self) -> dict[int, bytes]:
        """Broker id -> controlled-shutdown request state, for brokers shutting down."""
        ...

    async def register_broker(self, broker: BrokerInfo | None = None, *, stale_wait_s: float | None = None) -> None:
        """Announce this broker (with its bound address) to the cluster."""
        ...

    def registration_lost(self) -> bool: ...

    async def request_controlled_shutdown(self) -> None: ...


class ConfigStore(Protocol):
    """Entity configs, Kafka's ``/config/<entity type>/<name>``: the settings of each
    entity of ``ENTITY_TYPES`` (dynamic broker settings, client-metrics subscriptions),
    and client quotas. Listeners hear "broker_config" (key: a broker id as text, or
    "<default>"), "entity_config" (key: (entity type, name)) for the other types, and
    "quota" (key: the quota entity)."""

    def entity_configs(self, entity_type: str) -> Mapping[str, Mapping[str, str]]:
        """Name -> settings of every entity of ``entity_type`` that has some (from
        memory). A snapshot: a change replaces it, never alters it in place."""
        ...

    async def alter_entity_configs(self, entity_type: str, name: str, configs: Mapping[str, str]) -> None:
        """Replace one entity's settings (none: it has no settings any more)."""
        ...

    def broker_configs(self, entity: str) -> Mapping[str, str]:
        """Dynamic broker settings of ``entity``: a broker id as text, or "<default>"
        for the cluster-wide default (from memory)."""
        ...

    async def alter_broker_configs(self, entity: str, configs: Mapping[str, str]) -> None:
        """Replace ``entity``'s dynamic broker settings; listeners hear "broker_config"."""
        ...

    # Bumped by every client quota change this store hears of.
    quota_version: int

    def client_quotas(self) -> Mapping[Entity, Mapping[str, float]]:
        """Quota settings by entity (from memory)."""
        ...

    async def alter_client_quotas(self, entity: Entity, updates: Mapping[str, float], removals: list[str]) -> None: ...


class SecurityStore(Protocol):
    """ACLs and credentials: ACL bindings, SCRAM credentials, delegation tokens."""

    # Bumped by every ACL change this store hears of (the authorizer re-indexes then).
    acl_version: int

    def acls(self) -> list[AclBinding]:
        """Every ACL binding of the cluster (from memory)."""
        ...

    async def create_acls(self, bindings: list[AclBinding]) -> None: ...

    async def delete_acls(self, bindings: list[AclBinding]) -> None: ...

    async def scram_credentials(self, users: list[str] | None = None) -> dict[str, dict[str, str]]:
        """user -> {SCRAM mechanism: credential text} for ``users`` (every user with a
        credential when None); users without credentials are left out."""
        ...

    async def alter_scram_credentials(self, user: str, upserts: Mapping[str, str], deletions: list[str]) -> None:
        """Set and remove one user's credentials (mechanism -> credential text)."""
        ...

    async def delegation_tokens(self, token_ids: list[str] | None = None) -> dict[str, TokenInfo]:
        """Token id -> delegation token for ``token_ids`` (every stored token when None);
        unknown ids are left out. Expired tokens are there until removed."""
        ...

    def delegation_token_end(self, token_id: str) -> int | None:
        """When the token stops working (ms since the epoch), from memory; None when it
        is not (any more) stored. Connections logged in with it are closed then."""
        ...

    async def store_delegation_token(self, token: TokenInfo) -> None:
        """Create or replace a token."""
        ...

    async def remove_delegation_tokens(self, token_ids: list[str]) -> None: ...


class ProducerIdStore(Protocol):
    """Producer ids, handed out cluster-wide."""

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before, even across restarts: its block is
        durable before any id of it is used. MetadataWriteError when a new block could
        not be saved (no id is handed out then)."""
        ...


class ClusterView(TopicStore, MembershipStore, StoreEvents, Protocol):
    """Topics and partitions with the brokers that hold them: what the replica manager,
    the controller and the Metadata answers read."""


@runtime_checkable
class MetadataStore(ClusterView, ConfigStore, SecurityStore, ProducerIdStore, Protocol):
    """The whole store: every concern above, and ``close``. A caller that needs one
    concern takes that protocol; the broker holds the whole store.

    A change is durable in the store before memory shows it; a change that cannot be
    made durable raises MetadataWriteError and leaves memory as it was."""

    def close(self) -> None: ...
