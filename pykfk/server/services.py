"""What request handlers may use of the broker (Redpanda's ``request_context`` idea):
one Protocol, so a handler's reach into the broker is declared, typed and the same on a
standalone broker and in a cluster.

``pykfk.broker.Broker`` implements it; a handler never sees which metadata store runs,
whether partitions have followers, or how logs are laid out on disk.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pykfk.clock import Clock
    from pykfk.cluster.metadata import MetadataStore
    from pykfk.cluster.node import ClusterNode
    from pykfk.cluster.replica import ReplicaManager
    from pykfk.cluster.topics import TopicManager
    from pykfk.config import BrokerConfig
    from pykfk.group import GroupCoordinator
    from pykfk.metrics.stats import RequestStats
    from pykfk.security.acl import Authorizer
    from pykfk.security.quotas import QuotaManager
    from pykfk.txn import TransactionCoordinator


class BrokerServices(Protocol):
    """The broker as request handlers see it. Loop-affine."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def broker_id(self) -> int: ...

    @property
    def clock(self) -> Clock:
        """Every read of time (a ManualClock in tests)."""
        ...

    @property
    def metadata(self) -> MetadataStore:
        """Topics, partition states, brokers and the controller (read from memory)."""
        ...

    @property
    def replica_manager(self) -> ReplicaManager:
        """The one path of records: appends, reads, offsets, fetch purgatories."""
        ...

    @property
    def cluster(self) -> ClusterNode:
        """Partition reassignments and leader elections (the controller's work)."""
        ...

    @property
    def topics(self) -> TopicManager:
        """Topic creation, deletion and growth with Kafka's checks."""
        ...

    @property
    def group_coordinator(self) -> GroupCoordinator: ...

    @property
    def transaction_coordinator(self) -> TransactionCoordinator | None:
        """Transactional ids and their transactions (None only while starting)."""
        ...

    @property
    def quotas(self) -> QuotaManager:
        """Client byte-rate quotas (no cost while none is set)."""
        ...

    @property
    def authorizer(self) -> Authorizer | None:
        """The ACL authorizer; None when ``authorizer.class.name`` is unset (everything
        is allowed, as on a Kafka broker without one)."""
        ...

    @property
    def request_stats(self) -> RequestStats:
        """Requests by api and version, their times and throttles (the broker metrics)."""
        ...

    @property
    def stopping(self) -> bool:
        """True once shutdown began: parked requests answer with what they have."""
        ...

    async def ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` on first use and wait until the coordinator
        loaded the partitions this broker leads."""
        ...

    def coordinator_node(self, offsets_partition: int, listener: str) -> tuple[int, str, int] | None:
        """(node id, host, port) of the leader of a ``__consumer_offsets`` partition, on
        the client's ``listener``."""
        ...

    async def allocate_producer_id(self) -> int: ...

    async def ensure_transaction_topic(self) -> None:
        """Create ``__transaction_state`` on first use and wait until the transaction
        coordinator loaded the partitions this broker leads."""
        ...

    async def verify_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                 partitions: list[tuple[str, int]], add: bool = False) -> dict[tuple[str, int], int]:
        """Whether ``partitions`` are in the producer's open transaction, by its
        coordinator's word (this broker's or another's): an error code per partition.
        ``add``: the coordinator adds them instead (transaction version 2)."""
        ...

    def transaction_coordinator_node(self, partition: int, listener: str) -> tuple[int, str, int] | None:
        """(node id, host, port) of the leader of a ``__transaction_state`` partition."""
        ...
