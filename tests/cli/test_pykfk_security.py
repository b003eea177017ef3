"""``pykfk acl`` and ``pykfk user`` against a broker with SASL logins and the ACL
authorizer, reached through ``--command-config`` files of Kafka client properties."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pykfk.testing import BrokerProcess

from .conftest import Pykfk, on_terminal

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-pw" user_admin="admin-pw" user_alice="alice-pw";')


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(str(tmp_path_factory.mktemp("cli-acl") / "data"), {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "connection.failed.authentication.delay.ms": 0,
    }).start()
    yield broker
    broker.stop()


def _login(tmp_path: Path, name: str, mechanism: str, user: str, password: str) -> str:
    path = tmp_path / f"{name}.properties"
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism == "PLAIN"
              else "org.apache.kafka.common.security.scram.ScramLoginModule")
    path.write_text(
        "# Kafka client properties\n"
        "security.protocol=SASL_PLAINTEXT\n"
        f"sasl.mechanism={mechanism}\n"
        f"sasl.jaas.config={module} required \\\n"
        f'    username="{user}" password="{password}";\n')
    return str(path)


@pytest.fixture
def sasl(secured: BrokerProcess) -> Pykfk:
    return Pykfk(f"127.0.0.1:{secured.ports['SASL_PLAINTEXT']}")


def test_acl_create_list_delete(sasl: Pykfk, tmp_path: Path) -> None:
    admin = _login(tmp_path, "admin", "PLAIN", "admin", "admin-pw")
    created = sasl.ok("acl", "create", "--command-config", admin, "--principal", "User:alice",
                      "--operation", "read", "--permission", "allow", "--topic", "orders-",
                      "--prefixed", "-o", "json").json()
    assert created["principal"] == "User:alice" and created["pattern_type"] == "prefixed"
    both = sasl.ok("acl", "create", "--command-config", admin, "--principal", "User:alice",
                   "--operation", "describe", "--operation", "read", "--permission", "allow",
                   "--group", "billing", "-o", "json").json()
    assert sorted(b["operation"] for b in both) == ["describe", "read"]

    listed = sasl.ok("acl", "list", "--command-config", admin, "-o", "json").json()
    assert sorted((a["resource_type"], a["resource_name"], a["operation"]) for a in listed) == [
        ("group", "billing", "describe"), ("group", "billing", "read"), ("topic", "orders-", "read")]
    only_topics = sasl.ok("acl", "list", "--command-config", admin, "--topic", "orders-",
                          "--prefixed", "-o", "json").json()
    assert [a["resource_name"] for a in only_topics] == ["orders-"]
    assert "User:alice" in sasl.ok("acl", "list", "--command-config", admin).out

    everything = sasl("acl", "delete", "--command-config", admin, "--force")
    assert everything.code == 2 and "--all" in everything.err

    # As kafka-acls.sh --remove: the matches are shown and a person confirms; piped
    # input cannot confirm, so a script says --force.
    delete = ["acl", "delete", "--command-config", admin, "--group", "billing"]
    unattended = sasl(*delete)
    assert unattended.code == 2 and "stdin is not a terminal" in unattended.err
    assert "--force" in unattended.err
    declined = on_terminal(sasl, *delete, typed="n\n")
    assert declined.code == 1 and "nothing removed" in declined.err, declined
    assert "these 2 ACL bindings match" in declined.err and "billing" in declined.err
    assert len(sasl.ok("acl", "list", "--command-config", admin, "--group", "billing",
                       "-o", "json").json()) == 2
    confirmed = on_terminal(sasl, *delete, "--operation", "read", "-o", "json", typed="y\n")
    assert confirmed.code == 0, confirmed
    assert [(a["resource_name"], a["operation"]) for a in confirmed.json()] == [("billing", "read")]
    removed = sasl.ok(*delete, "--force", "-o", "json").json()
    assert [(a["resource_name"], a["operation"]) for a in removed] == [("billing", "describe")]
    left = sasl.ok("acl", "list", "--command-config", admin, "-o", "json").json()
    assert [a["resource_name"] for a in left] == ["orders-"]

    # Alice may not manage ACLs: the cluster's refusal, named.
    alice = _login(tmp_path, "alice", "PLAIN", "alice", "alice-pw")
    refused = sasl("acl", "list", "--command-config", alice)
    assert refused.code == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.err, refused


def test_scram_user_set_list_delete_and_log_in(sasl: Pykfk, tmp_path: Path) -> None:
    admin = _login(tmp_path, "admin", "PLAIN", "admin", "admin-pw")
    sasl.ok("user", "set", "bob", "--command-config", admin, "--password", "bob-pw",
            "--mechanism", "SCRAM-SHA-256", "--iterations", "8192")
    listed = sasl.ok("user", "list", "--command-config", admin, "-o", "json").json()
    assert {"user": "bob", "mechanisms": [{"mechanism": "SCRAM-SHA-256", "iterations": 8192}]} \
        in listed

    bob = _login(tmp_path, "bob", "SCRAM-SHA-256", "bob", "bob-pw")
    info = sasl.ok("cluster", "info", "--command-config", bob, "-o", "json").json()
    assert info["brokers"]
    wrong = _login(tmp_path, "wrong", "SCRAM-SHA-256", "bob", "not-bobs")
    failed = sasl("cluster", "info", "--command-config", wrong)
    assert failed.code == 1 and "SASL_AUTHENTICATION_FAILED" in failed.err, failed

    sasl.ok("user", "delete", "bob", "--command-config", admin)
    gone = sasl("cluster", "info", "--command-config", bob)
    assert gone.code == 1 and "SASL_AUTHENTICATION_FAILED" in gone.err, gone
    unknown = sasl("user", "delete", "nobody", "--command-config", admin)
    assert unknown.code == 1 and "nobody" in unknown.err, unknown


def test_bad_command_config_is_a_usage_error(sasl: Pykfk, tmp_path: Path) -> None:
    missing = sasl("cluster", "info", "--command-config", str(tmp_path / "absent.properties"))
    assert missing.code == 2 and "cannot read --command-config" in missing.err
    odd = tmp_path / "odd.properties"
    odd.write_text("security.protocol=CARRIER_PIGEON\n")
    result = sasl("cluster", "info", "--command-config", str(odd))
    assert result.code == 2 and "security.protocol" in result.err


def test_acls_on_a_broker_without_authorizer(pykfk: Pykfk) -> None:
    result = pykfk("acl", "list")
    assert result.code == 1 and "SECURITY_DISABLED" in result.err, result
    # The answer says what to change, as a person needs it.
    assert "set authorizer.class.name=" in result.err, result


def test_tls_listener_with_a_trust_store(tmp_path: Path) -> None:
    from tests.security.certs import CertificateAuthority

    (tmp_path / "ca").mkdir()
    ca = CertificateAuthority(tmp_path / "ca")
    server = ca.issue("server", "localhost", server=True)
    broker = BrokerProcess(str(tmp_path / "data"), {
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.location": str(server.both),
        "ssl.truststore.location": str(ca.cert_path),
    }).start()
    try:
        tls = Pykfk(f"127.0.0.1:{broker.ports['SSL']}")
        trusted = tmp_path / "tls.properties"
        trusted.write_text(f"security.protocol=SSL\nssl.truststore.location={ca.cert_path}\n")
        info = tls.ok("cluster", "info", "--command-config", str(trusted), "-o", "json").json()
        assert [b["port"] for b in info["brokers"]] == [broker.ports["SSL"]]
        tls.ok("topic", "create", "secret", "-p", "1", "--command-config", str(trusted))
        tls.ok("produce", "secret", "--command-config", str(trusted), input="over tls\n")
        records = tls.ok("consume", "secret", "--from-beginning", "-e", "-o", "json",
                         "--command-config", str(trusted)).json_lines()
        assert [r["value"] for r in records] == ["over tls"]

        # Without the CA the broker's certificate is not trusted: no connection.
        untrusted = tmp_path / "untrusted.properties"
        untrusted.write_text("security.protocol=SSL\n")
        refused = tls("cluster", "info", "--command-config", str(untrusted), "--timeout", "3")
        assert refused.code == 3 and "CERTIFICATE_VERIFY_FAILED" in refused.err, refused
    finally:
        broker.stop()
