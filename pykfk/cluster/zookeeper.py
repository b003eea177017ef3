"""ZooKeeper metadata store: the cluster's state in Kafka's own znodes, through kazoo.

Znodes (JSON as Kafka writes them, so Kafka's tools can read a pykfk cluster)::

    /cluster/id                                    {"version":"1","id":"<22 chars>"}
    /brokers/ids/<id>                   ephemeral  {"host","port","endpoints","rack",...}
    /brokers/topics/<topic>                        {"version":2,"partitions":{"0":[1,2,3]},...}
                                                   with "adding_replicas"/"removing_replicas" of
                                                   partitions being moved (KIP-455)
    /brokers/topics/<topic>/partitions/<p>/state   {"leader","leader_epoch","isr","controller_epoch"}
    /config/topics/<topic>                         {"version":1,"config":{...}}
    /config/users/<user, URL-encoded>              {"version":1,"config":{"SCRAM-SHA-256":"salt=..."}}
    /config/brokers/<id> and /config/brokers/<default>   {"version":1,"config":{"log.retention.ms":"..."}}
    /config/client-metrics/<name>                  {"version":1,"config":{"metrics":"...","interval.ms":"..."}}
    /config/changes/config_change_<seq>            {"version":2,"entity_path":"users/<user>"}
    /controller                         ephemeral  {"version":1,"brokerid":N,"timestamp":"..."}
    /controller_epoch                              N (bumped with a conditional set)
    /admin/delete_topics/<topic>                   deletion requests (processed by the controller)
    /admin/controlled_shutdown/<id>     ephemeral  pykfk: a broker asking the controller to move
                                                   its leaderships away before it stops
    /latest_producer_id_block                      {"version":1,"broker":N,"block_start":"0","block_end":"999"}
    /delegation_token/tokens/<token id>            {"version":3,"owner":"User%3Aalice",...} (Kafka's token JSON)
    /delegation_token/token_changes/token_change_<seq>   <token id> (a token stored or removed)

Threads: kazoo runs its own threads. Three ``TreeCache`` recipes mirror ``/brokers``,
``/config/topics`` and ``/admin``; their events, the ``/controller`` watch and session
state changes are handed to the event loop with ``call_soon_threadsafe`` and applied
there, in arrival order, to plain dicts. Reads (``brokers()``, ``partition_state()``) are
served from those dicts and never wait; writes are coroutines over kazoo's async API.
Listeners (``add_listener``) are called on the loop with ``(kind, key)`` after each change.

ZooKeeper versions order the changes of one znode: a state this broker wrote itself is
applied at once with the version the write returned, and a cache event carrying an older
version is ignored, so the view never goes backwards.

The view changes only once ZooKeeper has a change (from the write's answer or the
caches), so a write that fails leaves it as it was. The changes a request asks for
(topics, configs, ACLs, users, quotas, producer id blocks) raise MetadataWriteError when
ZooKeeper fails them: REQUEST_TIMED_OUT when it cannot be reached in time (kazoo may
still send the change once it reconnects, as a Kafka client's timed-out request may
still be applied), UNKNOWN_SERVER_ERROR when it refuses them (what Kafka's ZooKeeper
brokers answer for an error of ZooKeeper's).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import logging
import time
import urllib.parse
import uuid
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any, Concatenate, NamedTuple, ParamSpec, TypeVar

from pykfk.cluster.assignment import AssignmentError, assign_replicas
from pykfk.cluster.metadata import (
    BROKER_ENTITIES,
    DEFAULT_ENTITY,
    ENTITY_TYPES,
    NO_LEADER,
    BrokerInfo,
    Endpoint,
    MetadataWriteError,
    PartitionAssignment,
    PartitionState,
    TopicExistsError,
    TopicInfo,
    UnknownTopicError,
    notify_listeners,
)
from pykfk.errors import ErrorCode
from pykfk.security.acl import (
    OPERATION_NAMES,
    PERMISSION_NAMES,
    RESOURCE_NAMES,
    AclBinding,
    PatternType,
    ResourceType,
)
from pykfk.security.quotas import CLIENT_ID, QUOTA_KEYS, USER, Entity
from pykfk.security.tokens import TokenError, TokenInfo, plausible_token_id

log = logging.getLogger("pykfk.cluster")

CLUSTER_ID_PATH = "/cluster/id"
BROKER_IDS_PATH = "/brokers/ids"
TOPICS_PATH = "/brokers/topics"
CONFIG_TOPICS_PATH = "/config/topics"
CONFIG_USERS_PATH = "/config/users"
CONFIG_CLIENTS_PATH = "/config/clients"
# Kafka's ZooKeeper authorizer layout: LITERAL bindings under /kafka-acl/<Type>/<name>,
# PREFIXED ones under /kafka-acl-extended/prefixed/<Type>/<name>, each znode
# {"version":1,"acls":[{"principal","permissionType","operation","host"}]}; changes are
# announced under the two change paths.
ACL_PATH = "/kafka-acl"
ACL_EXTENDED_PATH = "/kafka-acl-extended"
ACL_CHANGES_PATH = "/kafka-acl-changes"
ACL_EXTENDED_CHANGES_PATH = "/kafka-acl-extended-changes"
CONFIG_CHANGES_PATH = "/config/changes"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
DELETE_TOPICS_PATH = "/admin/delete_topics"
CONTROLLED_SHUTDOWN_PATH = "/admin/controlled_shutdown"
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
TOKENS_PATH = "/delegation_token/tokens"
TOKEN_CHANGES_PATH = "/delegation_token/token_changes"
PERSISTENT_PATHS = (
    BROKER_IDS_PATH,
    TOPICS_PATH,
    CONFIG_TOPICS_PATH,
    DELETE_TOPICS_PATH,
    CONTROLLED_SHUTDOWN_PATH,
    "/cluster",
    ACL_PATH,
    f"{ACL_EXTENDED_PATH}/prefixed",
    CONFIG_USERS_PATH,
    CONFIG_CLIENTS_PATH,
    *(f"/config/{kind}" for kind in ENTITY_TYPES),
    TOKENS_PATH,
    TOKEN_CHANGES_PATH,
)
PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdManager block size

Listener = Callable[[str, Any], None]


class ZooKeeperError(Exception):
    """ZooKeeper could not be reached or refused a change this broker needs."""


class BrokerIdInUseError(ZooKeeperError):
    """Another live broker is registered under this broker.id."""


@contextlib.contextmanager
def _metadata_call(what: str) -> Iterator[None]:
    """ZooKeeper's failure of a call a request made, as the Kafka error that answers it
    (MetadataWriteError), logged in one line."""
    from kazoo.exceptions import (
        ConnectionClosedError,
        ConnectionDropped,
        ConnectionLoss,
        KazooException,
        OperationTimeoutError,
        SessionExpiredError,
    )

    try:
        yield
    except (ConnectionLoss, ConnectionDropped, SessionExpiredError, ConnectionClosedError, OperationTimeoutError,
            asyncio.TimeoutError) as exc:
        log.warning("%s failed, nothing changed: ZooKeeper unreachable (%s)", what, type(exc).__name__)
        raise MetadataWriteError(ErrorCode.REQUEST_TIMED_OUT,
                                 f"ZooKeeper could not be reached to {what} ({type(exc).__name__})") from None
    except (KazooException, ZooKeeperError) as exc:
        log.warning("%s failed, nothing changed: ZooKeeper refused it (%s)", what, type(exc).__name__)
        raise MetadataWriteError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                 f"ZooKeeper refused to {what} ({type(exc).__name__})") from None


_P = ParamSpec("_P")
_R = TypeVar("_R")
_Method = Callable[Concatenate[Any, _P], Coroutine[Any, Any, _R]]


def _metadata_change(what: str) -> Callable[[_Method[_P, _R]], _Method[_P, _R]]:
    """A store method a request calls: ZooKeeper's failures of it become the Kafka error
    that answers the request. ``what`` names the change, formatted with the arguments."""

    def wrap(method: _Method[_P, _R]) -> _Method[_P, _R]:
        @functools.wraps(method)
        async def call(self: Any, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            with _metadata_call(what.format(*args)):
                return await method(self, *args, **kwargs)

        return call

    return wrap


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}/state"


def encode_state(state: PartitionState) -> bytes:
    return json.dumps(
        {
            "controller_epoch": state.controller_epoch,
            "leader": state.leader,
            "version": 1,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
        }
    ).encode()


def decode_state(data: bytes, version: int, zxid: int = -1) -> PartitionState:
    doc = json.loads(data)
    return PartitionState(
        int(doc["leader"]),
        int(doc["leader_epoch"]),
        tuple(int(b) for b in doc["isr"]),
        int(doc.get("controller_epoch", 0)),
        version,
        zxid,
    )


def _broker_json(info: BrokerInfo) -> bytes:
    endpoints = info.endpoints or (Endpoint("PLAINTEXT", "PLAINTEXT", info.host, info.port),)
    doc: dict[str, Any] = {
        "listener_security_protocol_map": {e.listener: e.security_protocol for e in endpoints},
        "endpoints": [f"{e.listener}://{_bracketed(e.host)}:{e.port}" for e in endpoints],
        "jmx_port": -1,
        "features": {},
        "host": info.host,
        "timestamp": str(int(time.time() * 1000)),
        "port": info.port,
        "version": 5,
    }
    if info.rack:
        doc["rack"] = info.rack
    return json.dumps(doc).encode()


_RESOURCE_TYPES = {name: rtype for rtype, name in RESOURCE_NAMES.items()}
_OPERATIONS = {name: op for op, name in OPERATION_NAMES.items()}
_PERMISSIONS = {name: perm for perm, name in PERMISSION_NAMES.items()}


def _parse_acl_json(resource_type: ResourceType, pattern: PatternType, name: str, data: bytes) -> list[AclBinding]:
    bindings = []
    for entry in json.loads(data or b"{}").get("acls", ()):
        operation, permission = _OPERATIONS.get(entry.get("operation")), _PERMISSIONS.get(entry.get("permissionType"))
        if operation is None or permission is None:
            continue  # a kind this broker does not know: never grants anything
        bindings.append(AclBinding(resource_type, name, pattern, str(entry["principal"]), str(entry["host"]),
                                   operation, permission))
    return bindings


def _acl_json(bindings: list[AclBinding]) -> bytes:
    return json.dumps({"version": 1, "acls": [
        {"principal": b.principal, "permissionType": PERMISSION_NAMES[b.permission],
         "operation": OPERATION_NAMES[b.operation], "host": b.host} for b in bindings]}).encode()


def _with_bindings(added: list[AclBinding], current: list[AclBinding]) -> list[AclBinding]:
    return current + [b for b in added if b not in current]


def _without_bindings(removed: list[AclBinding], current: list[AclBinding]) -> list[AclBinding]:
    return [b for b in current if b not in removed]


def _by_resource(bindings: list[AclBinding]) -> dict[tuple[ResourceType, PatternType, str], list[AclBinding]]:
    groups: dict[tuple[ResourceType, PatternType, str], list[AclBinding]] = {}
    for binding in bindings:
        groups.setdefault((binding.resource_type, binding.pattern_type, binding.name), []).append(binding)
    return groups


def _entity_name(text: str) -> str | None:
    return None if text == DEFAULT_ENTITY else urllib.parse.unquote(text)


def _quota_entity(parts: list[str]) -> Entity | None:
    """The quota entity of a /config/users or /config/clients znode, else None."""
    if parts[:2] == ["config", "users"] and len(parts) == 3:
        return ((USER, _entity_name(parts[2])),)
    if parts[:2] == ["config", "users"] and len(parts) == 5 and parts[3] == "clients":
        return ((CLIENT_ID, _entity_name(parts[4])), (USER, _entity_name(parts[2])))
    if parts[:2] == ["config", "clients"] and len(parts) == 3:
        return ((CLIENT_ID, _entity_name(parts[2])),)
    return None


def _quota_paths(entity: Entity) -> tuple[str, str]:
    """(znode, change-notice entity path) of a quota entity."""
    names = dict(entity)

    def part(kind: str) -> str:
        name = names[kind]
        return DEFAULT_ENTITY if name is None else _sanitized(name)

    if USER in names and CLIENT_ID in names:
        relative = f"users/{part(USER)}/clients/{part(CLIENT_ID)}"
    elif USER in names:
        relative = f"users/{part(USER)}"
    else:
        relative = f"clients/{part(CLIENT_ID)}"
    return f"/config/{relative}", relative


def _quota_text(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def _sanitized(user: str) -> str:
    """A user name as a znode name, URL-encoded like Kafka's Sanitizer."""
    return urllib.parse.quote(user, safe="").replace("~", "%7E")


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _parse_broker(broker_id: int, data: bytes) -> BrokerInfo:
    doc = json.loads(data)
    protocols = doc.get("listener_security_protocol_map") or {}
    endpoints = []
    for text in doc.get("endpoints", ()):
        name, _, address = str(text).partition("://")
        host, sep, port_text = address.rpartition(":")
        if sep and port_text.isdigit():
            endpoints.append(Endpoint(name, str(protocols.get(name, name)), host.strip("[]"), int(port_text)))
    first = next((e for e in endpoints if e.listener == "PLAINTEXT"), endpoints[0] if endpoints else None)
    host, port = (first.host, first.port) if first is not None else (str(doc.get("host")), int(doc.get("port", -1)))
    return BrokerInfo(broker_id, host, port, doc.get("rack"), tuple(endpoints))


