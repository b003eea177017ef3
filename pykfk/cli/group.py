"""``pykfk group``: list, describe (members, assignments, offsets and lag),
reset-offsets, delete, delete-offsets."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from typing import Any

import click

from pykfk.cli.common import (
    CliContext,
    CliError,
    admin_command,
    complete_groups,
    emit,
    emit_json,
    emit_table,
    note,
    parse_partitions,
    parse_time_ms,
    pass_cli,
    progress,
)
from pykfk.client.admin import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    AdminClient,
    GroupDescription,
)

TopicPartition = tuple[str, int]

# Kafka resets offsets only of groups without active members.
INACTIVE_STATES = ("Empty", "Dead")


@click.group("group")
def group_group() -> None:
    """Consumer groups and share groups: members, lag, offsets."""


@group_group.command("list")
@admin_command
@pass_cli
def list_groups(cli: CliContext) -> None:
    """List the groups of every broker, with their state."""
    admin = cli.admin()
    rows = []
    for g in admin.list_groups():
        shared = _share_group(admin, g["group"]) if g["protocol_type"] == "share" else None
        if shared is not None:
            rows.append({"group": g["group"], "protocol_type": "share", "state": shared["state"],
                         "members": len(shared["members"])})
            continue
        description = admin.describe_group(g["group"])
        rows.append({"group": g["group"], "protocol_type": g["protocol_type"],
                     "state": description.state, "members": len(description.members)})
    emit(cli, rows, rows, ["group", "state", "members", "protocol_type"],
         ["group", "state", "members", "type"])


def _owners(description: GroupDescription) -> dict[TopicPartition, dict[str, Any]]:
    owners = {}
    for m in description.members:
        for topic, partitions in m.assignment.items():
            for p in partitions:
                owners[(topic, p)] = {"member_id": m.member_id, "client_id": m.client_id,
                                      "host": m.client_host}
    return owners


def end_offsets(admin: AdminClient, partitions: Iterable[TopicPartition],
                timestamp: int = LATEST_TIMESTAMP, *, show_progress: bool = True) -> dict[TopicPartition, int]:
    """(topic, partition) -> offset at ``timestamp``, asked topic by topic."""
    by_topic: dict[str, list[int]] = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(p)
    out = {}
    total = sum(map(len, by_topic.values()))
    with progress(total, "offsets", enabled=show_progress and len(by_topic) > 1) as advance:
        for topic, parts in sorted(by_topic.items()):
            for p, offset in admin.list_offsets(topic, parts, timestamp).items():
                out[(topic, p)] = offset
            advance(len(parts))
    return out


def lag_rows(admin: AdminClient, group: str, description: GroupDescription) -> list[dict[str, Any]]:
    """One row per partition the group has an offset for or is assigned: committed
    offset, end offset (high watermark) and lag = end - committed."""
    committed = admin.committed_offsets(group)
    owners = _owners(description)
    partitions = sorted(set(committed) | set(owners))
    ends = end_offsets(admin, partitions)
    rows = []
    for tp in partitions:
        current, end = committed.get(tp), ends.get(tp)
        owner = owners.get(tp, {})
        rows.append({
            "topic": tp[0], "partition": tp[1], "committed_offset": current,
            "end_offset": end,
            "lag": end - current if current is not None and end is not None else None,
            "member_id": owner.get("member_id"), "client_id": owner.get("client_id"),
            "host": owner.get("host"),
        })
    return rows


@group_group.command("describe")
@click.argument("groups", shell_complete=complete_groups, nargs=-1)
@click.option("--all-groups", is_flag=True, help="Every group of the cluster.")
@admin_command
@pass_cli
def describe(cli: CliContext, groups: tuple[str, ...], all_groups: bool) -> None:
    """State, members, assignments, committed offsets and lag of GROUPS (or --all-groups),
    with each group's total lag."""
    if bool(groups) == all_groups:
        raise click.UsageError("name groups or give --all-groups")
    admin = cli.admin()
    names = [g["group"] for g in admin.list_groups()] if all_groups else list(groups)
    described = [d for d in (_describe_one(admin, group, missing_ok=all_groups) for group in names)
                 if d is not None]
    if cli.json:
        emit_json(described if all_groups or len(described) > 1 else described[0])
        return
    if not described:
        note("no groups")
    for i, d in enumerate(described):
        if i:
            click.echo()
        _print_group(d)


