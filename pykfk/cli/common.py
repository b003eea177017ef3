"""What every ``pykfk`` subcommand shares: the connection and output options, the
admin client they open, tables and JSON, progress bars, argument parsers, and the one
mapping from failures to messages and exit codes.

Exit codes: 0 success; 1 the cluster refused or reported an error (unknown topic,
invalid config...) or a check failed (a damaged segment, an unfinished reassignment);
2 bad arguments (click's usage errors); 3 no broker reachable in time.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import click

from pykfk.client.admin import AdminClient, ClientSecurity, read_properties
from pykfk.client.connection import ConnectionError_
from pykfk.errors import KafkaError

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_TIMEOUT = 15.0

F = TypeVar("F", bound=Callable[..., Any])


class CliError(click.ClickException):
    """A failure reported as ``Error: <message>`` on stderr with its exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED):
        super().__init__(message)
        self.exit_code = exit_code


class CliContext:
    """Options of the command line, and the admin client opened on first use."""

    def __init__(self) -> None:
        self.bootstrap = os.environ.get("PYKFK_BOOTSTRAP") or DEFAULT_BOOTSTRAP
        self.timeout = DEFAULT_TIMEOUT
        self.format = "table"
        self.command_config: str | None = None
        self._admin: AdminClient | None = None

    @property
    def json(self) -> bool:
        return self.format == "json"

    def security(self) -> ClientSecurity:
        if not self.command_config:
            return ClientSecurity()
        try:
            return ClientSecurity.from_properties(read_properties(self.command_config))
        except OSError as exc:
            raise CliError(f"cannot read --command-config {self.command_config}: "
                           f"{exc.strerror}", EXIT_USAGE) from None
        except ValueError as exc:
            raise CliError(f"--command-config {self.command_config}: {exc}", EXIT_USAGE) from None

    def admin(self) -> AdminClient:
        if self._admin is None:
            try:
                self._admin = AdminClient(self.bootstrap, timeout=self.timeout,
                                          security=self.security())
            except ValueError as exc:
                raise CliError(f"--bootstrap-server {self.bootstrap!r}: {exc}", EXIT_USAGE) from None
        return self._admin

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None


pass_cli = click.make_pass_decorator(CliContext, ensure=True)


