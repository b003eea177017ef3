"""A small admin client over pykfk's protocol codec: every API the codec declares is
reachable, and each request goes to the broker Kafka routes it to.

Routing (what Kafka's own AdminClient does):

- cluster-wide questions (Metadata, DescribeCluster, DescribeConfigs of topics, ACLs,
  SCRAM users) go to any broker; topic and partition changes (CreateTopics, DeleteTopics,
  CreatePartitions, reassignments) to the controller;
- ListOffsets, DeleteRecords and Fetch/Produce to each partition's leader;
- group APIs to the group's coordinator (FindCoordinator);
- DescribeConfigs and IncrementalAlterConfigs of a broker to that broker.

Versions are negotiated per connection with ApiVersions (``BrokerConnection.version_for``).
Every wait is bounded by ``timeout`` seconds; retriable answers (a coordinator still
loading, a leader or controller that moved) are retried with a short backoff until then.
Errors surface as ``KafkaError`` (the cluster answered with an error code) or
``ConnectionError_`` (no broker could be reached in time).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pykfk.client.connection import BrokerConnection, ConnectionError_, parse_bootstrap
from pykfk.errors import ErrorCode, KafkaError, error_code

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36

# Kafka's ListOffsets special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2

# ConfigResource types (apache/kafka ConfigResource.Type).
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4

# IncrementalAlterConfigs operations (AlterConfigOp.OpType).
CONFIG_SET, CONFIG_DELETE, CONFIG_APPEND, CONFIG_SUBTRACT = 0, 1, 2, 3

# DescribeConfigs config_source values (DescribeConfigsResponse.json).
CONFIG_SOURCES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}

# Answers after which the same request may succeed once routing is refreshed.
_RETRY_CODES = frozenset(
    {
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
    }
)
_BACKOFF = 0.1

T = TypeVar("T")

if TYPE_CHECKING:
    from typing_extensions import Self


class RetryableAnswer(KafkaError):
    """An answer after which the same request may succeed once routing is refreshed;
    ``AdminClient.retrying`` tries again until its deadline."""

    def __init__(self, code: ErrorCode, what: str):
        super().__init__(code, what)
        self.what = what


def check(code: int, what: str, message: str | None = None) -> None:
    """Raise KafkaError for a non-zero error code, naming what was asked."""
    if code:
        err = error_code(code)
        detail = f"{what}: {message}" if message else what
        if err in _RETRY_CODES:
            raise RetryableAnswer(err, detail)
        raise KafkaError(err, detail)


# ------------------------------------------------------------------------- security


@dataclasses.dataclass(frozen=True)
class ClientSecurity:
    """Kafka client security properties (``security.protocol``, ``sasl.*``, ``ssl.*``)."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    sasl_username: str = ""
    sasl_password: str = ""
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_key_password: str | None = None
    ssl_check_hostname: bool = True
    # OAUTHBEARER's client credentials (pykfk.security.oauth_login.ClientCredentials) and
    # SCRAM extensions (tokenauth: a delegation token login), from ``sasl.*``.
    oauth: Any = None
    sasl_extensions: tuple[tuple[str, str], ...] = ()
    ssl_verify: bool = True
    # Certificates and key given as PEM text (librdkafka's ssl.*.pem, or read from a
    # PKCS#12 key store): loaded from memory, never left on disk.
    ssl_ca_pem: str | None = None
    ssl_cert_pem: str | None = None
    ssl_key_pem: str | None = None

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ClientSecurity:
        """From Kafka client properties; PEM files for the TLS trust and key stores.
        Raises ValueError naming a property that is unusable."""
        from pykfk.security.jaas import JaasError, parse_jaas
        from pykfk.security.sasl import client_login_settings

        protocol = _protocol(props)
        username = password = ""
        if props.get("sasl.jaas.config"):
            try:
                options = parse_jaas(props["sasl.jaas.config"]).options
            except JaasError as exc:
                raise ValueError(f"sasl.jaas.config: {exc}") from None
            username, password = options.get("username", ""), options.get("password", "")
        username = props.get("sasl.username", username)
        password = props.get("sasl.password", password)
        mechanism = _mechanism(protocol, "sasl.mechanism", props.get("sasl.mechanism", "PLAIN"))
        for store in ("ssl.truststore.type", "ssl.keystore.type"):
            if props.get(store, "PEM").upper() != "PEM":
                raise ValueError(f"{store}: only PEM files are supported")
        return cls(
            protocol=protocol,
            sasl_mechanism=mechanism,
            sasl_username=username,
            sasl_password=password,
            ssl_cafile=props.get("ssl.truststore.location") or props.get("ssl.ca.location"),
            ssl_certfile=props.get("ssl.keystore.location")
            or props.get("ssl.certificate.location"),
            ssl_keyfile=props.get("ssl.key.location"),
            ssl_key_password=props.get("ssl.key.password"),
            ssl_check_hostname=props.get("ssl.endpoint.identification.algorithm", "https") != "",
            **(client_login_settings(props, mechanism) if protocol.startswith("SASL") else {}),
        )

    @classmethod
    def from_librdkafka(cls, settings: Mapping[str, object]) -> ClientSecurity:
        """From librdkafka settings, as confluent-kafka's clients take them (the mirror's
        ``source.*`` / ``target.*``): ``security.protocol``, ``sasl.mechanism(s)``
        (librdkafka's default GSSAPI included), ``sasl.username``/``password``,
        ``ssl.ca.location`` (a file, a directory or ``probe``), ``ssl.certificate.location``,
        ``ssl.key.location``/``password``, ``ssl.endpoint.identification.algorithm``
        (``https``, librdkafka's default, or ``none``) and
        ``enable.ssl.certificate.verification``, PEM text (``ssl.ca.pem``,
        ``ssl.certificate.pem``, ``ssl.key.pem``) and PKCS#12 key stores
        (``ssl.keystore.location``/``password``). Raises ValueError naming a setting this
        client cannot honour (GSSAPI). OAUTHBEARER takes
        librdkafka's OIDC keys (``sasl.oauthbearer.token.endpoint.url``, ``.client.id``,
        ``.client.secret``, ``.scope``)."""
        from pykfk.security.sasl import client_login_settings

        props = {k: str(v) for k, v in settings.items()}
        protocol = _protocol(props)
        mechanism = props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "GSSAPI"
        name = "sasl.mechanism" if "sasl.mechanism" in props else "sasl.mechanisms"
        cafile = props.get("ssl.ca.location") or None
        verify = props.get("enable.ssl.certificate.verification", "true").lower()
        algorithm = props.get("ssl.endpoint.identification.algorithm", "https").lower()
        if algorithm not in ("https", "none"):
            raise ValueError(f"ssl.endpoint.identification.algorithm: {algorithm!r} is neither https nor none")
        mechanism = _mechanism(protocol, name, mechanism)
        cert_pem, key_pem = props.get("ssl.certificate.pem") or None, props.get("ssl.key.pem") or None
        _check_pem_text(props)
        if props.get("ssl.keystore.location"):
            cert_pem, key_pem = _pkcs12_as_pem(props["ssl.keystore.location"], props.get("ssl.keystore.password"))
        return cls(
            protocol=protocol,
            sasl_mechanism=mechanism,
            sasl_username=props.get("sasl.username", ""),
            sasl_password=props.get("sasl.password", ""),
            ssl_cafile=None if cafile == "probe" else cafile,
            ssl_certfile=props.get("ssl.certificate.location") or None,
            ssl_keyfile=props.get("ssl.key.location") or None,
            ssl_key_password=props.get("ssl.key.password") or None,
            ssl_check_hostname=algorithm == "https",
            ssl_verify=verify not in ("false", "0"),
            ssl_ca_pem=props.get("ssl.ca.pem") or None,
            ssl_cert_pem=cert_pem,
            ssl_key_pem=key_pem,
            **(client_login_settings(props, mechanism) if protocol.startswith("SASL") else {}),
        )

    def tls_context(self) -> ssl.SSLContext:
        directory = self.ssl_cafile is not None and os.path.isdir(self.ssl_cafile)
        context = ssl.create_default_context(cafile=None if directory else self.ssl_cafile,
                                             capath=self.ssl_cafile if directory else None)
        context.check_hostname = self.ssl_check_hostname and self.ssl_verify
        if not self.ssl_verify:
            context.verify_mode = ssl.CERT_NONE
        if self.ssl_ca_pem:
            context.load_verify_locations(cadata=self.ssl_ca_pem)
        if self.ssl_cert_pem:
            _load_chain_from_memory(context, self.ssl_cert_pem, self.ssl_key_pem, self.ssl_key_password)
        elif self.ssl_certfile:
            context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile, self.ssl_key_password)
        return context


