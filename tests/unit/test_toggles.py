"""The counted toggle set that replaces kopf's O(N^2) start-up wake-ups keeps its semantics."""

from __future__ import annotations

import asyncio

from kopf._cogs.aiokits import aiotoggles
from kopf._core.reactor import orchestration

from tessera.handlers.toggles import CountedToggleSet, install


def test_all_set_is_on_only_when_every_toggle_is_on_or_dropped() -> None:
    async def scenario() -> list[bool]:
        seen = []
        toggles = CountedToggleSet(all)
        seen.append(toggles.is_on())  # empty: on, like all([])
        first = await toggles.make_toggle(name="a")
        second = await toggles.make_toggle(True, name="b")
        seen.append(toggles.is_on())
        await first.turn_to(True)
        seen.append(toggles.is_on())
        await second.turn_to(False)
        seen.append(toggles.is_on())
        await toggles.drop_toggle(second)
        seen.append(toggles.is_on())
        await toggles.drop_toggle(second)  # dropping twice changes nothing
        seen.append(toggles.is_on() and len(toggles) == 1)
        return seen

    assert asyncio.run(scenario()) == [True, False, True, False, True, True]


def test_any_set_counts_the_toggles_that_are_on() -> None:
    async def scenario() -> list[bool]:
        toggles = CountedToggleSet(any)
        seen = [toggles.is_on()]
        flag = await toggles.make_toggle()
        seen.append(toggles.is_on())
        await flag.turn_to(True)
        seen.append(toggles.is_on())
        await toggles.drop_toggles([flag])
        seen.append(toggles.is_on())
        return seen

    assert asyncio.run(scenario()) == [False, False, True, False]


def test_waiters_wake_when_the_last_object_toggle_is_dropped() -> None:
    async def scenario() -> bool:
        toggles = CountedToggleSet(all)
        objects = [await toggles.make_toggle(name=f"object-{i}") for i in range(500)]
        waiter = asyncio.create_task(toggles.wait_for(True))
        await toggles.drop_toggles(objects[:-1])
        await asyncio.sleep(0)
        still_waiting = not waiter.done()
        await toggles.drop_toggle(objects[-1])
        await asyncio.wait_for(waiter, timeout=1)
        return still_waiting

    assert asyncio.run(scenario())


def test_install_makes_kopfs_orchestration_build_counted_sets() -> None:
    original = orchestration.aiotoggles
    try:
        install()
        assert orchestration.aiotoggles.ToggleSet is CountedToggleSet
        assert orchestration.aiotoggles.Toggle is aiotoggles.Toggle
    finally:
        orchestration.aiotoggles = original
