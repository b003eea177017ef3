"""``pykfk reassign plan|execute|verify``: move partitions to new replica sets
(AlterPartitionReassignments, key 45; ListPartitionReassignments, key 46).

Plans use Kafka's reassignment JSON (kafka-reassign-partitions.sh), so files move
between the two tools::

    {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3, 4]}]}
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from pykfk.cli.common import (
    CliContext,
    CliError,
    Duration,
    admin_command,
    emit,
    emit_json,
    note,
    pass_cli,
    progress,
)
from pykfk.client.admin import (
    CONFIG_DELETE,
    CONFIG_SET,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    AdminClient,
)

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


THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
THROTTLED_REPLICAS = ("leader.replication.throttled.replicas",
                      "follower.replication.throttled.replicas")


def _involved_brokers(moves: dict[TopicPartition, list[int]],
                      current: dict[TopicPartition, list[int]]) -> list[int]:
    return sorted({b for tp, target in moves.items() for b in [*target, *current.get(tp, [])]})


def _topics_with_replica_lists(admin: AdminClient, topics: list[str]) -> list[str]:
    """Topics whose brokers know Kafka's throttled-replica lists; a pykfk broker has none
    and throttles exactly the replicas being added."""
    return [t for t in topics if any(
        e.name == THROTTLED_REPLICAS[0]
        for e in admin.describe_configs(RESOURCE_TOPIC, t, [THROTTLED_REPLICAS[0]]))]


def set_throttle(admin: AdminClient, moves: dict[TopicPartition, list[int]],
                 current: dict[TopicPartition, list[int]], rate: int) -> list[int]:
    """kafka-reassign-partitions.sh --throttle: the rate on every broker of the move; on
    Kafka brokers also the topics' lists of the replicas it applies to (leaders: the
    current replicas; followers: the ones being added)."""
    brokers = _involved_brokers(moves, current)
    for broker in brokers:
        admin.alter_configs(RESOURCE_BROKER, str(broker),
                            [(name, CONFIG_SET, str(rate)) for name in THROTTLE_RATES])
    topics = sorted({t for t, _ in moves})
    for topic in _topics_with_replica_lists(admin, topics):
        leaders = [f"{p}:{b}" for (t, p), r in sorted(current.items()) if t == topic for b in r]
        followers = [f"{p}:{b}" for (t, p), r in sorted(moves.items()) if t == topic
                     for b in r if b not in current.get((t, p), [])]
        admin.alter_configs(RESOURCE_TOPIC, topic, [
            (THROTTLED_REPLICAS[0], CONFIG_SET, ",".join(leaders)),
            (THROTTLED_REPLICAS[1], CONFIG_SET, ",".join(followers))])
    return brokers


def clear_throttle(admin: AdminClient, moves: dict[TopicPartition, list[int]]) -> list[int]:
    """What verify does once every partition moved: the throttle rates go from every
    broker of the cluster (the old replicas are no longer named in the assignment), as
    Kafka's --verify does; returns the brokers that had one."""
    admin.metadata([])
    cleared = []
    for broker in sorted(admin.brokers):
        set_now = {e.name for e in admin.describe_configs(RESOURCE_BROKER, str(broker),
                                                           list(THROTTLE_RATES))
                   if e.source == "DYNAMIC_BROKER_CONFIG"}
        if set_now:
            admin.alter_configs(RESOURCE_BROKER, str(broker),
                                [(name, CONFIG_DELETE, None) for name in sorted(set_now)])
            cleared.append(broker)
    for topic in _topics_with_replica_lists(admin, sorted({t for t, _ in moves})):
        admin.alter_configs(RESOURCE_TOPIC, topic,
                            [(name, CONFIG_DELETE, None) for name in THROTTLED_REPLICAS])
    return cleared


@reassign_group.command("execute")
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False))
@click.option("--cancel", is_flag=True, help="Cancel the pending reassignments of PLAN's partitions.")
@click.option("--throttle", type=click.IntRange(min=1), metavar="BYTES/S",
              help="Cap the replication traffic of the move (kafka-reassign-partitions.sh's "
                   "--throttle); verify removes it once the move is complete.")
@admin_command
@pass_cli
def execute(cli: CliContext, plan_file: str, cancel: bool, throttle: int | None) -> None:
    """Start (or --cancel) the reassignment of PLAN."""
    moves = read_plan(plan_file)
    if not moves:
        raise CliError(f"{plan_file} lists no partitions")
    if cancel and throttle:
        raise click.UsageError("--throttle applies to starting a move, not to --cancel")
    admin = cli.admin()
    throttled: list[int] = []
    if throttle:
        current = current_assignment(admin, sorted({t for t, _ in moves}))
        throttled = set_throttle(admin, moves, current, throttle)
    request: dict[TopicPartition, list[int] | None] = {
        tp: None if cancel else replicas for tp, replicas in moves.items()}
    results = admin.alter_reassignments(request)
    rows = [{"topic": t, "partition": p, "replicas": None if cancel else moves[(t, p)],
             "accepted": e is None, "error": e} for (t, p), e in sorted(results.items())]
    emit(cli, rows, rows, ["topic", "partition", "replicas", "accepted", "error"])
    if throttle:
        note(f"throttle {throttle} B/s set on brokers {','.join(map(str, throttled))}; "
             "`pykfk reassign verify` removes it once the move is complete")
    failed = [f"{r['topic']}-{r['partition']} ({r['error']})" for r in rows if r["error"]]
    if failed:
        raise CliError("refused: " + ", ".join(failed))


def _status_rows(admin: AdminClient, moves: dict[TopicPartition, list[int]]) -> list[dict[str, Any]]:
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
    return rows


@reassign_group.command("verify")
@click.argument("plan_file", metavar="PLAN", type=click.Path(dir_okay=False))
@click.option("--wait", "wait_for", type=Duration(), metavar="DURATION",
              help="Wait up to this long (30s, 10m) for the move to complete, with a progress "
                   "bar on a terminal.")
@click.option("--preserve-throttles", is_flag=True,
              help="Keep the --throttle of execute after the move completed.")
@admin_command
@pass_cli
def verify(cli: CliContext, plan_file: str, wait_for: int | None,
           preserve_throttles: bool) -> None:
    """Whether PLAN's partitions have reached their new replicas; exits 1 while any
    is still moving or differs. Once all have, removes the throttle (as Kafka's
    --verify does)."""
    moves = read_plan(plan_file)
    admin = cli.admin()
    rows = _status_rows(admin, moves)
    if wait_for:
        deadline = time.monotonic() + wait_for / 1000
        with progress(len(rows), "reassigning") as advance:
            done = sum(r["status"] == "complete" for r in rows)
            advance(done)
            while any(r["status"] == "in progress" for r in rows) and time.monotonic() < deadline:
                time.sleep(0.5)
                rows = _status_rows(admin, moves)
                now_done = sum(r["status"] == "complete" for r in rows)
                advance(now_done - done)
                done = now_done
    complete = all(r["status"] == "complete" for r in rows)
    cleared: list[int] = []
    if complete and not preserve_throttles:
        cleared = clear_throttle(admin, moves)
    if cli.json:
        emit_json({"complete": complete, "partitions": rows, "throttle_removed_from": cleared})
    else:
        emit(cli, rows, rows, ["topic", "partition", "target", "replicas", "status"])
        if cleared:
            note("reassignment complete; throttles removed from brokers "
                 + ",".join(map(str, cleared)))
    if not complete:
        raise CliError("reassignment not complete")


COMMANDS = [reassign_group]
