"""The operator's collector settings: no cyclic collection while a cycle plans, the
collector restored as it was after, and the young collection the pause put off run as it
ends."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from tessera.controller import collector


@pytest.fixture
def young(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The young collections that run, by generation, with a threshold of 1,000."""
    runs: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            runs.append(info["generation"])

    threshold = gc.get_threshold()
    enabled = gc.isenabled()
    gc.set_threshold(1000, *threshold[1:])
    gc.enable()
    gc.callbacks.append(seen)
    yield runs
    gc.callbacks.remove(seen)
    gc.set_threshold(*threshold)
    if not enabled:
        gc.disable()


def test_nothing_is_collected_inside_and_one_young_collection_runs_as_it_ends(
    young: list[int],
) -> None:
    with collector.paused():
        assert not gc.isenabled()
        kept = [[i] for i in range(20_000)]  # 20 thresholds' worth of new objects
        assert young == []
    assert gc.isenabled()
    assert young[0] == 0 and len(young) <= 2, young  # one, where 20 would have run
    assert len(kept) == 20_000


def test_no_collection_is_forced_where_none_is_due(young: list[int]) -> None:
    gc.collect()
    young.clear()
    with collector.paused():
        few = [[i] for i in range(10)]
    assert young == [] and len(few) == 10


def test_the_collector_is_restored_as_it_was_even_on_failure(young: list[int]) -> None:
    with pytest.raises(RuntimeError), collector.paused():
        raise RuntimeError("a plan that fails")
    assert gc.isenabled()
    gc.disable()
    with collector.paused():
        pass
    assert not gc.isenabled()  # the CLI's choice is its own
    gc.enable()