def _check_pem_text(props: Mapping[str, str]) -> None:
    """ValueError naming an ``ssl.*.pem`` setting that holds no usable PEM text, when
    the settings are read rather than at the first connection."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    password = props.get("ssl.key.password")
    checks: dict[str, Callable[[bytes], object]] = {
        "ssl.ca.pem": x509.load_pem_x509_certificates,
        "ssl.certificate.pem": x509.load_pem_x509_certificates,
        "ssl.key.pem": lambda data: load_pem_private_key(data, password.encode() if password else None),
    }
    for key, load in checks.items():
        text = props.get(key)
        if not text:
            continue
        try:
            load(text.encode())
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{key}: not usable PEM text: {exc}") from None


def _pkcs12_as_pem(path: str, password: str | None) -> tuple[str, str]:
    """(certificate chain, unencrypted key) of a PKCS#12 key store, as PEM text."""
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
        pkcs12,
    )

    try:
        with open(path, "rb") as f:
            key, cert, extra = pkcs12.load_key_and_certificates(f.read(), password.encode() if password else None)
    except (OSError, ValueError) as exc:
        raise ValueError(f"ssl.keystore.location: cannot read the PKCS#12 key store {path}: {exc}") from None
    if key is None or cert is None:
        raise ValueError(f"ssl.keystore.location: {path} holds no private key and certificate")
    chain = b"".join(c.public_bytes(Encoding.PEM) for c in (cert, *extra))
    return chain.decode(), key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()