def _topic_json(assignment: Mapping[int, Sequence[int]], topic_id: str,
                adding: Mapping[int, Sequence[int]] | None = None,
                removing: Mapping[int, Sequence[int]] | None = None) -> bytes:
    def by_partition(replicas: Mapping[int, Sequence[int]] | None) -> dict[str, list[int]]:
        return {str(p): list(r) for p, r in sorted((replicas or {}).items())}

    return json.dumps(
        {
            "version": 2,
            "partitions": by_partition(assignment),
            "adding_replicas": by_partition(adding),
            "removing_replicas": by_partition(removing),
            "topic_id": topic_id,
        }
    ).encode()


class _TopicZnode(NamedTuple):
    """What ``/brokers/topics/<t>`` holds, and the znode version it was read at."""

    assignment: dict[int, tuple[int, ...]]
    topic_id: str
    version: int
    adding: dict[int, tuple[int, ...]]
    removing: dict[int, tuple[int, ...]]

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)


def _parse_topic(data: bytes, version: int) -> _TopicZnode:
    doc = json.loads(data)

    def by_partition(key: str) -> dict[int, tuple[int, ...]]:
        return {int(p): tuple(int(b) for b in r) for p, r in (doc.get(key) or {}).items()}

    moving = {key: {p: r for p, r in by_partition(key).items() if r} for key in ("adding_replicas", "removing_replicas")}
    return _TopicZnode(by_partition("partitions"), str(doc.get("topic_id") or ""), version,
                       moving["adding_replicas"], moving["removing_replicas"])


