"""The authorizer's rules without I/O: literal, wildcard and prefixed patterns, Deny over
Allow, implied operations, super users, hosts, the no-ACL default and filters."""

from __future__ import annotations

import pytest

from pykfk.security.acl import (
    AclBinding,
    AclError,
    AclFilter,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY


def _authorizer(*bindings: AclBinding, **kw) -> Authorizer:
    stored = list(bindings)
    version = [1]
    authorizer = Authorizer(lambda: stored, lambda: version[0], **kw)
    authorizer.stored, authorizer.bump = stored, lambda: version.__setitem__(0, version[0] + 1)  # type: ignore[attr-defined]
    return authorizer


def _b(rtype, name, pattern, principal, op, perm, host="*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def test_literal_wildcard_and_prefixed_patterns():
    a = _authorizer(_b(T, "orders", LIT, "User:alice", Operation.WRITE, ALLOW),
                    _b(T, "logs-", PRE, "User:alice", Operation.READ, ALLOW),
                    _b(T, "*", LIT, "User:bob", Operation.READ, ALLOW))
    assert a.authorize("User:alice", "h", Operation.WRITE, T, "orders")
    assert not a.authorize("User:alice", "h", Operation.WRITE, T, "orders2")
    assert a.authorize("User:alice", "h", Operation.READ, T, "logs-eu")
    assert not a.authorize("User:alice", "h", Operation.READ, T, "log")
    assert a.authorize("User:bob", "h", Operation.READ, T, "anything")
    assert not a.authorize("User:bob", "h", Operation.WRITE, T, "anything")


def test_deny_wins_and_all_covers_every_operation():
    a = _authorizer(_b(T, "*", LIT, "User:*", Operation.ALL, ALLOW),
                    _b(T, "secret", LIT, "User:eve", Operation.READ, DENY),
                    _b(T, "locked-", PRE, "User:*", Operation.ALL, DENY))
    assert a.authorize("User:eve", "h", Operation.WRITE, T, "secret")
    assert not a.authorize("User:eve", "h", Operation.READ, T, "secret")
    assert a.authorize("User:zed", "h", Operation.READ, T, "secret")
    assert not a.authorize("User:zed", "h", Operation.DESCRIBE, T, "locked-x")


def test_implied_operations_and_hosts():
    a = _authorizer(_b(T, "t", LIT, "User:a", Operation.WRITE, ALLOW),
                    _b(T, "c", LIT, "User:a", Operation.ALTER_CONFIGS, ALLOW),
                    _b(G, "g", LIT, "User:a", Operation.READ, ALLOW, host="10.0.0.1"))
    assert a.authorize("User:a", "h", Operation.DESCRIBE, T, "t")
    assert not a.authorize("User:a", "h", Operation.READ, T, "t")
    assert a.authorize("User:a", "h", Operation.DESCRIBE_CONFIGS, T, "c")
    assert a.authorize("User:a", "10.0.0.1", Operation.READ, G, "g")
    assert not a.authorize("User:a", "10.0.0.2", Operation.READ, G, "g")


def test_super_users_and_the_no_acl_default():
    a = _authorizer(super_users=["User:root"])
    assert a.authorize("User:root", "h", Operation.ALTER, C, "kafka-cluster")
    assert not a.authorize("User:x", "h", Operation.READ, T, "free")
    assert _authorizer(allow_if_no_acl=True).authorize("User:x", "h", Operation.READ, T, "free")
    # Once any binding names the resource, the default no longer applies.
    b = _authorizer(_b(T, "free", LIT, "User:y", Operation.READ, ALLOW), allow_if_no_acl=True)
    assert not b.authorize("User:x", "h", Operation.READ, T, "free")


def test_decisions_follow_changes_of_the_bindings():
    a = _authorizer()
    assert not a.authorize("User:a", "h", Operation.READ, T, "t")
    a.stored.append(_b(T, "t", LIT, "User:a", Operation.READ, ALLOW))
    a.bump()
    assert a.authorize("User:a", "h", Operation.READ, T, "t")
    a.stored.clear()
    a.bump()
    assert not a.authorize("User:a", "h", Operation.READ, T, "t")


def test_authorize_any_for_idempotent_producers():
    a = _authorizer(_b(T, "x-", PRE, "User:a", Operation.WRITE, ALLOW), _b(T, "*", LIT, "User:b", Operation.WRITE, DENY),
                    _b(T, "y", LIT, "User:b", Operation.WRITE, ALLOW))
    assert a.authorize_any("User:a", "h", Operation.WRITE, T)
    assert not a.authorize_any("User:b", "h", Operation.WRITE, T)
    assert not a.authorize_any("User:c", "h", Operation.WRITE, T)


def test_filters_and_binding_checks():
    literal = _b(T, "orders", LIT, "User:a", Operation.READ, ALLOW)
    prefixed = _b(T, "ord", PRE, "User:a", Operation.READ, ALLOW)
    wildcard = _b(T, "*", LIT, "User:b", Operation.WRITE, DENY)
    match = AclFilter(T, "orders", PatternType.MATCH)
    assert [b for b in (literal, prefixed, wildcard) if match.matches(b)] == [literal, prefixed, wildcard]
    assert [b for b in (literal, prefixed, wildcard) if AclFilter(pattern_type=PRE).matches(b)] == [prefixed]
    assert [b for b in (literal, prefixed, wildcard) if AclFilter(principal="User:b").matches(b)] == [wildcard]
    for bad in [_b(ResourceType.ANY, "x", LIT, "User:a", Operation.READ, ALLOW),
                _b(T, "*", PRE, "User:a", Operation.READ, ALLOW),
                _b(T, "x", LIT, "alice", Operation.READ, ALLOW),
                _b(T, "x", LIT, "User:a", Operation.ANY, ALLOW),
                _b(C, "other", LIT, "User:a", Operation.ALTER, ALLOW),
                _b(T, "", LIT, "User:a", Operation.READ, ALLOW)]:
        with pytest.raises(AclError):
            bad.check()
