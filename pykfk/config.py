"""Broker configuration: Kafka's own property names, types, defaults and validation.

Mirrors the broker and topic settings of apache/kafka (``KafkaConfig``, ``ServerLogConfigs``,
``TopicConfig``) that a standalone pykfk broker honours. Sources, in order of precedence:
``--override key=value`` > ``server.properties`` > defaults. Every value is validated when
the config is built; a bad one raises :class:`ConfigError` naming the key.

Every setting is declared once, like Kafka's ``ConfigDef``: broker settings in
``BROKER_KEYS`` (name, parser and validator, default, type, doc, dynamic or not) and
topic settings in ``TOPIC_KEYS`` (name, parser, the broker synonyms that supply their
default, the LogConfig attribute). Broker config, topic validation, ``LogConfig``,
DescribeConfigs and ``docs/configuration.md`` (``python -m pykfk.config --markdown``)
all read these two tables.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


class ConfigError(ValueError):
    """An unknown key or an invalid value; ``key`` names the offending setting."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


# ---------------------------------------------------------------------------------------
# Value types. Each parser takes the raw string (or an already typed value) and returns the
# typed value or raises ValueError with a message for the user.


def _parse_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ValueError(f"expected true or false, got {raw!r}")


def _int_parser(lo: int, hi: int) -> Callable[[Any], int]:
    def parse(raw: Any) -> int:
        if isinstance(raw, bool):
            raise ValueError(f"expected an integer, got {raw!r}")  # noqa: TRY004 - a bool given as a number is a bad value, reported like any other
        if isinstance(raw, int):
            value = raw
        else:
            text = str(raw).strip()
            if not re.fullmatch(r"[+-]?\d+", text):
                raise ValueError(f"expected an integer, got {raw!r}")
            value = int(text)
        if not lo <= value <= hi:
            raise ValueError(f"value {value} out of range [{lo}, {hi}]")
        return value

    return parse


def _parse_string(raw: Any) -> str:
    return str(raw).strip()


def _parse_list(raw: Any) -> list[str]:
    if isinstance(raw, (list, tuple)):
        return [str(item).strip() for item in raw if str(item).strip()]
    return [item.strip() for item in str(raw).split(",") if item.strip()]


def choice_parser(*choices: str) -> Callable[[Any], str]:
    def parse(raw: Any) -> str:
        text = str(raw).strip()
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {raw!r}")
        return text

    return parse


def _cleanup_policy(raw: Any) -> list[str]:
    items = _parse_list(raw)
    for item in items:
        if item not in ("delete", "compact"):
            raise ValueError(f"expected a list of delete, compact; got {raw!r}")
    if not items:
        raise ValueError("expected a list of delete, compact; got an empty list")
    return items


def _ratio(raw: Any) -> float:
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise ValueError(f"expected a number between 0 and 1, got {raw!r}") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"expected a number between 0 and 1, got {raw!r}")
    return value


INT = _int_parser(-(2**31), INT32_MAX)
LONG = _int_parser(-(2**63), INT64_MAX)


def _at_least(minimum: int, big: bool = False) -> Callable[[Any], int]:
    return _int_parser(minimum, INT64_MAX if big else INT32_MAX)


# Kafka's DescribeConfigs ConfigType codes (KIP-569), reported from DescribeConfigs v3.
CONFIG_TYPE_CODES = {"bool": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7,
                     "password": 9}


@dataclasses.dataclass(frozen=True)
class ConfigKey:
    """One setting: its Kafka name, parser, default (None = unset) and a one-line doc."""

    name: str
    parse: Callable[[Any], Any]
    default: Any
    doc: str
    kind: str = "string"  # bool/string/int/long/list, for DescribeConfigs
    # True for settings pykfk accepts for compatibility with Kafka's sample files but
    # does not act on (thread counts, replication settings of internal topics, ...).
    ignored: bool = False

    @property
    def dynamic(self) -> bool:
        """Updatable without a restart in Kafka (DescribeConfigs: not read-only)."""
        return self.name in DYNAMIC_BROKER_KEYS


def _key(name: str, parse: Callable[[Any], Any], default: Any, doc: str, kind: str, **kw: Any) -> ConfigKey:
    return ConfigKey(name, parse, default, doc, kind, **kw)


AUTHORIZER_NAMES = frozenset({
    "kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "pykfk.security.acl.Authorizer",
})


def _consumer_assignors(raw: Any) -> list[str]:
    """``uniform`` and ``range``, by short name or Kafka's class name."""
    known = {"uniform": "uniform", "range": "range",
             "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
             "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range"}
    items = _parse_list(raw)
    for item in items:
        if item not in known:
            raise ValueError(f"unknown assignor {item!r} (have uniform, range)")
    if not items:
        raise ValueError("expected at least one assignor")
    return [known[item] for item in items]


def _authorizer_name(raw: Any) -> str:
    name = str(raw).strip()
    if name and name not in AUTHORIZER_NAMES:
        raise ValueError(f"unknown authorizer {name!r} (pykfk has Kafka's ACL authorizer: "
                         "kafka.security.authorizer.AclAuthorizer)")
    return name


def _metrics_listener(raw: Any) -> str:
    value = str(raw).strip()
    if value:
        from pykfk.metrics.address import parse_listener

        parse_listener(value)  # ValueError names what is wrong
    return value


REPLICA_SELECTORS = frozenset({"org.apache.kafka.common.replica.RackAwareReplicaSelector",
                               "org.apache.kafka.common.replica.LeaderSelector"})


def _replica_selector(raw: Any) -> str | None:
    """Kafka's class names; the leader selector is the same as none."""
    name = str(raw).strip()
    if name and name not in REPLICA_SELECTORS:
        raise ValueError(f"unknown replica selector {name!r} (pykfk has "
                         "org.apache.kafka.common.replica.RackAwareReplicaSelector)")
    return name if name.endswith("RackAwareReplicaSelector") else None


def _store_type(raw: Any) -> str:
    """PEM, PKCS12 or JKS, in any case (Java compares store types ignoring case)."""
    text = str(raw).strip().upper()
    if text not in ("PEM", "PKCS12", "JKS"):
        raise ValueError(f"expected one of PEM, PKCS12, JKS, got {raw!r}")
    return text


COMPRESSION_TYPES = ("uncompressed", "gzip", "snappy", "lz4", "zstd", "producer")
_compression_type = choice_parser(*COMPRESSION_TYPES)


def _gzip_level(raw: Any) -> int:
    """-1 (zlib's default) or 1..9, as Kafka's compression.gzip.level."""
    value = INT(raw)
    if value != -1 and not 1 <= value <= 9:
        raise ValueError(f"expected -1 or a level from 1 to 9, got {raw!r}")
    return value


_TIERED = "tiered storage (KIP-405) is not supported by pykfk"


def _local_retention(raw: Any) -> int:
    value = LONG(raw)
    if value != -2:
        raise ValueError(f"{_TIERED}: only -2 (follow retention.*) is accepted")
    return value


def _remote_storage(raw: Any) -> bool:
    if _parse_bool(raw):
        raise ValueError(_TIERED)
    return False


def _throttled_replicas(raw: Any) -> list[str]:
    """``*`` or ``partition:broker`` pairs, as Kafka's throttled-replica lists."""
    items = _parse_list(raw)
    if items == ["*"]:
        return items
    for item in items:
        if not re.fullmatch(r"\d+:\d+", item):
            raise ValueError(f"expected * or a list of partition:broker, got {item!r}")
    return items


def _process_roles(raw: Any) -> list[str]:
    roles = [role.lower() for role in _parse_list(raw)]
    if any(role not in ("broker", "controller") for role in roles) or len(set(roles)) != len(roles):
        raise ValueError(f"expected broker and/or controller, got {raw!r}")
    if roles and set(roles) != {"broker", "controller"}:
        raise ValueError(f"{','.join(roles)}: pykfk runs a node that is both (broker,controller); "
                         "a cluster of pykfk brokers is coordinated through zookeeper.connect, not a KRaft quorum")
    return roles


