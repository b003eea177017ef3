"""``pykfk audit``: compare the tiers of a pipeline window by window from the audit
topic (pykfk/audit.py; the 2011 paper's section 5).

Exit codes: 0 every window old enough to judge is complete; 1 a tier lost records or
has duplicates in some window; 2 bad arguments; 3 nothing to compare (the audit topic
does not exist, holds no counts, or lacks the tiers asked for; every window is still
open), the cluster cannot be reached or the audit topic cannot be read. Each failure is one ``Error:`` line saying which.
"""

from __future__ import annotations

import datetime
from typing import Any

import click

from pykfk.audit import AUDIT_TOPIC, AuditRecord, AuditReport, compare, read_audit_records
from pykfk.cli.common import (
    EXIT_FAILED,
    EXIT_UNREACHABLE,
    CliContext,
    CliError,
    Duration,
    admin_command,
    emit_json,
    emit_table,
    pass_cli,
)
from pykfk.client.connection import ConnectionError_
from pykfk.errors import ErrorCode, KafkaError

# Nothing to compare shares the code of an unreachable cluster: no verdict either way.
EXIT_NOTHING_TO_COMPARE = EXIT_UNREACHABLE

def _when(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _nothing(reason: str) -> CliError:
    return CliError(f"nothing to compare: {reason}", EXIT_NOTHING_TO_COMPARE)


def _read(cli: CliContext, audit_topic: str) -> list[AuditRecord]:
    """Every audit record; a topic that cannot be read gives no verdict (exit 3), never
    the exit code of a loss."""
    try:
        return list(read_audit_records(cli.admin(), audit_topic))
    except ConnectionError_:
        raise  # "cannot reach the cluster" (exit 3), as every command says it
    except KafkaError as exc:
        if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise _nothing(f"the audit topic {audit_topic} does not exist on {cli.bootstrap} "
                           "(no tier has published counts there yet)") from None
        detail = f"{exc.message}: " if exc.message else ""
        raise _nothing(f"cannot read the audit topic {audit_topic}: "
                       f"{detail}{exc.code.name} ({int(exc.code)})") from None
    except TimeoutError as exc:
        raise _nothing(f"cannot read the audit topic {audit_topic}: {exc}") from None
    except (ValueError, KeyError, TypeError) as exc:  # a record no emitter wrote
        raise _nothing(f"the audit topic {audit_topic} holds a record that is not an audit "
                       f"count ({type(exc).__name__}: {exc})") from None


def _check_tiers(records: list[AuditRecord], audit_topic: str, reference: str,
                 tiers: tuple[str, ...], topics: tuple[str, ...]) -> None:
    """Refuse to judge when a tier to compare has published nothing at all."""
    found = sorted({r.tier for r in records if not topics or r.topic in topics})
    where = f"{audit_topic} for {', '.join(topics)}" if topics else audit_topic
    if not found:
        raise _nothing(f"{where} holds no counts yet")
    listing = f"tiers found: {', '.join(found)}"
    for tier in [reference, *tiers]:
        if tier not in found:
            raise _nothing(f"tier {tier!r} has published no counts to {where} ({listing})")
    if not tiers and found == [reference]:
        raise _nothing(f"only the reference tier {reference!r} has published counts to {where}")


def _verdict(report: AuditReport, settle_ms: int) -> None:
    """The exit code's reason, as one line: loss or duplicates (1), nothing judged (3)."""
    s = report.summary()
    if s["windows_with_loss"] or s["windows_with_duplicates"]:
        raise CliError(f"{s['missing']} records missing in {s['windows_with_loss']} windows, "
                       f"{s['duplicates']} duplicates in {s['windows_with_duplicates']} windows",
                       EXIT_FAILED)
    if s["windows"] and s["windows_open"] == s["windows"]:
        raise _nothing(f"all {s['windows']} windows ended less than {settle_ms / 1000:g}s ago "
                       "(--settle); records may still be on their way")


def _table(report: AuditReport, show_all: bool) -> None:
    rows: list[dict[str, Any]] = []
    for w in report.windows:
        if not show_all and w.status == "ok":
            continue
        row: dict[str, Any] = {"topic": w.topic, "window": _when(w.window_start), "status": w.status}
        for tier, count in w.counts.items():
            row[tier] = count
        row["missing"] = ", ".join(f"{t} {n}" for t, n in w.missing.items()) or None
        row["duplicates"] = ", ".join(f"{t} {n}" for t, n in w.duplicates.items()) or None
        rows.append(row)
    tiers = [report.reference, *report.tiers]
    if rows:
        emit_table(rows, ["topic", "window", *tiers, "status", "missing", "duplicates"])
    s = report.summary()
    click.echo(f"{s['windows']} windows: {s['windows_complete']} complete, {s['windows_with_loss']} with loss "
               f"({s['missing']} records missing), {s['windows_with_duplicates']} with duplicates "
               f"({s['duplicates']} records), {s['windows_open']} still open")


@click.command("audit")
@click.option("--audit-topic", default=AUDIT_TOPIC, show_default=True, help="Where the tiers publish counts.")
@click.option("--reference", default="producer", show_default=True, help="The tier the others are checked against.")
@click.option("--tier", "tiers", multiple=True, help="Tiers to check (repeatable; default all found).")
@click.option("--topic", "topics", multiple=True, help="Only these topics (repeatable).")
@click.option("--settle", default="1m", type=Duration(), show_default=True,
              help="Judge a window only this long after it ended (records still in flight are not loss).")
@click.option("--all", "show_all", is_flag=True, help="Table: list complete windows too.")
@admin_command
@pass_cli
def audit(cli: CliContext, audit_topic: str, reference: str, tiers: tuple[str, ...],
          topics: tuple[str, ...], settle: int, show_all: bool) -> None:
    """Compare the audit counts of each tier with the reference tier, per topic and time
    window: windows complete, windows with loss or duplicates and their counts.

    Exit 0 when every window old enough to judge is complete; 1 when a tier lost records
    or has duplicates there; 2 on bad arguments; 3 when there is nothing to compare (no
    audit topic, no counts, a tier asked for has published none, every window still
    open) or the cluster cannot be reached.
    """
    records = _read(cli, audit_topic)
    _check_tiers(records, audit_topic, reference, tiers, topics)
    report = compare(records, reference=reference, tiers=list(tiers) or None,
                     topics=list(topics) or None, settle_ms=settle)
    if cli.json:
        emit_json(report.to_json())
    else:
        _table(report, show_all)
    _verdict(report, settle)


COMMANDS = [audit]
