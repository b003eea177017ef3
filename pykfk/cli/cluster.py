"""``pykfk cluster``: info (brokers, controller, cluster id), api-versions, and
``config get|set`` of brokers and topics."""

from __future__ import annotations

from typing import Any

import click

from pykfk.cli.common import CliContext, admin_command, emit, emit_json, emit_table, note, pass_cli
from pykfk.cli.topic import config_operations, report_config_change
from pykfk.client.admin import RESOURCE_BROKER, RESOURCE_TOPIC
from pykfk.protocol import API_SPECS


@click.group("cluster")
def cluster_group() -> None:
    """Brokers, controller, API versions and dynamic configs."""


@cluster_group.command("info")
@admin_command
@pass_cli
def info(cli: CliContext) -> None:
    """Cluster id, controller and brokers."""
    described = cli.admin().describe_cluster()
    brokers = [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack,
                "controller": b.node_id == described["controller_id"]}
               for b in described["brokers"]]
    if cli.json:
        emit_json({"cluster_id": described["cluster_id"],
                   "controller_id": described["controller_id"], "brokers": brokers})
        return
    click.echo(f"cluster {described['cluster_id']}, controller {described['controller_id']}")
    emit_table(brokers, ["node_id", "host", "port", "rack", "controller"],
               ["broker", "host", "port", "rack", "controller"])


@cluster_group.command("api-versions")
@admin_command
@pass_cli
def api_versions(cli: CliContext) -> None:
    """The APIs and versions the bootstrap broker serves (ApiVersions)."""
    served = cli.admin().any_broker().api_versions
    rows = [{"api_key": key, "name": API_SPECS[key].name if key in API_SPECS else None,
             "min_version": lo, "max_version": hi}
            for key, (lo, hi) in sorted(served.items())]
    emit(cli, rows, rows, ["api_key", "name", "min_version", "max_version"],
         ["key", "api", "min", "max"])


@cluster_group.group("config")
def config_group() -> None:
    """Read and change broker and topic configs."""


def _resource(cli: CliContext, broker: int | None, broker_defaults: bool,
              topic: str | None) -> tuple[int, str]:
    chosen = sum(x is not None and x is not False for x in (broker, topic)) + broker_defaults
    if chosen > 1:
        raise click.UsageError("give one of --broker, --broker-defaults, --topic")
    if topic is not None:
        cli.admin().topic(topic)
        return RESOURCE_TOPIC, topic
    if broker_defaults:
        return RESOURCE_BROKER, ""
    if broker is None:
        # Without a choice: the controller, a broker every cluster has.
        admin = cli.admin()
        admin.metadata([])
        broker = admin.controller_id if admin.controller_id >= 0 else min(admin.brokers)
    return RESOURCE_BROKER, str(broker)


_resource_options = [
    click.option("--broker", type=int, metavar="ID",
                 help="This broker's configs [default: the controller's]."),
    click.option("--broker-defaults", is_flag=True,
                 help="The cluster-wide dynamic broker defaults."),
    click.option("--topic", metavar="NAME", help="This topic's configs."),
]


def _with_resource_options(func: click.decorators.FC) -> click.decorators.FC:
    for option in reversed(_resource_options):
        func = option(func)
    return func


@config_group.command("get")
@click.argument("keys", nargs=-1)
@_with_resource_options
@click.option("--all", "-a", "show_all", is_flag=True, help="Show default values too.")
@click.option("--synonyms", is_flag=True, help="Show where each value comes from.")
@admin_command
@pass_cli
def config_get(cli: CliContext, keys: tuple[str, ...], broker: int | None,
               broker_defaults: bool, topic: str | None, show_all: bool, synonyms: bool) -> None:
    """Configs of a broker or topic (DescribeConfigs); KEYS narrow the list."""
    resource_type, name = _resource(cli, broker, broker_defaults, topic)
    every = cli.admin().describe_configs(resource_type, name, list(keys) or None)
    entries = every if show_all or keys else [e for e in every if not e.is_default]
    rows: list[dict[str, Any]] = [{"name": e.name, "value": "[hidden]" if e.sensitive else e.value,
             "source": e.source, "read_only": e.read_only, "sensitive": e.sensitive,
             "synonyms": [{"name": s[0], "value": s[1], "source": s[2]} for s in e.synonyms]}
            for e in entries]
    label = (f"topic {name}" if resource_type == RESOURCE_TOPIC
             else f"broker {name}" if name else "the broker defaults")
    if cli.json:
        emit_json({"resource_type": "topic" if resource_type == RESOURCE_TOPIC else "broker",
                   "resource_name": name, "configs": rows})
        return
    if not rows:
        note(f"{label}: all {len(every)} configs are at their defaults (--all lists them)"
             if every else f"{label}: no dynamic configs")
        return
    for row in rows:
        # Kafka's kafka-configs.sh shape: SOURCE:name=value, a null value as null.
        row["synonyms"] = " ".join(
            f"{s['source']}:{s['name']}={'null' if s['value'] is None else s['value']}"
            for s in row["synonyms"])
        if row["value"] is None:
            row["value"] = "null"
    emit_table(rows, ["name", "value", "source", "read_only"] + (["synonyms"] if synonyms else []))


@config_group.command("set")
@click.argument("settings", nargs=-1, metavar="KEY=VALUE...")
@_with_resource_options
@click.option("--delete", "-d", "deletes", multiple=True, metavar="KEY",
              help="Remove a dynamic config.")
@click.option("--validate-only", is_flag=True)
@admin_command
@pass_cli
def config_set(cli: CliContext, settings: tuple[str, ...], broker: int | None,
               broker_defaults: bool, topic: str | None, deletes: tuple[str, ...],
               validate_only: bool) -> None:
    """Change dynamic configs of a broker or topic (IncrementalAlterConfigs)."""
    operations = config_operations(settings, deletes, (), ())
    resource_type, name = _resource(cli, broker, broker_defaults, topic)
    cli.admin().alter_configs(resource_type, name, operations, validate_only=validate_only)
    label = (f"topic {name}" if resource_type == RESOURCE_TOPIC
             else f"broker {name}" if name else "broker defaults")
    report_config_change(cli, label, operations, validate_only)


COMMANDS = [cluster_group]
