"""The ledger: each named operation, driven as the phases drive it. What this process promised
or wrote is kept until the cache shows it, and only that long."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

from tessera.controller.events import _of_live
from tessera.controller.ledger import CREATED_GRACE, Hold, Ledger
from tessera.world.caches import Edits
from tessera.world.facts import ObjectFacts, Placed, PodFacts, object_facts
from tessera.world.pacing import PROGRESS_EVERY
from tessera.world.snapshot import World

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
PLACED = Placed("h100", {0: "n0"}, NOW)


def facts(name: str, uid: str = "u", pool: str | None = None, rv: str = "1") -> ObjectFacts:
    status = {"pool": pool} if pool else {}
    meta = {"name": name, "namespace": "ml", "uid": uid, "resourceVersion": rv}
    return object_facts({"metadata": meta, "spec": {}, "status": status})


def world(
    workloads: dict[str, ObjectFacts], pods: dict[str, tuple[Any, ...]] | None = None
) -> World:
    """The parts of a World the ledger reads."""
    return cast(World, SimpleNamespace(workloads=workloads, pods_by_workload=pods or {}))


def test_a_decision_is_kept_until_the_cache_shows_it_or_its_workload_goes() -> None:
    ledger = Ledger()
    a, b, c = facts("a", "ua"), facts("b", "ub"), facts("c", "uc")
    workloads = {"ml/a": a, "ml/b": b, "ml/c": c}
    assert ledger.decided(workloads) == {}
    for f in (a, b, c):
        ledger.decide(f, PLACED, {"pool": "h100"}, -math.inf)
    assert set(ledger.decided(dict(workloads))) == {"ml/a", "ml/b", "ml/c"}
    assert set(ledger.decided(dict(workloads))) == {"ml/a", "ml/b", "ml/c"}  # nothing moved
    workloads["ml/a"] = facts("a", "ua", pool="h100", rv="2")  # the status write, cached
    workloads["ml/b"] = facts("b", "other", rv="3")  # deleted and created again
    del workloads["ml/c"]
    assert ledger.decided(dict(workloads)) == {}
    assert ledger.decision("ml/a") is None


def test_a_decision_made_since_the_last_look_is_looked_at_though_its_workload_is_unchanged() -> (
    None
):
    ledger = Ledger()
    shown = facts("a", "ua", pool="h100")
    workloads = {"ml/a": shown}
    ledger.decided(workloads)
    ledger.assume(shown, PLACED)
    assert ledger.decision("ml/a") is PLACED
    assert ledger.decided(dict(workloads)) == {}


def test_with_the_caches_edits_only_the_workloads_they_name_are_looked_at_again() -> None:
    """Given the keys each copy of the caches changed (Edits), `decided` looks again at the
    decisions whose workload they name and those made since; a copy that does not follow
    the last one it saw tells it nothing, so it looks at every decision."""
    ledger = Ledger()
    a, b = facts("a", "ua"), facts("b", "ub")
    workloads = {"ml/a": a, "ml/b": b}
    ledger.decided(workloads, Edits(1, {"workloads": None}))
    for f in (a, b):
        ledger.decide(f, PLACED, {"pool": "h100"}, -math.inf)
    assert set(ledger.decided(dict(workloads), Edits(2, {"workloads": frozenset()}))) == {
        "ml/a", "ml/b",
    }  # fmt: skip
    assert ledger.decisions_edited() == {"ml/a", "ml/b"}  # both made since copy 1
    # Both statuses are now cached, but this copy's edits name only a's.
    workloads = {"ml/a": facts("a", "ua", pool="h100"), "ml/b": facts("b", "ub", pool="h100")}
    assert set(ledger.decided(workloads, Edits(3, {"workloads": frozenset({"ml/a"})}))) == {"ml/b"}
    assert ledger.decisions_edited() == {"ml/a"}
    # Copy 5 follows copy 3: its edits may miss what copy 4 carried.
    assert ledger.decided(workloads, Edits(5, {"workloads": frozenset()})) == {}
    assert ledger.decisions_edited() is None  # nor can the World trust the ledger's
    ledger.decided(workloads, Edits(6, {"workloads": frozenset()}))
    assert ledger.decisions_edited() == frozenset()


def test_an_unwritten_status_is_due_once_its_pods_are_sent_and_goes_with_its_decision() -> None:
    ledger = Ledger()
    a = facts("a", "ua")
    entry = ledger.decide(a, PLACED, {"pool": "h100"}, math.inf)  # a burst's: pods queued
    assert ledger.unwritten("ml/a") == ({"pool": "h100"}, math.inf)
    ledger.sent("ml/a", entry, 12.5)
    assert ledger.unwritten("ml/a") == ({"pool": "h100"}, 12.5)
    newer = ledger.decide(a, PLACED, {"pool": "a100"}, math.inf)
    ledger.sent("ml/a", entry, 20.0)  # the old entry's sends: the newer decision keeps its clock
    assert ledger.unwritten("ml/a") == newer
    ledger.forget("ml/a")
    assert ledger.unwritten("ml/a") is None
    ledger.decide(a, PLACED, {"pool": "h100"}, -math.inf)
    ledger.forget("ml/a")
    assert ledger.unwritten("ml/a") is None and ledger.decision("ml/a") is None
    # An unwritten status whose decision the cache shows is dropped when writes settle.
    ledger.decide(a, PLACED, {"pool": "h100"}, -math.inf)
    ledger.decided({"ml/a": facts("a", "ua", pool="h100", rv="2")})
    ledger.settle_writes(world({"ml/a": a}))
    assert ledger.unwritten("ml/a") is None


def test_a_held_decision_is_released_once_its_pods_are_sent() -> None:
    """A decision held before its first write (ledger.Hold) is made due at once only after
    its pods went out: released earlier, a visit would write it over pods still queued. One
    that joined a burst is let go at once, to be written as the burst's are."""
    ledger = Ledger()
    a, b = facts("a", "ua"), facts("b", "ub")
    entry = ledger.decide(a, PLACED, {"pool": "h100"}, math.inf, Hold(1.0, a, "placed"))
    assert ledger.held("ml/a") and ledger.holds() == [("ml/a", Hold(1.0, a, "placed"))]
    assert not ledger.release("ml/a")  # pods still queued: held on
    assert ledger.held("ml/a") and ledger.unwritten("ml/a") == ({"pool": "h100"}, math.inf)
    ledger.sent("ml/a", entry, 12.5)
    assert ledger.release("ml/a") and not ledger.held("ml/a") and ledger.holds() == []
    assert ledger.unwritten("ml/a") == ({"pool": "h100"}, -math.inf)  # due at once
    ledger.sent("ml/a", entry, 13.0)  # a late send of the released entry moves nothing
    assert ledger.unwritten("ml/a") == ({"pool": "h100"}, -math.inf)
    ledger.decide(b, PLACED, {"pool": "h100"}, math.inf, Hold(1.0, b, "placed"))
    assert ledger.release("ml/b", due=False)  # joined a burst: its pods' clock, as theirs
    assert not ledger.held("ml/b") and ledger.unwritten("ml/b") == ({"pool": "h100"}, math.inf)
    ledger.decide(b, PLACED, {"pool": "h100"}, math.inf)  # decided again in a burst: no hold
    assert not ledger.held("ml/b")


