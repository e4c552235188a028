"""Pacing: when a decision or a status change is written, when placement is in a burst, when
a gang leaves its pool. Pure rules over times and statuses; the shell passes the clock in."""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from tessera import api
from tessera.world.facts import PodFacts


def progress_only(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """True when a new lifecycle status differs from the old only in counts and messages
    (same phase, same condition types, statuses and reasons): such a write can wait."""

    def shape(status: Mapping[str, Any]) -> Any:
        conds = status.get("conditions") or []
        return status.get("phase"), [(c["type"], c["status"], c["reason"]) for c in conds]

    return bool(before.get("phase")) and shape(before) == shape(after)


# A burst starts when more than BURST pods are placed within BURST_WINDOW seconds, in one
# cycle or over several. Pods, not Workloads: they are the API server's load (a stream of
# 13-21 gangs a second, 60-100 pods, never started one counted in Workloads, and each gang
# took its pods + 3 writes). Over a window, not per cycle: how many one cycle places
# depends on how long cycles take. It lasts while the window holds at least BURST_LASTS
# pods: a steady stream near the threshold then stays one burst (one status write per
# placement) instead of flipping between it and two writes each. Counted per cycle (at
# least 8), a stream of 60 pods a second in cycles 0.2 s apart (2-45 pods each) ended it
# whenever one cycle placed fewer, and the next cycle wrote its decisions at once (1.33 s).
# At a burst's start the window is not full yet: its pods are counted against the seconds
# since the first of them was seen pending (at least half the window), so a burst is known
# by its first large cycle. Counted against the whole window, a burst arriving at 110
# Workloads a second was known only once 64 had been placed, and the cycles before it wrote
# each decision at once: the first took 1.05 s for 64 (pods, then status writes, under a


BURST = 64
BURST_WINDOW = 1.0
BURST_LASTS = 16


def bursting(was: bool, placed: int, before: int, span: float = BURST_WINDOW) -> bool:
    """Whether a cycle that placed `placed` pods is (still) in a burst; `was`: the last
    placing cycle was; `before`: the pods the cycles of the BURST_WINDOW seconds before it
    placed; `span`: the seconds since the first of those pods was seen pending
    (RecentPlacements.span). In a burst each decision is written with its first lifecycle
    status."""
    seconds = min(max(span, BURST_WINDOW / 2), BURST_WINDOW)
    held = placed + before
    return held > BURST * seconds / BURST_WINDOW or (was and held >= BURST_LASTS)


class RecentPlacements:
    """The pods each placing cycle of the last BURST_WINDOW seconds placed (`bursting`'s
    `before`), by the monotonic time the cycle decided, with when the first of them was
    seen pending."""

    def __init__(self) -> None:
        self._cycles: deque[tuple[float, int, float]] = deque()

    def place(self, now: float, pods: int, since: float | None = None) -> int:
        """Records a cycle that placed `pods` at `now`, the first of them seen pending at
        `since` (`now` when not given); returns what the window held before."""
        while self._cycles and now - self._cycles[0][0] > BURST_WINDOW:
            self._cycles.popleft()
        before = sum(n for _, n, _ in self._cycles)
        self._cycles.append((now, pods, now if since is None else since))
        return before

    @property
    def placing(self) -> bool:
        """Whether the last cycle recorded placed pods."""
        return bool(self._cycles) and self._cycles[-1][1] > 0

    def span(self, now: float) -> float:
        """Seconds since the first pod the window holds was seen pending (0 if none)."""
        return now - min((s for _, n, s in self._cycles if n), default=now)


# A decision made outside a burst is written at once. One made in a burst goes out with the
# workload's first lifecycle status, and while the burst lasts that write waits, good news
# (Running) included, at most BURST_WRITE_AFTER seconds after the pods were sent: the API
# server's capacity goes to the burst's pod creates first. At 5,000 nodes the decisions
# written 60 s into a 10,000-Workload burst (the earlier rule) doubled the writes its pods
# competed with, and held placement back for the rest of the burst. Once the burst is over
# it is written when the pods run, or once they were sent FIRST_WRITE_AFTER seconds ago and
# the burst has been over for QUIET_AFTER_BURST: right after a burst the API server and
# kwok (or the kubelets) are busiest, and a decision written then, its pods not yet
# running, was followed by a second write when they ran (1,850 status writes for 1,000
# singles at 1,000 nodes, the first half of them within 10 s of the burst's end). The quiet
# is counted from the burst's end or from the last time the pods of one of its held
# decisions were seen running, whichever is later: while its pods still come up, the ones
# not running yet are starting, not stuck. At 5,000 nodes the pods of a burst of 10,000
# singles ran 100-130 s after their Workloads were created (the node agents' status writes
# queue behind the burst), most of them over 30 s after the burst's end; counted from the
# end alone, 5,800 decisions were written Placed and then Running (15,789 status writes).
# Bad news (unschedulable, refused, failed) never waits.
FIRST_WRITE_AFTER = 10.0
QUIET_AFTER_BURST = 30.0
BURST_WRITE_AFTER = 300.0
# A decision made outside a burst is held LONE_HOLD seconds before its first write and its
# Placed Event: a burst is known only once its first cycles placed half a window's pods
# (`bursting`), and the decisions of those cycles, written at once, cost a burst's first
# 15-25 Workloads two status writes and an Event each (2.03 writes a single in the default
# fleet's bursts, against pods + 1). Held, they join the burst when it is known within the
# hold; a lone Workload is written a second later (once, when its pods ran by then), with
# its Event. Bad news (an unschedulable, refused or failed pod) does not wait.
LONE_HOLD = BURST_WINDOW


_ROUTINE = frozenset({api.Phase.PLACED.value, api.Phase.RUNNING.value})


def first_write_due(
    age: float,
    burst: bool,
    phase: str = api.Phase.PLACED.value,
    news: bool = False,
    quiet: float = math.inf,
    held: bool = False,
) -> bool:
    """Whether a decision whose pods were sent `age` seconds ago is written now, with the
    lifecycle `phase` its pods imply; `news`: bad news the phase does not say (a pod
    unschedulable or refused); `burst`: placement is still in a burst; `quiet`: seconds
    since the last burst ended or, later, a held decision's pods were seen running (infinite
    when neither has happened: Bursts.first_write_due); `held`: a decision made outside a
    burst, in its LONE_HOLD (the placing phase releases it: ledger.Hold)."""
    if news or phase not in _ROUTINE or age >= BURST_WRITE_AFTER:
        return True
    if burst or held:
        return False
    if phase == api.Phase.RUNNING.value:
        return True
    return age >= FIRST_WRITE_AFTER and quiet >= QUIET_AFTER_BURST


# Seconds a pod this process sent is trusted to exist before the pod watch shows it.
def fallback_reason(
    limit: float,
    pods: Iterable[PodFacts],
    now: datetime,
    refused: tuple[float, str] | None = None,
) -> str | None:
    """Why a gang should leave its pool: one of its pods unschedulable, or refused by the API
    server (`refused`: for how many seconds, and what it said), for over `limit` seconds (0:
    never); else None."""
    if limit <= 0:
        return None
    for p in pods:
        since = p.unschedulable_since
        if since is not None and not p.node and (now - since).total_seconds() > limit:
            return f"pods unschedulable for over {limit}s: {p.unschedulable_message}"
    if refused is not None and refused[0] > limit:
        return f"pods refused for over {limit}s: {refused[1]}"
    return None


PROGRESS_EVERY = 30.0  # a workload's ready count alone is rewritten at most this often
# A gang still starting this many seconds after its decision has its ready count written
# before it runs, so that a stalled start shows how far it got.
SLOW_START = 300.0


class CountsWrite(enum.Enum):
    """When a lifecycle status may be written, as far as its counts are concerned."""

    NOW = "now"  # more than counts changed, or the counts are due
    WITH_RUNNING = "with-running"  # a starting gang's counts: they go with Running
    LATER = "later"  # counts alone, written less than PROGRESS_EVERY ago


def counts_write(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    placed_at: datetime | None,
    now: datetime,
    since_written: float,
) -> CountsWrite:
    """A change that moves only the counts (3/8 ready) is not written on its own at once.
    A starting gang's (phase Placed) go out with the write that says Running: a gang is all
    or none, so a start costs pods + 2 writes; not once the start is slow (SLOW_START
    seconds after the decision, or when the decision's time is unknown). Anyone else's
    (a running service healing, a slow start) at most every PROGRESS_EVERY seconds."""
    if not progress_only(before, after):
        return CountsWrite.NOW
    starting = after.get("phase") == api.Phase.PLACED.value
    if starting and placed_at is not None and (now - placed_at).total_seconds() < SLOW_START:
        return CountsWrite.WITH_RUNNING
    return CountsWrite.LATER if since_written < PROGRESS_EVERY else CountsWrite.NOW


class Bursts:
    """Whether placement is in a burst, when the last one ended, and the window of recent
    placing cycles that decides it; times are monotonic seconds the caller passes in."""

    def __init__(self) -> None:
        self.active = False
        self.started = -math.inf
        self.ended = -math.inf
        self.last_run = -math.inf  # when a held decision's pods were last seen running
        self.window = RecentPlacements()

    def placed(self, at: float, pods: int, since: float | None = None) -> bool:
        """Records a cycle that placed `pods` at `at` (the first of them seen pending at
        `since`); returns whether placement is now in a burst."""
        before = self.window.place(at, pods, since)
        burst = bursting(self.active, pods, before, self.window.span(at))
        if self.active and not burst:
            self.ended = at
        elif burst and not self.active:
            self.started = at
        self.active = burst
        return burst

    def lone_fate(self, decided: float, at: float) -> bool | None:
        """A decision made outside a burst at `decided`, at `at`: True when it is due (its
        first write and its Placed Event), False when a burst began since (it is one of the
        burst's: no Event, written as they are), None while it is held (LONE_HOLD)."""
        if self.active or self.started > decided:
            return False
        return True if at - decided >= LONE_HOLD else None

    @property
    def placing(self) -> bool:
        """Whether the last cycle recorded placed pods."""
        return self.window.placing

    def ran(self, at: float) -> None:
        """Records that a held decision's pods were seen running at `at`: the burst's pods
        still come up, so the quiet after it starts again."""
        self.last_run = max(self.last_run, at)

    @property
    def state(self) -> tuple[bool, float, float] | tuple[bool]:
        """What first_write_due reads of the bursts besides the times: in a burst, only
        that it is one (the quiet after it counts once it is over)."""
        return (True,) if self.active else (False, self.ended, self.last_run)

    def first_write_due(
        self,
        at: float,
        sent: float,
        phase: str = api.Phase.PLACED.value,
        news: bool = False,
        held: bool = False,
    ) -> bool:
        """Whether an unwritten decision whose pods were sent at `sent` is due at `at`."""
        quiet = at - max(self.ended, self.last_run)
        return first_write_due(at - sent, self.active, phase, news, quiet, held)