def _describe_one(admin: AdminClient, group: str, *, missing_ok: bool) -> dict[str, Any] | None:
    description = admin.describe_group(group)
    offsets = lag_rows(admin, group, description)
    if description.state == "Dead" and not offsets:
        shared = _share_group(admin, group)
        if shared is not None:
            return shared
        if missing_ok:
            return None
        raise CliError(f"group {group!r} does not exist")
    members: list[dict[str, Any]] = [
        {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
         "client_id": m.client_id, "host": m.client_host,
         "assignment": {t: ps for t, ps in sorted(m.assignment.items())}}
        for m in description.members
    ]
    return {"group": group, "state": description.state,
            "protocol_type": description.protocol_type,
            "protocol": description.protocol, "coordinator": description.coordinator,
            "members": members, "offsets": offsets,
            "total_lag": sum(r["lag"] or 0 for r in offsets)}


def _share_group(admin: AdminClient, group: str) -> dict[str, Any] | None:
    """A share group (KIP-932) as ShareGroupDescribe tells it, None when there is no
    share group of that name (or the brokers do not speak share groups)."""
    if not admin.supports(77):
        return None
    conn = admin.coordinator(group)
    answer = admin.call(conn, 77, {"group_ids": [group], "include_authorized_operations": False})
    g = answer.groups[0]
    if g.error_code:
        return None
    members: list[dict[str, Any]] = [
        {"member_id": m.member_id, "group_instance_id": None, "client_id": m.client_id, "host": m.client_host,
         "assignment": {t.topic_name: list(t.partitions) for t in sorted(m.assignment.topic_partitions,
                                                                        key=lambda t: t.topic_name)}}
        for m in g.members
    ]
    return {"group": group, "state": g.group_state, "protocol_type": "share", "protocol": g.assignor_name,
            "coordinator": conn.node_id, "members": members, "offsets": [], "total_lag": 0}


def _print_group(d: dict[str, Any]) -> None:
    members, offsets = d["members"], d["offsets"]
    click.echo(f"group {d['group']}: {d['state']}, {len(members)} members, "
               f"protocol {d['protocol'] or '-'}, coordinator {d['coordinator']}")
    if members:
        click.echo()
        emit_table([{**m, "assignment": _assignment_text(m["assignment"])} for m in members],
                   ["member_id", "client_id", "host", "assignment"])
    if offsets:
        click.echo()
        emit_table(offsets, ["topic", "partition", "committed_offset", "end_offset", "lag",
                             "client_id"],
                   ["topic", "partition", "committed", "end", "lag", "client"])
        partitions = len(offsets)
        click.echo(f"total lag {d['total_lag']} over {partitions} "
                   f"partition{'s' if partitions != 1 else ''}")


def _assignment_text(assignment: dict[str, list[int]]) -> str:
    return " ".join(f"{t}:{','.join(map(str, ps))}" for t, ps in assignment.items()) or "-"


# ------------------------------------------------------------------ reset-offsets


def _chosen_partitions(admin: AdminClient, group: str, topics: tuple[str, ...],
                       all_topics: bool) -> list[TopicPartition]:
    if all_topics:
        chosen = sorted(admin.committed_offsets(group))
        if not chosen:
            raise CliError(f"group {group!r} has no committed offsets; name topics with --topic")
        return chosen
    out: list[TopicPartition] = []
    for spec in topics:
        name, sep, parts = spec.partition(":")
        known = [p.partition for p in admin.topic(name).partitions]
        wanted = parse_partitions(parts, "--topic") if sep else known
        missing = sorted(set(wanted) - set(known))
        if missing:
            raise CliError(f"topic {name!r} has no partition {missing[0]}")
        out += [(name, p) for p in wanted]
    return sorted(set(out))


def _read_offsets_file(path: str) -> dict[TopicPartition, int]:
    """Kafka's reset file: ``topic,partition,offset`` per line."""
    out = {}
    with open(path, newline="", encoding="utf-8") as f:
        for lineno, row in enumerate(csv.reader(f), 1):
            if not row or row[0].startswith("#"):
                continue
            try:
                topic, partition, offset = row[0].strip(), int(row[1]), int(row[2])
            except (IndexError, ValueError):
                raise click.BadParameter(f"line {lineno}: expected topic,partition,offset",
                                         param_hint="--from-file") from None
            out[(topic, partition)] = offset
    return out