def test_a_hold_ends_with_its_decision_withdrawn_or_its_workload_gone() -> None:
    """A decision withdrawn in its hold (a fallback, a stale spec) lets the hold go, so no
    Placed Event follows the withdrawal; one written on bad news keeps it (the Placed Event
    is still due) though the cache shows the status; a deleted workload's goes when the
    workloads settle."""
    ledger = Ledger()
    a, b = facts("a", "ua"), facts("b", "ub")
    ledger.decide(b, PLACED, {"pool": "h100"}, math.inf, Hold(1.0, b, "placed"))
    ledger.forget("ml/b")
    assert not ledger.held("ml/b") and ledger.holds() == []
    ledger.decide(b, PLACED, {"pool": "h100"}, 2.0, Hold(1.0, b, "placed"))
    ledger.decided({"ml/b": facts("b", "ub", pool="h100", rv="2")})
    ledger.settle_writes(world({"ml/b": b}))
    assert ledger.unwritten("ml/b") is None and ledger.held("ml/b")
    assert ledger.release("ml/b") and ledger.holds() == []
    ledger.decide(a, PLACED, {"pool": "h100"}, 2.0, Hold(1.0, a, "placed"))
    ledger.settle_workloads(world({"ml/b": b}), 3.0, full=False)
    assert ledger.holds() == []


