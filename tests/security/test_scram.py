"""SCRAM users managed with confluent-kafka's admin client (Alter/DescribeUserScramCredentials)
and logging in with SCRAM-SHA-256 and SCRAM-SHA-512, over plain TCP and TLS."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from pykfk.errors import ErrorCode
from pykfk.testing import RawClient
from tests.security.conftest import client_settings

ALTER, DESCRIBE = 51, 50


def _admin(broker, ca):
    return AdminClient(client_settings(broker, ca, "SASL_PLAINTEXT", user="admin", password="admin-secret"))


def _login_error(settings: dict[str, str]) -> KafkaError | None:
    """None when a client logs in and reads metadata; else the first error it reports."""
    errors: list[KafkaError] = []
    producer = Producer({**settings, "error_cb": errors.append, "reconnect.backoff.ms": 1000})
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        try:
            producer.list_topics(timeout=0.5)
            return None
        except Exception:  # noqa: BLE001 - not yet: the error callback says why, or the next try works
            producer.poll(0.1)
    return errors[0] if errors else KafkaError(KafkaError._TIMED_OUT)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_a_scram_user_added_through_the_admin_api_logs_in(secure_broker, ca, mechanism, listener):
    admin = _admin(secure_broker, ca)
    user = f"bob-{mechanism[-3:]}-{listener.lower()}"
    info = ScramCredentialInfo(getattr(ScramMechanism, mechanism.replace("-", "_")), 8192)
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, info, b"bob-secret")])
    futures[user].result(20)
    assert _login_error(client_settings(secure_broker, ca, listener, mechanism=mechanism, user=user,
                                        password="bob-secret")) is None
    wrong = _login_error(client_settings(secure_broker, ca, listener, mechanism=mechanism, user=user,
                                         password="not-it"))
    assert wrong is not None and wrong.code() == KafkaError._AUTHENTICATION

    description = admin.describe_user_scram_credentials([user])[user].result(20)
    assert [(i.mechanism, i.iterations) for i in description.scram_credential_infos] == [(info.mechanism, 8192)]

    admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, info.mechanism)])[user].result(20)
    gone = _login_error(client_settings(secure_broker, ca, listener, mechanism=mechanism, user=user,
                                        password="bob-secret"))
    assert gone is not None and gone.code() == KafkaError._AUTHENTICATION


def test_credentials_survive_a_restart(secure_broker, ca):
    admin = _admin(secure_broker, ca)
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion("carol", info, b"c-pw")])["carol"].result(20)
    secure_broker.restart()
    assert _login_error(client_settings(secure_broker, ca, "SASL_SSL", mechanism="SCRAM-SHA-256", user="carol",
                                        password="c-pw")) is None


def _raw_admin(broker) -> RawClient:
    raw = RawClient("127.0.0.1", broker.ports["SASL_PLAINTEXT"])
    assert raw.call(17, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.NONE
    assert raw.call(36, 1, {"auth_bytes": b"\0admin\0admin-secret"}).error_code == ErrorCode.NONE
    return raw


def test_bad_credential_changes_get_kafkas_errors(secure_broker):
    raw = _raw_admin(secure_broker)
    try:
        upsert = {"name": "dave", "mechanism": 1, "iterations": 4096, "salt": b"s" * 16, "salted_password": b"p" * 32}
        answer = raw.call(ALTER, 0, {"deletions": [], "upsertions": [
            {**upsert, "name": "low", "iterations": 100},
            {**upsert, "name": "mech", "mechanism": 9},
            {**upsert, "name": "empty", "salt": b""},
            {**upsert, "name": ""},
            upsert, {**upsert, "salt": b"t" * 16},
        ]})
        codes = {r.user: r.error_code for r in answer.results}
        assert codes == {"low": ErrorCode.UNACCEPTABLE_CREDENTIAL, "mech": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                         "empty": ErrorCode.UNACCEPTABLE_CREDENTIAL, "": ErrorCode.UNACCEPTABLE_CREDENTIAL,
                         "dave": ErrorCode.DUPLICATE_RESOURCE}
        answer = raw.call(ALTER, 0, {"deletions": [{"name": "nobody", "mechanism": 1}], "upsertions": []})
        assert answer.results[0].error_code == ErrorCode.RESOURCE_NOT_FOUND
        described = raw.call(DESCRIBE, 0, {"users": [{"name": "nobody"}, {"name": "low"}]})
        assert [r.error_code for r in described.results] == [ErrorCode.RESOURCE_NOT_FOUND] * 2
        # Nothing of the refused changes was stored.
        everyone = raw.call(DESCRIBE, 0, {"users": None})
        assert not {"low", "mech", "empty", "dave", ""} & {r.user for r in everyone.results}
    finally:
        raw.close()