def _targets(admin: AdminClient, chosen: list[TopicPartition], committed: dict[TopicPartition, int],
             strategy: tuple[str, Any]) -> tuple[dict[TopicPartition, int], list[str]]:
    """The new offset of each partition, clamped into [log start, end] as Kafka does,
    and Kafka's warning for each offset that was clamped."""
    kind, value = strategy
    earliest = end_offsets(admin, chosen, EARLIEST_TIMESTAMP)
    latest = end_offsets(admin, chosen, LATEST_TIMESTAMP)
    if kind == "datetime":
        found = end_offsets(admin, chosen, value)
        wanted = {tp: found[tp] if found[tp] >= 0 else latest[tp] for tp in chosen}
    elif kind == "earliest":
        wanted = dict(earliest)
    elif kind == "latest":
        wanted = dict(latest)
    elif kind == "offset":
        wanted = {tp: value for tp in chosen}
    elif kind == "shift":
        wanted = {tp: committed.get(tp, latest[tp]) + value for tp in chosen}
    else:  # file
        wanted = {tp: value[tp] for tp in chosen}
    targets, warnings = {}, []
    for tp in chosen:
        targets[tp] = min(max(wanted[tp], earliest[tp]), latest[tp])
        if wanted[tp] > latest[tp]:
            warnings.append(f"New offset ({wanted[tp]}) is higher than latest offset for topic "
                            f"partition {tp[0]}-{tp[1]}. Value will be set to {targets[tp]}")
        elif wanted[tp] < earliest[tp]:
            warnings.append(f"New offset ({wanted[tp]}) is lower than earliest offset for topic "
                            f"partition {tp[0]}-{tp[1]}. Value will be set to {targets[tp]}")
    return targets, warnings


def _strategy(to_earliest: bool, to_latest: bool, to_offset: int | None, to_datetime: str | None,
              shift_by: int | None, from_file: str | None) -> tuple[str, Any]:
    given: list[tuple[str, Any]] = [(name, value) for name, value in (
        ("earliest", to_earliest or None), ("latest", to_latest or None), ("offset", to_offset),
        ("datetime", to_datetime), ("shift", shift_by), ("file", from_file)) if value is not None]
    if len(given) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, "
                               "--to-datetime, --shift-by, --from-file")
    kind, value = given[0]
    if kind == "datetime":
        return kind, parse_time_ms(value, "--to-datetime")
    if kind == "file":
        return kind, _read_offsets_file(value)
    return kind, value


@group_group.command("reset-offsets")
@click.argument("group", shell_complete=complete_groups, required=False)
@click.option("--all-groups", is_flag=True,
              help="Every consumer group of the cluster (those with active members are left as they are).")
@click.option("--topic", "-t", "topics", multiple=True, metavar="TOPIC[:PARTITIONS]",
              help="A topic, or some of its partitions (orders:0,2-3). Repeatable.")
@click.option("--all-topics", is_flag=True, help="Every topic the group has offsets for.")
@click.option("--to-earliest", is_flag=True, help="To each partition's log start.")
@click.option("--to-latest", is_flag=True, help="To each partition's end.")
@click.option("--to-offset", type=click.IntRange(min=0), help="To this offset.")
@click.option("--to-datetime", metavar="TIME",
              help="To the first offset at or after TIME (ISO 8601, ms, or -1h style).")
@click.option("--shift-by", type=int, metavar="N", help="Move each committed offset by N.")
@click.option("--from-file", type=click.Path(exists=True, dir_okay=False),
              help="CSV of topic,partition,offset lines.")
@click.option("--execute", is_flag=True, help="Apply; without it nothing changes (dry run).")
@admin_command
@pass_cli
def reset_offsets(cli: CliContext, group: str | None, all_groups: bool, topics: tuple[str, ...],
                  all_topics: bool, to_earliest: bool, to_latest: bool, to_offset: int | None,
                  to_datetime: str | None, shift_by: int | None, from_file: str | None,
                  execute: bool) -> None:
    """Move GROUP's (or --all-groups') committed offsets. A dry run unless --execute; a
    group must have no active members to apply."""
    if (group is None) != all_groups:
        raise click.UsageError("name a GROUP or give --all-groups")
    strategy = _strategy(to_earliest, to_latest, to_offset, to_datetime, shift_by, from_file)
    from_plan = strategy[0] == "file" and not topics and not all_topics
    if not from_plan and bool(topics) == all_topics:
        raise click.UsageError("give --topic (repeatable) or --all-topics")
    admin = cli.admin()
    if group is not None:
        result = _reset_group(admin, group, topics, all_topics, strategy, execute)
        assert result is not None
        _show_reset([result], cli.json, execute, by_group=False)
        return
    results, refused = [], []
    for name in (g["group"] for g in admin.list_groups() if g["protocol_type"] != "share"):
        try:
            result = _reset_group(admin, name, topics, all_topics, strategy, execute, every_group=True)
        except CliError as exc:
            refused.append(exc.message)  # Kafka reports the group and goes on with the next
            continue
        if result is not None:
            results.append(result)
    _show_reset(results, cli.json, execute, by_group=True)
    if refused:
        raise CliError("; ".join(refused))