def _principal_list(raw: Any) -> list[str]:
    items = raw if isinstance(raw, (list, tuple)) else str(raw).split(";")
    principals = [str(item).strip() for item in items if str(item).strip()]
    for principal in principals:
        kind, sep, name = principal.partition(":")
        if not (sep and kind and name):
            raise ValueError(f"expected principals like User:alice separated by ';', got {principal!r}")
    return principals


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = tuple(f"{p}:{p}" for p in SECURITY_PROTOCOLS)
# The settings that may be given per listener (listener.name.<listener>.<setting>).
PER_LISTENER_KEYS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
    "ssl.client.auth", "ssl.enabled.protocols", "ssl.protocol", "ssl.cipher.suites",
    "ssl.principal.mapping.rules", "ssl.endpoint.identification.algorithm",
    "sasl.enabled.mechanisms", "sasl.jaas.config", "connections.max.reauth.ms",
    # The JVM's own TLS settings, accepted per listener too (and logged as ignored).
    "ssl.secure.random.implementation", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
    "ssl.provider",
})
# OAUTHBEARER's settings, read per listener and mechanism as Kafka reads them
# (listener.name.<l>.oauthbearer.<setting>, then listener.name.<l>.<setting>, then <setting>).
OAUTHBEARER_LISTENER_KEYS = frozenset({
    "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.jwt.retriever.class",
    "sasl.oauthbearer.jwt.validator.class", "sasl.oauthbearer.client.credentials.client.id",
    "sasl.oauthbearer.client.credentials.client.secret", "sasl.oauthbearer.scope",
    "sasl.oauthbearer.header.urlencode", "sasl.oauthbearer.assertion.algorithm",
    "sasl.oauthbearer.assertion.claim.aud", "sasl.oauthbearer.assertion.claim.exp.seconds",
    "sasl.oauthbearer.assertion.claim.iss", "sasl.oauthbearer.assertion.claim.jti.include",
    "sasl.oauthbearer.assertion.claim.nbf.seconds", "sasl.oauthbearer.assertion.claim.sub",
    "sasl.oauthbearer.assertion.file", "sasl.oauthbearer.assertion.private.key.file",
    "sasl.oauthbearer.assertion.private.key.passphrase", "sasl.oauthbearer.assertion.template.file",
    "sasl.oauthbearer.jwks.endpoint.url", "sasl.oauthbearer.jwks.endpoint.refresh.ms",
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", "sasl.oauthbearer.expected.audience",
    "sasl.oauthbearer.expected.issuer", "sasl.oauthbearer.clock.skew.seconds",
    "sasl.oauthbearer.sub.claim.name", "sasl.oauthbearer.scope.claim.name",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds",
    "sasl.login.connect.timeout.ms", "sasl.login.read.timeout.ms", "sasl.login.retry.backoff.ms",
    "sasl.login.retry.backoff.max.ms",
})
PER_LISTENER_KEYS = PER_LISTENER_KEYS | OAUTHBEARER_LISTENER_KEYS
_LISTENER_KEY = re.compile(r"listener\.name\.([a-z_][a-z0-9_]*)\.(.+)")
_MECHANISM_JAAS_KEY = re.compile(
    r"([a-z0-9-]+)\.sasl\.(?:jaas\.config|server\.callback\.handler\.class|login\.callback\.handler\.class)")
_MECHANISM_KEY = re.compile(r"([a-z0-9-]+)\.(.+)")
# Kafka's JWT retrievers and validators (KIP-1139), by class name.
_OAUTH_PACKAGE = "org.apache.kafka.common.security.oauthbearer."
JWT_RETRIEVERS = tuple(_OAUTH_PACKAGE + n for n in (
    "DefaultJwtRetriever", "ClientCredentialsJwtRetriever", "JwtBearerJwtRetriever", "FileJwtRetriever"))
JWT_VALIDATORS = tuple(_OAUTH_PACKAGE + n for n in ("DefaultJwtValidator", "BrokerJwtValidator"))
CLIENT_JWT_VALIDATOR = _OAUTH_PACKAGE + "ClientJwtValidator"


def _jwt_retriever(raw: Any) -> str:
    name = _parse_string(raw)
    if name not in JWT_RETRIEVERS:
        raise ValueError(f"pykfk gets tokens with Kafka's JWT retrievers ({', '.join(JWT_RETRIEVERS)}), "
                         f"not {name}")
    return name


def _jwt_validator(raw: Any) -> str:
    name = _parse_string(raw)
    if name == CLIENT_JWT_VALIDATOR:
        raise ValueError("ClientJwtValidator does not check a token's signature: a broker validates tokens with "
                         "DefaultJwtValidator or BrokerJwtValidator (against sasl.oauthbearer.jwks.endpoint.url)")
    if name not in JWT_VALIDATORS:
        raise ValueError(f"pykfk checks tokens with Kafka's JWT validators ({', '.join(JWT_VALIDATORS)}), not {name}")
    return name


