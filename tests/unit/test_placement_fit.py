"""Node-level gang fit: every pod on one node, all or none, never over a node's free devices."""

from __future__ import annotations

from tessera.placement import NodeFit, earliest_fit


def test_each_pod_lands_on_one_node_and_the_gang_is_all_or_nothing() -> None:
    fit = NodeFit([("a", 4), ("b", 4), ("c", 2)])
    assert fit.take(8, 1) is None  # 10 devices in all, but no node has 8
    assert fit.free == {"a": 4, "b": 4, "c": 2}  # a refused gang reserves nothing
    assert fit.take(4, 3) is None
    assert fit.free == {"a": 4, "b": 4, "c": 2}
    assert fit.take(4, 2) == ["a", "b"]
    assert fit.free == {"a": 0, "b": 0, "c": 2}


def test_best_fit_fills_the_tightest_node_first() -> None:
    fit = NodeFit([("big", 8), ("small", 4)])
    assert fit.take(4, 1) == ["small"]  # keeps the 8-device hole for an 8-device pod
    assert fit.take(8, 1) == ["big"]


def test_a_gang_packs_onto_few_nodes() -> None:
    fit = NodeFit([("a", 8), ("b", 8), ("c", 8)])
    assert fit.take(2, 4) == ["a", "a", "a", "a"]
    assert fit.take(2, 5) == ["b", "b", "b", "b", "c"]


def test_ties_break_by_node_name_whatever_the_input_order() -> None:
    assert NodeFit([("n2", 8), ("n1", 8)]).take(8, 1) == ["n1"]
    assert NodeFit([("n1", 8), ("n2", 8)]).take(8, 1) == ["n1"]


def test_room_and_largest() -> None:
    fit = NodeFit([("a", 7), ("b", 3), ("c", 0)])
    assert fit.room(2) == 4 and fit.room(4) == 1 and fit.room(8) == 0
    assert fit.largest() == 7
    fit.give("c", 8)
    assert fit.room(8) == 1 and fit.largest() == 8


def test_earliest_fit_replays_releases_node_by_node() -> None:
    free = {"a": 4, "b": 0}
    releases = [(3600.0, "b", 4), (7200.0, "a", 4)]
    assert earliest_fit(free, releases, 4, 1) == 0.0
    assert earliest_fit(free, releases, 4, 2) == 3600.0
    assert earliest_fit(free, releases, 8, 1) == 7200.0  # b's 4 are not enough for 8
    assert earliest_fit(free, releases, 8, 2) is None
    assert earliest_fit(free, [(60.0, "elsewhere", 8)], 8, 1) is None


def test_a_copy_takes_and_gives_apart_from_its_original() -> None:
    fit = NodeFit([("a", 8), ("b", 4), ("c", 0)])
    fit.room(4)  # a cached count, copied with it
    copy = fit.copy()
    assert copy.take(4, 2) == ["b", "a"]
    assert fit.free == {"a": 8, "b": 4, "c": 0} and fit.room(4) == 3
    assert fit.take(8, 1) == ["a"]
    assert copy.free == {"a": 4, "b": 0, "c": 0} and copy.room(4) == 1
    copy.give("c", 8)
    assert fit.free["c"] == 0 and fit.levels == {4: ["b"]}
