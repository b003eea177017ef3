"""The transactional producers of a mirror process against a real broker: a holder
fenced by a newer process gets the mirror's own error, whichever call meets the fence."""

from __future__ import annotations

import gc
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaException

from pykfk.mirror.errors import MirrorError
from pykfk.mirror.runner import Mirror
from pykfk.mirror.transactions import PartitionTransactions
from tests.mirror.helpers import create_topic

PARTITION = ("trades", 0)


def _fenced_holder(bootstrap: str) -> tuple[PartitionTransactions, PartitionTransactions]:
    """A holder with a transaction open, and the newer process that fenced it."""
    create_topic(bootstrap, "a.trades", 1)
    config = {"bootstrap.servers": bootstrap}
    holder = PartitionTransactions(config, "mirror-a-b")
    holder.open(PARTITION)
    holder.producer(PARTITION).produce("a.trades", b"before", partition=0)
    holder.flush([PARTITION])
    successor = PartitionTransactions(config, "mirror-a-b")
    successor.open(PARTITION)
    return holder, successor


def _produce_and_poll(holder: PartitionTransactions) -> None:
    """Send and serve callbacks as the mirror's loop does (a refused send raises
    ``failure``'s error), until the producer learns it was fenced: a failed send is
    reported asynchronously."""
    for _ in range(100):
        try:
            Mirror._produce(holder.producer(PARTITION), "a.trades", b"more", None, 0, 0, None)
        except KafkaException as exc:
            raise holder.failure(PARTITION, exc) from exc
        holder.poll()
        time.sleep(0.1)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("meets_the_fence", [
    pytest.param(lambda holder: holder.flush([PARTITION]), id="flush"),
    pytest.param(lambda holder: holder.commit(PARTITION), id="commit"),
    pytest.param(_produce_and_poll, id="produce-and-poll"),
])
def test_a_fenced_holder_is_told_another_process_took_over(
        standalone_factory: Any, meets_the_fence: Callable[[PartitionTransactions], None]) -> None:
    holder, successor = _fenced_holder(standalone_factory("b").bootstrap)
    try:
        holder.producer(PARTITION).produce("a.trades", b"after", partition=0)
        message = _error_message(lambda: meets_the_fence(holder))
    finally:
        holder.close()
        successor.close()
        # The error's traceback kept the producers in reference cycles: collect them
        # before the broker stops, or they retry connecting for the rest of the run.
        gc.collect()
    assert re.match(r"trades\[0\]: another process took it over \(fenced\): ", message), message


def _error_message(call: Callable[[], None]) -> str:
    """The MirrorError ``call`` raised, as text (the error itself, with its traceback,
    is dropped here)."""
    try:
        call()
    except MirrorError as exc:
        # confluent-kafka keeps a reference to the KafkaException a failed produce()
        # raised: drop its traceback, whose frames hold the producer.
        if exc.__cause__ is not None:
            exc.__cause__.__traceback__ = None
        return str(exc)
    raise AssertionError("no MirrorError raised")
