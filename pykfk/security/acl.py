"""Kafka's ACL model and an authorizer over it (Kafka's AclAuthorizer rules).

A binding allows or denies one principal, from one host, one operation on the resources
a pattern names: a LITERAL name (or ``*``, every resource of the type) or a PREFIXED one.
A request is authorized when the principal is a super user; else, if no binding names
the resource, when ``allow.everyone.if.no.acl.found``; else when no matching DENY binding
and at least one matching ALLOW binding exist. ALL matches every operation; an ALLOW of
READ, WRITE, DELETE or ALTER implies DESCRIBE, and one of ALTER_CONFIGS implies
DESCRIBE_CONFIGS. Principals and hosts match exactly or through ``User:*`` and ``*``.

The codes are Kafka's (``ResourceType``, ``PatternType``, ``AclOperation``,
``AclPermissionType``); the names are those of Kafka's ZooKeeper layout.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Sequence


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"
DECISION_CACHE_SIZE = 100_000  # bounded: cleared when full
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"

# Names in Kafka's ZooKeeper JSON.
RESOURCE_NAMES = {ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group", ResourceType.CLUSTER: "Cluster",
                  ResourceType.TRANSACTIONAL_ID: "TransactionalId", ResourceType.DELEGATION_TOKEN: "DelegationToken",
                  ResourceType.USER: "User"}
OPERATION_NAMES = {Operation.ALL: "All", Operation.READ: "Read", Operation.WRITE: "Write", Operation.CREATE: "Create",
                   Operation.DELETE: "Delete", Operation.ALTER: "Alter", Operation.DESCRIBE: "Describe",
                   Operation.CLUSTER_ACTION: "ClusterAction", Operation.DESCRIBE_CONFIGS: "DescribeConfigs",
                   Operation.ALTER_CONFIGS: "AlterConfigs", Operation.IDEMPOTENT_WRITE: "IdempotentWrite",
                   Operation.CREATE_TOKENS: "CreateTokens", Operation.DESCRIBE_TOKENS: "DescribeTokens"}
PERMISSION_NAMES = {Permission.ALLOW: "Allow", Permission.DENY: "Deny"}

# The ALLOW operations that also grant another.
_IMPLIED_BY = {
    Operation.DESCRIBE: (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER),
    Operation.DESCRIBE_CONFIGS: (Operation.ALTER_CONFIGS,),
}


class AclError(ValueError):
    """A binding or filter that cannot be stored or used (INVALID_REQUEST)."""


@dataclasses.dataclass(frozen=True)
class AclBinding:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def check(self) -> None:
        """Raise AclError unless this binding can be stored (Kafka's rules)."""
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise AclError("the resource type must be a concrete type")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError("the pattern type must be LITERAL or PREFIXED")
        if self.operation in (Operation.ANY, Operation.UNKNOWN):
            raise AclError("the operation must be a concrete operation")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise AclError("the permission must be ALLOW or DENY")
        if not self.name:
            raise AclError("the resource name must not be empty")
        if self.pattern_type == PatternType.PREFIXED and self.name == WILDCARD:
            raise AclError("a PREFIXED pattern cannot be the wildcard '*'")
        if self.resource_type == ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise AclError(f"the cluster resource is named {CLUSTER_NAME}")
        kind, sep, _name = self.principal.partition(":")
        if not sep or not kind or not _name:
            raise AclError(f"principal {self.principal!r} is not of the form Type:name")
        if not self.host:
            raise AclError("the host must not be empty (use '*')")


@dataclasses.dataclass(frozen=True)
class AclFilter:
    """DescribeAcls/DeleteAcls filters: ANY and None match everything; MATCH matches
    the bindings that would apply to the named resource."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def check(self) -> None:
        for value, enum_type in ((self.resource_type, ResourceType), (self.pattern_type, PatternType),
                                 (self.operation, Operation), (self.permission, Permission)):
            if value == enum_type.UNKNOWN:
                raise AclError(f"unknown {enum_type.__name__} in the filter")

    def matches(self, binding: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, binding.resource_type):
            return False
        if not self._matches_pattern(binding):
            return False
        return ((self.principal is None or self.principal == binding.principal)
                and (self.host is None or self.host == binding.host)
                and self.operation in (Operation.ANY, binding.operation)
                and self.permission in (Permission.ANY, binding.permission))

    def _matches_pattern(self, binding: AclBinding) -> bool:
        if self.pattern_type == PatternType.MATCH:
            if self.name is None:
                return True
            if binding.pattern_type == PatternType.LITERAL:
                return binding.name in (self.name, WILDCARD)
            return self.name.startswith(binding.name)
        if self.pattern_type not in (PatternType.ANY, binding.pattern_type):
            return False
        return self.name is None or self.name == binding.name


def _to_enum(enum_type: type[enum.IntEnum], code: int) -> enum.IntEnum:
    try:
        return enum_type(code)
    except ValueError:
        return enum_type(0)  # UNKNOWN


def binding_from_codes(resource_type: int, name: str, pattern_type: int, principal: str, host: str,
                       operation: int, permission: int) -> AclBinding:
    return AclBinding(ResourceType(_to_enum(ResourceType, resource_type)), name,
                      PatternType(_to_enum(PatternType, pattern_type)), principal, host,
                      Operation(_to_enum(Operation, operation)), Permission(_to_enum(Permission, permission)))


def filter_from_codes(resource_type: int, name: str | None, pattern_type: int, principal: str | None,
                      host: str | None, operation: int, permission: int) -> AclFilter:
    return AclFilter(ResourceType(_to_enum(ResourceType, resource_type)), name,
                     PatternType(_to_enum(PatternType, pattern_type)), principal, host,
                     Operation(_to_enum(Operation, operation)), Permission(_to_enum(Permission, permission)))


class _Index:
    """The bindings of one resource type, by how they name resources."""

    def __init__(self) -> None:
        self.literal: dict[str, list[AclBinding]] = {}
        self.prefixed: list[AclBinding] = []

    def matching(self, name: str) -> list[AclBinding]:
        found = self.literal.get(name, []) + self.literal.get(WILDCARD, [])
        found += [b for b in self.prefixed if name.startswith(b.name)]
        return found


class Authorizer:
    """Answers ``authorize(principal, host, operation, resource_type, name)`` from the
    bindings ``source()`` returns; the index is rebuilt when ``version()`` changes."""

    def __init__(self, source: Callable[[], Sequence[AclBinding]], version: Callable[[], int],
                 super_users: Iterable[str] = (), allow_if_no_acl: bool = False):
        self._source = source
        self._version = version
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._indexed_version = -1
        self._index: dict[ResourceType, _Index] = {}
        # Decisions since the bindings last changed: a client repeats the same checks
        # (its topics, every request), which then cost one dict lookup.
        self._decisions: dict[tuple[str, str, Operation, ResourceType, str], bool] = {}

    def _refresh(self) -> None:
        version = self._version()
        if version == self._indexed_version:
            return
        index: dict[ResourceType, _Index] = {}
        for binding in self._source():
            entry = index.setdefault(binding.resource_type, _Index())
            if binding.pattern_type == PatternType.PREFIXED:
                entry.prefixed.append(binding)
            else:
                entry.literal.setdefault(binding.name, []).append(binding)
        self._index, self._indexed_version = index, version
        self._decisions.clear()

    def authorize(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        self._refresh()
        key = (principal, host, operation, resource_type, name)
        decision = self._decisions.get(key)
        if decision is None:
            if len(self._decisions) >= DECISION_CACHE_SIZE:
                self._decisions.clear()
            decision = self._decisions[key] = self._decide(principal, host, operation, resource_type, name)
        return decision

    def _decide(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                name: str) -> bool:
        entry = self._index.get(resource_type)
        bindings = entry.matching(name) if entry is not None else []
        if not bindings:
            return self.allow_if_no_acl
        applicable = [b for b in bindings if b.principal in (principal, WILDCARD_PRINCIPAL) and b.host in (host, WILDCARD)]
        if any(b.permission == Permission.DENY and b.operation in (operation, Operation.ALL) for b in applicable):
            return False
        allowed = (operation, Operation.ALL, *_IMPLIED_BY.get(operation, ()))
        return any(b.permission == Permission.ALLOW and b.operation in allowed for b in applicable)

    def authorize_any(self, principal: str, host: str, operation: Operation, resource_type: ResourceType) -> bool:
        """Whether some resource of the type could be authorized (Kafka's
        authorizeByResourceType): an ALLOW binding for the principal that no DENY of the
        same pattern cancels."""
        if principal in self.super_users:
            return True
        self._refresh()
        entry = self._index.get(resource_type)
        if entry is None:
            return self.allow_if_no_acl
        bindings = [b for items in entry.literal.values() for b in items] + entry.prefixed
        applicable = [b for b in bindings if b.principal in (principal, WILDCARD_PRINCIPAL) and b.host in (host, WILDCARD)]
        denied = {(b.pattern_type, b.name) for b in applicable
                  if b.permission == Permission.DENY and b.operation in (operation, Operation.ALL)}
        if (PatternType.LITERAL, WILDCARD) in denied:
            return False
        return any(b.permission == Permission.ALLOW and b.operation in (operation, Operation.ALL)
                   and (b.pattern_type, b.name) not in denied for b in applicable)
