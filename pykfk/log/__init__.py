"""Partition logs: segments, roll, flush, retention, recovery, idempotent producer state,
and the LogManager over ``log.dirs``. See ``README.md`` in this directory."""

from typing import Any

from pykfk.log.config import CREATE_TIME, LOG_APPEND_TIME, LogConfig

__all__ = [
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "AppendInfo",
    "FetchData",
    "Log",
    "LogConfig",
    "LogManager",
]


def __getattr__(name: str) -> Any:
    # Log and LogManager need the compiled core; importing them lazily keeps
    # ``pykfk.log.config`` usable (e.g. by config parsing) without it.
    if name in ("AppendInfo", "FetchData", "Log"):
        from pykfk.log import log

        return getattr(log, name)
    if name == "LogManager":
        from pykfk.log.manager import LogManager

        return LogManager
    raise AttributeError(f"module 'pykfk.log' has no attribute {name!r}")
