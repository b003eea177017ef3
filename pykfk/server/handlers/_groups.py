"""Answers of the consumer-group APIs while this broker has no group coordinator.

Every group request gets COORDINATOR_NOT_AVAILABLE (retriable: clients keep looking for a
coordinator instead of failing), shaped as each API's response expects.
"""

from __future__ import annotations

from pykfk.errors import ErrorCode

COORDINATOR_NOT_AVAILABLE = ErrorCode.COORDINATOR_NOT_AVAILABLE
MESSAGE = "The group coordinator is not available on this broker"


def simple_error() -> dict:
    """Responses whose only payload is an error code (Heartbeat, LeaveGroup, SyncGroup...)."""
    return {"throttle_time_ms": 0, "error_code": COORDINATOR_NOT_AVAILABLE}
