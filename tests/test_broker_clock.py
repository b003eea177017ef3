"""One clock for the whole broker: the log manager, the logs and the replica manager read
time from the clock the broker was given (a broker made in process, no network)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pykfk.broker import Broker
from pykfk.clock import SystemClock
from pykfk.config import BrokerConfig


def test_a_broker_hands_its_clock_to_every_part(tmp_path: Path) -> None:
    clock = SystemClock()  # a clock of its own, told apart from the default by identity
    config = BrokerConfig({"log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0"})
    broker = Broker(config, clock=clock)

    async def run() -> None:
        await broker.start()
        try:
            assert broker.replica_manager.clock is clock
            assert broker.log_manager is not None and broker.log_manager.clock is clock
        finally:
            await broker.stop()

    asyncio.run(run())
