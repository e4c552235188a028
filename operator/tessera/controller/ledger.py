"""The ledger: what this process has promised or written and not yet seen come back through
its caches (Kueue's assume/forget). Phases use its named operations, never its dicts. No I/O."""

from __future__ import annotations

import logging
import math
from collections.abc import Container, Mapping, Set
from typing import Any, NamedTuple

from tessera.world.caches import Edits, by_id, changed
from tessera.world.facts import ObjectFacts, Placed, placed_of
from tessera.world.pacing import PROGRESS_EVERY
from tessera.world.snapshot import World

log = logging.getLogger("tessera.controller")

# Seconds a pod this process sent is trusted to exist before the pod watch shows it.
CREATED_GRACE = 30.0


class Refusal(NamedTuple):
    """The API server's last refusal of one of a workload's pods (a quota, an admission
    policy), with when the refusals began and when the last was answered (monotonic)."""

    since: float
    last: float
    message: str


# A decision's status not yet written, and the monotonic time its pods were sent (minus
# infinity: due at once; infinity: its pods are still queued).
Unwritten = tuple[dict[str, Any], float]


class _Checked(NamedTuple):
    """What Ledger.decided last saw: the copy of the caches it came with (Edits.serial), or
    else the workloads by id() (their facts held, so no id() is reused)."""

    copy: int | None
    ids: dict[int, str]
    held: list[ObjectFacts]


class Hold(NamedTuple):
    """A decision made outside a burst, held LONE_HOLD before its first write so a burst
    that begins meanwhile takes it in (tessera.world.pacing.Bursts.lone_fate): when it was
    decided (monotonic), the workload as read then, and its Placed Event's message."""

    decided: float
    facts: ObjectFacts
    message: str


def settle_claims(
    created: dict[str, tuple[float, str]], visible: Container[str], copied: float
) -> list[tuple[str, float]]:
    """Forgets, in place, the claims on pods the World shows (they exist) and on those sent
    CREATED_GRACE or more before the World was copied (monotonic `copied`) yet not in it:
    the next visit sends those again. Returns the latter, with how long before the copy
    they were sent. The age counts to the copy, not to the clock: a gang burst's cycle can
    wait on the send queue for tens of seconds while placing, and held against the clock
    after those sends, the World copied before them would show every pod sent meanwhile as
    missing, and send it again (answered 409)."""
    expired = []
    for name, (at, _) in list(created.items()):
        if name in visible:
            created.pop(name, None)
        elif copied - at >= CREATED_GRACE:
            created.pop(name, None)
            expired.append((name, copied - at))
    return expired


def _records(status: Mapping[str, Any], placed: Placed) -> bool:
    """Whether a status records this placement: its pool, and (a repair moves replicas
    within the pool) its nodes."""
    if status.get("pool") != placed.pool:
        return False
    assigned = placed_of(status)
    return (
        assigned is None or not assigned.assignments or assigned.assignments == placed.assignments
    )


class Pass(NamedTuple):
    """What choosing the visits reads for every workload each cycle, typed read-only, so
    that pass costs a dict lookup per question: a method call per question and workload
    made it about 15 % dearer (cProfile, 5,000 Workloads over a stub API)."""

    writing: Mapping[str, str]  # key -> the resourceVersion written over
    deferred: Set[str]
    unwritten: Mapping[str, Unwritten]
    refused: Mapping[str, Refusal]
    in_flight: Set[str]
    visited: Mapping[str, tuple[Any, ...]]