def _reset_group(admin: AdminClient, group: str, topics: tuple[str, ...], all_topics: bool,
                 strategy: tuple[str, Any], execute: bool, *,
                 every_group: bool = False) -> dict[str, Any] | None:
    """The reset of one group (applied with ``execute``); None when ``every_group`` and
    it has nothing to reset (no committed offsets, or none in the plan)."""
    if strategy[0] == "file" and not topics and not all_topics:
        chosen = sorted(strategy[1])
    elif every_group and all_topics:
        chosen = sorted(admin.committed_offsets(group))
    else:
        chosen = _chosen_partitions(admin, group, topics, all_topics)
    if strategy[0] == "file":
        absent = [tp for tp in chosen if tp not in strategy[1]]
        if absent:
            raise CliError(f"{absent[0][0]}-{absent[0][1]} is not in --from-file")
    if not chosen:
        return None
    committed = admin.committed_offsets(group)
    targets, warnings = _targets(admin, chosen, committed, strategy)
    for warning in warnings:
        note(f"Warning: {warning}")
    if execute:
        description = admin.describe_group(group)
        if description.state not in INACTIVE_STATES:
            raise CliError(f"group {group!r} is {description.state} with "
                           f"{len(description.members)} members; offsets can be reset only "
                           "while it has none (stop its consumers first)")
        admin.commit_offsets(group, targets)
    rows = [{"topic": t, "partition": p, "current_offset": committed.get((t, p)),
             "new_offset": targets[(t, p)]} for t, p in chosen]
    return {"group": group, "executed": execute, "offsets": rows, "warnings": warnings}


def _show_reset(results: list[dict[str, Any]], as_json: bool, execute: bool, *, by_group: bool) -> None:
    """One group's reset as Kafka's columns; with --all-groups a GROUP column first (JSON:
    the list of every group's object)."""
    if as_json:
        emit_json(results if by_group else results[0])
    else:
        columns = ["topic", "partition", "current_offset", "new_offset"]
        headers = ["topic", "partition", "current", "new"]
        rows = [{"group": r["group"], **row} for r in results for row in r["offsets"]]
        if by_group:
            columns, headers = ["group", *columns], ["group", *headers]
        emit_table(rows, columns, headers)
    if not execute:
        note("dry run: nothing changed (add --execute to apply)")


# --------------------------------------------------------------------------- delete


@group_group.command("delete")
@click.argument("groups", shell_complete=complete_groups, nargs=-1)
@click.option("--all-groups", is_flag=True, help="Every group of the cluster.")
@admin_command
@pass_cli
def delete(cli: CliContext, groups: tuple[str, ...], all_groups: bool) -> None:
    """Delete GROUPS (or --all-groups); a group with active members is not deleted."""
    if bool(groups) == all_groups:
        raise click.UsageError("name groups or give --all-groups")
    admin = cli.admin()
    names = [g["group"] for g in admin.list_groups()] if all_groups else list(groups)
    results = admin.delete_groups(names) if names else {}
    rows = [{"group": g, "deleted": e is None, "error": e} for g, e in results.items()]
    emit(cli, rows, rows, ["group", "deleted", "error"])
    failed = [f"{g} ({e})" for g, e in results.items() if e]
    if failed:
        raise CliError("not deleted: " + ", ".join(failed))


@group_group.command("delete-offsets")
@click.argument("group", shell_complete=complete_groups)
@click.option("--topic", "-t", required=True, metavar="TOPIC[:PARTITIONS]",
              help="The topic, or some of its partitions (orders:0,2).")
@admin_command
@pass_cli
def delete_offsets(cli: CliContext, group: str, topic: str) -> None:
    """Remove GROUP's committed offsets of a topic (OffsetDelete)."""
    admin = cli.admin()
    name, sep, parts = topic.partition(":")
    partitions = (parse_partitions(parts, "--topic") if sep
                  else [p.partition for p in admin.topic(name).partitions])
    results = admin.delete_offsets(group, name, partitions)
    rows = [{"topic": name, "partition": p, "deleted": e is None, "error": e}
            for p, e in sorted(results.items())]
    emit(cli, rows, rows, ["topic", "partition", "deleted", "error"])
    failed = [f"{name}-{p} ({e})" for p, e in sorted(results.items()) if e]
    if failed:
        raise CliError("offsets not deleted: " + ", ".join(failed))


COMMANDS = [group_group]