class ZooKeeperMetadataStore:
    """MetadataStore of a broker in a ZooKeeper-coordinated cluster. Loop-affine except
    where noted; create it, ``await start()``, ``await register_broker()``, ``close()``."""

    def __init__(
        self,
        connect: str,
        broker: BrokerInfo,
        *,
        session_timeout_ms: int = 18000,
        connection_timeout_ms: int = 18000,
        request_timeout_s: float = 30.0,
    ):
        self.connect = connect
        self.broker = broker
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms
        self.request_timeout_s = request_timeout_s
        self.zk: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._cluster_id = ""
        self._brokers: dict[int, BrokerInfo] = {}
        # Broker id -> czxid of its registration: a new value means the broker restarted
        # (Kafka's broker epoch, KIP-380).
        self._broker_epochs: dict[int, int] = {}
        self.registration_zxid = -1
        self._controller_id = -1
        self._assignments: dict[str, _TopicZnode] = {}
        self._configs: dict[str, dict[str, str]] = {}
        self._topics: dict[str, TopicInfo] = {}
        self._states: dict[tuple[str, int], PartitionState] = {}
        self._delete_requests: set[str] = set()
        self._shutdown_requests: dict[int, bytes] = {}
        self._listeners: list[Listener] = []
        self._caches: list[Any] = []
        self._initialized: dict[str, asyncio.Event] = {}
        self._registered_session: int | None = None
        self._closed = False
        # (resource type, pattern type, name) -> the bindings of one ACL znode.
        self._acls: dict[tuple[ResourceType, PatternType, str], list[AclBinding]] = {}
        self.acl_version = 0
        self._quotas: dict[Entity, dict[str, float]] = {}
        self.quota_version = 0
        # Entity type -> name -> settings; each type's dict is replaced on a change.
        self._entity_configs: dict[str, dict[str, dict[str, str]]] = {}
        # Delegation token id -> when it stops working (ms), from the tokens' znodes.
        self._token_ends: dict[str, int] = {}

    # -- start and stop ---------------------------------------------------------------

    async def start(self) -> None:
        """Connect, create the persistent paths and the cluster id, fill the caches."""
        from kazoo.client import KazooClient

        self.loop = asyncio.get_running_loop()
        hosts, chroot = _split_chroot(self.connect)
        if chroot:
            await self.loop.run_in_executor(None, self._ensure_chroot, hosts, chroot)
        self.zk = KazooClient(
            hosts=self.connect,
            timeout=self.session_timeout_ms / 1000,
            connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 1.0},
            command_retry={"max_tries": 3, "delay": 0.1, "max_delay": 1.0},
            logger=logging.getLogger("pykfk.cluster.kazoo"),
        )
        self.zk.add_listener(self._on_session_state)
        try:
            await self.loop.run_in_executor(None, self._connect_and_prepare)
        except Exception as exc:
            with contextlib.suppress(Exception):
                self.zk.stop()
                self.zk.close()
            raise ZooKeeperError(f"cannot use ZooKeeper at {self.connect}: {exc or type(exc).__name__}") from exc
        from kazoo.recipe.cache import TreeCache

        for root in ("/brokers", CONFIG_TOPICS_PATH, "/admin", ACL_PATH, ACL_EXTENDED_PATH, CONFIG_USERS_PATH,
                     CONFIG_CLIENTS_PATH, *(f"/config/{kind}" for kind in ENTITY_TYPES), TOKENS_PATH):
            cache = TreeCache(self.zk, root)
            self._initialized[root] = asyncio.Event()
            cache.listen(lambda event, root=root: self._post(self._on_tree_event, root, event))
            cache.listen_fault(lambda exc: log.warning("ZooKeeper cache error: %r", exc))
            self._caches.append(cache)
        # TreeCache.start and DataWatch make a blocking round trip each: not on the loop.
        await self.loop.run_in_executor(None, self._start_watches)
        deadline = self.request_timeout_s
        try:
            for event in self._initialized.values():
                await asyncio.wait_for(event.wait(), deadline)
        except asyncio.TimeoutError:
            raise ZooKeeperError(f"ZooKeeper at {self.connect}: caches not filled within {deadline}s") from None

    def _start_watches(self) -> None:
        for cache in self._caches:
            cache.start()
        self.zk.DataWatch(CONTROLLER_PATH, self._controller_watch)

    def _ensure_chroot(self, hosts: str, chroot: str) -> None:
        from kazoo.client import KazooClient

        client = KazooClient(hosts=hosts, timeout=self.session_timeout_ms / 1000)
        client.start(timeout=self.connection_timeout_ms / 1000)
        try:
            client.ensure_path(chroot)
        finally:
            client.stop()
            client.close()

    def _connect_and_prepare(self) -> None:
        """Blocking (worker thread): connect and create what every broker needs."""
        from kazoo.exceptions import NodeExistsError, NoNodeError

        self.zk.start(timeout=self.connection_timeout_ms / 1000)
        for path in PERSISTENT_PATHS:
            self.zk.ensure_path(path)
        try:
            data, _stat = self.zk.get(CLUSTER_ID_PATH)
        except NoNodeError:  # the first broker of the cluster picks the id
            new_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            try:
                self.zk.create(CLUSTER_ID_PATH, json.dumps({"version": "1", "id": new_id}).encode())
            except NodeExistsError:
                pass
            data, _stat = self.zk.get(CLUSTER_ID_PATH)
        self._cluster_id = str(json.loads(data)["id"])

    def close(self) -> None:
        """Stop the caches and close the session (ephemerals vanish at once). Any thread."""
        if self._closed:
            return
        self._closed = True
        for cache in self._caches:
            with contextlib.suppress(Exception):
                cache.close()
        if self.zk is not None:
            with contextlib.suppress(Exception):
                self.zk.stop()
                self.zk.close()

    # -- plumbing: kazoo threads -> loop ----------------------------------------------

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        """Any thread: run ``fn(*args)`` on the loop (dropped once the loop is closed)."""
        loop = self.loop
        if loop is None or self._closed:
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(fn, *args)

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _notify(self, kind: str, key: Any) -> None:
        notify_listeners(self._listeners, kind, key)

    async def _wait(self, async_result: Any, timeout: float | None = None) -> Any:
        """Await a kazoo IAsyncResult on the loop."""
        assert self.loop is not None
        future = self.loop.create_future()

        def done(result: Any) -> None:
            try:
                value = result.get_nowait()
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                self._post(_settle, future, None, exc)
            else:
                self._post(_settle, future, value, None)

        async_result.rawlink(done)
        return await asyncio.wait_for(future, timeout or self.request_timeout_s)

    def _on_session_state(self, state: str) -> None:
        # kazoo thread; must not block.
        self._post(self._notify, "session", state)

    def _controller_watch(self, data: bytes | None, _stat: Any) -> None:
        controller = -1
        if data:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                controller = int(json.loads(data)["brokerid"])
        self._post(self._set_controller, controller)

    def _set_controller(self, controller: int) -> None:
        if controller != self._controller_id:
            self._controller_id = controller
            self._notify("controller", controller)

    # -- cache events (loop) ----------------------------------------------------------

    def _on_tree_event(self, root: str, event: Any) -> None:
        from kazoo.recipe.cache import TreeEvent

        if event.event_type == TreeEvent.INITIALIZED:
            self._initialized[root].set()
            return
        if event.event_type not in (TreeEvent.NODE_ADDED, TreeEvent.NODE_UPDATED, TreeEvent.NODE_REMOVED):
            return
        node = event.event_data
        parts = [p for p in node.path.split("/") if p]
        removed = event.event_type == TreeEvent.NODE_REMOVED
        try:
            self._apply_node(parts, None if removed else node.data, node.stat)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring malformed znode %s: %r", node.path, exc)

    def _apply_node(self, parts: list[str], data: bytes | None, stat: Any) -> None:
        version = stat.version if stat is not None else -1
        quota_entity = _quota_entity(parts)
        if quota_entity is not None:
            self._apply_quotas(quota_entity, data)
            return
        if parts[:2] == ["delegation_token", "tokens"] and len(parts) == 3:
            if data is None:
                self._token_ends.pop(parts[2], None)
            elif data:
                token = TokenInfo.from_json(data)
                self._token_ends[parts[2]] = min(token.expiry_ms, token.max_ms)
            return
        if parts[:1] == ["kafka-acl"] and len(parts) == 3:
            self._apply_acls(parts[1], PatternType.LITERAL, parts[2], data)
            return
        if parts[:2] == ["kafka-acl-extended", "prefixed"] and len(parts) == 4:
            self._apply_acls(parts[2], PatternType.PREFIXED, parts[3], data)
            return
        if parts[:2] == ["brokers", "ids"] and len(parts) == 3:
            broker_id = int(parts[2])
            if data is None:
                self._broker_epochs.pop(broker_id, None)
                if self._brokers.pop(broker_id, None) is not None:
                    self._notify("broker", broker_id)
            elif data:
                info = _parse_broker(broker_id, data)
                epoch = stat.czxid if stat is not None else -1
                if self._brokers.get(broker_id) != info or self._broker_epochs.get(broker_id) != epoch:
                    self._brokers[broker_id] = info
                    self._broker_epochs[broker_id] = epoch
                    self._notify("broker", broker_id)
        elif parts[:2] == ["brokers", "topics"] and len(parts) == 3:
            topic = parts[2]
            if data is None:
                self._assignments.pop(topic, None)
                for key in [k for k in self._states if k[0] == topic]:
                    del self._states[key]
                self._rebuild_topic(topic)
            elif data:
                znode = _parse_topic(data, version)
                current = self._assignments.get(topic)
                if current is None or current.version <= version:
                    self._assignments[topic] = znode
                    self._rebuild_topic(topic)
        elif parts[:2] == ["brokers", "topics"] and len(parts) == 6 and parts[5] == "state":
            key = (parts[2], int(parts[4]))
            if data is None:
                if self._states.pop(key, None) is not None:
                    self._notify("partition", key)
            elif data:
                self.apply_state(key[0], key[1], decode_state(data, version, stat.mzxid))
        elif parts[:2] == ["config", "topics"] and len(parts) == 3:
            topic = parts[2]
            if data is None:
                self._configs.pop(topic, None)
            elif data:
                doc = json.loads(data)
                self._configs[topic] = {str(k): str(v) for k, v in (doc.get("config") or {}).items()}
            self._rebuild_topic(topic)
        elif parts[:1] == ["config"] and len(parts) == 3 and parts[1] in ENTITY_TYPES:
            name = parts[2] if parts[1] == BROKER_ENTITIES else urllib.parse.unquote(parts[2])
            self._apply_entity_configs(parts[1], name, data)
        elif parts[:2] == ["admin", "delete_topics"] and len(parts) == 3:
            if data is None:
                self._delete_requests.discard(parts[2])
            else:
                self._delete_requests.add(parts[2])
                self._notify("delete_topic", parts[2])
        elif parts[:2] == ["admin", "controlled_shutdown"] and len(parts) == 3:
            broker_id = int(parts[2])
            if data is None:
                self._shutdown_requests.pop(broker_id, None)
            else:
                self._shutdown_requests[broker_id] = data
            self._notify("controlled_shutdown", broker_id)

    def _rebuild_topic(self, topic: str) -> None:
        znode = self._assignments.get(topic)
        if znode is None:
            if self._topics.pop(topic, None) is not None:
                self._notify("topic", topic)
            return
        assignment = znode.assignment
        # The replication factor is the target's: a moving partition has extra replicas.
        first = next(iter(assignment), None)
        factor = 0 if first is None else len([r for r in assignment[first] if r not in znode.removing.get(first, ())])
        info = TopicInfo(
            topic,
            len(assignment),
            factor,
            dict(self._configs.get(topic, {})),
            znode.topic_id or uuid.uuid5(uuid.NAMESPACE_URL, topic).hex,
            assignment,
            znode.adding,
            znode.removing,
        )
        if self._topics.get(topic) != info:
            self._topics[topic] = info
            self._notify("topic", topic)

    def apply_state(self, topic: str, partition: int, state: PartitionState) -> bool:
        """Take a partition state into the view unless an equal or newer version is
        there already; returns True (and notifies) when it changed the view."""
        key = (topic, partition)
        current = self._states.get(key)
        if current is not None and 0 <= state.version <= current.version:
            if state.version == current.version and current.zxid < 0 <= state.zxid:
                self._states[key] = state  # same write, now with its zxid: no news
            return False
        self._states[key] = state
        self._notify("partition", key)
        return True

    # -- reads (loop, from memory) ----------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    def brokers(self) -> list[BrokerInfo]:
        return [self._brokers[b] for b in sorted(self._brokers)]

    def get_broker(self, broker_id: int) -> BrokerInfo | None:
        return self._brokers.get(broker_id)

    def live_broker_ids(self) -> set[int]:
        return set(self._brokers)

    def broker_epoch(self, broker_id: int) -> int:
        """czxid of the broker's current registration (-1: not registered)."""
        return self._broker_epochs.get(broker_id, -1)

    def controller_id(self) -> int:
        return self._controller_id

    def topics(self) -> Mapping[str, TopicInfo]:
        return dict(self._topics)

    def get_topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        return self._states.get((topic, partition))

    def partition_states(self) -> dict[tuple[str, int], PartitionState]:
        return dict(self._states)

    def topic_states(self, topic: str, start: int, end: int) -> list[PartitionState | None]:
        get = self._states.get
        return [get((topic, p)) for p in range(start, end)]

    def delete_requests(self) -> set[str]:
        return set(self._delete_requests)

    def shutdown_requests(self) -> dict[int, bytes]:
        return dict(self._shutdown_requests)

    @property
    def session_id(self) -> int | None:
        client_id = self.zk.client_id if self.zk is not None else None
        return client_id[0] if client_id else None

    # -- membership --------------------------------------------------------------------

    async def register_broker(self, broker: BrokerInfo | None = None, *, stale_wait_s: float | None = None) -> None:
        """Create ``/brokers/ids/<id>``. An existing registration of another live broker
        raises BrokerIdInUseError. One advertising this broker's own address belongs to a
        previous run of it that died without closing its session (this process holds that
        port now): wait up to ``stale_wait_s`` (the session timeout) for it to expire."""
        from kazoo.exceptions import NodeExistsError, NoNodeError

        if broker is not None:
            self.broker = broker
        info = self.broker
        path = f"{BROKER_IDS_PATH}/{info.node_id}"
        wait_s = self.session_timeout_ms / 1000 * 1.5 + 2 if stale_wait_s is None else stale_wait_s
        deadline = time.monotonic() + wait_s
        while True:
            try:
                await self._wait(self.zk.create_async(path, _broker_json(info), ephemeral=True))
                self._registered_session = self.session_id
                stat = await self._wait(self.zk.exists_async(path))
                self.registration_zxid = stat.czxid if stat is not None else -1
                log.info("registered broker %d at %s as %s:%d%s", info.node_id, path, info.host, info.port,
                         f" (rack {info.rack})" if info.rack else "")
                return
            except NodeExistsError:
                pass
            try:
                data, stat = await self._wait(self.zk.get_async(path))
            except NoNodeError:
                continue
            if stat.ephemeralOwner == self.session_id:
                self._registered_session = self.session_id
                self.registration_zxid = stat.czxid
                return  # ours already (a retried create that did succeed)
            other = _parse_broker(info.node_id, data)
            same_address = (other.host, other.port) == (info.host, info.port)
            if not same_address or time.monotonic() >= deadline:
                raise BrokerIdInUseError(
                    f"broker.id {info.node_id} is already registered in ZooKeeper at {path} by a broker "
                    f"at {other.host}:{other.port} (session 0x{stat.ephemeralOwner:x}); "
                    "each broker of a cluster needs its own broker.id"
                )
            log.info("%s still holds the registration of a previous run of this broker; "
                     "waiting for its ZooKeeper session to expire", path)
            await asyncio.sleep(0.2)

    def registration_lost(self) -> bool:
        """True when the session that holds this broker's registration is gone."""
        return self._registered_session is None or self._registered_session != self.session_id

    # -- controller election -----------------------------------------------------------

    async def try_become_controller(self) -> tuple[int, int] | None:
        """Create ``/controller``; on success bump ``/controller_epoch`` with a
        conditional set and return (epoch, epoch znode version), else None."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        me = self.broker.node_id
        doc = json.dumps({"version": 1, "brokerid": me, "timestamp": str(int(time.time() * 1000))}).encode()
        try:
            await self._wait(self.zk.create_async(CONTROLLER_PATH, doc, ephemeral=True))
        except NodeExistsError:
            return None
        self._set_controller(me)
        for _ in range(20):
            try:
                data, stat = await self._wait(self.zk.get_async(CONTROLLER_EPOCH_PATH))
            except NoNodeError:
                try:
                    stat = await self._wait(self.zk.create_async(CONTROLLER_EPOCH_PATH, b"1"))
                except NodeExistsError:
                    continue
                return 1, 0
            epoch = int(data) + 1
            try:
                stat = await self._wait(self.zk.set_async(CONTROLLER_EPOCH_PATH, str(epoch).encode(), stat.version))
            except BadVersionError:
                continue
            return epoch, stat.version
        raise ZooKeeperError("could not bump /controller_epoch")

    async def controller_epoch(self) -> int:
        data, _stat = await self._wait(self.zk.get_async(CONTROLLER_EPOCH_PATH))
        return int(data)

    async def resign_controller(self) -> None:
        """Delete ``/controller`` if this broker holds it (a clean stop)."""
        with contextlib.suppress(Exception):
            _data, stat = await self._wait(self.zk.get_async(CONTROLLER_PATH), 5)
            if stat.ephemeralOwner == self.session_id:
                await self._wait(self.zk.delete_async(CONTROLLER_PATH, stat.version), 5)

    async def write_states_as_controller(
        self,
        changes: Sequence[tuple[str, int, PartitionState, int | None]],
        epoch_version: int,
    ) -> dict[tuple[str, int], PartitionState | BaseException]:
        """Write partition states, each in a transaction that also checks that
        ``/controller_epoch`` still has ``epoch_version``, so a deposed controller cannot
        write. ``expected`` None creates the state znode. Returns per partition the state
        now stored (with its version) or the exception."""

        async def one(topic: str, partition: int, state: PartitionState, expected: int | None) -> Any:
            path = state_path(topic, partition)
            txn = self.zk.transaction()
            txn.check(CONTROLLER_EPOCH_PATH, epoch_version)
            if expected is None:
                parent = f"{TOPICS_PATH}/{topic}/partitions"
                with contextlib.suppress(Exception):
                    await self._wait(self.zk.ensure_path_async(f"{parent}/{partition}"))
                txn.create(path, encode_state(state))
            else:
                txn.set_data(path, encode_state(state), expected)
            results = await self._wait(txn.commit_async())
            _raise_first(results)
            version = 0 if expected is None else results[1].version
            zxid = -1 if expected is None else results[1].mzxid
            stored = PartitionState(state.leader, state.leader_epoch, state.isr, state.controller_epoch, version, zxid)
            self.apply_state(topic, partition, stored)
            return stored

        outcomes = await asyncio.gather(*(one(*c) for c in changes), return_exceptions=True)
        return {(c[0], c[1]): o for c, o in zip(changes, outcomes)}

    async def update_isr(self, topic: str, partition: int, state: PartitionState, expected_version: int) -> PartitionState:
        """A leader's ISR change: conditional on the state version it last saw (Kafka's
        ``updateLeaderAndIsr``). Raises kazoo's BadVersionError when it moved meanwhile."""
        stat = await self._wait(
            self.zk.set_async(state_path(topic, partition), encode_state(state), expected_version)
        )
        stored = PartitionState(state.leader, state.leader_epoch, state.isr, state.controller_epoch, stat.version,
                                stat.mzxid)
        self.apply_state(topic, partition, stored)
        return stored

    async def write_reassignment_as_controller(
        self,
        topic: str,
        partitions: Mapping[int, PartitionAssignment],
        states: Sequence[tuple[str, int, PartitionState, int | None]],
        epoch_version: int,
    ) -> None:
        """Controller: new replica sets (with the moves under way) of partitions of one
        topic, and the partition states that go with them, in one transaction that also
        checks ``/controller_epoch`` (a deposed controller cannot write) and the versions
        this broker last saw of the topic and state znodes. Raises kazoo's
        BadVersionError when one moved meanwhile (re-read and decide again)."""
        znode = self._assignments.get(topic)
        if znode is None:
            raise UnknownTopicError(topic)
        assignment, adding, removing = dict(znode.assignment), dict(znode.adding), dict(znode.removing)
        for partition, moved in partitions.items():
            assignment[partition] = moved.replicas
            for table, replicas in ((adding, moved.adding), (removing, moved.removing)):
                table.pop(partition, None)
                if replicas:
                    table[partition] = replicas
        doc = _topic_json(assignment, znode.topic_id, adding, removing)
        txn = self.zk.transaction()
        txn.check(CONTROLLER_EPOCH_PATH, epoch_version)
        txn.set_data(f"{TOPICS_PATH}/{topic}", doc, znode.version)
        for state_topic, partition, state, expected in states:
            txn.set_data(state_path(state_topic, partition), encode_state(state), -1 if expected is None else expected)
        results = await self._wait(txn.commit_async())
        _raise_first(results)
        self._apply_node(["brokers", "topics", topic], doc, results[1])
        for (state_topic, partition, state, _expected), stat in zip(states, results[2:]):
            self.apply_state(state_topic, partition, PartitionState(
                state.leader, state.leader_epoch, state.isr, state.controller_epoch, stat.version, stat.mzxid))

    async def read_topic(self, topic: str) -> None:
        """``/brokers/topics/<t>`` straight from ZooKeeper (after a conflict) into the view."""
        from kazoo.exceptions import NoNodeError

        with contextlib.suppress(NoNodeError):
            data, stat = await self._wait(self.zk.get_async(f"{TOPICS_PATH}/{topic}"))
            self._apply_node(["brokers", "topics", topic], data, stat)

    async def read_state(self, topic: str, partition: int) -> PartitionState | None:
        """The state straight from ZooKeeper (after a conflict); also updates the view."""
        from kazoo.exceptions import NoNodeError

        try:
            data, stat = await self._wait(self.zk.get_async(state_path(topic, partition)))
        except NoNodeError:
            return None
        state = decode_state(data, stat.version, stat.mzxid)
        self.apply_state(topic, partition, state)
        return self._states.get((topic, partition))

    async def delete_topic_znodes(self, topic: str) -> None:
        """Controller: remove a topic's znodes, its config and its deletion request."""
        assert self.loop is not None
        for path in (f"{TOPICS_PATH}/{topic}", f"{CONFIG_TOPICS_PATH}/{topic}", f"{DELETE_TOPICS_PATH}/{topic}"):
            await self.loop.run_in_executor(None, _delete_recursive, self.zk, path)

    async def mark_shutdown_processed(self, broker_id: int, remaining: int) -> None:
        from kazoo.exceptions import NoNodeError

        with contextlib.suppress(NoNodeError):
            await self._wait(
                self.zk.set_async(f"{CONTROLLED_SHUTDOWN_PATH}/{broker_id}", json.dumps({"remaining": remaining}).encode())
            )

    async def request_controlled_shutdown(self) -> None:
        from kazoo.exceptions import NodeExistsError

        path = f"{CONTROLLED_SHUTDOWN_PATH}/{self.broker.node_id}"
        try:
            await self._wait(self.zk.create_async(path, b"{}", ephemeral=True))
        except NodeExistsError:
            await self._wait(self.zk.set_async(path, b"{}"))

    # -- topic changes (any broker) ----------------------------------------------------

    def assign(self, partitions: int, replication_factor: int, *, first_partition: int = 0) -> dict[int, list[int]]:
        brokers = self.brokers()
        racks = {b.node_id: b.rack for b in brokers}
        return assign_replicas(
            [b.node_id for b in brokers],
            partitions,
            replication_factor,
            racks=racks if any(racks.values()) else None,
            first_partition=first_partition,
        )

    @_metadata_change("create topic {0}")
    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        *,
        assignment: Mapping[int, Sequence[int]] | None = None,
        wait_s: float = 10.0,
    ) -> TopicInfo:
        """Write the topic's config and assignment (Kafka's AdminZkClient); the controller
        then elects leaders. Waits up to ``wait_s`` for every partition to have one."""
        from kazoo.exceptions import NodeExistsError

        if assignment is None:
            try:
                assignment = self.assign(partitions, replication_factor)
            except AssignmentError as exc:
                from pykfk.errors import ErrorCode, KafkaError

                raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, str(exc)) from None
        topic_id = uuid.uuid4().hex
        config_doc = json.dumps({"version": 1, "config": dict(configs)}).encode()
        txn = self.zk.transaction()
        txn.create(f"{CONFIG_TOPICS_PATH}/{name}", config_doc)
        txn.create(f"{TOPICS_PATH}/{name}", _topic_json(assignment, topic_id))
        results = await self._wait(txn.commit_async())
        if isinstance(results[1], NodeExistsError):
            raise TopicExistsError(name)
        if isinstance(results[0], NodeExistsError):  # a leftover config: overwrite it
            await self._wait(self.zk.set_async(f"{CONFIG_TOPICS_PATH}/{name}", config_doc))
            try:
                await self._wait(self.zk.create_async(f"{TOPICS_PATH}/{name}", _topic_json(assignment, topic_id)))
            except NodeExistsError:
                raise TopicExistsError(name) from None
        else:
            _raise_first(results)
        log.info("created topic %s: assignment %s", name, dict(assignment))
        await self.wait_for(lambda: self._has_leaders(name, len(assignment)), wait_s)
        info = self._topics.get(name)
        if info is None:
            info = TopicInfo(name, len(assignment), replication_factor, dict(configs), topic_id,
                             {p: tuple(r) for p, r in assignment.items()})
        return info

    def _has_leaders(self, topic: str, partitions: int) -> bool:
        for p in range(partitions):
            state = self._states.get((topic, p))
            if state is None or state.leader == NO_LEADER:
                return False
        return topic in self._topics

    async def wait_for(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``condition()`` holds after some view change, or the timeout."""
        if condition():
            return True
        assert self.loop is not None
        changed = asyncio.Event()

        def listener(_kind: str, _key: Any) -> None:
            changed.set()

        self._listeners.append(listener)
        deadline = self.loop.time() + timeout_s
        try:
            while not condition():
                remaining = deadline - self.loop.time()
                if remaining <= 0:
                    return False
                changed.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(changed.wait(), remaining)
            return True
        finally:
            self._listeners.remove(listener)

    @_metadata_change("delete topic {0}")
    async def delete_topic(self, name: str, *, wait_s: float = 30.0) -> None:
        """Ask the controller to delete the topic (``/admin/delete_topics/<t>``) and wait
        until it is gone."""
        from kazoo.exceptions import NodeExistsError

        if name not in self._topics:
            raise UnknownTopicError(name)
        with contextlib.suppress(NodeExistsError):
            await self._wait(self.zk.create_async(f"{DELETE_TOPICS_PATH}/{name}", b""))
        if not await self.wait_for(lambda: name not in self._topics, wait_s):
            from pykfk.errors import ErrorCode, KafkaError

            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"topic {name} is marked for deletion, not deleted yet")

    @_metadata_change("add partitions to {0}")
    async def create_partitions(self, name: str, total: int, *, wait_s: float = 10.0) -> TopicInfo:
        znode = self._assignments.get(name)
        info = self._topics.get(name)
        if znode is None or info is None:
            raise UnknownTopicError(name)
        if znode.reassigning:
            from pykfk.errors import ErrorCode, KafkaError

            raise KafkaError(ErrorCode.REASSIGNMENT_IN_PROGRESS,
                             f"A partition reassignment is in progress for the topic '{name}'.")
        assignment = znode.assignment
        extra = self.assign(total - len(assignment), info.replication_factor, first_partition=len(assignment))
        merged = {**{p: list(r) for p, r in assignment.items()}, **extra}
        await self._wait(self.zk.set_async(f"{TOPICS_PATH}/{name}", _topic_json(merged, znode.topic_id),
                                           znode.version))
        await self.wait_for(lambda: self._has_leaders(name, total), wait_s)
        return self._topics.get(name, info)

    @_metadata_change("alter configs of topic {0}")
    async def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo:
        if name not in self._topics:
            raise UnknownTopicError(name)
        doc = json.dumps({"version": 1, "config": dict(configs)}).encode()
        await self._wait(self.zk.set_async(f"{CONFIG_TOPICS_PATH}/{name}", doc))
        await self.wait_for(lambda: self._configs.get(name) == dict(configs), 5.0)
        return self._topics[name]

    # -- entity configs (cached from /config/brokers and /config/client-metrics) -------

    def _apply_entity_configs(self, entity_type: str, name: str, data: bytes | None) -> None:
        configs = {str(k): str(v) for k, v in (json.loads(data).get("config") or {}).items()} if data else {}
        current = self._entity_configs.get(entity_type, {})
        if current.get(name, {}) == configs:
            return
        entities = {e: c for e, c in current.items() if e != name}
        if configs:
            entities[name] = configs
        self._entity_configs[entity_type] = entities
        if entity_type == BROKER_ENTITIES:
            self._notify("broker_config", name)
        else:
            self._notify("entity_config", (entity_type, name))

    def entity_configs(self, entity_type: str) -> Mapping[str, Mapping[str, str]]:
        return self._entity_configs.get(entity_type, {})

    @_metadata_change("alter configs of {0} {1}")
    async def alter_entity_configs(self, entity_type: str, name: str, configs: Mapping[str, str]) -> None:
        """The entity's znode is replaced whole (AlterConfigs semantics; the incremental
        form computed the whole set already), then a change notice follows as in Kafka."""
        from kazoo.exceptions import NodeExistsError

        # Broker ids and <default> as they are; other names URL-encoded (Kafka's Sanitizer).
        znode = name if entity_type == BROKER_ENTITIES else _sanitized(name)
        path = f"/config/{entity_type}/{znode}"
        doc = json.dumps({"version": 1, "config": dict(configs)}).encode()
        try:
            await self._wait(self.zk.create_async(path, doc, makepath=True))
        except NodeExistsError:
            await self._wait(self.zk.set_async(path, doc))
        notice = json.dumps({"version": 2, "entity_path": f"{entity_type}/{znode}"}).encode()
        await self._wait(self.zk.create_async(f"{CONFIG_CHANGES_PATH}/config_change_", notice,
                                              sequence=True, makepath=True))
        await self.wait_for(lambda: self.entity_configs(entity_type).get(name, {}) == dict(configs), 5.0)

    def broker_configs(self, entity: str) -> Mapping[str, str]:
        return self.entity_configs(BROKER_ENTITIES).get(entity, {})

    async def alter_broker_configs(self, entity: str, configs: Mapping[str, str]) -> None:
        await self.alter_entity_configs(BROKER_ENTITIES, entity, configs)

    # -- client quotas (cached from /config/users and /config/clients) -----------------

    def _apply_quotas(self, entity: Entity, data: bytes | None) -> None:
        config = json.loads(data).get("config", {}) if data else {}
        values = {k: float(v) for k, v in config.items() if k in QUOTA_KEYS}
        if values:
            self._quotas[entity] = values
        elif self._quotas.pop(entity, None) is None:
            return
        self.quota_version += 1
        self._notify("quota", entity)

    def client_quotas(self) -> Mapping[Entity, Mapping[str, float]]:
        return self._quotas

    @_metadata_change("alter quotas of {0}")
    async def alter_client_quotas(self, entity: Entity, updates: Mapping[str, float], removals: list[str]) -> None:
        """Kafka's layout: the entity's config znode keeps its other entries (SCRAM
        credentials) as they are; a change notice follows."""
        path, entity_path = _quota_paths(entity)
        await self._change_entity_config(path, entity_path, {k: _quota_text(v) for k, v in updates.items()}, removals)
        await self.wait_for(lambda: self._quotas_applied(entity, updates, removals), 5.0)

    def _quotas_applied(self, entity: Entity, updates: Mapping[str, float], removals: list[str]) -> bool:
        values = self._quotas.get(entity, {})
        return all(values.get(k) == float(v) for k, v in updates.items()) and not any(k in values for k in removals)

    # -- ACLs (cached from the ACL znodes, changed with conditional writes) -------------

    def _apply_acls(self, type_name: str, pattern: PatternType, name: str, data: bytes | None) -> None:
        resource_type = _RESOURCE_TYPES.get(type_name)
        if resource_type is None:
            return
        key = (resource_type, pattern, name)
        if data:
            self._acls[key] = _parse_acl_json(resource_type, pattern, name, data)
        else:
            self._acls.pop(key, None)
        self.acl_version += 1

    def acls(self) -> list[AclBinding]:
        return [binding for bindings in self._acls.values() for binding in bindings]

    @_metadata_change("create ACLs")
    async def create_acls(self, bindings: list[AclBinding]) -> None:
        for key, group in _by_resource(bindings).items():
            await self._update_acl_znode(key, functools.partial(_with_bindings, group))

    @_metadata_change("delete ACLs")
    async def delete_acls(self, bindings: list[AclBinding]) -> None:
        for key, group in _by_resource(bindings).items():
            await self._update_acl_znode(key, functools.partial(_without_bindings, group))

    async def _update_acl_znode(self, key: tuple[ResourceType, PatternType, str],
                                change: Callable[[list[AclBinding]], list[AclBinding]]) -> None:
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        resource_type, pattern, name = key
        type_name = RESOURCE_NAMES[resource_type]
        if pattern == PatternType.LITERAL:
            path, changes = f"{ACL_PATH}/{type_name}/{name}", ACL_CHANGES_PATH
            notice = f"{type_name}:{name}".encode()
        else:
            path, changes = f"{ACL_EXTENDED_PATH}/prefixed/{type_name}/{name}", ACL_EXTENDED_CHANGES_PATH
            notice = json.dumps({"version": 1, "resourceType": type_name, "name": name,
                                 "patternType": "PREFIXED"}).encode()
        while True:
            try:
                data, stat = await self._wait(self.zk.get_async(path))
                current, version = _parse_acl_json(resource_type, pattern, name, data), stat.version
            except NoNodeError:
                current, version = [], -1
            wanted = change(current)
            if wanted == current:
                return
            try:
                if not wanted:
                    await self._wait(self.zk.delete_async(path, version))
                elif version < 0:
                    await self._wait(self.zk.create_async(path, _acl_json(wanted), makepath=True))
                else:
                    await self._wait(self.zk.set_async(path, _acl_json(wanted), version))
                break
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # changed meanwhile: read again
        await self._wait(self.zk.create_async(f"{changes}/acl_changes_", notice, sequence=True, makepath=True))

    # -- SCRAM credentials (read on demand: a login is rare next to a request) ----------

    @_metadata_change("read SCRAM credentials")
    async def scram_credentials(self, users: list[str] | None = None) -> dict[str, dict[str, str]]:
        from kazoo.exceptions import NoNodeError

        if users is None:
            try:
                children = await self._wait(self.zk.get_children_async(CONFIG_USERS_PATH))
            except NoNodeError:
                return {}
            users = [urllib.parse.unquote(child) for child in children]
        found: dict[str, dict[str, str]] = {}
        for user in users:
            try:
                data, _stat = await self._wait(self.zk.get_async(f"{CONFIG_USERS_PATH}/{_sanitized(user)}"))
            except NoNodeError:
                continue
            config = json.loads(data or b"{}").get("config", {})
            credentials = {k: str(v) for k, v in config.items() if k.startswith("SCRAM-")}
            if credentials:
                found[user] = credentials
        return found

    @_metadata_change("alter credentials of user {0}")
    async def alter_scram_credentials(self, user: str, upserts: Mapping[str, str], deletions: list[str]) -> None:
        """Kafka's layout: the user's config znode keeps other entries (quotas) as they
        are; a change notification tells brokers, Kafka's among them, to reload."""
        await self._change_entity_config(f"{CONFIG_USERS_PATH}/{_sanitized(user)}", f"users/{_sanitized(user)}",
                                         upserts, deletions)

    async def _change_entity_config(self, path: str, entity_path: str, updates: Mapping[str, str],
                                    removals: list[str]) -> None:
        """Set and remove entries of a user's or client's config znode with a
        conditional write (read again when it changed meanwhile), keeping its other
        entries, then announce the change under /config/changes as Kafka does."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        while True:
            try:
                data, stat = await self._wait(self.zk.get_async(path))
                config, version = json.loads(data or b"{}").get("config", {}), stat.version
            except NoNodeError:
                config, version = {}, -1
            for key in removals:
                config.pop(key, None)
            config.update(updates)
            doc = json.dumps({"version": 1, "config": config}).encode()
            try:
                if version < 0:
                    await self._wait(self.zk.create_async(path, doc, makepath=True))
                else:
                    await self._wait(self.zk.set_async(path, doc, version))
                break
            except (BadVersionError, NodeExistsError):
                continue  # changed meanwhile: read again
        notice = json.dumps({"version": 2, "entity_path": entity_path}).encode()
        await self._wait(self.zk.create_async(f"{CONFIG_CHANGES_PATH}/config_change_", notice,
                                              sequence=True, makepath=True))

    # -- delegation tokens (read on demand, as credentials are) ------------------------

    @_metadata_change("read delegation tokens")
    async def delegation_tokens(self, token_ids: list[str] | None = None) -> dict[str, TokenInfo]:
        """Token id -> token; unknown ids, and znodes that do not parse (logged), are
        left out."""
        from kazoo.exceptions import NoNodeError

        if token_ids is None:
            try:
                token_ids = await self._wait(self.zk.get_children_async(TOKENS_PATH))
            except NoNodeError:
                return {}
        found: dict[str, TokenInfo] = {}
        for token_id in token_ids:
            if not plausible_token_id(token_id):
                continue  # no broker makes such an id (nor could it name a znode safely)
            try:
                data, _stat = await self._wait(self.zk.get_async(f"{TOKENS_PATH}/{token_id}"))
                found[token_id] = TokenInfo.from_json(data or b"")
            except NoNodeError:
                continue
            except TokenError as exc:
                log.warning("delegation token %s ignored: %s", token_id, exc)
        return found

    def delegation_token_end(self, token_id: str) -> int | None:
        """When the token stops working (ms since the epoch), from memory; None when
        there is no such token (any more)."""
        return self._token_ends.get(token_id)

    @_metadata_change("store delegation token {0.token_id}")
    async def store_delegation_token(self, token: TokenInfo) -> None:
        """Create or replace the token's znode, then announce it as Kafka does."""
        from kazoo.exceptions import NodeExistsError

        path = f"{TOKENS_PATH}/{token.token_id}"
        try:
            await self._wait(self.zk.create_async(path, token.to_json(), makepath=True))
        except NodeExistsError:
            await self._wait(self.zk.set_async(path, token.to_json()))
        await self._announce_token(token.token_id)

    @_metadata_change("remove delegation tokens")
    async def remove_delegation_tokens(self, token_ids: list[str]) -> None:
        from kazoo.exceptions import NoNodeError

        for token_id in token_ids:
            with contextlib.suppress(NoNodeError):
                await self._wait(self.zk.delete_async(f"{TOKENS_PATH}/{token_id}"))
            await self._announce_token(token_id)

    async def _announce_token(self, token_id: str) -> None:
        await self._wait(self.zk.create_async(f"{TOKEN_CHANGES_PATH}/token_change_", token_id.encode(),
                                              sequence=True, makepath=True))

    # -- producer ids ------------------------------------------------------------------

    @_metadata_change("claim a producer id block")
    async def allocate_producer_id(self) -> int:
        if self._next_producer_id >= self._producer_id_block_end:
            await self._claim_producer_id_block()
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        return producer_id

    _next_producer_id = 0
    _producer_id_block_end = 0

    async def _claim_producer_id_block(self) -> None:
        """Claim the next block of ids with a conditional update (Kafka's ZK ProducerIdManager)."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        for _ in range(50):
            try:
                data, stat = await self._wait(self.zk.get_async(PRODUCER_ID_BLOCK_PATH))
                start = int(json.loads(data)["block_end"]) + 1 if data else 0
            except NoNodeError:
                stat, start = None, 0
            end = start + PRODUCER_ID_BLOCK_SIZE - 1
            doc = json.dumps(
                {"version": 1, "broker": self.broker.node_id, "block_start": str(start), "block_end": str(end)}
            ).encode()
            try:
                if stat is None:
                    await self._wait(self.zk.create_async(PRODUCER_ID_BLOCK_PATH, doc))
                else:
                    await self._wait(self.zk.set_async(PRODUCER_ID_BLOCK_PATH, doc, stat.version))
            except (BadVersionError, NodeExistsError):
                continue
            self._next_producer_id, self._producer_id_block_end = start, end + 1
            return
        raise ZooKeeperError("could not claim a producer id block")

    # -- test support ------------------------------------------------------------------

    def session_credentials(self) -> tuple[int, bytes] | None:
        """(session id, password) of the current session (visible for testing: a second
        client with these credentials that closes expires this broker's session)."""
        return self.zk.client_id if self.zk is not None else None


def _settle(future: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(value)


def _raise_first(results: Sequence[Any]) -> None:
    from kazoo.exceptions import RolledBackError

    for result in results:
        if isinstance(result, Exception) and not isinstance(result, RolledBackError):
            raise result
    for result in results:
        if isinstance(result, Exception):
            raise result


def _delete_recursive(zk: Any, path: str) -> None:
    from kazoo.exceptions import NoNodeError, NotEmptyError

    for _ in range(10):
        try:
            zk.delete(path, recursive=True)
            return
        except NoNodeError:
            return
        except NotEmptyError:  # a child appeared meanwhile (a late state write)
            continue


def _split_chroot(connect: str) -> tuple[str, str]:
    hosts, slash, chroot = connect.partition("/")
    return hosts, (slash + chroot).rstrip("/") if chroot else ""