# Broker settings. Defaults are Kafka's, except where a standalone developer broker wants a
# friendlier one: listeners (loopback only) and log.dirs (./data instead of /tmp/kafka-logs).
BROKER_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        _key("broker.id", _at_least(-1), 0, "id of this broker", "int"),
        # KRaft's names (Kafka 4's config/server.properties): one node that is broker and
        # controller is what a pykfk broker without zookeeper.connect is.
        _key("node.id", _at_least(-1), None, "KRaft's name for broker.id (they must agree when both are set)", "int"),
        _key("process.roles", _process_roles, [],
             "KRaft roles: broker,controller (one node, its own controller) is what pykfk runs", "list"),
        _key("controller.listener.names", _parse_list, [],
             "KRaft controller listeners: not bound (the controller is inside this broker)", "list"),
        _key("listeners", _parse_list, ["PLAINTEXT://127.0.0.1:9092"], "addresses to listen on", "list"),
        _key("advertised.listeners", _parse_list, None, "addresses given to clients (default: listeners)", "list"),
        _key("log.dirs", _parse_list, None, "directories holding the partition logs", "list"),
        _key("log.dir", _parse_string, "./data", "log directory used when log.dirs is unset", "string"),
        _key("num.partitions", _at_least(1), 1, "default partition count of new topics", "int"),
        _key("default.replication.factor", _at_least(1), 1, "default replication factor", "int"),
        _key("auto.create.topics.enable", _parse_bool, True, "create topics on Metadata requests", "bool"),
        _key("message.max.bytes", _at_least(0), 1048588, "largest record batch accepted", "int"),
        _key("socket.request.max.bytes", _at_least(1), 104857600, "largest request frame", "int"),
        _key("log.segment.bytes", _at_least(14), 1073741824, "segment size before rolling", "int"),
        _key("log.roll.ms", _at_least(1, big=True), None, "segment age before rolling (ms)", "long"),
        _key("log.roll.hours", _at_least(1), 168, "segment age before rolling (hours)", "int"),
        _key("log.index.interval.bytes", _at_least(0), 4096, "bytes between offset index entries", "int"),
        _key("log.index.size.max.bytes", _at_least(4), 10485760, "maximum offset index size", "int"),
        _key("log.flush.interval.messages", _at_least(1, big=True), INT64_MAX, "messages between fsyncs", "long"),
        _key("log.flush.interval.ms", LONG, None, "ms between fsyncs", "long"),
        _key("log.flush.scheduler.interval.ms", LONG, INT64_MAX, "how often the flusher checks logs", "long"),
        # Log dir health (pykfk.log.manager): produce is refused on a dir with less free
        # space than the floor, so checkpoints, snapshots and metadata always have room.
        _key("log.dir.free.bytes.min", _at_least(0, big=True), 4194304,
             "free bytes below which a log dir refuses produce (KAFKA_STORAGE_ERROR)", "long"),
        _key("log.dir.free.bytes.alert", _at_least(0, big=True), 67108864,
             "free bytes below which a log dir raises its low-space alert", "long"),
        _key("log.dir.check.interval.ms", _at_least(1, big=True), 1000,
             "how often free space is measured and offline log dirs are probed", "long"),
        _key("log.retention.ms", LONG, None, "retention time (ms, -1 = unlimited)", "long"),
        _key("log.retention.minutes", INT, None, "retention time (minutes)", "int"),
        _key("log.retention.hours", INT, 168, "retention time (hours)", "int"),
        _key("log.retention.bytes", LONG, -1, "retention size per partition (-1 = unlimited)", "long"),
        _key("log.retention.check.interval.ms", _at_least(1, big=True), 300000, "retention check period", "long"),
        _key("log.segment.delete.delay.ms", _at_least(0, big=True), 60000, "delay before deleting a segment file", "long"),
        _key("log.cleanup.policy", _cleanup_policy, ["delete"], "default cleanup policy", "list"),
        # Log compaction (pykfk.log.cleaner) for topics with cleanup.policy=compact.
        _key("log.cleaner.enable", _parse_bool, True, "run the log cleaner", "bool"),
        _key("log.cleaner.backoff.ms", _at_least(0, big=True), 15000, "pause between cleaner passes", "long"),
        _key("log.cleaner.dedupe.buffer.size", _at_least(1, big=True), 134217728, "cleaner offset map memory", "long"),
        _key("log.cleaner.min.cleanable.ratio", _ratio, 0.5, "dirty share that makes a log cleanable", "double"),
        _key("log.cleaner.delete.retention.ms", _at_least(0, big=True), 86400000, "how long tombstones stay", "long"),
        _key("log.cleaner.min.compaction.lag.ms", _at_least(0, big=True), 0, "records younger stay uncompacted", "long"),
        _key("log.cleaner.threads", _at_least(0), 1, "cleaner threads (one worker here)", "int", ignored=True),
        _key("log.cleaner.io.buffer.size", _at_least(0), 524288, "cleaner I/O buffer", "int", ignored=True),
        _key("log.cleaner.io.max.bytes.per.second", _parse_string, "1.7976931348623157E308", "cleaner I/O cap", "double", ignored=True),
        _key("log.preallocate", _parse_bool, False, "preallocate segment files", "bool"),
        _key("log.cleaner.max.compaction.lag.ms", _at_least(1, big=True), INT64_MAX,
             "a dirty record is compacted within this long (the active segment rolls for it)", "long"),
        _key("log.roll.jitter.ms", _at_least(0, big=True), None, "random share taken off segment.ms per segment", "long"),
        _key("log.roll.jitter.hours", _at_least(0), 0, "log.roll.jitter.ms in hours", "int"),
        _key("compression.type", _compression_type, "producer",
             "codec batches are stored with (producer: as the producer sent them)", "string"),
        _key("compression.gzip.level", _gzip_level, -1, "gzip level of batches the broker compresses (KIP-390)", "int"),
        _key("compression.lz4.level", _int_parser(1, 17), 9, "lz4 level of batches the broker compresses", "int"),
        _key("compression.zstd.level", _int_parser(-131072, 22), 3, "zstd level of batches the broker compresses",
             "int"),
        _key("log.message.timestamp.before.max.ms", _at_least(0, big=True), INT64_MAX,
             "CreateTime records older than this are refused (KIP-937)", "long"),
        _key("log.message.timestamp.after.max.ms", _at_least(0, big=True), INT64_MAX,
             "CreateTime records this far in the future are refused (KIP-937)", "long"),
        _key("log.message.timestamp.difference.max.ms", _at_least(0, big=True), INT64_MAX,
             "deprecated: both of the above at once", "long"),
        _key("log.local.retention.ms", _local_retention, -2, "tiered storage: not supported (-2 only)", "long"),
        _key("log.local.retention.bytes", _local_retention, -2, "tiered storage: not supported (-2 only)", "long"),
        _key(
            "log.message.timestamp.type",
            choice_parser("CreateTime", "LogAppendTime"),
            "CreateTime",
            "timestamp kept in batches",
            "string",
        ),
        _key("connections.max.idle.ms", LONG, 600000, "close connections idle this long", "long"),
        _key("queued.max.requests", _at_least(1), 500, "requests read ahead per connection", "int"),
        _key("offsets.topic.num.partitions", _at_least(1), 50, "partitions of the offsets topic", "int"),
        _key("group.initial.rebalance.delay.ms", _at_least(0), 3000, "delay of the first rebalance", "int"),
        _key("group.min.session.timeout.ms", _at_least(0), 6000, "shortest session timeout a member may ask", "int"),
        _key("group.max.session.timeout.ms", _at_least(0), 1800000, "longest session timeout a member may ask", "int"),
        _key("group.max.size", _at_least(1), INT32_MAX, "most members in one consumer group", "int"),
        # pykfk: bound on one member's JoinGroup protocol metadata and one SyncGroup assignment.
        _key("group.member.metadata.max.bytes", _at_least(0), 1048576, "largest member metadata or assignment", "int"),
        # Consumer-protocol groups (KIP-848), Kafka's names and defaults.
        _key("group.consumer.session.timeout.ms", _at_least(1), 45000,
             "consumer-protocol members not heard from this long are fenced", "int"),
        _key("group.consumer.heartbeat.interval.ms", _at_least(1), 5000,
             "how often consumer-protocol members heartbeat", "int"),
        _key("group.consumer.assignors", _consumer_assignors, ["uniform", "range"],
             "server-side assignors of consumer-protocol groups, the first the default", "list"),
        _key("group.consumer.max.size", _at_least(1), INT32_MAX, "most members in one consumer-protocol group", "int"),
        # Share groups (KIP-932), Kafka's names and defaults.
        _key("group.share.session.timeout.ms", _at_least(1), 45000, "share-group members not heard from this long are fenced", "int"),
        _key("group.share.min.session.timeout.ms", _at_least(1), 45000, "shortest share-group session timeout", "int"),
        _key("group.share.max.session.timeout.ms", _at_least(1), 60000, "longest share-group session timeout", "int"),
        _key("group.share.heartbeat.interval.ms", _at_least(1), 5000, "how often share-group members heartbeat", "int"),
        _key("group.share.min.heartbeat.interval.ms", _at_least(1), 5000, "shortest share-group heartbeat interval", "int"),
        _key("group.share.max.heartbeat.interval.ms", _at_least(1), 15000, "longest share-group heartbeat interval", "int"),
        _key("group.share.record.lock.duration.ms", _at_least(1000), 30000, "how long a share-group member holds records it acquired", "int"),
        _key("group.share.min.record.lock.duration.ms", _at_least(1000), 15000, "shortest acquisition lock", "int"),
        _key("group.share.max.record.lock.duration.ms", _at_least(1000), 60000, "longest acquisition lock", "int"),
        _key("group.share.delivery.count.limit", _at_least(2), 5, "deliveries of a record before it is archived", "int"),
        _key("group.share.partition.max.record.locks", _at_least(1), 2000, "most records in flight per share partition", "int"),
        _key("group.share.max.size", _at_least(1), 200, "most members in one share group", "int"),
        _key("group.share.max.groups", _at_least(1), 10, "most share groups", "int"),
        _key("group.share.assignors", _parse_list, ["simple"], "server-side assignors of share groups", "list"),
        _key("group.share.enable", _parse_bool, True, "serve share groups", "bool"),
        _key("share.coordinator.state.topic.num.partitions", _at_least(1), 50,
             "partitions of __share_group_state (fixed once the topic exists)", "int"),
        _key("share.coordinator.state.topic.replication.factor", _at_least(1), 3,
             "replication factor of __share_group_state (fewer when fewer brokers are up)", "int"),
        _key("offsets.retention.minutes", _at_least(1), 10080, "keep committed offsets of empty groups this long", "int"),
        _key("offsets.retention.check.interval.ms", _at_least(1, big=True), 600000, "offset expiry check period", "long"),
        _key("offset.metadata.max.bytes", _at_least(0), 4096, "largest metadata string of a committed offset", "int"),
        _key("zookeeper.connect", _parse_string, None, "ZooKeeper connect string (cluster mode)", "string"),
        # Cluster mode (zookeeper.connect set): membership, controller, replication.
        _key("zookeeper.session.timeout.ms", _at_least(1), 18000, "ZooKeeper session timeout", "int"),
        _key("zookeeper.connection.timeout.ms", _at_least(1), 18000, "wait this long for ZooKeeper at start", "int"),
        _key("broker.rack", _parse_string, None, "rack of this broker (rack-aware replica placement)", "string"),
        _key("replica.selector.class", _replica_selector, None,
             "RackAwareReplicaSelector: consumers with client.rack read from an in-sync replica in their rack (KIP-392)",
             "string"),
        _key("min.insync.replicas", _at_least(1), 1, "ISR size acks=all needs", "int"),
        _key("unclean.leader.election.enable", _parse_bool, False, "elect a leader outside the ISR", "bool"),
        _key("offsets.topic.replication.factor", _at_least(1), 3, "replication factor of the offsets topic", "int"),
        _key("offsets.commit.timeout.ms", _at_least(1), 5000, "wait this long for an offset commit to replicate", "int"),
        # The transaction coordinator (pykfk.txn), Kafka's names and defaults.
        _key("transaction.state.log.num.partitions", _at_least(1), 50, "partitions of the transaction state topic", "int"),
        _key("transaction.state.log.replication.factor", _at_least(1), 3,
             "replication factor of the transaction state topic", "int"),
        _key("transaction.state.log.min.isr", _at_least(1), 2, "min.insync.replicas of the transaction state topic", "int"),
        _key("transaction.state.log.segment.bytes", _at_least(1), 104857600,
             "segment size of the transaction state topic", "int"),
        _key("transaction.max.timeout.ms", _at_least(1), 900000, "longest transaction.timeout.ms a producer may ask",
             "int"),
        _key("transactional.id.expiration.ms", _at_least(1), 604800000,
             "forget transactional ids idle this long", "int"),
        _key("transaction.abort.timed.out.transaction.cleanup.interval.ms", _at_least(1), 10000,
             "how often timed-out transactions are looked for", "int"),
        _key("transaction.remove.expired.transaction.cleanup.interval.ms", _at_least(1), 3600000,
             "how often expired transactional ids are looked for", "int"),
        _key("replica.lag.time.max.ms", _at_least(1, big=True), 30000, "followers not caught up this long leave the ISR", "long"),
        _key("replica.fetch.max.bytes", _at_least(0), 1048576, "bytes a follower fetches per partition", "int"),
        _key("replica.fetch.response.max.bytes", _at_least(0), 10485760, "bytes a follower fetches per request", "int"),
        _key("replica.fetch.wait.max.ms", _at_least(0), 500, "longest wait of a follower fetch", "int"),
        _key("replica.fetch.min.bytes", _at_least(1), 1, "bytes a follower fetch waits for", "int"),
        _key("max.incremental.fetch.session.cache.slots", _at_least(0), 1000,
             "incremental fetch sessions (KIP-227) the broker keeps at once", "int"),
        _key("min.incremental.fetch.session.eviction.ms", _at_least(0), 120000,
             "a consumer's fetch session used this recently is not evicted for another's", "int"),
        _key("replica.fetch.backoff.ms", _at_least(0), 1000, "pause after a failed follower fetch", "int"),
        _key("replica.socket.timeout.ms", _at_least(1), 30000, "timeout of follower requests", "int"),
        _key("follower.replication.throttled.rate", _at_least(1, big=True), INT64_MAX,
             "bytes per second this broker fetches for replicas it is adding in a reassignment", "long"),
        _key("leader.replication.throttled.rate", _at_least(1, big=True), INT64_MAX,
             "bytes per second this broker as leader sends to replicas being added in a reassignment", "long"),
        _key("replica.alter.log.dirs.io.max.bytes.per.second", _at_least(1, big=True), INT64_MAX,
             "bytes per second a move between log dirs (AlterReplicaLogDirs) copies", "long"),
        _key("replica.high.watermark.checkpoint.interval.ms", _at_least(1, big=True), 5000, "high watermark checkpoint period", "long"),
        _key("auto.leader.rebalance.enable", _parse_bool, True, "move leadership back to preferred replicas", "bool"),
        _key("leader.imbalance.check.interval.seconds", _at_least(1, big=True), 300, "preferred leader check period", "long"),
        _key("leader.imbalance.per.broker.percentage", _at_least(0), 10, "tolerated share of moved leaderships", "int"),
        _key("controlled.shutdown.enable", _parse_bool, True, "move leaderships away before stopping", "bool"),
        _key("controlled.shutdown.max.retries", _at_least(1), 3, "controlled shutdown attempts", "int"),
        _key("controlled.shutdown.retry.backoff.ms", _at_least(0, big=True), 5000, "pause between attempts", "long"),
        # Listeners and security (pykfk.security). Every SSL and SASL setting may also be
        # given per listener as listener.name.<listener>.<setting> (lower-case listener).
        _key("listener.security.protocol.map", _parse_list, list(DEFAULT_PROTOCOL_MAP),
             "listener name -> security protocol, as NAME:PROTOCOL pairs", "list"),
        _key("inter.broker.listener.name", _parse_string, None,
             "listener brokers use among themselves (default: PLAINTEXT, else the first)", "string"),
        _key("security.inter.broker.protocol", choice_parser(*SECURITY_PROTOCOLS), None,
             "brokers talk to each other on the listener named after this protocol (instead of "
             "inter.broker.listener.name)", "string"),
        _key("ssl.keystore.type", _store_type, "PEM", "format of the key store (PEM, PKCS12, JKS)", "string"),
        _key("ssl.keystore.location", _parse_string, None, "key store file (PEM: key and certificate chain)", "string"),
        _key("ssl.keystore.password", _parse_string, None, "password of the key store file", "password"),
        _key("ssl.key.password", _parse_string, None, "password of the private key", "password"),
        _key("ssl.keystore.certificate.chain", _parse_string, None, "certificate chain as inline PEM", "password"),
        _key("ssl.keystore.key", _parse_string, None, "private key as inline PEM", "password"),
        _key("ssl.truststore.type", _store_type, "PEM", "format of the trust store (PEM, PKCS12, JKS)", "string"),
        _key("ssl.truststore.location", _parse_string, None, "trusted CA certificates file", "string"),
        _key("ssl.truststore.password", _parse_string, None, "password of the trust store file", "password"),
        _key("ssl.truststore.certificates", _parse_string, None, "trusted CA certificates as inline PEM", "password"),
        _key("ssl.client.auth", choice_parser("none", "requested", "required"), "none",
             "ask clients for a certificate", "string"),
        _key("ssl.enabled.protocols", _parse_list, ["TLSv1.2", "TLSv1.3"], "TLS versions accepted", "list"),
        _key("ssl.protocol", _parse_string, "TLSv1.3", "TLS version brokers offer as clients", "string"),
        _key("ssl.cipher.suites", _parse_list, [],
             "enabled cipher suites, TLS 1.3 names (TLS_AES_128_GCM_SHA256) and TLS 1.2 ones in OpenSSL's spelling, "
             "the server's first choice first; empty: TLS 1.3's usual three with AES-128-GCM first, OpenSSL's "
             "TLS 1.2 suites", "list"),
        _key("ssl.principal.mapping.rules", _parse_string, "DEFAULT",
             "rules turning a client certificate's subject into a principal", "string"),
        _key("ssl.endpoint.identification.algorithm", _parse_string, "https",
             "check the host name in other brokers' certificates (empty: do not)", "string"),
        _key("sasl.enabled.mechanisms", _parse_list, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
             "SASL mechanisms offered on SASL listeners", "list"),
        _key("sasl.mechanism.inter.broker.protocol", _parse_string, "PLAIN",
             "SASL mechanism brokers log in to each other with", "string"),
        _key("sasl.jaas.config", _parse_string, None,
             "JAAS login module settings (usually per listener and mechanism)", "password"),
        _key("connections.max.reauth.ms", _at_least(0, big=True), 0,
             "SASL sessions expire after this long unless the client logs in again (0: never)", "long"),
        _key("connection.failed.authentication.delay.ms", _at_least(0), 100,
             "delay before answering and closing a failed login", "int"),
        _key("sasl.server.max.receive.size", _at_least(1), 524288,
             "largest request a client may send before it has logged in (SASL listeners)", "int"),
        _key("sasl.server.callback.handler.class", _parse_string, None,
             "OAUTHBEARER validator (Kafka's class names; usually per listener and mechanism)", "string"),
        # GSSAPI (pykfk.security.kerberos): the broker's keytab comes with the listener's
        # gssapi.sasl.jaas.config (Krb5LoginModule keyTab= principal=).
        _key("sasl.kerberos.service.name", _parse_string, None,
             "Kerberos service name of the brokers (the first component of their principal)", "string"),
        _key("sasl.kerberos.principal.to.local.rules", _parse_list, ["DEFAULT"],
             "rules turning Kerberos names into principal names (Kafka's / Hadoop's auth_to_local)", "list"),
        # OAUTHBEARER (pykfk.security.oauth, KIP-768): JWTs checked against a JWKS.
        _key("sasl.oauthbearer.jwks.endpoint.url", _parse_string, None,
             "the identity provider's JWKS (https://, http:// or file:)", "string"),
        _key("sasl.oauthbearer.jwks.endpoint.refresh.ms", _at_least(1, big=True), 3600000,
             "how often the JWKS is fetched again", "long"),
        _key("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", _at_least(0, big=True), 100,
             "least time between fetches for a key id the JWKS lacks", "long"),
        _key("sasl.oauthbearer.expected.audience", _parse_list, [],
             "audiences a token must name one of (empty: not checked)", "list"),
        _key("sasl.oauthbearer.expected.issuer", _parse_string, None,
             "issuer a token must name (unset: not checked)", "string"),
        _key("sasl.oauthbearer.clock.skew.seconds", _at_least(0), 30,
             "tolerated clock difference with the identity provider", "int"),
        _key("sasl.oauthbearer.sub.claim.name", _parse_string, "sub",
             "claim naming the principal", "string"),
        _key("sasl.oauthbearer.scope.claim.name", _parse_string, "scope",
             "claim holding a token's scopes (each must be non-blank, none twice)", "string"),
        _key("sasl.oauthbearer.jwt.validator.class", _jwt_validator, JWT_VALIDATORS[0],
             "how tokens are checked: Kafka's DefaultJwtValidator or BrokerJwtValidator (signature, claims)",
             "string"),
        # This broker's own OAUTHBEARER logins to the others (client credentials or a
        # signed assertion, KIP-1139; the JAAS options clientId/clientSecret/scope also do).
        _key("sasl.oauthbearer.token.endpoint.url", _parse_string, None,
             "the identity provider's token endpoint a broker gets its own tokens from", "string"),
        _key("sasl.oauthbearer.jwt.retriever.class", _jwt_retriever, JWT_RETRIEVERS[0],
             "how a broker gets its own tokens: Kafka's DefaultJwtRetriever (client credentials, or the token "
             "of a file: endpoint), ClientCredentialsJwtRetriever, JwtBearerJwtRetriever or FileJwtRetriever",
             "string"),
        _key("sasl.oauthbearer.client.credentials.client.id", _parse_string, None,
             "client id of the client-credentials grant (over the JAAS option clientId)", "string"),
        _key("sasl.oauthbearer.client.credentials.client.secret", _parse_string, None,
             "client secret of the client-credentials grant (over the JAAS option clientSecret)", "password"),
        _key("sasl.oauthbearer.scope", _parse_string, None,
             "scope asked for at the token endpoint (over the JAAS option scope)", "string"),
        _key("sasl.oauthbearer.header.urlencode", _parse_bool, False,
             "URL-encode the client id and secret in the token request's Basic credentials", "bool"),
        _key("sasl.oauthbearer.assertion.algorithm", choice_parser("RS256", "ES256"), "RS256",
             "signature algorithm of the jwt-bearer grant's assertion", "string"),
        _key("sasl.oauthbearer.assertion.claim.aud", _parse_string, None, "aud claim of the assertion", "string"),
        _key("sasl.oauthbearer.assertion.claim.exp.seconds", _at_least(0), 300,
             "the assertion expires this long after it is made", "int"),
        _key("sasl.oauthbearer.assertion.claim.iss", _parse_string, None, "iss claim of the assertion", "string"),
        _key("sasl.oauthbearer.assertion.claim.jti.include", _parse_bool, False,
             "give each assertion a random jti claim", "bool"),
        _key("sasl.oauthbearer.assertion.claim.nbf.seconds", _at_least(0), 60,
             "the assertion is valid from this long before it is made", "int"),
        _key("sasl.oauthbearer.assertion.claim.sub", _parse_string, None, "sub claim of the assertion", "string"),
        _key("sasl.oauthbearer.assertion.file", _parse_string, None,
             "a file holding a ready-made assertion (read again for each request), instead of signing one",
             "string"),
        _key("sasl.oauthbearer.assertion.private.key.file", _parse_string, None,
             "PEM private key (PKCS#8) the assertion is signed with", "string"),
        _key("sasl.oauthbearer.assertion.private.key.passphrase", _parse_string, None,
             "passphrase of the assertion's private key", "password"),
        _key("sasl.oauthbearer.assertion.template.file", _parse_string, None,
             "JSON file with \"header\" and \"payload\" objects laid under the assertion's own", "string"),
        _key("sasl.login.callback.handler.class", _parse_string, None,
             "how a broker gets its own OAUTHBEARER tokens (Kafka's class names; usually per listener and "
             "mechanism)", "string"),
        _key("sasl.login.refresh.window.factor", _ratio, 0.8,
             "a broker's own token is fetched again at this fraction of its lifetime", "double"),
        _key("sasl.login.refresh.window.jitter", _ratio, 0.05,
             "random fraction of the lifetime added to the refresh time", "double"),
        _key("sasl.login.refresh.min.period.seconds", _int_parser(0, 900), 60,
             "least time between two fetches of a broker's own token", "short"),
        _key("sasl.login.refresh.buffer.seconds", _int_parser(0, 3600), 300,
             "a broker's own token is fetched again at least this long before it expires", "short"),
        _key("sasl.login.connect.timeout.ms", _at_least(1), None, "token endpoint connect timeout", "int"),
        _key("sasl.login.read.timeout.ms", _at_least(1), None, "token endpoint read timeout", "int"),
        _key("sasl.login.retry.backoff.ms", _at_least(0, big=True), 100,
             "first wait before asking the token endpoint again after a failure", "long"),
        _key("sasl.login.retry.backoff.max.ms", _at_least(0, big=True), 10000,
             "longest wait between attempts at the token endpoint", "long"),
        # Delegation tokens (pykfk.security.tokens, KIP-48): disabled without a secret.
        _key("delegation.token.secret.key", _parse_string, None,
             "key of the tokens' HMACs, the same on every broker (empty: tokens disabled)", "password"),
        _key("delegation.token.max.lifetime.ms", _at_least(1, big=True), 604800000,
             "longest a token can live, renewals included", "long"),
        _key("delegation.token.expiry.time.ms", _at_least(1, big=True), 86400000,
             "a token expires this long after its creation or renewal unless renewed", "long"),
        _key("delegation.token.expiry.check.interval.ms", _at_least(1, big=True), 3600000,
             "how often expired tokens are removed from the store", "long"),
        _key("delegation.token.scram.without.extension", _parse_bool, False,
             "pykfk: a SCRAM login without the tokenauth extension may use a token (for clients that "
             "cannot send it, e.g. librdkafka)", "bool"),
        # Authorization (pykfk.security.acl): Kafka's ACL authorizer under any of its names.
        _key("authorizer.class.name", _authorizer_name, "",
             "ACL authorizer (kafka.security.authorizer.AclAuthorizer or StandardAuthorizer; empty: none)", "string"),
        _key("super.users", _principal_list, [], "principals allowed everything, separated by ';'", "list"),
        _key("allow.everyone.if.no.acl.found", _parse_bool, False,
             "allow access to resources no ACL names", "bool"),
        # Monitoring (pykfk.metrics, docs/metrics.md).
        _key("metrics.listener", _metrics_listener, "",
             "Prometheus endpoint as http://HOST:PORT, bound on that host only (empty: none)", "string"),
        # Accepted for Kafka's sample server.properties; no effect on a pykfk broker.
        *[
            _key(name, parse, default, "accepted for compatibility; no effect", kind, ignored=True)
            for name, parse, default, kind in [
                ("num.network.threads", _at_least(1), 3, "int"),
                ("num.io.threads", _at_least(1), 8, "int"),
                ("socket.send.buffer.bytes", INT, 102400, "int"),
                ("socket.receive.buffer.bytes", INT, 102400, "int"),
                ("num.recovery.threads.per.data.dir", _at_least(1), 1, "int"),
                ("transaction.state.log.replication.factor", _at_least(1), 3, "int"),
                ("transaction.state.log.min.isr", _at_least(1), 2, "int"),
                ("delete.topic.enable", _parse_bool, True, "bool"),
                # The JVM's TLS and security providers: Python's ssl module (OpenSSL) does
                # the TLS here.
                ("ssl.secure.random.implementation", _parse_string, None, "string"),
                ("ssl.keymanager.algorithm", _parse_string, "SunX509", "string"),
                ("ssl.trustmanager.algorithm", _parse_string, "PKIX", "string"),
                ("ssl.provider", _parse_string, None, "string"),
                ("security.providers", _parse_string, None, "string"),
                # Kerberos: the JVM's ticket renewal (a broker only accepts, with its keytab).
                ("sasl.kerberos.kinit.cmd", _parse_string, "/usr/bin/kinit", "string"),
                ("sasl.kerberos.min.time.before.relogin", LONG, 60000, "long"),
                ("sasl.kerberos.ticket.renew.window.factor", _ratio, 0.8, "double"),
                ("sasl.kerberos.ticket.renew.jitter", _ratio, 0.05, "double"),
                # JMX and the JVM's metric reporters (pykfk: metrics.listener, Prometheus).
                ("metric.reporters", _parse_list, list[str](), "list"),
                ("metrics.num.samples", _at_least(1), 2, "int"),
                ("metrics.sample.window.ms", _at_least(1, big=True), 30000, "long"),
                ("metrics.recording.level", _parse_string, "INFO", "string"),
                ("kafka.metrics.reporters", _parse_list, [], "list"),
                ("kafka.metrics.polling.interval.secs", _at_least(1), 10, "int"),
                ("auto.include.jmx.reporter", _parse_bool, True, "bool"),
                # Thread pools and buffers of Kafka's JVM broker.
                ("background.threads", _at_least(1), 10, "int"),
                ("num.replica.fetchers", _at_least(1), 1, "int"),
                ("num.replica.alter.log.dirs.threads", INT, None, "int"),
                ("socket.listen.backlog.size", _at_least(1), 50, "int"),
                ("queued.max.request.bytes", LONG, -1, "long"),
                ("log.cleaner.io.buffer.load.factor", _ratio, 0.9, "double"),
                ("log.flush.offset.checkpoint.interval.ms", _at_least(0), 60000, "int"),
                ("log.flush.start.offset.checkpoint.interval.ms", _at_least(0), 60000, "int"),
                # Message format and protocol versions: pykfk speaks the current ones.
                ("inter.broker.protocol.version", _parse_string, None, "string"),
                ("log.message.format.version", _parse_string, "3.0-IV1", "string"),
                ("log.message.downconversion.enable", _parse_bool, True, "bool"),
                ("zookeeper.set.acl", _parse_bool, False, "bool"),
                ("zookeeper.max.in.flight.requests", _at_least(1), 10, "int"),
                # KRaft's quorum of one: this broker is its own controller.
                ("controller.quorum.voters", _parse_list, [], "list"),
                ("controller.quorum.bootstrap.servers", _parse_list, [], "list"),
                ("share.coordinator.state.topic.min.isr", _at_least(1), 2, "int"),
            ]
        ],
    ]
}