def _set(attr: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def callback(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value is not None:
            setattr(ctx.ensure_object(CliContext), attr, value)

    return callback


def _bootstrap_value(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value is not None and not str(value).strip():
        raise click.BadParameter("must name at least one host:port", ctx, param)
    _set("bootstrap")(ctx, param, value)


def connection_options(func: F) -> F:
    """--bootstrap-server, --command-config, --timeout: taken on the root command and on
    every subcommand, whichever the user writes them after."""
    options = [
        click.option("--bootstrap-server", "-b", metavar="HOST:PORT[,...]", expose_value=False,
                     callback=_bootstrap_value, is_eager=True,
                     help=f"Brokers to start from [env PYKFK_BOOTSTRAP; default {DEFAULT_BOOTSTRAP}]."),
        click.option("--command-config", type=click.Path(dir_okay=False), expose_value=False,
                     callback=_set("command_config"), is_eager=True,
                     help="Kafka client properties: security.protocol, sasl.*, ssl.* (PEM)."),
        click.option("--timeout", type=click.FloatRange(min=0.1), expose_value=False,
                     callback=_set("timeout"), is_eager=True,
                     help=f"Seconds to wait for the cluster [default {DEFAULT_TIMEOUT:g}]."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def output_option(func: F) -> F:
    """--format table|json."""
    return click.option("--format", "-o", "output_format", type=click.Choice(["table", "json"]),
                        expose_value=False, callback=_set("format"), is_eager=True,
                        help="Human table (default) or JSON for scripts.")(func)


def admin_command(func: F) -> F:
    """The options of a command that talks to a cluster and prints a result."""
    return connection_options(output_option(func))


# ------------------------------------------------------------------------- output


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def emit_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str],
               headers: Sequence[str] | None = None) -> None:
    """Aligned columns; None shows as '-'."""
    headers = [h.upper() for h in (headers or columns)]
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    click.echo("  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip())
    for r in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value) or "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def emit(cli: CliContext, data: Any, rows: Sequence[Mapping[str, Any]],
         columns: Sequence[str], headers: Sequence[str] | None = None) -> None:
    """``data`` as JSON with --format json, else ``rows`` as a table."""
    emit_rows(rows, columns, cli.format, headers, data=data)


def emit_rows(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], output_format: str,
              headers: Sequence[str] | None = None, *, data: Any = None) -> None:
    """The one printer of every pykfk command (``pykfk``, ``pykfk-mirror``): ``rows`` as
    an aligned table for ``table``, or ``data`` (default: the rows) as JSON for ``json``."""
    if output_format == "json":
        emit_json(rows if data is None else data)
    else:
        emit_table(rows, columns, headers)


def note(message: str) -> None:
    """A remark for the human at the terminal (stderr, so piped output stays clean)."""
    click.echo(message, err=True)


@contextlib.contextmanager
def progress(length: int, label: str, *, enabled: bool = True) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr when it is a terminal; yields ``advance(n)``."""
    if not enabled or not sys.stderr.isatty():
        yield lambda _n: None
        return
    with click.progressbar(length=length, label=label, file=sys.stderr) as bar:
        yield bar.update


# --------------------------------------------------------------------- completion

# Completing a name asks the cluster, briefly: a shell must not hang on a dead broker.
_COMPLETION_TIMEOUT = 2.0


def _names_from_cluster(ctx: click.Context, incomplete: str,
                        names: Callable[[AdminClient], Iterable[str]]) -> list[str]:
    obj = ctx.find_object(CliContext) or CliContext()
    try:
        with AdminClient(obj.bootstrap, timeout=_COMPLETION_TIMEOUT,
                         security=obj.security()) as admin:
            return sorted(n for n in names(admin) if n.startswith(incomplete))
    except (ConnectionError_, KafkaError, click.ClickException, ValueError, OSError):
        return []


def complete_topics(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[str]:
    """Shell completion of topic names (internal topics only when asked for by '_')."""
    return _names_from_cluster(ctx, incomplete, lambda admin: [
        t.name for t in admin.describe_topics(None) if not t.internal or incomplete.startswith("_")])


def complete_groups(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[str]:
    """Shell completion of consumer group names."""
    return _names_from_cluster(ctx, incomplete, lambda admin: [g["group"] for g in admin.list_groups()])


# ------------------------------------------------------------------------ parsing


def parse_key_values(pairs: Iterable[str], what: str) -> dict[str, str]:
    """``key=value`` items to a dict; a BadParameter names the malformed one."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{pair!r} is not key=value", param_hint=what)
        out[key.strip()] = value
    return out


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str, param_hint: str, *, default_unit: str = "s") -> int:
    """The one duration syntax of every pykfk command: a number with an optional unit,
    ``500ms``, ``30s``, ``5m``, ``2h``, ``1d`` (``default_unit`` without one), as ms."""
    match = _DURATION.match(text.strip())
    if not match:
        raise click.BadParameter(f"{text!r} is not a duration such as 0, 500ms, 30s, 5m, 2h or 1d",
                                 param_hint=param_hint)
    return int(float(match.group(1)) * _UNIT_MS[match.group(2) or default_unit])


class Duration(click.ParamType):  # type: ignore[type-arg]  # generic in click >= 8.2 only
    """A click option type for ``parse_duration_ms``: the value becomes ms."""

    name = "duration"

    def __init__(self, default_unit: str = "s"):
        self.default_unit = default_unit

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        hint = param.get_error_hint(ctx) if param is not None and ctx is not None else None
        return parse_duration_ms(str(value), hint or "duration", default_unit=self.default_unit)


def parse_time_ms(text: str, param_hint: str, now_ms: int | None = None) -> int:
    """A point in time as ms since the epoch: ISO 8601 (local time without an offset),
    a number of ms, or a duration ago such as ``-15m``, ``-2h``, ``-1d``."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    if text.startswith("-") and _DURATION.match(text[1:]) and not text[1:].isdigit():
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return now - parse_duration_ms(text[1:], param_hint)
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a time (ISO 8601 like 2024-05-01T12:00:00, ms since the epoch, "
            "or a duration ago like -1h)", param_hint=param_hint) from None
    return int(moment.timestamp() * 1000)


def format_time_ms(ms: int) -> str | None:
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")


def parse_partitions(text: str, param_hint: str) -> list[int]:
    """``0,1,5-7`` to [0, 1, 5, 6, 7]."""
    out: list[int] = []
    try:
        for part in text.split(","):
            lo, sep, hi = part.strip().partition("-")
            out.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a partition list like 0,1,4-7",
                                 param_hint=param_hint) from None
    return sorted(set(out))


def run_guarded(func: Callable[[], Any]) -> Any:
    """Turn the client's failures into CliErrors with the documented exit codes."""
    try:
        return func()
    except ConnectionError_ as exc:
        raise CliError(f"cannot reach the cluster: {exc.message}", EXIT_UNREACHABLE) from None
    except KafkaError as exc:
        raise CliError(_kafka_message(exc)) from None


def _kafka_message(exc: KafkaError) -> str:
    # Broker messages are sentences ("Topic 'x' already exists."); the code follows
    # after a colon, so the sentence's own full stop goes.
    detail = f"{exc.message.rstrip().rstrip('.')}: " if exc.message else ""
    return f"{detail}{exc.code.name} ({int(exc.code)})"
