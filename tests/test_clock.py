"""ManualClock: time moves only when a test says so, timers run in due order."""

from __future__ import annotations

import asyncio

from pykfk.clock import SYSTEM_CLOCK, ManualClock


def test_time_starts_where_asked_and_moves_only_on_advance():
    clock = ManualClock(start_ms=5_000, monotonic_s=10.0)
    assert (clock.time_ms(), clock.monotonic()) == (5_000, 10.0)
    clock.advance(1_500)
    assert (clock.time_ms(), clock.monotonic()) == (6_500, 11.5)


async def test_timers_run_in_due_order_at_their_due_time_and_cancel():
    clock = ManualClock()
    ran: list[tuple[str, int]] = []
    clock.call_later(0.3, lambda: ran.append(("c", clock.time_ms())))
    clock.call_later(0.1, lambda: ran.append(("a", clock.time_ms())))
    doomed = clock.call_later(0.2, lambda: ran.append(("never", 0)))
    clock.call_later(0.2, lambda: ran.append(("b", clock.time_ms())))
    doomed.cancel()
    start = clock.time_ms()
    clock.advance(299)
    assert ran == [("a", start + 100), ("b", start + 200)]
    clock.advance(1)
    assert ran[-1] == ("c", start + 300)
    assert clock.pending_timers() == 0


async def test_a_timer_scheduled_by_a_timer_runs_in_the_same_advance_when_due():
    clock = ManualClock()
    ran: list[int] = []

    def first() -> None:
        ran.append(1)
        clock.call_later(0.05, ran.append, 2)

    clock.call_later(0.1, first)
    clock.advance(150)
    assert ran == [1, 2]


async def test_many_small_steps_reach_a_timer_exactly():
    clock = ManualClock()
    fired: list[bool] = []
    clock.call_later(0.3, fired.append, True)
    for _ in range(30):
        clock.advance(10)  # float steps would drift past or short of 300 ms
    assert fired == [True]


async def test_sleepers_wake_when_time_passes_and_not_before():
    clock = ManualClock()
    woke: list[str] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append(name)

    tasks = [asyncio.create_task(sleeper("long", 2.0)), asyncio.create_task(sleeper("short", 1.0))]
    await clock.tick(999)
    assert woke == []
    await clock.tick(1)
    assert woke == ["short"]
    await clock.tick(1000)
    assert woke == ["short", "long"]
    await asyncio.gather(*tasks)


async def test_a_zero_delay_runs_on_the_next_loop_turn_without_advancing():
    clock = ManualClock()
    ran: list[int] = []
    clock.call_later(0, ran.append, 1)
    assert ran == []
    await clock.settle()
    assert ran == [1]


async def test_system_clock_sleeps_and_schedules_on_the_loop():
    done = asyncio.get_running_loop().create_future()
    SYSTEM_CLOCK.call_later(0.001, done.set_result, "ok")
    await SYSTEM_CLOCK.sleep(0)
    assert await asyncio.wait_for(done, 5) == "ok"
    assert SYSTEM_CLOCK.time_ms() > 1_600_000_000_000
