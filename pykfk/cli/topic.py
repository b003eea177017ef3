"""``pykfk topic``: create, list, describe, alter-config, add-partitions, delete, trim."""

from __future__ import annotations

import re
from typing import Any

import click

from pykfk.cli.common import (
    CliContext,
    CliError,
    admin_command,
    complete_topics,
    emit,
    emit_json,
    emit_table,
    parse_key_values,
    parse_partitions,
    pass_cli,
)
from pykfk.client.admin import (
    CONFIG_APPEND,
    CONFIG_DELETE,
    CONFIG_SET,
    CONFIG_SUBTRACT,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    RESOURCE_TOPIC,
    ConfigEntry,
    TopicInfo,
)
from pykfk.errors import ErrorCode, KafkaError


@click.group("topic")
def topic_group() -> None:
    """Create, inspect, change and delete topics."""


@topic_group.command("create")
@click.argument("name")
@click.option("--partitions", "-p", type=click.IntRange(min=1), default=None,
              help="Partition count [default: the broker's num.partitions].")
@click.option("--replication-factor", "-r", type=click.IntRange(min=1), default=None,
              help="Replicas per partition [default: the broker's default.replication.factor].")
@click.option("--config", "-c", "configs", multiple=True, metavar="KEY=VALUE",
              help="A topic config (retention.ms=86400000, cleanup.policy=compact, ...).")
@click.option("--replica-assignment", metavar="B:B,B:B,...",
              help="Each partition's replicas, partitions separated by commas and brokers by "
                   "colons (kafka-topics.sh's syntax: 1:2,2:3 is two partitions of two "
                   "replicas); the first broker of each leads. Excludes -p and -r.")
@click.option("--if-not-exists", is_flag=True, help="Succeed when the topic exists already.")
@click.option("--validate-only", is_flag=True, help="Ask the controller to check, not create.")
@admin_command
@pass_cli
def create(cli: CliContext, name: str, partitions: int | None, replication_factor: int | None,
           configs: tuple[str, ...], replica_assignment: str | None, if_not_exists: bool,
           validate_only: bool) -> None:
    """Create topic NAME."""
    settings = parse_key_values(configs, "--config")
    assignment = parse_replica_assignment(replica_assignment) if replica_assignment else None
    if assignment is not None and (partitions or replication_factor):
        raise click.UsageError("--replica-assignment gives the partitions and replicas; "
                               "leave out --partitions and --replication-factor")
    admin = cli.admin()
    try:
        admin.create_topic(name, partitions or -1, replication_factor or -1, settings,
                           validate_only=validate_only, assignment=assignment)
        created = True
    except KafkaError as exc:
        if not (if_not_exists and exc.code == ErrorCode.TOPIC_ALREADY_EXISTS):
            raise
        created = False
    verb = "would be created" if validate_only else ("created" if created else "exists already")
    if cli.json:
        emit_json({"topic": name, "created": created and not validate_only,
                   "validate_only": validate_only})
    else:
        click.echo(f"topic {name} {verb}")


def parse_replica_assignment(text: str) -> list[list[int]]:
    """Kafka's ``1:2,2:3`` (partition 0 on brokers 1 and 2, partition 1 on 2 and 3)."""
    out: list[list[int]] = []
    try:
        for spec in text.split(","):
            out.append([int(b) for b in spec.split(":")])
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a list of broker ids like 1:2,2:3",
                                 param_hint="--replica-assignment") from None
    for i, replicas in enumerate(out):
        if len(set(replicas)) != len(replicas):
            raise click.BadParameter(f"partition {i} names a broker twice ({text.split(',')[i]})",
                                     param_hint="--replica-assignment")
        if len(replicas) != len(out[0]):
            raise click.BadParameter(f"partition {i} has {len(replicas)} replicas, partition 0 "
                                     f"has {len(out[0])}; every partition needs as many",
                                     param_hint="--replica-assignment")
    return out


@topic_group.command("list")
@click.option("--internal/--no-internal", default=False,
              help="Include internal topics (__consumer_offsets).")
@admin_command
@pass_cli
def list_topics(cli: CliContext, internal: bool) -> None:
    """List topics with their partition counts and replication factors."""
    topics = [t for t in cli.admin().describe_topics(None) if internal or not t.internal]
    rows = [{"topic": t.name, "partitions": len(t.partitions),
             "replication_factor": t.replication_factor, "internal": t.internal}
            for t in topics]
    emit(cli, rows, rows, ["topic", "partitions", "replication_factor"],
         ["topic", "partitions", "replicas"])


