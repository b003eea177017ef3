"""``pykfk user principal``: the principal a broker gives a Kerberos name, under
Kafka's ``sasl.kerberos.principal.to.local.rules`` (from the command line or the
broker's server.properties), without asking a broker. ``pykfk user list|set|delete``
(SCRAM users) live in ``pykfk.cli.access``."""

from __future__ import annotations

from typing import Any

import click

from pykfk.cli.access import user_group
from pykfk.cli.common import (
    EXIT_FAILED,
    EXIT_USAGE,
    CliContext,
    CliError,
    emit,
    output_option,
    pass_cli,
)
from pykfk.client.admin import read_properties
from pykfk.security.kerberos import KerberosError, KerberosNameMapper

RULES_KEY = "sasl.kerberos.principal.to.local.rules"


@user_group.command("principal")
@click.argument("names", nargs=-1, required=True, metavar="KERBEROS_NAME...")
@click.option("--rules", "rules", multiple=True, metavar="RULE",
              help=f"A rule of {RULES_KEY} (DEFAULT, RULE:[n:fmt](regex)s/a/b/g/L); repeatable.")
@click.option("--broker-config", type=click.Path(exists=True, dir_okay=False),
              help=f"Take {RULES_KEY} from this server.properties.")
@click.option("--realm", help="The default realm DEFAULT maps from [default: that of krb5.conf / KRB5_CONFIG].")
@output_option
@pass_cli
def user_principal(cli: CliContext, names: tuple[str, ...], rules: tuple[str, ...], broker_config: str | None,
                   realm: str | None) -> None:
    """The principal each Kerberos NAME (name[/host]@REALM) logs in as with SASL/GSSAPI.

    A name no rule maps cannot log in: it is reported, and the exit code is 1."""
    if rules and broker_config:
        raise CliError("give --rules or --broker-config, not both", EXIT_USAGE)
    chosen: str | list[str] = list(rules) or ["DEFAULT"]
    if broker_config:
        chosen = read_properties(broker_config).get(RULES_KEY, "").strip() or "DEFAULT"
    try:
        mapper = KerberosNameMapper(chosen, realm)
    except KerberosError as exc:
        raise CliError(f"{RULES_KEY}: {exc}", EXIT_USAGE) from None
    rows: list[dict[str, Any]] = []
    for name in names:
        try:
            rows.append({"kerberos_name": name, "principal": "User:" + mapper.short_name(name), "error": ""})
        except KerberosError as exc:
            rows.append({"kerberos_name": name, "principal": "", "error": str(exc)})
    emit(cli, rows, rows, ["kerberos_name", "principal", "error"])
    if any(r["error"] for r in rows):
        raise click.exceptions.Exit(EXIT_FAILED)


COMMANDS: list[click.Command] = []  # its command joins ``pykfk user`` on import