def test_a_pod_is_claimed_once_until_the_cache_shows_it_or_its_grace_runs_out() -> None:
    ledger = Ledger()
    assert ledger.claim("ml/a-0", "ml/a", 10.0)
    assert not ledger.claim("ml/a-0", "ml/a", 10.5), "claimed: not sent twice"
    assert ledger.claimed("ml/a-0")
    ledger.claim("ml/b-0", "ml/b", 10.0)
    ledger.sending("ml/b-0", "ml/b", 11.0)
    ledger.claim("ml/c-0", "ml/c", 10.0)
    ledger.unclaim("ml/c-0")  # its create failed: sent again next visit
    assert not ledger.claimed("ml/c-0")
    pod = cast(PodFacts, SimpleNamespace(key="ml/a-0"))
    expired = ledger.settle_pods(world({}, {"ml/a": (pod,)}), 10.0 + CREATED_GRACE + 0.5)
    assert expired == [], "b was sent at 11.0: its grace counts from the send"
    assert not ledger.claimed("ml/a-0"), "a is in the cache"
    assert ledger.pods_in_flight("ml/b") and not ledger.pods_in_flight("ml/a")
    expired = ledger.settle_pods(world({}), 11.0 + CREATED_GRACE)
    assert expired == [("ml/b-0", CREATED_GRACE)]
    assert not ledger.pods_in_flight("ml/b")


def test_a_status_write_is_in_flight_until_the_cache_shows_a_newer_copy() -> None:
    ledger = Ledger()
    a = facts("a", rv="7")
    ledger.wrote(a, 100.0)
    assert ledger.writing("ml/a")
    assert ledger.since_written("ml/a", 103.0) == 3.0
    ledger.settle_writes(world({"ml/a": a}))
    assert ledger.writing("ml/a"), "the cache still shows the copy written over"
    ledger.settle_writes(world({"ml/a": facts("a", rv="8")}))
    assert not ledger.writing("ml/a")
    ledger.settle_workloads(world({"ml/a": a}), 100.0 + PROGRESS_EVERY, full=False)
    assert ledger.since_written("ml/a", 200.0) == 200.0, "forgotten after PROGRESS_EVERY"


def test_deferred_writes_refusals_and_visits_are_kept_per_live_workload() -> None:
    ledger = Ledger()
    ledger.defer("ml/a")
    assert ledger.deferred("ml/a")
    ledger.undefer("ml/a")
    assert not ledger.deferred("ml/a")
    ledger.refuse("ml/a", "quota", 5.0)
    ledger.refuse("ml/a", "quota again", 9.0)
    refusal = ledger.refusal("ml/a")
    assert refusal is not None and (refusal.since, refusal.last) == (5.0, 9.0)
    assert refusal.message == "quota again"
    ledger.accept("ml/a")
    assert ledger.refusal("ml/a") is None
    assert not ledger.unchanged("ml/a", ("rv", 1)), "never visited"
    ledger.visited("ml/a", ("rv", 1))
    assert ledger.unchanged("ml/a", ("rv", 1)) and not ledger.unchanged("ml/a", ("rv", 2))
    assert not ledger.unchanged("ml/a", None), "no signature: always visited"
    ledger.defer("ml/b")
    ledger.refuse("ml/b", "quota", 1.0)
    ledger.visited("ml/b", ("rv", 1))
    ledger.settle_workloads(world({"ml/a": facts("a")}), 10.0, full=True)
    assert not ledger.deferred("ml/b") and ledger.refusal("ml/b") is None
    assert not ledger.unchanged("ml/b", ("rv", 1)), "ml/b is gone"
    assert ledger.unchanged("ml/a", ("rv", 1))


def test_event_keys_are_kept_for_the_objects_the_world_has() -> None:
    live = cast(World, SimpleNamespace(workloads={"ml/a": None}, pools={"h100": None}))
    assert _of_live(live, "Workload/ml/a/Placed")
    assert not _of_live(live, "Workload/ml/b/Placed")
    assert _of_live(live, "AcceleratorPool/None/h100/Degraded")
    assert not _of_live(live, "AcceleratorPool/None/a100/Degraded")