# Kafka's dynamically updatable broker settings (DynamicBrokerConfig) that a running pykfk
# broker takes without a restart: the log settings that are topic defaults (the cleaner's
# among them); thread counts are accepted and have no effect. Listeners are bound once at
# start and the cleaner's pacing is set then, so pykfk reports those read-only, as it
# does every other broker setting.
DYNAMIC_BROKER_KEYS = frozenset({
    "log.segment.bytes", "log.roll.ms", "log.roll.hours", "log.index.size.max.bytes",
    "log.index.interval.bytes", "log.flush.interval.messages", "log.flush.interval.ms",
    "log.retention.ms", "log.retention.minutes", "log.retention.hours", "log.retention.bytes",
    "log.segment.delete.delay.ms", "log.cleanup.policy", "log.cleaner.min.cleanable.ratio",
    "log.cleaner.delete.retention.ms", "log.cleaner.min.compaction.lag.ms", "log.preallocate",
    "log.message.timestamp.type", "message.max.bytes", "min.insync.replicas",
    "log.cleaner.max.compaction.lag.ms", "log.roll.jitter.ms", "log.roll.jitter.hours", "compression.type",
    "compression.gzip.level", "compression.lz4.level", "compression.zstd.level",
    "log.message.timestamp.before.max.ms", "log.message.timestamp.after.max.ms",
    "log.message.timestamp.difference.max.ms",
    "unclean.leader.election.enable", "log.cleaner.threads",
    "log.cleaner.io.buffer.size", "log.cleaner.io.max.bytes.per.second",
    "num.network.threads", "num.io.threads", "num.recovery.threads.per.data.dir",
    "follower.replication.throttled.rate", "leader.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second", "sasl.kerberos.kinit.cmd", "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.ticket.renew.window.factor", "sasl.kerberos.ticket.renew.jitter",
    "metric.reporters", "background.threads",
    "num.replica.fetchers", "num.replica.alter.log.dirs.threads", "log.message.downconversion.enable",
})
BROKER_DEFAULTS: dict[str, Any] = {name: key.default for name, key in BROKER_KEYS.items()}


