"""``pykfk audit``: compare the tiers of a pipeline window by window from the audit
topic (pykfk/audit.py; the 2011 paper's section 5). Exit 1 when a tier lost records."""

from __future__ import annotations

import datetime
import re
from typing import Any

import click

from pykfk.audit import AUDIT_TOPIC, AuditReport, compare, read_audit_records
from pykfk.cli.common import (
    EXIT_FAILED,
    CliContext,
    CliError,
    admin_command,
    emit_json,
    emit_table,
    pass_cli,
)

_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)?$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration_ms(ctx: click.Context, param: click.Parameter, value: str) -> int:
    match = _DURATION.match(value.strip())
    if not match:
        raise click.BadParameter("a duration such as 0, 30s, 5m or 1h", ctx, param)
    return int(match.group(1)) * _UNIT_MS[match.group(2) or "s"]


def _when(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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
@click.option("--settle", default="1m", callback=_duration_ms, show_default=True,
              help="Judge a window only this long after it ended (records still in flight are not loss).")
@click.option("--all", "show_all", is_flag=True, help="Table: list complete windows too.")
@admin_command
@pass_cli
def audit(cli: CliContext, audit_topic: str, reference: str, tiers: tuple[str, ...],
          topics: tuple[str, ...], settle: int, show_all: bool) -> None:
    """Compare the audit counts of each tier with the reference tier, per topic and time
    window: windows complete, windows with loss or duplicates and their counts. Exit 1
    when any tier lost records in a window old enough to judge."""
    records = list(read_audit_records(cli.admin(), audit_topic))
    report = compare(records, reference=reference, tiers=list(tiers) or None,
                     topics=list(topics) or None, settle_ms=settle)
    if cli.json:
        emit_json(report.to_json())
    else:
        _table(report, show_all)
    if report.has_loss:
        raise CliError(f"{report.summary()['missing']} records missing in "
                       f"{report.summary()['windows_with_loss']} windows", EXIT_FAILED)


COMMANDS = [audit]