class Ledger:
    """Per workload key: its decision not yet seen in the cache, the decision's status not yet
    written and its hold (Hold); the pods claimed or sent but not yet seen; the status write
    not yet seen (and when it was sent); a progress-only write held back; the API server's
    refusal of its pods; and what it looked like when last visited. Safe to use from the
    writer threads: each dict read or write is atomic under the GIL (an operation that writes
    several, as `decide` does, writes one key in each), and pruning goes over copies."""

    def __init__(self) -> None:
        # key -> this process's placement not yet seen in the cache, and the uid of the
        # workload it was made for: apart, so the next World takes a copy of the placements
        # as one C call (a dict comprehension over a burst's 10,000 was 6 ms a cycle)
        self._placed: dict[str, Placed] = {}
        self._uids: dict[str, str] = {}
        # What `decided` last saw: the copy of the caches (Edits.serial), or else the
        # workloads by id() (their facts held).
        self._checked: _Checked | None = None
        # Decisions made or dropped since `decided` last ran, and those it saw between its
        # last two runs where they came with consecutive copies (`decisions_edited`).
        self._edited: set[str] = set()
        self._last_edited: frozenset[str] | None = None
        self._unwritten: dict[str, Unwritten] = {}
        self._holds: dict[str, Hold] = {}  # decisions not yet due (Ledger.release)
        self._pods: dict[str, tuple[float, str]] = {}  # pod key -> (sent at, workload key)
        self._pods_of: set[str] = set()  # the workloads those pods belong to
        self._writing: dict[str, str] = {}  # key -> the resourceVersion written over
        self._written_at: dict[str, float] = {}  # key -> monotonic time of the last write
        self._deferred: set[str] = set()  # progress-only status changes not yet written
        self._refused: dict[str, Refusal] = {}
        self._visited: dict[str, tuple[Any, ...]] = {}  # key -> its signature when visited
        # key -> (its placement then, replica -> why it is lost): replicas a visit found lost
        # with their node, for the next plan to place again (tessera.controller.repairs).
        self._lost: dict[str, tuple[Placed, dict[int, str]]] = {}
        # Services whose scale up found no room on their pool: the next plan tries to move
        # them whole to a pool with room for every replica (tessera.controller.fallback.moves).
        self._outgrown: set[str] = set()

    # --- decisions --------------------------------------------------------------------------

    def decide(
        self,
        facts: ObjectFacts,
        placed: Placed,
        status: dict[str, Any],
        sent: float,
        hold: Hold | None = None,
    ) -> Unwritten:
        """Records a placement and its status, to be written once its pods are `sent`;
        with a `hold`, not before it is released (unless there is bad news)."""
        entry = (status, sent)
        self._uids[facts.key] = facts.uid
        self._placed[facts.key] = placed
        self._edited.add(facts.key)
        self._unwritten[facts.key] = entry
        if hold is not None:
            self._holds[facts.key] = hold
        else:
            self._holds.pop(facts.key, None)
        return entry

    def assume(self, facts: ObjectFacts, placed: Placed) -> None:
        """Records a placement whose status is written already (a migration's)."""
        self._uids[facts.key] = facts.uid
        self._placed[facts.key] = placed
        self._edited.add(facts.key)

    def sent(self, key: str, entry: Unwritten, at: float) -> None:
        """The decision's pods went out at `at`: its first write's clock starts (unless the
        decision was replaced or written meanwhile)."""
        if self._unwritten.get(key) is entry:
            self._unwritten[key] = (entry[0], at)

    def release(self, key: str, due: bool = True) -> bool:
        """Ends a decision's hold. `due`: its first write is due at once, once its pods went
        out (False while they have not: it stays held); else it is written as a burst's
        decisions are. True also when it was written meanwhile (on bad news)."""
        entry = self._unwritten.get(key)
        if due and entry is not None:
            if entry[1] == math.inf:
                return False
            self._unwritten[key] = (entry[0], -math.inf)
        self._holds.pop(key, None)
        return True

    def held(self, key: str) -> bool:
        return key in self._holds

    def holds(self) -> list[tuple[str, Hold]]:
        """The decisions held, by workload (a copy: releasing one changes the ledger)."""
        return list(self._holds.items())

    def decision(self, key: str) -> Placed | None:
        """This process's placement of a workload, while the cache may not show it."""
        return self._placed.get(key)

    def unwritten(self, key: str) -> Unwritten | None:
        return self._unwritten.get(key)

    def forget(self, key: str) -> None:
        """Drops the workload's decision (withdrawn, or built from a stale spec)."""
        self._placed.pop(key, None)
        self._edited.add(key)
        self._uids.pop(key, None)
        self._unwritten.pop(key, None)
        self._holds.pop(key, None)  # withdrawn: no Placed Event
        self._lost.pop(key, None)
        self._outgrown.discard(key)

    def decided(
        self, workloads: dict[str, ObjectFacts], edits: Edits | None = None
    ) -> dict[str, Placed]:
        """Decisions the cache may not show yet, for the next World. A decision is forgotten
        once the cache shows it (or the workload is gone). Only the decisions made since the
        last call, and those whose workload's facts changed (`edits`, where the copy of the
        caches says), are looked at: in a burst the decisions are written at its end, and
        going over all 10,000 each cycle took 11 ms."""
        decisions, last = self._placed, self._checked
        edited: Set[str] | None
        if edits is not None:
            self._checked = _Checked(edits.serial, {}, [])
            edited = edits.since(last.copy if last else None, "workloads")
        else:
            ids = by_id(workloads)
            self._checked = _Checked(None, ids, list(workloads.values()))
            edited = changed(last.ids, ids) if last and last.copy is None else None
        made, self._edited = self._edited, set()  # decisions made or dropped since the last
        keys = list(decisions) if edited is None else (edited | made) & decisions.keys()
        for key in keys:
            facts = workloads.get(key)
            if (
                facts is None
                or facts.uid != self._uids[key]
                or _records(facts.status, decisions[key])
            ):
                del decisions[key], self._uids[key]
                made.add(key)
        chained = edits is not None and last is not None and last.copy == edits.serial - 1
        self._last_edited = frozenset(made) if chained else None
        return dict(decisions)

    def decisions_edited(self) -> frozenset[str] | None:
        """The workloads whose decision was made, replaced or dropped between what the last
        two `decided` returned, where they came with consecutive copies of the caches
        (Edits); None where not known. The World's index takes these as the copy's edits."""
        return self._last_edited

    # --- pods -------------------------------------------------------------------------------

    def claim(self, pod: str, workload: str, at: float) -> bool:
        """Claims a pod before its request is built, so no pod is sent twice; False when it
        is claimed already (on its way, not yet in the cache)."""
        if pod in self._pods:
            return False
        self._pods[pod] = (at, workload)
        return True

    def sending(self, pod: str, workload: str, at: float) -> None:
        """CREATED_GRACE counts from the send, not the claim: a burst's claim may wait in
        the send queue first."""
        self._pods[pod] = (at, workload)

    def unclaim(self, pod: str) -> None:
        """The pod was not created: the next visit sends it again."""
        self._pods.pop(pod, None)

    def claimed(self, pod: str) -> bool:
        return pod in self._pods

    def pods_in_flight(self, workload: str) -> bool:
        """Whether some of the workload's pods were sent and are not yet in the cache (as of
        the last `settle_pods`)."""
        return workload in self._pods_of

    def settle_pods(self, world: World, copied: float) -> list[tuple[str, float]]:
        """Forgets the claims the World shows and those that expired (see settle_claims),
        returning the latter; `copied`: when the World was copied (monotonic)."""
        owners = {w for _, w in list(self._pods.values())}
        visible = {p.key for w in owners for p in world.pods_by_workload.get(w, ())}
        expired = settle_claims(self._pods, visible, copied)
        self._pods_of = {w for _, w in list(self._pods.values())}
        return expired

    # --- status writes ----------------------------------------------------------------------

    def wrote(self, facts: ObjectFacts, at: float) -> None:
        """A status write over `facts` went out at `at`: nothing more is written on top of
        that copy until the cache shows a newer one."""
        self._writing[facts.key] = facts.resource_version
        self._written_at[facts.key] = at

    def writing(self, key: str) -> bool:
        return key in self._writing

    def since_written(self, key: str, at: float) -> float:
        return at - self._written_at.get(key, 0.0)

    def defer(self, key: str) -> None:
        self._deferred.add(key)

    def undefer(self, key: str) -> None:
        self._deferred.discard(key)

    def deferred(self, key: str) -> bool:
        return key in self._deferred

    # --- refusals ---------------------------------------------------------------------------

    def refuse(self, key: str, message: str, at: float) -> None:
        known = self._refused.get(key)
        self._refused[key] = Refusal(known.since if known else at, at, message)

    def refusal(self, key: str) -> Refusal | None:
        return self._refused.get(key)

    def accept(self, key: str) -> None:
        """The workload's pods all exist or are on their way: the refusal is over."""
        self._refused.pop(key, None)

    # --- visits -----------------------------------------------------------------------------

    def visited(self, key: str, signature: tuple[Any, ...] | None) -> None:
        if signature is None:
            self._visited.pop(key, None)
        else:
            self._visited[key] = signature

    def unchanged(self, key: str, signature: tuple[Any, ...] | None) -> bool:
        """Whether a workload looks as it did when last visited (never, without a
        signature: it depends on more than its facts)."""
        return signature is not None and self._visited.get(key) == signature

    def for_pass(self) -> Pass:
        """Read-only views for choosing this cycle's visits, taken after the settling (which
        replaces some of the collections they view)."""
        return Pass(
            self._writing, self._deferred, self._unwritten, self._refused, self._pods_of,
            self._visited,
        )  # fmt: skip

    # --- replicas lost with their node --------------------------------------------------------

    def lose(self, key: str, placed: Placed, lost: dict[int, str]) -> None:
        """A visit found these replicas of the placement lost (their node gone or taking no
        pods, their pod gone or never bound): the next plan places them again."""
        if lost:
            self._lost[key] = (placed, lost)
        else:
            self._lost.pop(key, None)

    def losses(self) -> dict[str, tuple[Placed, dict[int, str]]]:
        """The replicas to place again, by workload (a copy)."""
        return dict(self._lost)

    def repaired(self, key: str) -> None:
        self._lost.pop(key, None)
        self._outgrown.discard(key)

    def outgrow(self, key: str) -> None:
        """A service's scale up found no room on its pool: the next plan places it whole."""
        self._outgrown.add(key)

    def outgrown(self) -> set[str]:
        """The services to place whole this cycle, taken: a plan that finds them no pool
        gives the next cycle back to their pool (a repair), and so on in turn."""
        taken, self._outgrown = self._outgrown, set()
        return taken

    # --- a cycle's settling -----------------------------------------------------------------

    def settle_writes(self, world: World) -> None:
        """Forgets the status writes the cache now shows, and the unwritten statuses of
        decisions forgotten. Before placement: a workload whose waiting status was written
        in the last cycle is placed in this one (left in flight, it was decided a cycle
        later, outside its burst)."""
        for key in self._unwritten.keys() - self._placed.keys():  # in C: a burst holds 10,000
            self._unwritten.pop(key, None)
        workloads = world.workloads
        self._writing = {
            k: rv
            for k, rv in self._writing.items()
            if k in workloads and workloads[k].resource_version == rv
        }

    def settle_workloads(self, world: World, at: float, full: bool) -> None:
        """Forgets what is kept of deleted workloads, and write times older than
        PROGRESS_EVERY (only their age matters, and only that young)."""
        workloads = world.workloads
        if full or len(self._visited) > len(workloads):
            self._visited = {k: v for k, v in self._visited.items() if k in workloads}
        self._written_at = {k: t for k, t in self._written_at.items() if at - t < PROGRESS_EVERY}
        self._deferred &= workloads.keys()
        for key in list(self._holds):
            if key not in workloads:
                self._holds.pop(key, None)
        for key in list(self._lost):
            if key not in workloads:
                self._lost.pop(key, None)
        for key in list(self._refused):
            if key not in workloads:
                self._refused.pop(key, None)