def _partition_rows(cli: CliContext, info: TopicInfo) -> list[dict[str, Any]]:
    ids = [p.partition for p in info.partitions]
    admin = cli.admin()
    starts = admin.list_offsets(info.name, ids, EARLIEST_TIMESTAMP) if ids else {}
    ends = admin.list_offsets(info.name, ids, LATEST_TIMESTAMP) if ids else {}
    return [
        {"partition": p.partition, "leader": p.leader, "replicas": p.replicas, "isr": p.isr,
         "offline": p.offline, "log_start_offset": starts.get(p.partition),
         "high_watermark": ends.get(p.partition), "error": p.error}
        for p in info.partitions
    ]


def _config_dict(entry: ConfigEntry) -> dict[str, Any]:
    return {"name": entry.name, "value": None if entry.sensitive else entry.value,
            "source": entry.source, "read_only": entry.read_only,
            "sensitive": entry.sensitive}


@topic_group.command("describe")
@click.argument("names", shell_complete=complete_topics, nargs=-1, required=True)
@click.option("--all-configs", is_flag=True, help="Show default configs too.")
@admin_command
@pass_cli
def describe(cli: CliContext, names: tuple[str, ...], all_configs: bool) -> None:
    """Partitions (leader, replicas, ISR, offsets) and configs of topics NAMES."""
    admin = cli.admin()
    described: list[dict[str, Any]] = []
    for name in names:
        info = admin.topic(name)
        configs = [c for c in admin.describe_configs(RESOURCE_TOPIC, name)
                   if all_configs or not c.is_default]
        described.append({
            "topic": name, "internal": info.internal,
            "partition_count": len(info.partitions),
            "replication_factor": info.replication_factor,
            "partitions": _partition_rows(cli, info),
            "configs": [_config_dict(c) for c in configs],
        })
    if cli.json:
        emit_json(described if len(described) > 1 else described[0])
        return
    for i, d in enumerate(described):
        if i:
            click.echo()
        click.echo(f"topic {d['topic']}: {d['partition_count']} partitions, "
                   f"replication factor {d['replication_factor']}")
        emit_table(d["partitions"], ["partition", "leader", "replicas", "isr",
                                     "log_start_offset", "high_watermark"],
                   ["partition", "leader", "replicas", "isr", "log start", "high watermark"])
        if d["configs"]:
            click.echo()
            emit_table(d["configs"], ["name", "value", "source"], ["config", "value", "source"])


@topic_group.command("alter-config")
@click.argument("name", shell_complete=complete_topics)
@click.option("--set", "-s", "sets", multiple=True, metavar="KEY=VALUE", help="Set a config.")
@click.option("--delete", "-d", "deletes", multiple=True, metavar="KEY",
              help="Remove a config (back to the broker default).")
@click.option("--append", "appends", multiple=True, metavar="KEY=VALUE",
              help="Add to a list config.")
@click.option("--subtract", "subtracts", multiple=True, metavar="KEY=VALUE",
              help="Remove from a list config.")
@click.option("--validate-only", is_flag=True, help="Ask the broker to check, not change.")
@admin_command
@pass_cli
def alter_config(cli: CliContext, name: str, sets: tuple[str, ...], deletes: tuple[str, ...],
                 appends: tuple[str, ...], subtracts: tuple[str, ...],
                 validate_only: bool) -> None:
    """Change configs of topic NAME (IncrementalAlterConfigs)."""
    operations = config_operations(sets, deletes, appends, subtracts)
    cli.admin().topic(name)
    cli.admin().alter_configs(RESOURCE_TOPIC, name, operations, validate_only=validate_only)
    report_config_change(cli, f"topic {name}", operations, validate_only)


def config_operations(sets: tuple[str, ...], deletes: tuple[str, ...], appends: tuple[str, ...],
                      subtracts: tuple[str, ...]) -> list[tuple[str, int, str | None]]:
    """The IncrementalAlterConfigs operations of --set/--delete/--append/--subtract."""
    operations: list[tuple[str, int, str | None]] = []
    for option, op, items in (("--set", CONFIG_SET, sets), ("--append", CONFIG_APPEND, appends),
                              ("--subtract", CONFIG_SUBTRACT, subtracts)):
        operations += [(k, op, v) for k, v in parse_key_values(items, option).items()]
    operations += [(k, CONFIG_DELETE, None) for k in deletes]
    if not operations:
        raise click.UsageError("nothing to change: give --set, --delete, --append or --subtract")
    return operations