# Settings of the group coordinator (pykfk.group.GroupConfig reads them by these names).
GROUP_COORDINATOR_KEYS = (
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "group.initial.rebalance.delay.ms",
    "group.max.size",
    "group.member.metadata.max.bytes",
    "group.consumer.session.timeout.ms",
    "group.consumer.heartbeat.interval.ms",
    "group.consumer.assignors",
    "group.consumer.max.size",
    "offsets.topic.num.partitions",
    "offsets.retention.minutes",
    "offsets.retention.check.interval.ms",
    "offset.metadata.max.bytes",
)


# Settings of the transaction coordinator (pykfk.txn.TxnConfig reads them by these names).
TRANSACTION_COORDINATOR_KEYS = (
    "transaction.state.log.num.partitions",
    "transaction.max.timeout.ms",
    "transactional.id.expiration.ms",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
    "transaction.remove.expired.transaction.cleanup.interval.ms",
    "offsets.commit.timeout.ms",
)


@dataclasses.dataclass(frozen=True)
class TopicKey:
    """A topic-level setting (Kafka's ``TopicConfig``), declared once for every user:
    broker defaults, per-topic validation, ``pykfk.log.LogConfig``, DescribeConfigs and
    the configuration reference page.

    ``synonyms`` are the broker settings that supply the default, in Kafka's precedence
    order, each with the factor that turns its unit into this key's (``retention.ms`` <-
    ``log.retention.ms`` x1, ``log.retention.minutes`` x60000, ``log.retention.hours``
    x3600000): the first one with a value wins. ``attr`` is the LogConfig attribute that
    holds the setting (None for settings the replica layer reads). Every topic setting
    is dynamic: a change applies to the topic's logs without a restart.
    """

    name: str
    parse: Callable[[Any], Any]
    synonyms: tuple[tuple[str, int], ...]
    kind: str
    doc: str
    attr: str | None = None
    # retention.ms / retention.bytes: any negative broker value means "unlimited" (-1).
    negative_is_unlimited: bool = False
    dynamic: bool = True
    # The default of a setting no broker setting supplies (synonyms empty).
    topic_default: Any = None

    @property
    def broker_synonym(self) -> str:
        return self.synonyms[0][0] if self.synonyms else ""

    def value_from(self, broker_values: Mapping[str, Any]) -> Any:
        """This setting's default under the (parsed) broker settings ``broker_values``."""
        if not self.synonyms:
            return self.topic_default
        for name, factor in self.synonyms:
            value = broker_values.get(name)
            if value is None:
                continue
            if factor != 1:
                value = value * factor
            if self.negative_is_unlimited and value < 0:
                return -1
            return value
        return None

    def synonym_with_value(self, broker_values: Mapping[str, Any]) -> str:
        """The broker setting that supplies the default (for DescribeConfigs)."""
        for name, _factor in self.synonyms:
            if broker_values.get(name) is not None:
                return name
        return self.broker_synonym

    @property
    def default(self) -> Any:
        """The default with every broker setting at its own default."""
        return self.value_from(BROKER_DEFAULTS)


