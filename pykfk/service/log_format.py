"""How ``pykfk-broker`` writes its log to stderr: readable lines, or JSON lines
(``--log-format json``) with ``time``, ``level``, ``logger``, ``message`` and, for a
record that carries one, ``exception`` (the formatted traceback)."""

from __future__ import annotations

import datetime
import json
import logging
import os
import sys
import threading
import types

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# sd-daemon(3) priority prefixes: the journal reads "<3>" at a line's start as the level
# (and strips it), so journalctl -p warning works on a text log.
JOURNAL_PRIORITIES = {logging.CRITICAL: 2, logging.ERROR: 3, logging.WARNING: 4, logging.INFO: 6, logging.DEBUG: 7}


class JsonLogFormatter(logging.Formatter):
    """One JSON object a line, UTC times with milliseconds (``2026-11-26T09:12:00.123Z``)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": _utc_iso(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False)


class JournalTextFormatter(logging.Formatter):
    """The readable format under a prefix the journal takes as the line's priority; the
    journal adds its own time, so the line leaves it out."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        priority = JOURNAL_PRIORITIES.get(record.levelno, 6)
        # A traceback spans lines; each is a journal entry of its own, so each gets it.
        return "\n".join(f"<{priority}>{line}" for line in super().format(record).splitlines())


def stderr_is_journal() -> bool:
    """True when stderr is a journal stream: systemd names its device and inode in
    ``$JOURNAL_STREAM`` (systemd.exec(5)), which tells it from a redirected stderr."""
    expected = os.environ.get("JOURNAL_STREAM", "")
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError):
        return False
    return expected == f"{st.st_dev}:{st.st_ino}"


def configure_logging(level: str, log_format: str) -> None:
    """Send every log record at ``level`` or above to stderr as ``log_format`` ("text"
    or "json") says."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonLogFormatter())
    elif stderr_is_journal():
        handler.setFormatter(JournalTextFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level))
    # Whatever else would reach stderr goes through the same format, so a JSON log
    # stays one object a line: Python's warnings, and exceptions nothing caught.
    logging.captureWarnings(True)
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_in_thread


def _log_uncaught(kind: type[BaseException], value: BaseException, tb: types.TracebackType | None) -> None:
    logging.getLogger("pykfk").critical("uncaught %s", kind.__name__, exc_info=(kind, value, tb))


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is None or isinstance(args.exc_value, SystemExit):
        return  # what threading's own hook ignores too
    thread = args.thread.name if args.thread is not None else "?"
    logging.getLogger("pykfk").error("uncaught %s in thread %s", args.exc_type.__name__, thread,
                                     exc_info=(args.exc_type, args.exc_value, args.exc_traceback))


def _utc_iso(created: float) -> str:
    moment = datetime.datetime.fromtimestamp(created, datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