def _load_chain_from_memory(context: ssl.SSLContext, cert_pem: str, key_pem: str | None,
                            password: str | None) -> None:
    """``load_cert_chain`` reads only files: the PEM text goes through a file only this
    user can read, in a directory only this user can enter, removed at once."""
    import shutil
    import tempfile

    directory = tempfile.mkdtemp(prefix="pykfk-tls-")  # mode 0700
    try:
        path = os.path.join(directory, "chain.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(cert_pem if key_pem is None else f"{key_pem.strip()}\n{cert_pem}")
        context.load_cert_chain(path, password=password)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _protocol(props: Mapping[str, str]) -> str:
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise ValueError(f"security.protocol: unknown protocol {protocol!r}")
    return protocol


def _mechanism(protocol: str, key: str, mechanism: str) -> str:
    """The SASL mechanism, checked when the protocol logs in with SASL."""
    from pykfk.security.sasl import CLIENT_MECHANISMS

    mechanism = mechanism.strip().upper()
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL") and mechanism not in CLIENT_MECHANISMS:
        raise ValueError(f"{key}: {mechanism} is not one pykfk logs in with "
                         f"({', '.join(CLIENT_MECHANISMS)})")
    return mechanism


def read_properties(path: str) -> dict[str, str]:
    """A Java properties file of ``key=value`` lines (``#``/``!`` comments, ``\\``
    continuations), as Kafka's ``--command-config`` takes."""
    props: dict[str, str] = {}
    pending = ""
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = pending + raw.strip()
            pending = ""
            if line.endswith("\\"):
                pending = line[:-1]
                continue
            if not line or line[0] in "#!":
                continue
            key, sep, value = line.partition("=")
            if not sep:
                key, _, value = line.partition(":")
            props[key.strip()] = value.strip()
    return props


class AdminConnection(BrokerConnection):
    """A BrokerConnection that can speak TLS and log in with SASL before its first request."""

    def __init__(self, host: str, port: int, *, security: ClientSecurity, **kwargs: Any):
        super().__init__(host, port, **kwargs)
        self.security = security

    def connect(self) -> AdminConnection:
        if self._sock is not None:
            return self
        try:
            sock = socket.create_connection((self.host, self.port), self.connect_timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.security.uses_tls:
                sock.settimeout(self.connect_timeout)
                sock = self.security.tls_context().wrap_socket(sock, server_hostname=self.host)
        except (OSError, ssl.SSLError) as exc:
            raise ConnectionError_(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        sock.settimeout(self.request_timeout)
        self._sock = sock
        self._rbuf = bytearray()
        try:
            try:
                body = self.request(API_VERSIONS, {}, version=0)
            except ConnectionError_ as exc:
                # Often something else listens there (an HTTP server, a TLS port).
                raise ConnectionError_(f"{self.host}:{self.port} does not answer like a Kafka "
                                       f"broker ({exc.message})") from exc
            check(body.error_code, "ApiVersions")
            self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
            if self.security.uses_sasl:
                self._sasl_login()
        except BaseException:
            self.close()
            raise
        return self

    def _sasl_login(self) -> None:
        from pykfk.security.sasl import SaslClient

        mechanism = self.security.sasl_mechanism
        answer = self.request(SASL_HANDSHAKE, {"mechanism": mechanism})
        check(answer.error_code, f"SASL mechanism {mechanism} (broker offers "
                                 f"{', '.join(answer.mechanisms)})")
        bearer = ""
        if mechanism == "OAUTHBEARER":
            from pykfk.security.oauth_login import TokenEndpointError, client_bearer_token

            try:
                bearer = client_bearer_token(self.security.oauth)
            except TokenEndpointError as exc:
                raise KafkaError(ErrorCode.SASL_AUTHENTICATION_FAILED, f"no OAUTHBEARER token: {exc}") from None
        client = SaslClient(mechanism, self.security.sasl_username, self.security.sasl_password,
                            dict(self.security.sasl_extensions), bearer_token=bearer)
        token: bytes | None = client.first()
        while token is not None:
            reply = self.request(SASL_AUTHENTICATE, {"auth_bytes": token})
            check(reply.error_code, "SASL authentication", reply.error_message)
            token = client.step(bytes(reply.auth_bytes))


# --------------------------------------------------------------------------- results


@dataclasses.dataclass
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclasses.dataclass
class PartitionInfo:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    offline: list[int]
    error: str | None = None


@dataclasses.dataclass
class TopicInfo:
    name: str
    internal: bool
    partitions: list[PartitionInfo]

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)


@dataclasses.dataclass
class ConfigEntry:
    name: str
    value: str | None
    source: str
    read_only: bool
    sensitive: bool
    synonyms: list[tuple[str, str | None, str]] = dataclasses.field(default_factory=list)

    @property
    def is_default(self) -> bool:
        return self.source == "DEFAULT_CONFIG"


@dataclasses.dataclass
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: dict[str, list[int]]


@dataclasses.dataclass
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[GroupMember]
    coordinator: int


def decode_consumer_assignment(data: bytes) -> dict[str, list[int]]:
    """The topic -> partitions of a ConsumerProtocolAssignment (version int16, then an
    array of topic string + int32 array; user data after it is ignored)."""
    view = memoryview(data)
    if len(view) < 6:
        return {}
    pos = 2
    (topics,) = struct.unpack_from(">i", view, pos)
    pos += 4
    out: dict[str, list[int]] = {}
    for _ in range(max(topics, 0)):
        (name_len,) = struct.unpack_from(">h", view, pos)
        name = bytes(view[pos + 2 : pos + 2 + name_len]).decode("utf-8", "replace")
        pos += 2 + name_len
        (count,) = struct.unpack_from(">i", view, pos)
        pos += 4
        out[name] = list(struct.unpack_from(f">{count}i", view, pos)) if count > 0 else []
        pos += 4 * max(count, 0)
    return out


# ---------------------------------------------------------------------------- client


class AdminClient:
    """Admin operations against a Kafka-protocol cluster reached through ``bootstrap``
    (``host:port[,host:port]``). Not thread-safe; close() when done (or use ``with``)."""

    def __init__(
        self,
        bootstrap: str,
        *,
        timeout: float = 15.0,
        client_id: str = "pykfk-cli",
        security: ClientSecurity | None = None,
    ):
        self.bootstrap = parse_bootstrap(bootstrap)
        if not self.bootstrap:
            raise ValueError("no bootstrap server given")
        self.timeout = timeout
        self.client_id = client_id
        self.security = security or ClientSecurity()
        self.brokers: dict[int, BrokerInfo] = {}
        self.controller_id = -1
        self.cluster_id: str | None = None
        self._connections: dict[int | tuple[str, int], AdminConnection] = {}
        self._bootstrap_conn: AdminConnection | None = None
        self._coordinators: dict[str, int] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
        self._bootstrap_conn = None

    # ---------------------------------------------------------------- connections

    def _open(self, host: str, port: int, node_id: int = -1) -> AdminConnection:
        key: int | tuple[str, int] = node_id if node_id >= 0 else (host, port)
        conn = self._connections.get(key)
        if conn is None or not conn.connected:
            # Connecting takes at most a third of the budget, so a dead broker leaves
            # time to try another one.
            conn = AdminConnection(
                host, port, security=self.security, client_id=self.client_id,
                connect_timeout=max(self.timeout / 3, 0.5), request_timeout=self.timeout,
                node_id=node_id,
            )
            conn.connect()
            self._connections[key] = conn
        return conn

    def any_broker(self) -> AdminConnection:
        """A connection to the first bootstrap server that answers."""
        if self._bootstrap_conn is not None and self._bootstrap_conn.connected:
            return self._bootstrap_conn
        failures = []
        for host, port in self.bootstrap:
            try:
                self._bootstrap_conn = self._open(host, port)
                return self._bootstrap_conn
            except ConnectionError_ as exc:
                failures.append(str(exc.message))
        raise ConnectionError_("no bootstrap server answered (" + "; ".join(failures) + ")")

    def broker(self, node_id: int) -> AdminConnection:
        if node_id not in self.brokers:
            self.metadata([])
        info = self.brokers.get(node_id)
        if info is None:
            raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {node_id} is not in the cluster")
        return self._open(info.host, info.port, node_id)

    def controller(self) -> AdminConnection:
        self.metadata([])
        if self.controller_id < 0:
            return self.any_broker()
        return self.broker(self.controller_id)

    def call(self, conn: BrokerConnection, api_key: int, body: Mapping[str, Any],
             max_version: int | None = None) -> Any:
        """One request at the highest version both sides speak. A connection the broker
        closed while it sat idle (``connections.max.idle.ms``) is opened again and the
        request sent once more, as Kafka's clients do."""
        version = conn.version_for(api_key, max_version)
        was_open = conn.connected
        try:
            return conn.request(api_key, body, version=version)
        except ConnectionError_ as exc:
            if not was_open or exc.code == ErrorCode.REQUEST_TIMED_OUT:
                raise
        return conn.request(api_key, body, version=version)

    def supports(self, api_key: int) -> bool:
        return api_key in self.any_broker().api_versions

    def retrying(self, attempt: Callable[[], T]) -> T:
        """Run ``attempt`` again after RetryableAnswer (routing refreshed) until the
        timeout; the last answer is raised as KafkaError."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return attempt()
            except RetryableAnswer as exc:
                self._coordinators.clear()
                if time.monotonic() + _BACKOFF > deadline:
                    raise KafkaError(exc.code, exc.what) from None
                time.sleep(_BACKOFF)

    # ----------------------------------------------------------------- metadata

    def metadata(self, topics: list[str] | None = None, *, auto_create: bool = False) -> Any:
        """Metadata of ``topics`` (None: every topic; []: brokers only)."""
        body = {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": auto_create,
        }
        answer = self.call(self.any_broker(), 3, body)
        self.brokers = {
            b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in answer.brokers
        }
        self.controller_id = answer.controller_id
        self.cluster_id = answer.cluster_id
        return answer

    def describe_topics(self, names: list[str] | None = None) -> list[TopicInfo]:
        """Partitions, leaders, replicas and ISRs; UNKNOWN_TOPIC_OR_PARTITION raised for
        a named topic that does not exist."""
        answer = self.metadata(names)
        topics = []
        for t in answer.topics:
            check(t.error_code, f"topic {t.name!r}")
            partitions = [
                PartitionInfo(
                    p.partition_index, p.leader_id, list(p.replica_nodes), list(p.isr_nodes),
                    list(p.offline_replicas),
                    error_code(p.error_code).name if p.error_code else None,
                )
                for p in sorted(t.partitions, key=lambda p: p.partition_index)
            ]
            topics.append(TopicInfo(t.name, t.is_internal, partitions))
        return sorted(topics, key=lambda t: t.name)

    def topic(self, name: str) -> TopicInfo:
        return self.retrying(lambda: self.describe_topics([name])[0])

    def partition_counts(self) -> dict[str, int]:
        """topic -> partition count of every topic the cluster lists without an error
        (one being created or deleted is left out until it settles)."""
        return {t.name: len(t.partitions) for t in self.metadata(None).topics if not t.error_code}

    def probe(self, timeout: float) -> None:
        """Does a bootstrap server answer on a new connection within ``timeout``
        seconds? ConnectionError_ (or the login's KafkaError) when none does; the
        client's own connections are left as they are."""
        failures = []
        for host, port in self.bootstrap:
            conn = AdminConnection(host, port, security=self.security, client_id=self.client_id,
                                   connect_timeout=timeout, request_timeout=timeout)
            try:
                conn.connect()
                return
            except ConnectionError_ as exc:
                failures.append(str(exc.message))
            finally:
                conn.close()
        raise ConnectionError_("no bootstrap server answered (" + "; ".join(failures) + ")")

    def describe_cluster(self) -> dict[str, Any]:
        """Cluster id, controller and brokers (DescribeCluster when served, else Metadata)."""
        conn = self.any_broker()
        if 60 in conn.api_versions:
            answer = self.call(conn, 60, {"include_cluster_authorized_operations": False})
            check(answer.error_code, "DescribeCluster", answer.error_message)
            brokers = [BrokerInfo(b.broker_id, b.host, b.port, b.rack) for b in answer.brokers]
            cluster_id, controller = answer.cluster_id, answer.controller_id
        else:
            self.metadata([])
            brokers = list(self.brokers.values())
            cluster_id, controller = self.cluster_id, self.controller_id
        return {
            "cluster_id": cluster_id,
            "controller_id": controller,
            "brokers": sorted(brokers, key=lambda b: b.node_id),
        }

    # ------------------------------------------------------------------- topics

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: Mapping[str, str], *, validate_only: bool = False,
                     assignment: Sequence[Sequence[int]] | None = None) -> None:
        """CreateTopics; ``assignment`` lists each partition's replicas (then
        ``partitions`` and ``replication_factor`` must be -1, as Kafka requires)."""
        body = {
            "topics": [{
                "name": name, "num_partitions": partitions,
                "replication_factor": replication_factor,
                "assignments": [{"partition_index": i, "broker_ids": list(replicas)}
                                for i, replicas in enumerate(assignment or [])],
                "configs": [{"name": k, "value": v} for k, v in configs.items()],
            }],
            "timeout_ms": int(self.timeout * 1000),
            "validate_only": validate_only,
        }

        def attempt() -> None:
            answer = self.call(self.controller(), 19, body)
            for t in answer.topics:
                check(t.error_code, f"create topic {t.name!r}", t.error_message)

        self.retrying(attempt)

    def delete_topics(self, names: list[str]) -> dict[str, str | None]:
        """topic -> None when deleted, else the error name."""
        answer = self.call(self.controller(), 20, {
            "topic_names": names, "timeout_ms": int(self.timeout * 1000),
        })
        return {r.name: error_code(r.error_code).name if r.error_code else None
                for r in answer.responses}

    def create_partitions(self, topic: str, total: int, *, validate_only: bool = False) -> None:
        body = {
            "topics": [{"name": topic, "count": total, "assignments": None}],
            "timeout_ms": int(self.timeout * 1000), "validate_only": validate_only,
        }

        def attempt() -> None:
            answer = self.call(self.controller(), 37, body)
            for r in answer.results:
                check(r.error_code, f"add partitions to {r.name!r}", r.error_message)

        self.retrying(attempt)

    # ------------------------------------------------------------------ configs

    def _config_connection(self, resource_type: int, name: str) -> BrokerConnection:
        """A broker's own configs are asked of that broker (Kafka's rule); the rest of
        any broker."""
        if resource_type == RESOURCE_BROKER and name:
            return self.broker(int(name))
        return self.any_broker()

    def describe_configs(self, resource_type: int, name: str,
                         keys: list[str] | None = None) -> list[ConfigEntry]:
        conn = self._config_connection(resource_type, name)
        answer = self.call(conn, 32, {
            "resources": [{"resource_type": resource_type, "resource_name": name,
                           "configuration_keys": keys or None}],
            "include_synonyms": True,
        })
        entries = []
        for result in answer.results:
            check(result.error_code, f"configs of {_resource_label(resource_type, name)}",
                  result.error_message)
            for c in result.configs:
                source = CONFIG_SOURCES.get(c.config_source, "UNKNOWN")
                if c.config_source == -1:  # v0 has only is_default
                    source = "DEFAULT_CONFIG" if c.is_default else "UNKNOWN"
                synonyms = [(s.name, s.value, CONFIG_SOURCES.get(s.source, "UNKNOWN"))
                            for s in c.synonyms]
                entries.append(ConfigEntry(c.name, c.value, source, c.read_only,
                                           c.is_sensitive, synonyms))
        return sorted(entries, key=lambda e: e.name)

    def alter_configs(self, resource_type: int, name: str,
                      operations: list[tuple[str, int, str | None]],
                      *, validate_only: bool = False) -> None:
        """IncrementalAlterConfigs: (config name, CONFIG_SET/DELETE/APPEND/SUBTRACT, value)."""
        conn = self._config_connection(resource_type, name)
        answer = self.call(conn, 44, {
            "resources": [{
                "resource_type": resource_type, "resource_name": name,
                "configs": [{"name": k, "config_operation": op, "value": v}
                            for k, op, v in operations],
            }],
            "validate_only": validate_only,
        })
        for r in answer.responses:
            check(r.error_code, f"alter configs of {_resource_label(resource_type, name)}",
                  r.error_message)

    # ------------------------------------------------------------------ offsets

    def _by_leader(self, topic: str, partitions: Iterable[int]) -> dict[int, list[int]]:
        info = self.topic(topic)
        leaders = {p.partition: p.leader for p in info.partitions}
        grouped: dict[int, list[int]] = {}
        for p in partitions:
            if p not in leaders:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"topic {topic!r} has no partition {p}")
            if leaders[p] < 0:
                raise RetryableAnswer(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{p} has no leader")
            grouped.setdefault(leaders[p], []).append(p)
        return grouped

    def list_offsets(self, topic: str, partitions: Iterable[int],
                     timestamp: int, *, isolation_level: int = 0) -> dict[int, int]:
        """partition -> offset for ``timestamp`` (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP or
        ms since the epoch; -1 when no record is that recent), asked of each leader.
        ``isolation_level`` 1 (read_committed) answers the last stable offset for LATEST."""
        wanted = list(partitions)

        def attempt() -> dict[int, int]:
            out: dict[int, int] = {}
            for leader, parts in self._by_leader(topic, wanted).items():
                conn = self.broker(leader)
                # v1+ answers one offset per partition (v0's list is the seeds' API).
                answer = self.call(conn, 2, {
                    "replica_id": -1, "isolation_level": isolation_level,
                    "topics": [{"name": topic, "partitions": [
                        {"partition_index": p, "timestamp": timestamp} for p in parts]}],
                })
                for t in answer.topics:
                    for p in t.partitions:
                        check(p.error_code, f"offsets of {topic}-{p.partition_index}")
                        out[p.partition_index] = p.offset
            return out

        return self.retrying(attempt)

    def delete_records(self, topic: str, offsets: Mapping[int, int]) -> dict[int, int]:
        """DeleteRecords up to ``offsets`` (partition -> offset, -1 = high watermark);
        returns partition -> new low watermark."""

        def attempt() -> dict[int, int]:
            out: dict[int, int] = {}
            for leader, parts in self._by_leader(topic, offsets).items():
                answer = self.call(self.broker(leader), 21, {
                    "topics": [{"name": topic, "partitions": [
                        {"partition_index": p, "offset": offsets[p]} for p in parts]}],
                    "timeout_ms": int(self.timeout * 1000),
                })
                for t in answer.topics:
                    for p in t.partitions:
                        check(p.error_code, f"delete records of {topic}-{p.partition_index}")
                        out[p.partition_index] = p.low_watermark
            return out

        return self.retrying(attempt)

    # ------------------------------------------------------------- records

    def leaders(self, topic: str) -> dict[int, int]:
        """partition -> leader broker id (-1: none now)."""
        return {p.partition: p.leader for p in self.topic(topic).partitions}

    def produce(self, topic: str, partition: int, batch: bytes, *, acks: int = -1) -> int:
        """Send one magic-2 batch to the partition's leader; returns its base offset
        (-1 with acks=0, which gets no answer)."""

        def attempt() -> int:
            leader = self._by_leader(topic, [partition])
            conn = self.broker(next(iter(leader)))
            body = {"transactional_id": None, "acks": acks,
                    "timeout_ms": int(self.timeout * 1000),
                    "topic_data": [{"name": topic, "partition_data": [
                        {"index": partition, "records": batch}]}]}
            # Magic-2 batches need Produce v3 or later.
            version = conn.version_for(0)
            if version < 3:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker lacks Produce v3+")
            if acks == 0:
                conn.send(0, body, version=version, expect_response=False)
                return -1
            answer = conn.request(0, body, version=version)
            result = answer.responses[0].partition_responses[0]
            check(result.error_code, f"produce to {topic}-{partition}", result.error_message)
            return int(result.base_offset)

        return self.retrying(attempt)

    def fetch(self, leader: int, topic: str, positions: Mapping[int, int], *,
              max_wait_ms: int = 500, partition_max_bytes: int = 1 << 20,
              isolation_level: int = 0) -> list[Any]:
        """One Fetch of ``positions`` (partition -> offset) from ``leader``; returns the
        PartitionData structs (error_code, high_watermark, records...). With
        ``isolation_level`` 1 (read_committed) the leader answers up to the last stable
        offset and lists the aborted transactions (aborted_transactions)."""
        conn = self.broker(leader)
        version = conn.version_for(1)
        if version < 4:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker lacks Fetch v4+")
        answer = conn.request(1, {
            "replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1,
            "max_bytes": 64 << 20, "isolation_level": isolation_level, "session_id": 0,
            "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "partitions": [
                {"partition": p, "fetch_offset": offset, "log_start_offset": -1,
                 "partition_max_bytes": partition_max_bytes}
                for p, offset in positions.items()]}],
        }, version=version, timeout=self.timeout + max_wait_ms / 1000)
        check(answer.error_code, f"fetch from broker {leader}")
        return [p for t in answer.responses for p in t.partitions]

    # ------------------------------------------------------------------- groups

    def forget_coordinator(self, group: str) -> None:
        """Ask FindCoordinator again next time (the coordinator moved or went away)."""
        self._coordinators.pop(group, None)

    def coordinator(self, group: str) -> AdminConnection:
        node = self._coordinators.get(group)
        if node is None:
            answer = self.call(self.any_broker(), 10, {"key": group, "key_type": 0})
            check(answer.error_code, f"coordinator of group {group!r}",
                  answer.error_message)
            node = answer.node_id
            self.brokers.setdefault(node, BrokerInfo(node, answer.host, answer.port))
            self._coordinators[group] = node
        return self.broker(node)

    def list_groups(self, *, answered_only: bool = False) -> list[dict[str, str]]:
        """Every group of every broker (each coordinator knows only its own). With
        ``answered_only`` the groups of the brokers that answered (Kafka's
        ListConsumerGroupsResult.valid); the first failure is raised when none did."""
        self.metadata([])
        groups: dict[str, dict[str, str]] = {}
        failures: list[KafkaError] = []
        for node_id in sorted(self.brokers):
            try:
                answer = self.call(self.broker(node_id), 16, {})
                check(answer.error_code, f"groups of broker {node_id}")
            except KafkaError as exc:
                if not answered_only:
                    raise
                failures.append(exc)
                continue
            for g in answer.groups:
                groups[g.group_id] = {"group": g.group_id, "protocol_type": g.protocol_type}
        if failures and len(failures) == len(self.brokers):
            raise failures[0]
        return [groups[g] for g in sorted(groups)]

    def describe_group(self, group: str) -> GroupDescription:
        def attempt() -> GroupDescription:
            conn = self.coordinator(group)
            answer = self.call(conn, 15, {"groups": [group]})
            g = answer.groups[0]
            if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                # DescribeGroups v6+: no classic group of that name (none at all, or a
                # group of the consumer protocol); its committed offsets may still exist.
                return GroupDescription(group, "Dead", "", "", [], conn.node_id)
            check(g.error_code, f"group {group!r}")
            consumer = g.protocol_type in ("consumer", "")
            members = [
                GroupMember(
                    m.member_id, m.group_instance_id, m.client_id, m.client_host,
                    decode_consumer_assignment(bytes(m.member_assignment)) if consumer else {},
                )
                for m in g.members
            ]
            return GroupDescription(g.group_id, g.group_state, g.protocol_type,
                                    g.protocol_data, members, conn.node_id)

        return self.retrying(attempt)

    def committed_offsets(self, group: str) -> dict[tuple[str, int], int]:
        """(topic, partition) -> committed offset, for every partition the group has one."""

        def attempt() -> dict[tuple[str, int], int]:
            answer = self.call(self.coordinator(group), 9, {"group_id": group, "topics": None},
                               max_version=7)
            check(answer.error_code, f"offsets of group {group!r}")
            out = {}
            for t in answer.topics:
                for p in t.partitions:
                    check(p.error_code, f"offset of {t.name}-{p.partition_index}")
                    if p.committed_offset >= 0:
                        out[(t.name, p.partition_index)] = p.committed_offset
            return out

        return self.retrying(attempt)

    def commit_offsets(self, group: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """Commit as an admin (generation -1, no member): Kafka accepts it only while
        the group has no active members."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append({
                "partition_index": partition, "committed_offset": offset,
                "committed_metadata": "",
            })
        body = {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        }

        def attempt() -> None:
            answer = self.call(self.coordinator(group), 8, body)
            for t in answer.topics:
                for p in t.partitions:
                    check(p.error_code, f"commit {t.name}-{p.partition_index} for {group!r}")

        self.retrying(attempt)

    def delete_groups(self, groups: list[str]) -> dict[str, str | None]:
        """group -> None when deleted, else the error name."""
        out: dict[str, str | None] = {}
        for group in groups:
            def attempt(group: str = group) -> str | None:
                answer = self.call(self.coordinator(group), 42, {"groups_names": [group]})
                code = error_code(answer.results[0].error_code)
                if code in _RETRY_CODES:
                    raise RetryableAnswer(code, f"delete group {group!r}")
                return code.name if code else None

            try:
                out[group] = self.retrying(attempt)
            except KafkaError as exc:
                out[group] = exc.code.name
        return out

    def delete_offsets(self, group: str, topic: str, partitions: list[int]) -> dict[int, str | None]:
        """OffsetDelete: partition -> None when removed, else the error name."""

        def attempt() -> dict[int, str | None]:
            answer = self.call(self.coordinator(group), 47, {
                "group_id": group,
                "topics": [{"name": topic,
                            "partitions": [{"partition_index": p} for p in partitions]}],
            })
            check(answer.error_code, f"delete offsets of group {group!r}")
            return {p.partition_index: error_code(p.error_code).name if p.error_code else None
                    for t in answer.topics for p in t.partitions}

        return self.retrying(attempt)

    # --------------------------------------------------------------------- ACLs

    def describe_acls(self, acl_filter: Mapping[str, Any]) -> list[dict[str, Any]]:
        answer = self.call(self.any_broker(), 29, acl_filter)
        check(answer.error_code, "describe ACLs", answer.error_message)
        return [
            {"resource_type": r.resource_type, "resource_name": r.resource_name,
             "pattern_type": r.pattern_type, "principal": a.principal, "host": a.host,
             "operation": a.operation, "permission_type": a.permission_type}
            for r in answer.resources for a in r.acls
        ]

    def create_acls(self, bindings: list[Mapping[str, Any]]) -> None:
        answer = self.call(self.any_broker(), 30, {"creations": bindings})
        for r in answer.results:
            check(r.error_code, "create ACL", r.error_message)

    def delete_acls(self, acl_filter: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Removes the bindings matching the filter; returns them."""
        answer = self.call(self.any_broker(), 31, {"filters": [acl_filter]})
        removed = []
        for result in answer.filter_results:
            check(result.error_code, "delete ACLs", result.error_message)
            for m in result.matching_acls:
                check(m.error_code, "delete ACL", m.error_message)
                removed.append({
                    "resource_type": m.resource_type, "resource_name": m.resource_name,
                    "pattern_type": m.pattern_type, "principal": m.principal, "host": m.host,
                    "operation": m.operation, "permission_type": m.permission_type,
                })
        return removed

    # --------------------------------------------------------------- SCRAM users

    def describe_scram_users(self, users: list[str] | None = None) -> dict[str, list[tuple[int, int]]]:
        """user -> [(mechanism type, iterations)]."""
        answer = self.call(self.any_broker(), 50, {
            "users": [{"name": u} for u in users] if users else None,
        })
        check(answer.error_code, "describe SCRAM users", answer.error_message)
        out = {}
        for r in answer.results:
            check(r.error_code, f"user {r.user!r}", r.error_message)
            out[r.user] = [(c.mechanism, c.iterations) for c in r.credential_infos]
        return out

    def alter_scram_users(self, upsertions: Sequence[Mapping[str, Any]],
                          deletions: Sequence[Mapping[str, Any]]) -> None:
        answer = self.call(self.controller(), 51, {
            "upsertions": upsertions, "deletions": deletions,
        })
        for r in answer.results:
            check(r.error_code, f"user {r.user!r}", r.error_message)

    # ------------------------------------------------------------ reassignments

    def alter_reassignments(self, moves: Mapping[tuple[str, int], list[int] | None]) -> dict[tuple[str, int], str | None]:
        """AlterPartitionReassignments: (topic, partition) -> new replicas (None cancels);
        returns (topic, partition) -> None when accepted, else the error and message."""
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), replicas in sorted(moves.items()):
            by_topic.setdefault(topic, []).append(
                {"partition_index": partition, "replicas": replicas})

        def attempt() -> dict[tuple[str, int], str | None]:
            answer = self.call(self.controller(), 45, {
                "timeout_ms": int(self.timeout * 1000),
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
            })
            check(answer.error_code, "reassign partitions", answer.error_message)
            return {
                (t.name, p.partition_index):
                    _error_text(p.error_code, p.error_message) if p.error_code else None
                for t in answer.responses for p in t.partitions
            }

        return self.retrying(attempt)

    def list_reassignments(self) -> dict[tuple[str, int], dict[str, list[int]]]:
        """(topic, partition) -> replicas, adding and removing, of ongoing reassignments."""

        def attempt() -> dict[tuple[str, int], dict[str, list[int]]]:
            answer = self.call(self.controller(), 46, {
                "timeout_ms": int(self.timeout * 1000), "topics": None,
            })
            check(answer.error_code, "list reassignments", answer.error_message)
            return {
                (t.name, p.partition_index): {
                    "replicas": list(p.replicas), "adding": list(p.adding_replicas),
                    "removing": list(p.removing_replicas),
                }
                for t in answer.topics for p in t.partitions
            }

        return self.retrying(attempt)


def _resource_label(resource_type: int, name: str) -> str:
    if resource_type == RESOURCE_BROKER:
        return f"broker {name}" if name else "the broker defaults"
    return f"topic {name!r}"


def _error_text(code: int, message: str | None) -> str:
    name = error_code(code).name
    return f"{name}: {message}" if message else name