def _topic(name: str, parse: Callable[[Any], Any], synonyms: str | tuple[tuple[str, int], ...] | None, kind: str,
           doc: str, attr: str | None = None, **kw: Any) -> TopicKey:
    synonym_list = () if synonyms is None else ((synonyms, 1),) if isinstance(synonyms, str) else synonyms
    return TopicKey(name, parse, synonym_list, kind, doc, attr, **kw)


TOPIC_KEYS: dict[str, TopicKey] = {
    k.name: k
    for k in [
        _topic("cleanup.policy", _cleanup_policy, "log.cleanup.policy", "list", "delete and/or compact",
               "cleanup_policy"),
        _topic("retention.ms", LONG,
               (("log.retention.ms", 1), ("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)),
               "long", "retention time (-1 = unlimited)", "retention_ms", negative_is_unlimited=True),
        _topic("retention.bytes", LONG, "log.retention.bytes", "long", "retention size (-1 = unlimited)",
               "retention_bytes", negative_is_unlimited=True),
        _topic("segment.bytes", _at_least(14), "log.segment.bytes", "int", "segment size", "segment_bytes"),
        _topic("segment.ms", _at_least(1, big=True), (("log.roll.ms", 1), ("log.roll.hours", 3_600_000)), "long",
               "segment age before rolling", "segment_ms"),
        _topic("segment.index.bytes", _at_least(4), "log.index.size.max.bytes", "int", "max index size",
               "max_index_bytes"),
        _topic("index.interval.bytes", _at_least(0), "log.index.interval.bytes", "int", "index density",
               "index_interval_bytes"),
        _topic("flush.messages", _at_least(1, big=True), "log.flush.interval.messages", "long", "fsync period",
               "flush_interval_messages"),
        _topic("flush.ms", _at_least(0, big=True),
               (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)), "long", "fsync period (ms)",
               "flush_interval_ms"),
        _topic("max.message.bytes", _at_least(0), "message.max.bytes", "int", "largest batch", "max_message_bytes"),
        _topic("message.timestamp.type", choice_parser("CreateTime", "LogAppendTime"), "log.message.timestamp.type",
               "string", "timestamp kept in batches", "message_timestamp_type"),
        _topic("file.delete.delay.ms", _at_least(0, big=True), "log.segment.delete.delay.ms", "long",
               "delete delay", "file_delete_delay_ms"),
        _topic("preallocate", _parse_bool, "log.preallocate", "bool", "preallocate segment files", "preallocate"),
        _topic("min.cleanable.dirty.ratio", _ratio, "log.cleaner.min.cleanable.ratio", "double",
               "dirty share to clean", "min_cleanable_dirty_ratio"),
        _topic("delete.retention.ms", _at_least(0, big=True), "log.cleaner.delete.retention.ms", "long",
               "tombstone life", "delete_retention_ms"),
        _topic("min.compaction.lag.ms", _at_least(0, big=True), "log.cleaner.min.compaction.lag.ms", "long",
               "compaction lag", "min_compaction_lag_ms"),
        _topic("min.insync.replicas", _at_least(1), "min.insync.replicas", "int", "ISR size acks=all needs"),
        _topic("max.compaction.lag.ms", _at_least(1, big=True), "log.cleaner.max.compaction.lag.ms", "long",
               "a dirty record is compacted within this long", "max_compaction_lag_ms"),
        _topic("segment.jitter.ms", _at_least(0, big=True),
               (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3_600_000)), "long",
               "random share taken off segment.ms per segment", "segment_jitter_ms"),
        _topic("compression.type", _compression_type, "compression.type", "string",
               "codec batches are stored with; others are recompressed (producer: as sent)", "compression_type"),
        _topic("compression.gzip.level", _gzip_level, "compression.gzip.level", "int",
               "gzip level when the broker compresses", "compression_gzip_level"),
        _topic("compression.lz4.level", _int_parser(1, 17), "compression.lz4.level", "int",
               "lz4 level when the broker compresses", "compression_lz4_level"),
        _topic("compression.zstd.level", _int_parser(-131072, 22), "compression.zstd.level", "int",
               "zstd level when the broker compresses", "compression_zstd_level"),
        _topic("message.timestamp.before.max.ms", _at_least(0, big=True), "log.message.timestamp.before.max.ms",
               "long", "CreateTime records older than this are refused", "message_timestamp_before_max_ms"),
        _topic("message.timestamp.after.max.ms", _at_least(0, big=True), "log.message.timestamp.after.max.ms",
               "long", "CreateTime records this far ahead are refused", "message_timestamp_after_max_ms"),
        _topic("message.timestamp.difference.max.ms", _at_least(0, big=True),
               "log.message.timestamp.difference.max.ms", "long",
               "deprecated: the before and after limits at once where they are not set",
               "message_timestamp_difference_max_ms"),
        _topic("leader.replication.throttled.replicas", _throttled_replicas, None, "list",
               "replicas throttled on the leader in a reassignment (* or partition:broker)", topic_default=[]),
        _topic("follower.replication.throttled.replicas", _throttled_replicas, None, "list",
               "replicas throttled on followers in a reassignment (* or partition:broker)", topic_default=[]),
        _topic("message.format.version", _parse_string, "log.message.format.version", "string",
               "accepted and ignored, as Kafka 3.x does"),
        _topic("remote.storage.enable", _remote_storage, None, "bool", _TIERED, topic_default=False),
        _topic("local.retention.ms", _local_retention, "log.local.retention.ms", "long", _TIERED),
        _topic("local.retention.bytes", _local_retention, "log.local.retention.bytes", "long", _TIERED),
        _topic("unclean.leader.election.enable", _parse_bool, "unclean.leader.election.enable", "bool",
               "elect a leader outside the ISR"),
    ]
}


# ---------------------------------------------------------------------------------------
# Java .properties reading (the subset Kafka's files use: comments, key=value / key:value /
# key value, backslash line continuations and escapes).


def parse_properties(text: str) -> dict[str, str]:
    """Parse the text of a Java properties file into a dict of raw strings."""
    props: dict[str, str] = {}
    logical: list[str] = []
    for raw_line in text.splitlines():
        line = raw_line.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        # An odd number of trailing backslashes continues the line.
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            logical.append(line[:-1])
            continue
        logical.append(line)
        entry = "".join(logical)
        logical = []
        match = re.match(r"((?:\\.|[^=:\s\\])*)\s*[=:\s]?\s*(.*)$", entry)
        if match is None:  # pragma: no cover - the pattern matches any string
            continue
        key, value = (_unescape(part) for part in match.groups())
        if key:
            props[key] = value.rstrip()
    return props


