"""``pykfk``: the operator's command for any Kafka-protocol cluster, pykfk or Kafka.

``pykfk topic|group|produce|consume|cluster|acl|user|reassign|log|audit ...``; ``pykfk COMMAND
--help`` describes each. docs/cli.md is the manual.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from pykfk.cli import access, audit, cluster, console, group, logdump, reassign, token, topic, user
from pykfk.cli.common import CliContext, connection_options, output_option, run_guarded

# The oldest API versions each command needs decide the oldest Kafka it works with:
# Produce v3 / Fetch v4 (magic-2 batches) came with Kafka 0.11; IncrementalAlterConfigs
# with 2.3; AlterPartitionReassignments and OffsetDelete with 2.4; the SCRAM user APIs
# with 2.7. Newer brokers (Kafka 4 included) answer the versions ApiVersions negotiates.
VERSION_MESSAGE = """%(prog)s %(version)s
Talks to pykfk-broker and Apache Kafka brokers 0.11 and later, Kafka 4 included
(each request at the highest version both sides speak, from ApiVersions):
  produce, consume, topic create/list/describe/delete, group, acl   Kafka 0.11+
  topic alter-config, cluster config set                            Kafka 2.3+
  reassign, group delete-offsets                                    Kafka 2.4+
  user                                                              Kafka 2.7+"""


class GuardedGroup(click.Group):
    """The root group: every subcommand's client failures become clear messages with
    the documented exit codes, never a traceback, and connections are closed."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return run_guarded(lambda: super(GuardedGroup, self).invoke(ctx))
        finally:
            obj = ctx.find_object(CliContext)
            if obj is not None:
                obj.close()


@click.group(cls=GuardedGroup, context_settings={"help_option_names": ["-h", "--help"],
                                                  "max_content_width": 100})
@connection_options
@output_option
@click.version_option(package_name="pykfk", prog_name="pykfk", message=VERSION_MESSAGE)
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Operate a Kafka-protocol cluster: topics, consumer groups, configs, ACLs, SCRAM
    users, reassignments, console produce/consume, and offline segment dumps.

    Shell completion (bash, zsh, fish): eval "$(_PYKFK_COMPLETE=bash_source pykfk)" in
    ~/.bashrc (zsh_source in ~/.zshrc; fish_source for fish).

    The brokers come from --bootstrap-server, else the PYKFK_BOOTSTRAP environment
    variable, else 127.0.0.1:9092. Exit codes: 0 ok, 1 the cluster reported an error or a
    check failed, 2 bad arguments, 3 no broker reachable.
    """
    ctx.ensure_object(CliContext)


for module in (topic, group, console, cluster, access, reassign, logdump, audit, token, user):
    for command in module.COMMANDS:
        cli.add_command(command)


def main(argv: Sequence[str] | None = None) -> None:
    cli.main(args=list(argv) if argv is not None else None, prog_name="pykfk")


if __name__ == "__main__":
    main(sys.argv[1:])
