"""The security building blocks without I/O: SCRAM against RFC 7677's example, PLAIN,
JAAS values, certificate subjects and principal mapping rules."""

from __future__ import annotations

import asyncio
import base64

import pytest

from pykfk.config import ConfigError
from pykfk.security import scram
from pykfk.security.jaas import JaasError, parse_jaas
from pykfk.security.sasl import AuthenticationError, SaslClient, SaslServer
from pykfk.security.tls import PrincipalMapper, subject_dn


def test_scram_sha_256_matches_rfc_7677():
    # RFC 7677 section 3: user "user", password "pencil".
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = scram.make_credential("SCRAM-SHA-256", "pencil", 4096, salt)
    server = scram.ScramServer("SCRAM-SHA-256")
    assert server.parse_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == "user"
    server.first(credential)
    server._nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"  # the RFC's server nonce
    server._server_first = f"r={server._nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = server.final(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                          b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_and_server_agree(mechanism):
    credential = scram.make_credential(mechanism, "s3cret", 4096)

    async def lookup(user, mech):
        return credential if (user, mech) == ("al,ice=", mechanism) else None

    server, client = SaslServer(mechanism, {}, lookup), SaslClient(mechanism, "al,ice=", "s3cret")
    token = client.first()
    while token is not None:
        token = client.step(asyncio.run(server.step(token)))
    assert server.complete and server.user == "al,ice="


def test_scram_refuses_a_wrong_password_and_a_replayed_nonce():
    credential = scram.make_credential("SCRAM-SHA-256", "right", 4096)

    async def lookup(user, mech):
        return credential

    server, client = SaslServer("SCRAM-SHA-256", {}, lookup), SaslClient("SCRAM-SHA-256", "u", "wrong")
    final = client.step(asyncio.run(server.step(client.first())))
    with pytest.raises(AuthenticationError):
        asyncio.run(server.step(final))
    server = SaslServer("SCRAM-SHA-256", {}, lookup)
    asyncio.run(server.step(b"n,,n=u,r=abc"))
    with pytest.raises(AuthenticationError, match="nonce"):
        asyncio.run(server.step(b"c=biws,r=abcOTHER,p=AAAA"))


def test_scram_credential_text_round_trips():
    credential = scram.make_credential("SCRAM-SHA-512", "pw", 5000)
    assert scram.ScramCredential.from_text(credential.to_text()) == credential
    with pytest.raises(scram.ScramError):
        scram.ScramCredential.from_text("salt=AAAA,iterations=x")


@pytest.mark.parametrize("token, ok", [
    (b"\0alice\0pw", True), (b"alice\0alice\0pw", True), (b"bob\0alice\0pw", False),
    (b"\0alice\0PW", False), (b"\0\0pw", False), (b"\0alice", False), (b"\0nobody\0pw", False),
])
def test_plain_checks_user_password_and_authorization_id(token, ok):
    async def no_scram(user, mech):
        return None

    server = SaslServer("PLAIN", {"alice": "pw"}, no_scram)
    if ok:
        assert asyncio.run(server.step(token)) == b"" and server.user == "alice"
    else:
        with pytest.raises(AuthenticationError):
            asyncio.run(server.step(token))


def test_jaas_values_parse_like_kafkas():
    entry = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required\n'
                       '  username="admin" password="a\\"b" user_admin="a\\"b" user_x=plain;')
    assert entry.login_module.endswith("PlainLoginModule") and entry.flag == "required"
    assert entry.options["password"] == 'a"b'
    assert entry.plain_users == {"admin": 'a"b', "x": "plain"}
    for bad in ["", "Module", 'Module required user="x"', 'Module required user="x"; trailing']:
        with pytest.raises(JaasError):
            parse_jaas(bad)


def test_subjects_print_as_java_does_and_rules_map_them():
    cert = {"subject": ((("countryName", "DE"),), (("organizationName", "Acme, Inc"),), (("commonName", "alice"),))}
    assert subject_dn(cert) == "CN=alice,O=Acme\\, Inc,C=DE"
    assert PrincipalMapper("DEFAULT").map("CN=alice,O=x") == "CN=alice,O=x"
    rules = PrincipalMapper("RULE:^CN=(.*?),O=(.*)$/$1@$2/L, DEFAULT")
    assert rules.map("CN=Alice,O=Acme") == "alice@acme"
    assert rules.map("OU=other") == "OU=other"
    assert PrincipalMapper("RULE:^CN=([^,]*).*$/$1/U").map("CN=bob,O=x") == "BOB"
    with pytest.raises(ConfigError):
        PrincipalMapper("RULE:^CN=(.*$/$1/")
    with pytest.raises(ConfigError):
        PrincipalMapper("NONSENSE")