_OP_NAMES = {CONFIG_SET: "set", CONFIG_DELETE: "delete", CONFIG_APPEND: "append",
             CONFIG_SUBTRACT: "subtract"}


def report_config_change(cli: CliContext, what: str, operations: list[tuple[str, int, str | None]],
                         validate_only: bool) -> None:
    changes = [{"name": k, "operation": _OP_NAMES[op], "value": v} for k, op, v in operations]
    if cli.json:
        emit_json({"resource": what, "validate_only": validate_only, "changes": changes})
        return
    verb = "would change" if validate_only else "changed"
    click.echo(f"{what}: {verb} " + ", ".join(
        f"{c['name']}={c['value']}" if c["value"] is not None else f"{c['operation']} {c['name']}"
        for c in changes))


@topic_group.command("add-partitions")
@click.argument("name", shell_complete=complete_topics)
@click.option("--count", "-p", "--partitions", type=click.IntRange(min=1), required=True,
              help="The new total number of partitions.")
@click.option("--validate-only", is_flag=True)
@admin_command
@pass_cli
def add_partitions(cli: CliContext, name: str, count: int, validate_only: bool) -> None:
    """Grow topic NAME to --count partitions."""
    admin = cli.admin()
    before = len(admin.topic(name).partitions)
    if count <= before:
        raise CliError(f"topic {name} has {before} partitions already; --count must be larger")
    admin.create_partitions(name, count, validate_only=validate_only)
    if cli.json:
        emit_json({"topic": name, "partitions_before": before, "partitions": count,
                   "validate_only": validate_only})
    else:
        verb = "would grow" if validate_only else "grew"
        click.echo(f"topic {name} {verb} from {before} to {count} partitions")


@topic_group.command("delete")
@click.argument("names", shell_complete=complete_topics, nargs=-1, required=True)
@click.option("--if-exists", is_flag=True, help="Succeed when a topic does not exist.")
@click.option("--regex", "-r", "by_regex", is_flag=True,
              help="NAMES are regular expressions matching whole topic names (rpk's -r); "
                   "internal topics never match.")
@admin_command
@pass_cli
def delete(cli: CliContext, names: tuple[str, ...], if_exists: bool, by_regex: bool) -> None:
    """Delete topics NAMES."""
    admin = cli.admin()
    chosen = list(names)
    if by_regex:
        chosen = _matching_topics(admin.describe_topics(None), names)
        if not chosen:
            if if_exists:
                emit(cli, [], [], ["topic", "deleted", "error"])
                return
            raise CliError("no topic matches " + " or ".join(repr(n) for n in names))
    results = admin.delete_topics(chosen)
    failed = {t: e for t, e in results.items()
              if e and not (if_exists and e == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.name)}
    rows = [{"topic": t, "deleted": e is None, "error": e} for t, e in results.items()]
    emit(cli, rows, rows, ["topic", "deleted", "error"])
    if failed:
        raise CliError("not deleted: " + ", ".join(f"{t} ({e})" for t, e in failed.items()))


def _matching_topics(topics: list[TopicInfo], patterns: tuple[str, ...]) -> list[str]:
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise click.BadParameter(f"{pattern!r} is not a regular expression: {exc}",
                                     param_hint="NAMES") from None
    return [t.name for t in topics
            if not t.internal and any(c.fullmatch(t.name) for c in compiled)]


@topic_group.command("trim")
@click.argument("name", shell_complete=complete_topics)
@click.option("--offset", required=True, metavar="OFFSET|latest",
              help="Delete records before this offset ('latest': everything up to the "
                   "high watermark).")
@click.option("--partition", "partitions", metavar="LIST",
              help="Partitions such as 0,2,4-7 [default: all].")
@admin_command
@pass_cli
def trim(cli: CliContext, name: str, offset: str, partitions: str | None) -> None:
    """Delete the records of topic NAME below an offset (DeleteRecords)."""
    if offset == "latest":
        target = -1
    elif offset.isdigit():
        target = int(offset)
    else:
        raise click.BadParameter(f"{offset!r} is neither a number nor 'latest'",
                                 param_hint="--offset")
    admin = cli.admin()
    info = admin.topic(name)
    chosen = (parse_partitions(partitions, "--partition") if partitions
              else [p.partition for p in info.partitions])
    low = admin.delete_records(name, {p: target for p in chosen})
    rows = [{"topic": name, "partition": p, "log_start_offset": low[p]} for p in sorted(low)]
    emit(cli, rows, rows, ["partition", "log_start_offset"], ["partition", "new log start"])


COMMANDS = [topic_group]
