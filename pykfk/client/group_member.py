"""Consumer-group membership through the broker's group coordinator (Kafka's classic
protocol: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetFetch,
OffsetCommit), with the embedded "consumer" protocol and the range assignor, so pykfk
consumers can share a group with kafka-python, librdkafka and the Java client.

ConsumerProtocolSubscription v0 (apache/kafka ConsumerProtocolSubscription.json):

    int16  version
    int32  topic count, then per topic: int16 length + UTF-8 name
    int32  user_data length (-1 = null), then the bytes
    (v1 adds owned partitions, v2 generation id, v3 rack id: read past, not needed)

ConsumerProtocolAssignment v0 (ConsumerProtocolAssignment.json):

    int16  version
    int32  topic count, then per topic: int16 length + name, int32 count + int32 partitions
    int32  user_data length (-1 = null), then the bytes
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable
from typing import Any

from pykfk.client.cluster_view import ClusterMetadata
from pykfk.client.connection import BrokerConnection, ConnectionError_
from pykfk.errors import ErrorCode, KafkaError, error_code
from pykfk.protocol import internal

log = logging.getLogger("pykfk.consumer")

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14

PROTOCOL_TYPE = "consumer"
RANGE = "range"

# Errors after which the coordinator must be looked up again.
COORDINATOR_ERRORS = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.REQUEST_TIMED_OUT,
    }
)
# Errors after which the member must join again.
REJOIN_ERRORS = frozenset(
    {
        ErrorCode.REBALANCE_IN_PROGRESS,
        ErrorCode.ILLEGAL_GENERATION,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.FENCED_INSTANCE_ID,
    }
)


# ------------------------------------------------------------ protocol bytes


# Member metadata is read as version 0 (the leading int16); later versions only add fields
# after those, which are left unread.
_CONSUMER_PROTOCOL_VERSION = 0


def encode_subscription(topics: Iterable[str], user_data: bytes | None = None) -> bytes:
    return internal.encode(internal.CONSUMER_PROTOCOL_SUBSCRIPTION, _CONSUMER_PROTOCOL_VERSION,
                           {"topics": sorted(set(topics)), "user_data": user_data}, prefix=_CONSUMER_PROTOCOL_VERSION)


def decode_subscription(data: bytes) -> list[str]:
    """Topics of a member's subscription (any version; later fields are ignored)."""
    internal.read_prefix(data, "version")
    subscription = internal.decode(internal.CONSUMER_PROTOCOL_SUBSCRIPTION, _CONSUMER_PROTOCOL_VERSION, data,
                                   whole=False)
    return list(subscription.topics)


def encode_assignment(assignment: dict[str, list[int]], user_data: bytes | None = None) -> bytes:
    body = {
        "assigned_partitions": [{"topic": topic, "partitions": sorted(assignment[topic])}
                                for topic in sorted(assignment)],
        "user_data": user_data,
    }
    return internal.encode(internal.CONSUMER_PROTOCOL_ASSIGNMENT, _CONSUMER_PROTOCOL_VERSION, body,
                           prefix=_CONSUMER_PROTOCOL_VERSION)


def decode_assignment(data: bytes | None) -> dict[str, list[int]]:
    if not data:
        return {}
    internal.read_prefix(data, "version")
    assignment = internal.decode(internal.CONSUMER_PROTOCOL_ASSIGNMENT, _CONSUMER_PROTOCOL_VERSION, data,
                                 whole=False)
    return {entry.topic: list(entry.partitions) for entry in assignment.assigned_partitions}


def range_assign(
    subscriptions: dict[str, list[str]], partitions: dict[str, list[int]]
) -> dict[str, dict[str, list[int]]]:
    """Kafka's RangeAssignor: per topic, its subscribers sorted by id each take a
    contiguous range of the sorted partitions, the first ``P % C`` one extra."""
    result: dict[str, dict[str, list[int]]] = {member: {} for member in subscriptions}
    topics = sorted({t for ts in subscriptions.values() for t in ts})
    for topic in topics:
        members = sorted(m for m, ts in subscriptions.items() if topic in ts)
        parts = sorted(partitions.get(topic, []))
        if not members or not parts:
            continue
        per, extra = divmod(len(parts), len(members))
        for i, member in enumerate(members):
            start = i * per + min(i, extra)
            length = per + (1 if i < extra else 0)
            if length:
                result[member][topic] = parts[start : start + length]
    return result


# --------------------------------------------------------------- membership


