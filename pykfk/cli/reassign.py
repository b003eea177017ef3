"""``pykfk reassign plan|execute|verify``: move partitions to new replica sets
(AlterPartitionReassignments, key 45; ListPartitionReassignments, key 46).

Plans use Kafka's reassignment JSON (kafka-reassign-partitions.sh), so files move
between the two tools::

    {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3, 4]}]}
"""

from __future__ import annotations

import json
from typing import Any

import click

from pykfk.cli.common import CliContext, CliError, admin_command, emit, emit_json, note, pass_cli
from pykfk.client.admin import AdminClient

TopicPartition = tuple[str, int]


def plan_assignment(current: dict[TopicPartition, list[int]], brokers: list[int],
                    replication_factor: int | None) -> dict[TopicPartition, list[int]]:
    """Spread each partition's replicas over ``brokers`` round robin (each partition
    starting one broker further on, so leaders spread too), keeping the replication
    factor unless one is given."""
    plan = {}
    for i, (tp, replicas) in enumerate(sorted(current.items())):
        factor = replication_factor or len(replicas)
        if factor > len(brokers):
            raise CliError(f"{tp[0]}-{tp[1]} needs {factor} replicas but only "
                           f"{len(brokers)} brokers were given")
        plan[tp] = [brokers[(i + k) % len(brokers)] for k in range(factor)]
    return plan


def plan_json(assignment: dict[TopicPartition, list[int]]) -> dict[str, Any]:
    return {"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r} for (t, p), r in sorted(assignment.items())]}


def read_plan(path: str) -> dict[TopicPartition, list[int]]:
    try:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
        return {(str(e["topic"]), int(e["partition"])): [int(b) for b in e["replicas"]]
                for e in document["partitions"]}
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc.strerror}", param_hint="PLAN") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise click.BadParameter(f"{path} is not a reassignment plan ({exc})",
                                 param_hint="PLAN") from None


def current_assignment(admin: AdminClient, topics: list[str]) -> dict[TopicPartition, list[int]]:
    return {(t, p.partition): p.replicas for t in topics for p in admin.topic(t).partitions}


@click.group("reassign")
def reassign_group() -> None:
    """Move partitions between brokers."""


@reassign_group.command("plan")
@click.option("--topic", "-t", "topics", multiple=True, required=True, help="Repeatable.")
@click.option("--brokers", required=True, metavar="ID,ID,...", help="The brokers to move to.")
@click.option("--replication-factor", type=click.IntRange(min=1),
              help="A new replication factor [default: keep each partition's].")
@admin_command
@pass_cli
def plan(cli: CliContext, topics: tuple[str, ...], brokers: str,
         replication_factor: int | None) -> None:
    """Print a plan (Kafka's JSON) moving TOPICS onto --brokers; the current
    assignment goes to stderr, to keep for a rollback."""
    try:
        ids = sorted({int(b) for b in brokers.split(",") if b.strip()})
    except ValueError:
        raise click.BadParameter(f"{brokers!r} is not a list of broker ids",
                                 param_hint="--brokers") from None
    admin = cli.admin()
    admin.metadata([])
    unknown = [b for b in ids if b not in admin.brokers]
    if unknown:
        raise CliError(f"broker {unknown[0]} is not in the cluster (brokers: "
                       f"{', '.join(map(str, sorted(admin.brokers)))})")
    current = current_assignment(admin, list(topics))
    proposed = plan_assignment(current, ids, replication_factor)
    note("current assignment (keep it to roll back):\n" + json.dumps(plan_json(current)))
    emit_json(plan_json(proposed))


@reassign_group.command("execute")
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False))
@click.option("--cancel", is_flag=True, help="Cancel the pending reassignments of PLAN's partitions.")
@admin_command
@pass_cli
def execute(cli: CliContext, plan_file: str, cancel: bool) -> None:
    """Start (or --cancel) the reassignment of PLAN."""
    moves = read_plan(plan_file)
    if not moves:
        raise CliError(f"{plan_file} lists no partitions")
    request: dict[TopicPartition, list[int] | None] = {
        tp: None if cancel else replicas for tp, replicas in moves.items()}
    results = cli.admin().alter_reassignments(request)
    rows = [{"topic": t, "partition": p, "replicas": None if cancel else moves[(t, p)],
             "accepted": e is None, "error": e} for (t, p), e in sorted(results.items())]
    emit(cli, rows, rows, ["topic", "partition", "replicas", "accepted", "error"])
    failed = [f"{r['topic']}-{r['partition']} ({r['error']})" for r in rows if r["error"]]
    if failed:
        raise CliError("refused: " + ", ".join(failed))


@reassign_group.command("verify")
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False))
@admin_command
@pass_cli
def verify(cli: CliContext, plan_file: str) -> None:
    """Whether PLAN's partitions have reached their new replicas; exits 1 while any
    is still moving or differs."""
    moves = read_plan(plan_file)
    admin = cli.admin()
    ongoing = admin.list_reassignments()
    current = current_assignment(admin, sorted({t for t, _ in moves}))
    rows = []
    for tp, target in sorted(moves.items()):
        if tp in ongoing:
            status = "in progress"
        elif sorted(current.get(tp, [])) == sorted(target):
            status = "complete"
        else:
            status = "differs"
        rows.append({"topic": tp[0], "partition": tp[1], "target": target,
                     "replicas": current.get(tp), "status": status,
                     "adding": ongoing.get(tp, {}).get("adding", []),
                     "removing": ongoing.get(tp, {}).get("removing", [])})
    if cli.json:
        emit_json({"complete": all(r["status"] == "complete" for r in rows), "partitions": rows})
    else:
        emit(cli, rows, rows, ["topic", "partition", "target", "replicas", "status"])
    if any(r["status"] != "complete" for r in rows):
        raise CliError("reassignment not complete")


COMMANDS = [reassign_group]
