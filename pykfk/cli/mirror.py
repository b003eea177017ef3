"""``pykfk-mirror``: run a mirror, list its checkpoints, fail a consumer group over.

    pykfk-mirror run mirror.yaml [--set key=value ...]
    pykfk-mirror checkpoints mirror.yaml [--group billing] [-o json]
    pykfk-mirror failover mirror.yaml --group billing [--execute]

Exit codes: 0 done, 1 the mirror stopped on an error (the target refused records,
a cluster was unreachable past the timeouts), 2 bad configuration or arguments.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any

import click

from pykfk.cli.common import emit_rows
from pykfk.mirror.config import ConfigError, MirrorConfig, load_config

EXIT_FAILED = 1
EXIT_USAGE = 2


def _load(path: str, settings: Sequence[str]) -> MirrorConfig:
    overrides = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.UsageError(f"--set needs KEY=VALUE, not {item!r}")
        overrides[key.strip()] = value.strip()
    try:
        return load_config(path, overrides)
    except (ConfigError, OSError) as exc:
        click.echo(f"Error: {path}: {exc}", err=True)
        sys.exit(EXIT_USAGE)


def _require_client() -> None:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        click.echo("Error: pykfk-mirror needs confluent-kafka: pip install 'pykfk[mirror]'", err=True)
        sys.exit(EXIT_USAGE)


config_argument = click.argument("config_file", type=click.Path(exists=True, dir_okay=False))
set_option = click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
                          help="Override a setting of the file (repeatable).")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--log-level", default="INFO", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]))
def cli(log_level: str) -> None:
    """Copy topics between Kafka-protocol clusters (pykfk or Kafka); docs/mirror.md."""
    logging.basicConfig(level=log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _require_client()


@cli.command()
@config_argument
@set_option
@click.option("--max-seconds", type=float, default=None, help="Stop after this long (tests, benchmarks).")
def run(config_file: str, settings: Sequence[str], max_seconds: float | None) -> None:
    """Mirror until SIGTERM or Ctrl-C; several processes with one config share the work."""
    from pykfk.mirror.health import CLIENT_ERRORS
    from pykfk.mirror.runner import Mirror, MirrorError, install_signal_handlers

    config = _load(config_file, settings)
    mirror = Mirror(config)
    install_signal_handlers(mirror)
    # A refusal (a failed login, a denied ACL) of any client, or the mirror giving up.
    stopping: tuple[type[Exception], ...] = (MirrorError, *CLIENT_ERRORS)
    try:
        stats = mirror.run(max_seconds)
    except stopping as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_FAILED)
    click.echo(f"copied {stats.records} records ({stats.bytes} bytes); "
               f"{stats.progress_writes} progress writes, {stats.checkpoints} checkpoints", err=True)


def _rows(checkpoints: list[Any]) -> list[dict[str, Any]]:
    return [{"group": c.group, "topic": c.topic, "partition": c.partition,
             "upstream_offset": c.upstream_offset, "downstream_topic": c.downstream_topic,
             "downstream_offset": c.downstream_offset} for c in checkpoints]


_COLUMNS = ["group", "topic", "partition", "upstream_offset", "downstream_topic", "downstream_offset"]


def _print(rows: list[dict[str, Any]], output: str) -> None:
    emit_rows(rows, _COLUMNS, output)


output_option = click.option("--format", "-o", "output", type=click.Choice(["table", "json"]), default="table")


@cli.command()
@config_argument
@set_option
@click.option("--group", default=None, help="Only this consumer group.")
@output_option
def checkpoints(config_file: str, settings: Sequence[str], group: str | None, output: str) -> None:
    """The latest translated offsets of the source's groups, as stored in the target."""
    from pykfk.mirror.checkpoints import read_checkpoints

    config = _load(config_file, settings)
    found = read_checkpoints(config.target.client("consumer"), config.checkpoints_topic)
    _print(_rows([c for key, c in sorted(found.items()) if group is None or key[0] == group]), output)


@cli.command()
@config_argument
@set_option
@click.option("--group", required=True, help="The consumer group to move to the target.")
@click.option("--execute", is_flag=True, help="Commit the offsets (else only show them).")
@output_option
def failover(config_file: str, settings: Sequence[str], group: str, execute: bool, output: str) -> None:
    """Commit a group's translated offsets in the target, so it continues there with no
    gap. The group must have no active members in the target."""
    from pykfk.mirror.checkpoints import apply_checkpoints

    config = _load(config_file, settings)
    try:
        applied = apply_checkpoints(config, group, execute=execute)
    except RuntimeError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(EXIT_FAILED)
    if not applied:
        click.echo(f"Error: no checkpoints of group {group!r} in {config.checkpoints_topic}", err=True)
        sys.exit(EXIT_FAILED)
    _print(_rows(applied), output)
    if not execute:
        click.echo("dry run: add --execute to commit these offsets", err=True)


def main(argv: Sequence[str] | None = None) -> None:
    cli.main(args=list(argv) if argv is not None else None, prog_name="pykfk-mirror")


if __name__ == "__main__":
    main(sys.argv[1:])
