"""pykfk.testing.wait_until, the one poll loop of the tests."""

from __future__ import annotations

import itertools
import time

import pytest

from pykfk.testing import wait_until


def test_wait_until_returns_the_first_true_value_and_names_what_timed_out() -> None:
    calls = itertools.count()
    assert wait_until(lambda: [n] if (n := next(calls)) >= 3 else [], 5, "the third call", 0.001) == [3]
    start = time.monotonic()
    with pytest.raises(AssertionError, match="waiting for the impossible"):
        wait_until(lambda: 0, 0.2, "the impossible", 0.05)
    assert time.monotonic() - start < 2
