"""The service manager's notification protocol (systemd's sd_notify(3)): state changes
such as ``READY=1`` go as one datagram of newline-separated assignments to the unix
socket named by ``$NOTIFY_SOCKET``; a name starting with "@" is in the abstract
namespace. Without that variable (not a ``Type=notify`` service) nothing is sent."""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger("pykfk.service")

NOTIFY_SOCKET = "NOTIFY_SOCKET"
# A manager that stops reading must not stall the broker: a notification is dropped
# after this long (sd_notify itself blocks; the event loop cannot afford to).
SEND_TIMEOUT_S = 1.0


def notify(*assignments: str) -> bool:
    """Send ``assignments`` (``"READY=1"``, ``"STATUS=serving"``, ``"STOPPING=1"``)
    to the service manager. True when sent; False when no manager asked for them or
    the send failed (logged: the broker runs on regardless)."""
    address = notify_address()
    if address is None:
        return False
    message = "\n".join(assignments).encode("utf-8")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.settimeout(SEND_TIMEOUT_S)
            sock.sendto(message, address)
    except OSError as exc:
        log.warning("cannot notify the service manager at %s: %s", os.environ[NOTIFY_SOCKET], exc)
        return False
    return True


def notify_address() -> bytes | None:
    """The socket address in ``$NOTIFY_SOCKET`` as ``sendto`` takes it, or None when
    unset or not a unix socket (systemd's vsock: addresses are for virtual machines)."""
    name = os.environ.get(NOTIFY_SOCKET, "")
    if name.startswith("@"):
        return b"\0" + os.fsencode(name[1:])
    if name.startswith("/"):
        return os.fsencode(name)
    return None


def watchdog_interval_s() -> float | None:
    """How often to send ``WATCHDOG=1``: half the timeout the unit's ``WatchdogSec=``
    set (sd_watchdog_enabled(3) advises half), or None when no watchdog watches this
    process (``$WATCHDOG_PID``, when set, names the process it watches)."""
    usec = os.environ.get("WATCHDOG_USEC", "")
    pid = os.environ.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0 or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 2_000_000
