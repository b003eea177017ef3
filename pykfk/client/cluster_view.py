"""The client's view of the cluster: brokers, topics, partition leaders.

Brokers come from a bootstrap list, or, as in the seeds, from ZooKeeper: the ephemeral
``/brokers/ids/<id>`` znodes (JSON with ``host``/``port``, or ``endpoints`` such as
``PLAINTEXT://host:port``) and the topic znodes under ``/brokers/topics``, both watched so
brokers and topics that come and go are seen without polling. Partition leaders are asked
of the brokers (Metadata), which know them first-hand.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from pykfk.client.connection import BrokerConnection, ConnectionError_, parse_bootstrap
from pykfk.errors import ErrorCode, KafkaError

log = logging.getLogger("pykfk.client")

METADATA = 3

# Errors after which a topic's partition list or leaders may have changed.
REFRESH_ERRORS = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
    }
)


class TopicInfo:
    """Partitions of one topic and the broker leading each (-1: none right now)."""

    __slots__ = ("available", "leaders", "name", "partitions")

    def __init__(self, name: str, leaders: dict[int, int]):
        self.name = name
        self.leaders = leaders
        self.partitions = sorted(leaders)
        self.available = [p for p in self.partitions if leaders[p] >= 0]


class ClusterMetadata:
    """Metadata cache shared by one client's threads.

    ``bootstrap_servers``: ``"host:port,host:port"`` or a list. ``zk_connect``: a ZooKeeper
    connect string (``host:port[,host:port][/chroot]``) used instead to find brokers.
    Connections made by ``connection(node_id)`` are shared control connections; threads
    that keep requests in flight open their own with ``open_connection``.
    """

    def __init__(
        self,
        bootstrap_servers: str | list[str] | None = None,
        *,
        zk_connect: str | None = None,
        client_id: str = "pykfk",
        request_timeout_ms: int = 30000,
        connect_timeout_ms: int = 10000,
        metadata_max_age_ms: int = 300000,
        zk_session_timeout_ms: int = 10000,
    ):
        if not bootstrap_servers and not zk_connect:
            raise ValueError("bootstrap_servers or zk_connect is required")
        self.client_id = client_id
        self.request_timeout = request_timeout_ms / 1000
        self.connect_timeout = connect_timeout_ms / 1000
        self.metadata_max_age = metadata_max_age_ms / 1000
        self._bootstrap = parse_bootstrap(bootstrap_servers) if bootstrap_servers else []
        self._lock = threading.RLock()
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, TopicInfo] = {}
        self._known_topics: set[str] | None = None  # from ZooKeeper when watched
        self._connections: dict[int, BrokerConnection] = {}
        self._bootstrap_conn: BrokerConnection | None = None
        self.last_refresh = 0.0
        self._listeners: list[Callable[[str], None]] = []
        self.zk: Any = None
        self._zk_owned = False
        if zk_connect:
            self._start_zookeeper(zk_connect, zk_session_timeout_ms / 1000)

    # ------------------------------------------------------------- ZooKeeper

    def _start_zookeeper(self, zk_connect: str, session_timeout: float) -> None:
        from kazoo.client import KazooClient

        self.zk = KazooClient(hosts=zk_connect, timeout=session_timeout)
        self.zk.start(timeout=self.connect_timeout)
        self._zk_owned = True
        self.zk.ensure_path("/brokers/ids")
        self.zk.ensure_path("/brokers/topics")
        self.zk.ChildrenWatch("/brokers/ids", self._on_broker_ids)
        self.zk.ChildrenWatch("/brokers/topics", self._on_topics)

    def _on_broker_ids(self, children: list[str]) -> None:
        brokers = {}
        for child in children:
            try:
                data, _ = self.zk.get(f"/brokers/ids/{child}")
                brokers[int(child)] = broker_address(json.loads(data))
            except Exception as exc:  # noqa: BLE001 - a broker that vanished meanwhile, or bad JSON
                log.debug("skipping /brokers/ids/%s: %s", child, exc)
        with self._lock:
            gone = set(self.brokers) - set(brokers)
            self.brokers = brokers
            self._bootstrap = list(brokers.values())
            for node_id in gone:
                conn = self._connections.pop(node_id, None)
                if conn is not None:
                    conn.close()
        self._notify("brokers")

    def _on_topics(self, children: list[str]) -> None:
        with self._lock:
            self._known_topics = set(children)
        self._notify("topics")

    def add_listener(self, callback: Callable[[str], None]) -> None:
        """``callback(kind)`` is called (kind "brokers" or "topics") when ZooKeeper reports a
        change; from a kazoo thread, so it must not block."""
        self._listeners.append(callback)

    def _notify(self, kind: str) -> None:
        for callback in list(self._listeners):
            try:
                callback(kind)
            except Exception:  # a listener must not break the watch
                log.exception("metadata listener failed")

    # ------------------------------------------------------------ connections

    def _open(self, host: str, port: int, node_id: int = -1) -> BrokerConnection:
        return BrokerConnection(
            host,
            port,
            client_id=self.client_id,
            connect_timeout=self.connect_timeout,
            request_timeout=self.request_timeout,
            node_id=node_id,
        ).connect()

    def any_connection(self) -> BrokerConnection:
        """A connected control connection to some broker (bootstrap or known)."""
        with self._lock:
            for conn in self._connections.values():
                if conn.connected:
                    return conn
            if self._bootstrap_conn is not None and self._bootstrap_conn.connected:
                return self._bootstrap_conn
            candidates = list(self.brokers.items()) or [(-1, a) for a in self._bootstrap]
        if not candidates:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, "no broker known")
        random.shuffle(candidates)
        errors = []
        for node_id, (host, port) in candidates:
            try:
                conn = self._open(host, port, node_id)
            except KafkaError as exc:
                errors.append(str(exc))
                continue
            with self._lock:
                if node_id >= 0:
                    self._connections[node_id] = conn
                else:
                    self._bootstrap_conn = conn
            return conn
        raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, "; ".join(errors))

    def connection(self, node_id: int) -> BrokerConnection:
        """The shared control connection to ``node_id``."""
        with self._lock:
            conn = self._connections.get(node_id)
            if conn is not None and conn.connected:
                return conn
        conn = self.open_connection(node_id)
        with self._lock:
            old = self._connections.get(node_id)
            if old is not None and old.connected:
                conn.close()
                return old
            self._connections[node_id] = conn
        return conn

    def open_connection(self, node_id: int) -> BrokerConnection:
        """A new connection to ``node_id`` for a caller that owns it."""
        address = self.brokers.get(node_id)
        if address is None:
            self.refresh()
            address = self.brokers.get(node_id)
            if address is None:
                raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {node_id} unknown")
        return self._open(address[0], address[1], node_id)

    # --------------------------------------------------------------- metadata

    def request(self, api_key: int, body: Any, **kwargs: Any) -> Any:
        """A request to any broker, retried once on another connection if the first fails."""
        for attempt in range(2):
            conn = self.any_connection()
            try:
                return conn.request(api_key, body, **kwargs)
            except ConnectionError_:
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def refresh(
        self, topics: Iterable[str] | None = (), *, allow_auto_create: bool = False
    ) -> None:
        """Refresh brokers and the given topics (None: every topic)."""
        names = None if topics is None else sorted(set(topics) | set(self.topics))
        body = {
            "topics": None if names is None else [{"name": n} for n in names],
            "allow_auto_topic_creation": allow_auto_create,
        }
        response = self.request(METADATA, body)
        with self._lock:
            if not self.zk or not self.brokers:
                self.brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
            for t in response.topics:
                if t.error_code == ErrorCode.NONE:
                    leaders = {
                        p.partition_index: (p.leader_id if p.error_code in (0, 9) else -1)
                        for p in t.partitions
                    }
                    self.topics[t.name] = TopicInfo(t.name, leaders)
                elif t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    self.topics.pop(t.name, None)
            if names is None:
                present = {t.name for t in response.topics}
                for name in list(self.topics):
                    if name not in present:
                        del self.topics[name]
            self.last_refresh = time.monotonic()

    def topic(
        self, name: str, *, auto_create: bool = False, timeout: float | None = None
    ) -> TopicInfo:
        """Partitions and leaders of ``name``, fetched when unknown (auto-creating if asked);
        UNKNOWN_TOPIC_OR_PARTITION when it does not appear within ``timeout``."""
        info = self.topics.get(name)
        if info is not None and time.monotonic() - self.last_refresh < self.metadata_max_age:
            return info
        deadline = time.monotonic() + (self.request_timeout if timeout is None else timeout)
        delay = 0.05
        while True:
            self.refresh([name], allow_auto_create=auto_create)
            info = self.topics.get(name)
            if info is not None and info.partitions:
                return info
            if time.monotonic() + delay > deadline:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name)
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def leader(self, topic: str, partition: int) -> int:
        info = self.topic(topic)
        leader = info.leaders.get(partition)
        if leader is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}[{partition}]")
        if leader < 0:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}[{partition}]")
        return leader

    def list_topics(self) -> list[str]:
        """Every topic name (from ZooKeeper's watched list when there is one)."""
        with self._lock:
            if self._known_topics is not None:
                return sorted(self._known_topics)
        self.refresh(None)
        return sorted(self.topics)

    def close(self) -> None:
        with self._lock:
            conns = list(self._connections.values())
            self._connections.clear()
            if self._bootstrap_conn is not None:
                conns.append(self._bootstrap_conn)
                self._bootstrap_conn = None
        for conn in conns:
            conn.close()
        if self.zk is not None and self._zk_owned:
            self._listeners.clear()
            with contextlib.suppress(Exception):  # already lost: nothing left to release
                self.zk.stop()
                self.zk.close()
            self.zk = None


def broker_address(registration: dict[str, Any]) -> tuple[str, int]:
    """(host, port) from a ``/brokers/ids/<id>`` registration: Kafka 0.8 wrote host/port,
    later versions also (or only) a list of listener endpoints."""
    host, port = registration.get("host"), registration.get("port")
    if host and port and int(port) > 0:
        return str(host), int(port)
    for endpoint in registration.get("endpoints", []):
        _, _, rest = endpoint.partition("://")
        h, _, p = rest.rpartition(":")
        if p:
            return h.strip("[]") or "127.0.0.1", int(p)
    raise ValueError(f"no address in broker registration {registration!r}")