def _unescape(text: str) -> str:
    escapes = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}

    def repl(m: re.Match[str]) -> str:
        ch = m.group(1)
        if ch.startswith("u"):
            return chr(int(ch[1:], 16))
        return escapes.get(ch, ch)

    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", repl, text)


# ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Listener:
    """One ``listeners`` entry: ``NAME://host:port``, with the security protocol that
    ``listener.security.protocol.map`` gives its name. An empty host binds all
    interfaces."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @classmethod
    def parse(cls, key: str, text: str, protocols: Mapping[str, str] | None = None) -> Listener:
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)://(\[[^\]]*\]|[^:/]*):(\d+)", text)
        if match is None:
            raise ConfigError(key, f"expected NAME://host:port, got {text!r}")
        name, host, port_text = match.groups()
        name = name.upper()
        port = int(port_text)
        if port > 65535:
            raise ConfigError(key, f"port {port} out of range [0, 65535]")
        protocols = _protocol_map(list(DEFAULT_PROTOCOL_MAP)) if protocols is None else protocols
        protocol = protocols.get(name)
        if protocol is None:
            raise ConfigError(key, f"listener {name} has no security protocol in listener.security.protocol.map")
        return cls(name, host.strip("[]"), port, protocol)

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def _protocol_map(items: list[str]) -> dict[str, str]:
    """``listener.security.protocol.map`` entries as {LISTENER: PROTOCOL}."""
    protocols: dict[str, str] = {}
    for item in items:
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", name):
            raise ConfigError("listener.security.protocol.map", f"expected LISTENER:PROTOCOL, got {item!r}")
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError("listener.security.protocol.map",
                              f"unknown security protocol {protocol!r} (one of {', '.join(SECURITY_PROTOCOLS)})")
        if name in protocols:
            raise ConfigError("listener.security.protocol.map", f"listener {name} is mapped twice")
        protocols[name] = protocol
    return protocols


def _per_listener_key(name: str) -> tuple[str, str] | None:
    """(listener, setting) of a ``listener.name.<listener>.<setting>`` key, else None."""
    match = _LISTENER_KEY.fullmatch(name)
    if match is None:
        return None
    listener, setting = match.groups()
    if setting in PER_LISTENER_KEYS or _MECHANISM_JAAS_KEY.fullmatch(setting):
        return listener.upper(), setting
    scoped = _MECHANISM_KEY.fullmatch(setting)
    if scoped is not None and scoped.group(1) == "oauthbearer" and scoped.group(2) in OAUTHBEARER_LISTENER_KEYS:
        return listener.upper(), setting
    return None


class BrokerConfig:
    """Validated broker settings. Read values with attribute names (``log_segment_bytes``)
    or Kafka names (``config["log.segment.bytes"]``).

    Derived values follow Kafka's precedence rules: ``log.dirs`` over ``log.dir``,
    ``log.roll.ms`` over ``log.roll.hours``, ``log.retention.ms`` over minutes over hours.
    """

    def __init__(self, props: Mapping[str, Any] | None = None):
        props = dict(props or {})
        self.originals: dict[str, Any] = props
        # Dynamic layers (apply_dynamic): the cluster-wide default and this broker's own.
        self.dynamic_default: dict[str, str] = {}
        self.dynamic_broker: dict[str, str] = {}
        self._values: dict[str, Any] = {}
        unknown = sorted(k for k in props if k not in BROKER_KEYS and _per_listener_key(k) is None)
        if unknown:
            raise ConfigError(unknown[0], "unknown configuration key")
        # listener.name.<listener>.<setting> values, parsed like the global setting.
        self._per_listener: dict[tuple[str, str], Any] = {}
        for name, raw in props.items():
            scoped = _per_listener_key(name)
            if scoped is None:
                continue
            unscoped = scoped[1].partition(".")[2]
            base = scoped[1] if scoped[1] in BROKER_KEYS else unscoped if unscoped in BROKER_KEYS \
                else "sasl.jaas.config"
            try:
                self._per_listener[scoped] = BROKER_KEYS[base].parse(raw)
            except ValueError as exc:
                raise ConfigError(name, str(exc)) from None
        for name, key in BROKER_KEYS.items():
            raw = props.get(name)
            if raw is None:
                self._values[name] = key.default
                continue
            try:
                self._values[name] = key.parse(raw)
            except ValueError as exc:
                raise ConfigError(name, str(exc)) from None
        self._derive()

    def _derive(self) -> None:
        v = self._values
        if v["node.id"] is not None:
            if "broker.id" in self.originals and v["broker.id"] != v["node.id"]:
                raise ConfigError("node.id", f"{v['node.id']} differs from broker.id {v['broker.id']}")
            v["broker.id"] = v["node.id"]
        if v["process.roles"] and v["zookeeper.connect"]:
            raise ConfigError("process.roles", "a KRaft node (process.roles) cannot also use zookeeper.connect")
        self.broker_id: int = v["broker.id"]
        self._derive_listeners()
        self.log_dirs: list[str] = v["log.dirs"] or [v["log.dir"]]
        if not self.log_dirs:
            raise ConfigError("log.dirs", "at least one directory is required")
        self.num_partitions: int = v["num.partitions"]
        self.default_replication_factor: int = v["default.replication.factor"]
        self.auto_create_topics_enable: bool = v["auto.create.topics.enable"]
        self.message_max_bytes: int = v["message.max.bytes"]
        self.socket_request_max_bytes: int = v["socket.request.max.bytes"]
        self.log_segment_bytes: int = v["log.segment.bytes"]
        self.log_roll_ms: int = TOPIC_KEYS["segment.ms"].value_from(v)
        self.log_index_interval_bytes: int = v["log.index.interval.bytes"]
        self.log_index_size_max_bytes: int = v["log.index.size.max.bytes"]
        self.log_flush_interval_messages: int = v["log.flush.interval.messages"]
        # Kafka: log.flush.interval.ms defaults to log.flush.scheduler.interval.ms.
        self.log_flush_interval_ms: int = TOPIC_KEYS["flush.ms"].value_from(v)
        self.log_retention_ms: int = TOPIC_KEYS["retention.ms"].value_from(v)
        self.log_retention_bytes: int = v["log.retention.bytes"]
        self.log_retention_check_interval_ms: int = v["log.retention.check.interval.ms"]
        self.log_segment_delete_delay_ms: int = v["log.segment.delete.delay.ms"]
        self.log_cleanup_policy: list[str] = v["log.cleanup.policy"]
        self.log_preallocate: bool = v["log.preallocate"]
        self.log_message_timestamp_type: str = v["log.message.timestamp.type"]
        self.connections_max_idle_ms: int = v["connections.max.idle.ms"]
        self.queued_max_requests: int = v["queued.max.requests"]
        self.offsets_topic_num_partitions: int = v["offsets.topic.num.partitions"]
        self.group_initial_rebalance_delay_ms: int = v["group.initial.rebalance.delay.ms"]
        self.zookeeper_connect: str | None = v["zookeeper.connect"] or None

    def _derive_listeners(self) -> None:
        """listeners, advertised.listeners and the inter-broker listener, checked
        together as Kafka checks them."""
        v = self._values
        protocols = _protocol_map(v["listener.security.protocol.map"])
        # KRaft controller listeners are not bound: the controller is inside this broker.
        controllers = {name.upper() for name in v["controller.listener.names"]}
        parsed = [Listener.parse("listeners", item, protocols) for item in v["listeners"]]
        self.listeners = [listener for listener in parsed if listener.name not in controllers]
        if not self.listeners:
            raise ConfigError("listeners", "at least one listener is required")
        names = [listener.name for listener in self.listeners]
        if len(set(names)) != len(names):
            raise ConfigError("listeners", "each listener needs a name of its own")
        ports = [listener.port for listener in self.listeners if listener.port]
        if len(set(ports)) != len(ports):
            raise ConfigError("listeners", "two listeners cannot share a port")
        by_name = {listener.name: listener for listener in self.listeners}
        advertised = {}
        for item in v["advertised.listeners"] or ():
            entry = Listener.parse("advertised.listeners", item, protocols)
            if entry.name in controllers:
                continue
            if entry.name not in by_name:
                raise ConfigError("advertised.listeners", f"{entry.name} is not one of the listeners")
            advertised[entry.name] = entry
        # A listener not advertised explicitly is advertised at its own address.
        self.advertised_listeners = [advertised.get(name, by_name[name]) for name in names]
        inter = v["inter.broker.listener.name"]
        protocol = v["security.inter.broker.protocol"]
        if protocol and inter:
            raise ConfigError("security.inter.broker.protocol",
                              "set either inter.broker.listener.name or security.inter.broker.protocol, not both")
        if protocol:
            # Kafka: the listener whose name is the protocol's.
            if protocol not in by_name:
                raise ConfigError("security.inter.broker.protocol",
                                  f"no listener is named {protocol} (name one so, or set inter.broker.listener.name)")
            inter = protocol
        if inter:
            inter = inter.upper()
            if inter not in by_name:
                raise ConfigError("inter.broker.listener.name", f"{inter} is not one of the listeners")
        self.inter_broker_listener_name: str = inter or ("PLAINTEXT" if "PLAINTEXT" in by_name else names[0])
        for entry in self.listeners:
            if entry.uses_tls and not (self.listener_setting(entry.name, "ssl.keystore.location")
                                       or self.listener_setting(entry.name, "ssl.keystore.key")):
                raise ConfigError("ssl.keystore.location", f"listener {entry.name} uses TLS but has no key store")
        for scoped_name, setting in self._per_listener:
            if scoped_name not in by_name and scoped_name not in controllers:
                raise ConfigError(f"listener.name.{scoped_name.lower()}.{setting}",
                                  f"{scoped_name} is not one of the listeners")

    def listener_setting(self, listener: str, name: str) -> Any:
        """A setting as it applies on ``listener``: its ``listener.name.<listener>.``
        value when given, else the broker-wide one."""
        scoped = (listener.upper(), name)
        return self._per_listener[scoped] if scoped in self._per_listener else self._values[name]

    def mechanism_setting(self, listener: str, mechanism: str, name: str) -> Any:
        """``listener.name.<l>.<mechanism>.<name>``, else the listener's or broker's."""
        scoped = (listener.upper(), f"{mechanism.lower()}.{name}")
        return self._per_listener[scoped] if scoped in self._per_listener else self.listener_setting(listener, name)

    def jaas_config(self, listener: str, mechanism: str) -> str | None:
        """The JAAS settings of ``mechanism`` on ``listener``, most specific first:
        ``listener.name.<l>.<mechanism>.sasl.jaas.config``, then
        ``listener.name.<l>.sasl.jaas.config``, then ``sasl.jaas.config``."""
        scoped = (listener.upper(), f"{mechanism.lower()}.sasl.jaas.config")
        if scoped in self._per_listener:
            return str(self._per_listener[scoped])
        value = self.listener_setting(listener, "sasl.jaas.config")
        return None if value is None else str(value)

    # -- access by Kafka name ------------------------------------------------------------

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    @property
    def values(self) -> Mapping[str, Any]:
        """Every broker setting by Kafka name, parsed (defaults included)."""
        return self._values

    def is_explicit(self, name: str) -> bool:
        """True when ``name`` was given in server.properties or an override."""
        return name in self.originals

    # -- dynamic settings (KIP-226) -----------------------------------------------------

    def apply_dynamic(self, cluster_default: Mapping[str, str], this_broker: Mapping[str, str]) -> list[str]:
        """Lay the dynamic settings over the static ones in Kafka's precedence (this
        broker's, then the cluster-wide default, then server.properties) and return the
        names whose value changed. Everyone holding this object sees the new values; a
        layer that does not validate leaves everything as it was (ConfigError)."""
        merged = {**self.originals, **cluster_default, **this_broker}
        fresh = BrokerConfig(merged)
        changed = [name for name, value in fresh._values.items() if self._values[name] != value]
        originals = self.originals
        vars(self).update(vars(fresh))
        self.originals = originals
        self.dynamic_default = dict(cluster_default)
        self.dynamic_broker = dict(this_broker)
        return changed

    def replace_static(self, props: Mapping[str, Any]) -> list[str]:
        """Take a re-read server.properties: its dynamic settings replace the ones given
        before, with the dynamic layers still on top. A static setting that differs is
        left as it is and named in the ConfigError (it needs a restart)."""
        fresh = BrokerConfig(props)
        restart = sorted(name for name in set(fresh.originals) | set(self.originals)
                         if name not in DYNAMIC_BROKER_KEYS and fresh.originals.get(name) != self.originals.get(name))
        if restart:
            raise ConfigError(restart[0], "cannot be changed on a running broker: restart it to apply")
        previous = self.originals
        self.originals = dict(fresh.originals)
        try:
            return self.apply_dynamic(self.dynamic_default, self.dynamic_broker)
        except ConfigError:
            self.originals = previous
            raise

    def source_of(self, name: str) -> str:
        """Where ``name``'s value comes from: "dynamic-broker", "dynamic-default",
        "static" or "default" (DescribeConfigs' config sources)."""
        if name in self.dynamic_broker:
            return "dynamic-broker"
        if name in self.dynamic_default:
            return "dynamic-default"
        return "static" if name in self.originals else "default"

    def ignored_keys_set(self) -> list[str]:
        """Keys accepted for compatibility that were set but have no effect (per-listener
        ones included)."""
        def base(name: str) -> str:
            scoped = _per_listener_key(name)
            return name if scoped is None else scoped[1]

        return sorted(k for k in self.originals if base(k) in BROKER_KEYS and BROKER_KEYS[base(k)].ignored)

    def transaction_properties(self) -> dict[str, Any]:
        """The transaction coordinator's settings by Kafka name (``TxnConfig.from_properties``)."""
        return {name: self._values[name] for name in TRANSACTION_COORDINATOR_KEYS}

    def group_properties(self) -> dict[str, Any]:
        """The group coordinator's settings by Kafka name (``GroupConfig.from_properties``)."""
        return {name: self._values[name] for name in GROUP_COORDINATOR_KEYS}

    # -- topic-level view --------------------------------------------------------------

    def topic_defaults(self) -> dict[str, Any]:
        """Topic-level settings (Kafka topic names) as this broker's settings give them."""
        return {name: key.value_from(self._values) for name, key in TOPIC_KEYS.items()}

    def topic_config(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """Broker defaults merged with validated per-topic overrides."""
        merged = self.topic_defaults()
        merged.update(validate_topic_configs(overrides))
        return merged

    # -- construction from the command line ---------------------------------------------

    @classmethod
    def load(cls, path: str | None = None, overrides: Iterable[str] = ()) -> BrokerConfig:
        """Read ``path`` (a server.properties file, optional) then apply ``key=value``
        overrides. Raises ConfigError for unknown keys and bad values, OSError when the
        file cannot be read."""
        props: dict[str, str] = {}
        if path is not None:
            with open(path, encoding="utf-8") as f:
                props.update(parse_properties(f.read()))
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError(item, "an override must look like key=value")
            props[key.strip()] = value.strip()
        return cls(props)


def validate_dynamic_broker_configs(configs: Mapping[str, str]) -> None:
    """Check settings meant for a running broker (AlterConfigs on a BROKER resource):
    known, changeable without a restart, and valid. Raises ConfigError naming the first
    that is not."""
    for name, raw in configs.items():
        key = BROKER_KEYS.get(name)
        if key is None:
            raise ConfigError(name, "unknown broker configuration key")
        if not key.dynamic:
            raise ConfigError(name, "cannot be updated dynamically: set it in server.properties and restart")
        try:
            key.parse(raw)
        except ValueError as exc:
            raise ConfigError(name, str(exc)) from None


def validate_topic_configs(configs: Mapping[str, Any]) -> dict[str, Any]:
    """Parse per-topic overrides (CreateTopics configs). None values mean "use the default"
    and are dropped. Raises ConfigError naming the first bad key."""
    parsed: dict[str, Any] = {}
    for name, raw in configs.items():
        key = TOPIC_KEYS.get(name)
        if key is None:
            raise ConfigError(name, "unknown topic configuration key")
        if raw is None:
            continue
        try:
            parsed[name] = key.parse(raw)
        except ValueError as exc:
            raise ConfigError(name, str(exc)) from None
    return parsed


def format_config_value(value: Any) -> str | None:
    """The string form Kafka uses in DescribeConfigs and property files."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(item) for item in value)
    return str(value)


# ---------------------------------------------------------------------------------------
# The configuration reference page (docs/configuration.md), generated from the tables.


def _cell(value: Any) -> str:
    text = format_config_value(value)
    return "(unset)" if text is None else f"`{text}`"


def config_reference_markdown() -> str:
    """``docs/configuration.md``: every broker and topic setting from the declaration."""
    lines = [
        "# Configuration reference",
        "",
        "Generated by `python -m pykfk.config --markdown` from `pykfk/config.py`; do not edit.",
        "Broker settings go in `server.properties` or `--override key=value`; topic settings",
        "come with CreateTopics (or later AlterConfigs) and default to their broker synonyms.",
        "",
        "## Broker settings",
        "",
        "| name | type | default | dynamic | description |",
        "|---|---|---|---|---|",
    ]
    for name, key in sorted(BROKER_KEYS.items()):
        doc = key.doc + (" (accepted, no effect)" if key.ignored else "")
        lines.append(f"| `{name}` | {key.kind} | {_cell(key.default)} | {'yes' if key.dynamic else 'no'} | {doc} |")
    lines += [
        "",
        "## Topic settings",
        "",
        "| name | type | default | broker synonyms | description |",
        "|---|---|---|---|---|",
    ]
    for name, tkey in sorted(TOPIC_KEYS.items()):
        synonyms = ", ".join(f"`{s}`" + (f" (x{f})" if f != 1 else "") for s, f in tkey.synonyms)
        lines.append(f"| `{name}` | {tkey.kind} | {_cell(tkey.default)} | {synonyms} | {tkey.doc} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m pykfk.config", description="pykfk's settings")
    parser.add_argument("--markdown", action="store_true", help="print the configuration reference page")
    if parser.parse_args().markdown:
        sys.stdout.write(config_reference_markdown())
    else:
        parser.print_help()
