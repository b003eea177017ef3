"""pykfk-broker as a system service: the systemd unit and an example
``/etc/pykfk/server.properties`` shipped with the package (``docs/service.md``), the
service manager's readiness protocol (``notify``) and the JSON log format
(``log_format``)."""

from __future__ import annotations

from importlib import resources

UNIT_FILE = "pykfk-broker.service"
EXAMPLE_CONFIG = "server.properties"
# Where the shipped unit expects pykfk-broker: a virtual environment made for it
# (python3 -m venv /opt/pykfk), as docs/service.md installs it.
UNIT_EXEC_PATH = "/opt/pykfk/bin/pykfk-broker"


def unit_file_text(executable: str | None = None) -> str:
    """The shipped unit file; with ``executable``, its ExecStart runs that pykfk-broker
    instead of ``UNIT_EXEC_PATH``."""
    text = _read(UNIT_FILE)
    if executable is None:
        return text
    if any(c.isspace() or c in "\"'\\%$" for c in executable):
        # ExecStart would need quoting and escaping for these; a plain path is clearer.
        raise ValueError(f"{executable!r}: install pykfk-broker under a path without spaces or quotes")
    return text.replace(UNIT_EXEC_PATH, executable)


def example_config_text() -> str:
    """The example server.properties the unit reads from /etc/pykfk."""
    return _read(EXAMPLE_CONFIG)


def _read(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
