"""``pykfk token``: delegation tokens (CreateDelegationToken, DescribeDelegationToken,
RenewDelegationToken, ExpireDelegationToken; Kafka 1.1+), as kafka-delegation-tokens.sh
manages them. HMACs are shown and taken in base64: the HMAC is also the SCRAM password a
client logs in with (the token id being the user name). ``pykfk token oidc`` gets an
OAUTHBEARER token from the identity provider with the --command-config client
credentials and shows the principal the brokers will take from it."""

from __future__ import annotations

import base64
import binascii
import datetime
from typing import Any

import click

from pykfk.cli.common import (
    EXIT_USAGE,
    CliContext,
    CliError,
    Duration,
    admin_command,
    emit,
    pass_cli,
)
from pykfk.client.admin import check

CREATE, RENEW, EXPIRE, DESCRIBE = 38, 39, 40, 41


def _principal(text: str, param_hint: str) -> dict[str, str]:
    kind, sep, name = text.partition(":")
    if not sep:
        kind, name = "User", text
    if not kind or not name:
        raise click.BadParameter(f"expected User:name or name, not {text!r}", param_hint=param_hint)
    return {"principal_type": kind, "principal_name": name}


def _hmac(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise click.BadParameter("not base64", param_hint="--hmac") from None


def _when(ms: int) -> str:
    if ms < 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _row(token: Any, issue: int, expiry: int, max_ms: int, renewers: list[str]) -> dict[str, Any]:
    return {"token_id": token.token_id, "hmac": base64.b64encode(bytes(token.hmac)).decode(),
            "owner": f"{token.principal_type}:{token.principal_name}",
            "issued": _when(issue), "expires": _when(expiry), "max": _when(max_ms), "renewers": renewers}


COLUMNS = ["token_id", "hmac", "owner", "renewers", "issued", "expires", "max"]


@click.group("token")
def token_group() -> None:
    """Delegation tokens: a SCRAM login (token id and HMAC) standing for their owner."""


@token_group.command("create")
@click.option("--renewer", "renewers", multiple=True, metavar="PRINCIPAL",
              help="A principal that may renew the token (User:name or name); repeatable.")
@click.option("--owner", metavar="PRINCIPAL",
              help="Make the token for another owner (needs CreateTokens on that User; Kafka 3.3+).")
@click.option("--max-life", "max_life_ms", type=Duration("ms"), default=None,
              help="Longest the token may live, e.g. 7d [default: the broker's delegation.token.max.lifetime.ms].")
@admin_command
@pass_cli
def token_create(cli: CliContext, renewers: tuple[str, ...], owner: str | None, max_life_ms: int | None) -> None:
    """Create a token. Its HMAC is shown once here (and to whoever may describe it)."""
    owned = _principal(owner, "--owner") if owner else {"principal_type": None, "principal_name": None}
    admin = cli.admin()
    answer = admin.call(admin.any_broker(), CREATE, {
        "owner_principal_type": owned["principal_type"], "owner_principal_name": owned["principal_name"],
        "renewers": [_principal(r, "--renewer") for r in renewers],
        "max_lifetime_ms": -1 if max_life_ms is None else max_life_ms})
    check(answer.error_code, "create a delegation token")
    named = [_principal(r, "--renewer") for r in renewers]
    row = _row(answer, answer.issue_timestamp_ms, answer.expiry_timestamp_ms, answer.max_timestamp_ms,
               [f"{p['principal_type']}:{p['principal_name']}" for p in named])
    emit(cli, row, [row], COLUMNS)


@token_group.command("list")
@click.option("--owner", "owners", multiple=True, metavar="PRINCIPAL",
              help="Only tokens of this owner or renewer; repeatable [default: every token you may see].")
@admin_command
@pass_cli
def token_list(cli: CliContext, owners: tuple[str, ...]) -> None:
    """The tokens you own, renew, or may describe."""
    admin = cli.admin()
    answer = admin.call(admin.any_broker(), DESCRIBE, {
        "owners": [_principal(o, "--owner") for o in owners] if owners else None})
    check(answer.error_code, "describe delegation tokens")
    rows = [_row(t, t.issue_timestamp, t.expiry_timestamp, t.max_timestamp,
                 [f"{r.principal_type}:{r.principal_name}" for r in t.renewers]) for t in answer.tokens]
    table = [{**r, "renewers": ",".join(r["renewers"])} for r in rows]
    emit(cli, rows, table, COLUMNS)


def _change(cli: CliContext, api_key: int, hmac_text: str, period_field: str, period_ms: int, what: str) -> None:
    admin = cli.admin()
    answer = admin.call(admin.any_broker(), api_key, {"hmac": _hmac(hmac_text), period_field: period_ms})
    check(answer.error_code, what)
    row = {"expires": _when(answer.expiry_timestamp_ms)}
    emit(cli, row, [row], ["expires"])


@token_group.command("renew")
@click.option("--hmac", "hmac_text", required=True, help="The token's HMAC (base64).")
@click.option("--period", "period_ms", type=Duration("ms"), default=None,
              help="New lifetime from now, e.g. 1d [default: the broker's delegation.token.expiry.time.ms].")
@admin_command
@pass_cli
def token_renew(cli: CliContext, hmac_text: str, period_ms: int | None) -> None:
    """Push a token's expiry out (owner, requester or renewer; never past its max)."""
    _change(cli, RENEW, hmac_text, "renew_period_ms", -1 if period_ms is None else period_ms, "renew the token")


@token_group.command("expire")
@click.option("--hmac", "hmac_text", required=True, help="The token's HMAC (base64).")
@click.option("--in", "period_ms", type=Duration("ms"), default=None,
              help="Expire after this long, e.g. 10m [default: now, removing the token].")
@admin_command
@pass_cli
def token_expire(cli: CliContext, hmac_text: str, period_ms: int | None) -> None:
    """End a token now, or bring its expiry forward."""
    _change(cli, EXPIRE, hmac_text, "expiry_time_period_ms", -1 if period_ms is None else period_ms,
            "expire the token")


@token_group.command("oidc")
@click.option("--sub-claim", default="sub", show_default=True,
              help="The claim naming the principal (the brokers' sasl.oauthbearer.sub.claim.name).")
@click.option("--scope-claim", default="scope", show_default=True,
              help="The claim holding the scopes (the brokers' sasl.oauthbearer.scope.claim.name).")
@click.option("--show-token", is_flag=True, help="Print the token too (a bearer credential: keep it to yourself).")
@admin_command
@pass_cli
def token_oidc(cli: CliContext, sub_claim: str, scope_claim: str, show_token: bool) -> None:
    """Get an OAUTHBEARER token from the identity provider and show what brokers see in it.

    The --command-config names the token endpoint and the client credentials as a Kafka
    client takes them (sasl.oauthbearer.token.endpoint.url and OAuthBearerLoginModule's
    clientId, clientSecret, scope in sasl.jaas.config; librdkafka's
    sasl.oauthbearer.client.id/.client.secret/.scope too). No broker is asked and the
    signature is not checked: the brokers check it against the JWKS."""
    import jwt

    from pykfk.client.admin import read_properties
    from pykfk.security.oauth import claim_scopes
    from pykfk.security.oauth_login import (
        TokenEndpointError,
        check_login_token,
        client_credentials_from_properties,
        fetch_access_token,
    )

    if not cli.command_config:
        raise CliError("--command-config must name the token endpoint and the client credentials", EXIT_USAGE)
    try:
        credentials = client_credentials_from_properties(read_properties(cli.command_config))
    except OSError as exc:
        raise CliError(f"cannot read --command-config {cli.command_config}: {exc.strerror}", EXIT_USAGE) from None
    except ValueError as exc:
        raise CliError(f"--command-config {cli.command_config}: {exc}", EXIT_USAGE) from None
    try:
        login = check_login_token(fetch_access_token(credentials), sub_claim, scope_claim)
    except TokenEndpointError as exc:
        raise CliError(f"no token: {exc}") from None
    claims = jwt.decode(login.value, options={"verify_signature": False})
    audience = claims.get("aud")
    row: dict[str, Any] = {
        "principal": f"User:{login.principal}", "issuer": claims.get("iss", "-"),
        "audience": audience if isinstance(audience, list) else [audience] if audience else [],
        "scopes": sorted(claim_scopes(claims, scope_claim)), "expires": _when(login.expiry_ms)}
    if show_token:
        row["token"] = login.value
    table = [{**row, "audience": ",".join(row["audience"]), "scopes": ",".join(row["scopes"])}]
    emit(cli, row, table, [*row])


COMMANDS = [token_group]
