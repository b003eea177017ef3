"""``pykfk acl list|create|delete`` (Describe/Create/DeleteAcls) and ``pykfk user
list|set|delete`` (SCRAM credentials: Describe/AlterUserScramCredentials)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import click

from pykfk.cli.common import (
    EXIT_USAGE,
    CliContext,
    CliError,
    admin_command,
    emit,
    emit_table,
    note,
    pass_cli,
)
from pykfk.errors import ErrorCode, KafkaError
from pykfk.security.acl import CLUSTER_NAME, Operation, PatternType, Permission, ResourceType
from pykfk.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_NAMES,
    MECHANISM_TYPES,
    MIN_ITERATIONS,
    salted_password,
)

F = TypeVar("F", bound=Callable[..., Any])


def _names(enum: Any, skip: tuple[str, ...] = ("UNKNOWN", "ANY")) -> list[str]:
    return [m.name.lower().replace("_", "-") for m in enum if m.name not in skip]


def _enum_value(enum: Any, text: str) -> int:
    return int(enum[text.upper().replace("-", "_")])


def _enum_name(enum: Any, value: int) -> str:
    try:
        return str(enum(value).name.lower().replace("_", "-"))
    except ValueError:
        return str(value)


def _resource_options(func: F) -> F:
    options = [
        click.option("--topic", help="A topic name (or prefix with --prefixed; '*' = all)."),
        click.option("--group", help="A consumer group name (or prefix)."),
        click.option("--transactional-id", help="A transactional id (or prefix)."),
        click.option("--cluster", is_flag=True, help="The cluster resource."),
        click.option("--prefixed", is_flag=True, help="The name is a prefix (PREFIXED pattern)."),
        click.option("--principal", metavar="User:NAME", help="Whose permission."),
        click.option("--host", help="From which host ('*' = any)."),
        click.option("--operation", "operations", multiple=True,
                     type=click.Choice(_names(Operation, ("UNKNOWN",)), case_sensitive=False),
                     help="What is allowed or denied. Repeatable."),
        click.option("--permission", type=click.Choice(["allow", "deny"], case_sensitive=False),
                     help="Allow or deny."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _resource(topic: str | None, group: str | None, transactional_id: str | None,
              cluster: bool) -> tuple[int, str | None]:
    chosen = [(ResourceType.TOPIC, topic), (ResourceType.GROUP, group),
              (ResourceType.TRANSACTIONAL_ID, transactional_id)]
    given = [(t, n) for t, n in chosen if n is not None]
    if cluster:
        given.append((ResourceType.CLUSTER, CLUSTER_NAME))
    if len(given) > 1:
        raise click.UsageError("give one of --topic, --group, --transactional-id, --cluster")
    return (int(given[0][0]), given[0][1]) if given else (int(ResourceType.ANY), None)


def _acl_filters(kw: dict[str, Any]) -> list[dict[str, Any]]:
    """One DescribeAcls/DeleteAcls filter per --operation (one for any without)."""
    resource_type, name = _resource(kw["topic"], kw["group"], kw["transactional_id"], kw["cluster"])
    pattern = PatternType.PREFIXED if kw["prefixed"] else (
        PatternType.LITERAL if name is not None else PatternType.ANY)
    operations = [_enum_value(Operation, o) for o in dict.fromkeys(kw["operations"])]
    return [{
        "resource_type_filter": resource_type, "resource_name_filter": name,
        "pattern_type_filter": int(pattern), "principal_filter": kw["principal"],
        "host_filter": kw["host"], "operation": operation,
        "permission_type": (_enum_value(Permission, kw["permission"]) if kw["permission"]
                            else int(Permission.ANY)),
    } for operation in operations or [int(Operation.ANY)]]


@contextlib.contextmanager
def _authorizer_hint() -> Iterator[None]:
    """SECURITY_DISABLED says what to change, not only what is wrong."""
    try:
        yield
    except KafkaError as exc:
        if exc.code != ErrorCode.SECURITY_DISABLED:
            raise
        raise CliError(f"{exc.message}: SECURITY_DISABLED ({int(exc.code)}); ACLs need an "
                       "authorizer: set authorizer.class.name=kafka.security.authorizer."
                       "AclAuthorizer in every broker's server.properties and restart them "
                       "(docs/security.md)") from None


def _matching(cli: CliContext, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for acl_filter in filters:
        rows += [_acl_row(b) for b in cli.admin().describe_acls(acl_filter) if _acl_row(b) not in rows]
    return rows


def _acl_row(binding: dict[str, Any]) -> dict[str, Any]:
    return {
        "resource_type": _enum_name(ResourceType, binding["resource_type"]),
        "resource_name": binding["resource_name"],
        "pattern_type": _enum_name(PatternType, binding["pattern_type"]),
        "principal": binding["principal"], "host": binding["host"],
        "operation": _enum_name(Operation, binding["operation"]),
        "permission": _enum_name(Permission, binding["permission_type"]),
    }


_ACL_COLUMNS = ["principal", "permission", "operation", "host", "resource_type",
                "resource_name", "pattern_type"]


@click.group("acl")
def acl_group() -> None:
    """Access control lists (needs an authorizer on the brokers)."""


@acl_group.command("list")
@_resource_options
@admin_command
@pass_cli
def acl_list(cli: CliContext, /, **kw: Any) -> None:
    """The ACL bindings matching the options (all of them without options)."""
    with _authorizer_hint():
        rows = _matching(cli, _acl_filters(kw))
    emit(cli, rows, rows, _ACL_COLUMNS)


@acl_group.command("create")
@_resource_options
@admin_command
@pass_cli
def acl_create(cli: CliContext, /, **kw: Any) -> None:
    """Add a binding per --operation (repeatable): --principal, --operation,
    --permission and one resource."""
    resource_type, name = _resource(kw["topic"], kw["group"], kw["transactional_id"], kw["cluster"])
    missing = [o for o, v in (("--principal", kw["principal"]), ("--operation", kw["operations"]),
                              ("--permission", kw["permission"])) if not v]
    if name is None:
        missing.append("--topic/--group/--transactional-id/--cluster")
    if missing:
        raise click.UsageError("acl create needs " + ", ".join(missing))
    if any(o.lower() == "any" for o in kw["operations"]):
        raise click.BadParameter("'any' only filters; name an operation", param_hint="--operation")
    bindings: list[Mapping[str, Any]] = [{
        "resource_type": resource_type, "resource_name": name,
        "resource_pattern_type": int(PatternType.PREFIXED if kw["prefixed"] else PatternType.LITERAL),
        "principal": kw["principal"], "host": kw["host"] or "*",
        "operation": _enum_value(Operation, operation),
        "permission_type": _enum_value(Permission, kw["permission"]),
    } for operation in dict.fromkeys(o.lower() for o in kw["operations"])]
    with _authorizer_hint():
        cli.admin().create_acls(bindings)
    rows = [_acl_row({**b, "pattern_type": b["resource_pattern_type"]}) for b in bindings]
    emit(cli, rows[0] if len(rows) == 1 else rows, rows, _ACL_COLUMNS)


@acl_group.command("delete")
@_resource_options
@click.option("--all", "delete_all", is_flag=True, help="Allow a filter that matches everything.")
@click.option("--force", "-f", is_flag=True,
              help="Do not ask for confirmation (needed when stdin is not a terminal).")
@admin_command
@pass_cli
def acl_delete(cli: CliContext, /, delete_all: bool, force: bool, **kw: Any) -> None:
    """Remove the bindings matching the options, after showing them and asking (as
    kafka-acls.sh --remove does); prints what was removed."""
    filters = _acl_filters(kw)
    if not delete_all and not any(kw[k] for k in ("topic", "group", "transactional_id", "cluster",
                                                  "principal", "host", "operations", "permission")):
        raise click.UsageError("this filter matches every ACL; narrow it or add --all")
    if not force:
        _confirm_delete(cli, filters)
    rows: list[dict[str, Any]] = []
    with _authorizer_hint():
        for acl_filter in filters:
            rows += [_acl_row(b) for b in cli.admin().delete_acls(acl_filter)]
    emit(cli, rows, rows, _ACL_COLUMNS)


def _confirm_delete(cli: CliContext, filters: list[dict[str, Any]]) -> None:
    if not sys.stdin.isatty():
        raise CliError("acl delete asks for confirmation and stdin is not a terminal; "
                       "add --force to delete without asking", EXIT_USAGE)
    with _authorizer_hint():
        matching = _matching(cli, filters)
    if not matching:
        note("no ACL matches; nothing to remove")
        return
    note(f"these {len(matching)} ACL bindings match:")
    with contextlib.redirect_stdout(sys.stderr):
        emit_table(matching, _ACL_COLUMNS)
    if not click.confirm("Are you sure you want to remove them?", err=True):
        raise CliError("not confirmed; nothing removed")


# ---------------------------------------------------------------------------- users


@click.group("user")
def user_group() -> None:
    """SCRAM users (SCRAM-SHA-256 / SCRAM-SHA-512 credentials)."""


@user_group.command("list")
@click.argument("names", nargs=-1)
@admin_command
@pass_cli
def user_list(cli: CliContext, names: tuple[str, ...]) -> None:
    """Users with SCRAM credentials and their mechanisms (never the secrets)."""
    users = cli.admin().describe_scram_users(list(names) or None)
    rows: list[dict[str, Any]] = [{"user": u, "mechanisms": [
        {"mechanism": MECHANISM_NAMES.get(m, str(m)), "iterations": i} for m, i in creds]}
        for u, creds in sorted(users.items())]
    table = [{"user": r["user"], "mechanisms": " ".join(
        f"{m['mechanism']}({m['iterations']})" for m in r["mechanisms"])} for r in rows]
    emit(cli, rows, table, ["user", "mechanisms"])


_MECHANISMS = click.Choice(sorted(MECHANISM_TYPES), case_sensitive=False)


@user_group.command("set")
@click.argument("name")
@click.option("--password", envvar="PYKFK_USER_PASSWORD",
              help="The password [env PYKFK_USER_PASSWORD; asked for when absent].")
@click.option("--mechanism", "mechanisms", type=_MECHANISMS, multiple=True,
              help="Repeatable [default: SCRAM-SHA-256 and SCRAM-SHA-512].")
@click.option("--iterations", type=click.IntRange(MIN_ITERATIONS, MAX_ITERATIONS),
              default=MIN_ITERATIONS, show_default=True)
@admin_command
@pass_cli
def user_set(cli: CliContext, name: str, password: str | None, mechanisms: tuple[str, ...],
             iterations: int) -> None:
    """Create or change user NAME's SCRAM credentials. Only a salted password is sent."""
    if password is None:
        password = click.prompt(f"password for {name}", hide_input=True,
                                confirmation_prompt=True, err=True)
    if not password:
        raise click.BadParameter("the password is empty", param_hint="--password")
    upsertions: list[dict[str, Any]] = []
    for mechanism in [m.upper() for m in mechanisms] or sorted(MECHANISM_TYPES):
        salt = os.urandom(32)
        upsertions.append({
            "name": name, "mechanism": MECHANISM_TYPES[mechanism], "iterations": iterations,
            "salt": salt,
            "salted_password": salted_password(mechanism, password.encode(), salt, iterations),
        })
    cli.admin().alter_scram_users(upsertions, [])
    row = {"user": name, "mechanisms": [MECHANISM_NAMES[u["mechanism"]] for u in upsertions],
           "iterations": iterations}
    emit(cli, row, [row], ["user", "mechanisms", "iterations"])


@user_group.command("delete")
@click.argument("name")
@click.option("--mechanism", "mechanisms", type=_MECHANISMS, multiple=True,
              help="Repeatable [default: every mechanism the user has].")
@admin_command
@pass_cli
def user_delete(cli: CliContext, name: str, mechanisms: tuple[str, ...]) -> None:
    """Remove user NAME's SCRAM credentials."""
    admin = cli.admin()
    if mechanisms:
        chosen = [MECHANISM_TYPES[m.upper()] for m in mechanisms]
    else:
        known = admin.describe_scram_users([name]).get(name, [])
        chosen = [m for m, _ in known]
        if not chosen:
            raise CliError(f"user {name!r} has no SCRAM credentials")
    admin.alter_scram_users([], [{"name": name, "mechanism": m} for m in chosen])
    row = {"user": name, "deleted": [MECHANISM_NAMES.get(m, str(m)) for m in chosen]}
    emit(cli, row, [row], ["user", "deleted"])


COMMANDS = [acl_group, user_group]