class BrokerGroupMembership:
    """This consumer's membership of ``group_id`` through the broker's coordinator.

    ``join(topics)`` runs JoinGroup/SyncGroup (as leader it computes the range assignment)
    and returns the assigned (topic, partition) pairs. ``heartbeat()`` returns True when
    the group is rebalancing and the member must join again. Used from one thread (the
    connector's coordinator thread) except ``commit``, which the connection's lock makes
    safe to call from the user's thread too.
    """

    def __init__(
        self,
        cluster: ClusterMetadata,
        group_id: str,
        *,
        session_timeout_ms: int = 10000,
        rebalance_timeout_ms: int = 30000,
        retry_backoff_ms: int = 200,
        timeout_ms: int = 60000,
        client_id: str = "pykfk-consumer",
    ):
        self.cluster = cluster
        self.group_id = group_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.retry_backoff = retry_backoff_ms / 1000
        self.timeout = timeout_ms / 1000
        self.member_id = ""
        self.generation_id = -1
        self.is_leader = False
        self.client_id = client_id
        self._coordinator: BrokerConnection | None = None

    # -- coordinator

    def coordinator(self) -> BrokerConnection:
        if self._coordinator is not None and self._coordinator.connected:
            return self._coordinator
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                response = self.cluster.request(
                    FIND_COORDINATOR, {"key": self.group_id, "key_type": 0}
                )
                code = error_code(response.error_code)
                if code == ErrorCode.NONE:
                    self.cluster.brokers.setdefault(
                        response.node_id, (response.host, response.port)
                    )
                    conn = BrokerConnection(
                        response.host,
                        response.port,
                        client_id=self.client_id,
                        connect_timeout=self.cluster.connect_timeout,
                        request_timeout=self.cluster.request_timeout,
                        node_id=response.node_id,
                    ).connect()
                    self._coordinator = conn
                    return conn
                error = KafkaError(code, "FindCoordinator")
            except KafkaError as exc:
                error = exc
            if not error.retriable or time.monotonic() + self.retry_backoff > deadline:
                raise error
            time.sleep(self.retry_backoff)

    def _lost_coordinator(self) -> None:
        if self._coordinator is not None:
            self._coordinator.close()
            self._coordinator = None

    def _call(self, api_key: int, body: dict[str, Any], timeout: float | None = None) -> Any:
        conn = self.coordinator()
        try:
            return conn.request(api_key, body, timeout=timeout)
        except ConnectionError_:
            self._lost_coordinator()
            raise

    # -- join

    def join(self, topics: Iterable[str]) -> list[tuple[str, int]]:
        """Join (or rejoin) with a subscription to ``topics``; returns the assignment."""
        topics = sorted(set(topics))
        deadline = time.monotonic() + self.timeout + self.rebalance_timeout_ms / 1000
        while True:
            try:
                assignment = self._join_once(topics)
                if assignment is not None:
                    return assignment
            except KafkaError as exc:
                if exc.code in COORDINATOR_ERRORS:
                    self._lost_coordinator()
                elif exc.code in REJOIN_ERRORS:
                    if exc.code != ErrorCode.REBALANCE_IN_PROGRESS:
                        self.member_id = ""
                elif not exc.retriable:
                    raise
                log.debug("join of %s failed: %s", self.group_id, exc)
                if time.monotonic() > deadline:
                    raise
            time.sleep(self.retry_backoff)

    def _join_once(self, topics: list[str]) -> list[tuple[str, int]] | None:
        body = {
            "group_id": self.group_id,
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "member_id": self.member_id,
            "group_instance_id": None,
            "protocol_type": PROTOCOL_TYPE,
            "protocols": [{"name": RANGE, "metadata": encode_subscription(topics)}],
        }
        # The coordinator parks JoinGroup until every member rejoined (up to the
        # rebalance timeout), so this request may take that long.
        response = self._call(JOIN_GROUP, body, timeout=self.rebalance_timeout_ms / 1000 + 10)
        code = error_code(response.error_code)
        if code == ErrorCode.MEMBER_ID_REQUIRED:  # KIP-394: join again with the given id
            self.member_id = response.member_id
            return None
        if code != ErrorCode.NONE:
            raise KafkaError(code, "JoinGroup")
        self.member_id = response.member_id
        self.generation_id = response.generation_id
        self.is_leader = response.leader == response.member_id
        assignments = []
        if self.is_leader:
            if response.protocol_name not in (RANGE, None):
                log.warning(
                    "group %s chose protocol %s; assigning by range",
                    self.group_id,
                    response.protocol_name,
                )
            assignments = self._assign(response.members)
        sync = {
            "group_id": self.group_id,
            "generation_id": self.generation_id,
            "member_id": self.member_id,
            "group_instance_id": None,
            "protocol_type": PROTOCOL_TYPE,
            "protocol_name": RANGE,
            "assignments": assignments,
        }
        response = self._call(SYNC_GROUP, sync, timeout=self.rebalance_timeout_ms / 1000 + 10)
        code = error_code(response.error_code)
        if code != ErrorCode.NONE:
            raise KafkaError(code, "SyncGroup")
        assigned = decode_assignment(response.assignment)
        return sorted((t, p) for t, ps in assigned.items() for p in ps)

    def _assign(self, members: list[Any]) -> list[dict[str, Any]]:
        subscriptions = {}
        for member in members:
            try:
                subscriptions[member.member_id] = decode_subscription(member.metadata)
            except ValueError:
                log.warning("member %s sent an unreadable subscription", member.member_id)
                subscriptions[member.member_id] = []
        all_topics = sorted({t for ts in subscriptions.values() for t in ts})
        partitions = {}
        if all_topics:
            self.cluster.refresh(all_topics)
            for topic in all_topics:
                info = self.cluster.topics.get(topic)
                if info is not None:
                    partitions[topic] = info.partitions
        plan = range_assign(subscriptions, partitions)
        return [{"member_id": m, "assignment": encode_assignment(a)} for m, a in plan.items()]

    # -- steady state

    def heartbeat(self) -> bool:
        """True when the member must rejoin (rebalance, or the member was expelled)."""
        body = {
            "group_id": self.group_id,
            "generation_id": self.generation_id,
            "member_id": self.member_id,
            "group_instance_id": None,
        }
        try:
            response = self._call(HEARTBEAT, body)
        except KafkaError as exc:
            log.debug("heartbeat failed: %s", exc)
            return False  # the next heartbeat finds the coordinator again
        code = error_code(response.error_code)
        if code == ErrorCode.NONE:
            return False
        if code in COORDINATOR_ERRORS:
            self._lost_coordinator()
            return False
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            self.member_id = "" if code == ErrorCode.UNKNOWN_MEMBER_ID else self.member_id
        return True

    def fetch_offsets(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Committed offsets (-1 where none)."""
        topics: dict[str, list[int]] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append(p)
        body = {
            "group_id": self.group_id,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
        }
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                response = self._call(OFFSET_FETCH, body)
                code = error_code(getattr(response, "error_code", 0) or 0)
                if code == ErrorCode.NONE:
                    out = {}
                    for t in response.topics:
                        for p in t.partitions:
                            out[(t.name, p.partition_index)] = (
                                p.committed_offset if p.error_code == 0 else -1
                            )
                    return out
                error = KafkaError(code, "OffsetFetch")
            except KafkaError as exc:
                error = exc
            if error.code in COORDINATOR_ERRORS:
                self._lost_coordinator()
            if not error.retriable or time.monotonic() > deadline:
                raise error
            time.sleep(self.retry_backoff)

    def commit(self, offsets: dict[tuple[str, int], int]) -> None:
        if not offsets:
            return
        topics: dict[str, list[dict[str, Any]]] = {}
        for (t, p), offset in offsets.items():
            topics.setdefault(t, []).append(
                {"partition_index": p, "committed_offset": offset, "committed_metadata": ""}
            )
        body = {
            "group_id": self.group_id,
            "generation_id_or_member_epoch": self.generation_id,
            "member_id": self.member_id,
            "retention_time_ms": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }
        try:
            response = self._call(OFFSET_COMMIT, body)
        except KafkaError as exc:
            if exc.code in COORDINATOR_ERRORS:
                self._lost_coordinator()
            raise
        for t in response.topics:
            for p in t.partitions:
                code = error_code(p.error_code)
                if code != ErrorCode.NONE:
                    if code in COORDINATOR_ERRORS:
                        self._lost_coordinator()
                    raise KafkaError(code, f"OffsetCommit {t.name}[{p.partition_index}]")

    def leave(self) -> None:
        if not self.member_id or self._coordinator is None:
            return
        try:
            self._coordinator.request(
                LEAVE_GROUP, {"group_id": self.group_id, "member_id": self.member_id}, timeout=5
            )
        except KafkaError as exc:
            log.debug("LeaveGroup failed: %s", exc)
        self.member_id = ""
        self.generation_id = -1

    def close(self) -> None:
        self._lost_coordinator()


def new_consumer_id(group_id: str) -> str:
    """The seeds' consumer id: group, host and a unique suffix."""
    import socket

    return f"{group_id}_{socket.gethostname()}-{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"
