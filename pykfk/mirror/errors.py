"""The error a mirror process stops on (exit code 1 of ``pykfk-mirror run``)."""

from __future__ import annotations

__all__ = ["MirrorError"]


class MirrorError(RuntimeError):
    """The target refused records, did not acknowledge them in time, or refused a
    transaction; nothing past them was recorded as copied, so the next start resumes
    before them."""
