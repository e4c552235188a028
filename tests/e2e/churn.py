"""Seeded churn against a running operator, and the invariants that must hold through it.

The driver creates and deletes Workloads and breaks and repairs the fleet under them (nodes
deleted and re-added, tainted, cordoned; pools drained and deleted; the operator SIGKILLed
and restarted). After every step, and about every second between steps, the sampler reads
the nodes, pods and Workloads and checks what a user relies on whatever happens:

1. capacity: no node has more devices requested by the pods bound to it than it has;
2. single placement: a replica of a Workload runs once (twice only while migrating);
3. nothing lost: every Workload created and not deleted still exists;
4. readable: every Workload is Running where its status says, waiting with a reason,
   finished, or on its way to one of those for at most GRACE_SECONDS; and no service's
   status claims more Ready replicas than there are for longer than STALE_SECONDS.

The seed and the driver's own bookkeeping choose each step: create or delete a Workload (of
which shape), inject which fault for how many steps, repair which. Two choices also look at
the cluster: node and pool faults aim mostly at what holds pods (as last sampled), and a
deleted pool is re-created only once it is gone. So a seed replays the same run as far as
the operator places the same way; every step is logged either way. Every fault kind can be
switched off on its own (ChurnConfig.faults).
tests/e2e/test_churn.py runs a short churn in CI, hack/soak.py a long one. Not a test module.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from types import TracebackType
from typing import Any

from churn_checks import (
    Finding,
    Reader,
    Snapshot,
    WorkloadFacts,
    lost,
    over_capacity,
    overclaimed,
    placed_twice,
    ready_replicas,
    summary,
    unsettled,
)
from operator_harness import (
    Kubectl,
    Operator,
    clear_workloads,
    drop_pool,
    make_pool,
    pool_nodes,
    set_draining,
    wait_for,
    workload,
)

# A Workload may be between readable states (placed, pods starting, a replica being replaced)
# for this long; longer, and a user reading its status is told something untrue or nothing.
GRACE_SECONDS = 60.0
# The operator creates a placement's pods first and writes the decision (Migrating included)
# after, so for a moment a migrating replica has two pods and a status that does not say so
# yet. A second pod counts as a double placement once it has been seen this long.
CONFIRM_SECONDS = 2.0
# A service whose status says every replica is Ready while fewer are (one ran on a node that
# is gone, or never started) is not in transit: it tells the user something false. That may
# last only as long as the operator takes to notice (a watch event, a cycle; the Ready
# condition's change is written at once, not paced), well under this.
STALE_SECONDS = 30.0
SAMPLE_EVERY = 1.0  # seconds between samples while the driver waits for its next step

MAINTENANCE_TAINT = "example.com/maintenance"
RUNTIME_ANNOTATION = "tessera.dev/simulated-runtime-ms"  # kwok completes such batch pods


class Fault(StrEnum):
    """The kinds of trouble the driver makes; each is injected and, steps later, repaired."""

    NODE_LOSS = "node-loss"  # kubectl delete node; re-added from the same manifest
    TAINT = "taint"  # example.com/maintenance, NoSchedule or NoExecute; removed
    CORDON = "cordon"  # kubectl cordon; uncordon
    DRAIN = "drain"  # the pool's spec.draining; undrained
    POOL_LOSS = "pool-loss"  # kubectl delete acp; re-created with the same spec
    OPERATOR_KILL = "operator-kill"  # SIGKILL; started again


ALL_FAULTS = frozenset(Fault)
# How many steps each fault stays before it is repaired, drawn at injection (about 2 s a
# step). Nodes may stay lost, tainted or cordoned for longer than GRACE_SECONDS (and than
# podgc's quarantine, 40 s and more), as maintenance does: what waits for them to come back
# instead of going elsewhere then shows. The operator is never down long.
HOLD_STEPS = {
    Fault.NODE_LOSS: (20, 45),
    Fault.TAINT: (5, 40),
    Fault.CORDON: (5, 40),
    Fault.DRAIN: (2, 12),
    Fault.POOL_LOSS: (2, 12),
    Fault.OPERATOR_KILL: (1, 2),
}
# Faults aimed mostly at what holds pods; a taint or a cordon matters as much on a free node
# (the next placement must avoid it), so those are aimed anywhere.
AIMED = frozenset({Fault.NODE_LOSS, Fault.DRAIN, Fault.POOL_LOSS})


@dataclass(frozen=True)
class ChurnConfig:
    """How long and how hard to churn. The defaults are gentle: a 2-core machine runs the
    whole control plane, kwok, the operator and this driver."""

    seed: int
    seconds: float  # of churn; restoring and settling come after
    faults: frozenset[Fault] = ALL_FAULTS
    pools: int = 3
    nodes_per_pool: int = 4
    devices_per_node: int = 8
    step_gap: tuple[float, float] = (1.0, 3.0)  # seconds from one step's start to the next
    warm_up: int = 4  # the first steps create Workloads, so the first faults hit something
    max_workloads: int = 8  # created and not deleted, at once
    max_broken: int = 4  # faults outstanding at once
    hold_steps: Mapping[Fault, tuple[int, int]] = field(default_factory=lambda: dict(HOLD_STEPS))
    restore_seconds: float = 60  # at the end, how long a deleted pool has to be gone
    settle_seconds: float = 120  # after restoring, how long every Workload has to settle
    grace_seconds: float = GRACE_SECONDS


# --- the sampler: invariants over time -------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """A step of the churn, as violations name it, with the faults in place after it."""

    index: int
    text: str
    faults: tuple[str, ...] = ()


@dataclass(frozen=True)
class Violation:
    step: Step  # the last step before the sample that saw it
    at: float
    finding: Finding

    def __str__(self) -> str:
        f, step = self.finding, self.step
        faults = f" [faults in place: {'; '.join(step.faults)}]" if step.faults else ""
        return (
            f"step {step.index} ({step.text}), +{self.at:.1f}s{faults}: "
            f"[{f.invariant}] {f.subject}: {f.detail}"
        )


class Sampler:
    """Checks the invariants on every snapshot and remembers what it needs across them: how
    long each Workload has been in transit (invariant 4 allows a grace period), how long a
    second pod has been seen (CONFIRM_SECONDS), which violations are already reported (one
    report for each time one starts, not one a sample), and each service's Ready shortfalls."""

    def __init__(self, reader: Reader, namespace: str, grace: float = GRACE_SECONDS) -> None:
        self.reader, self.namespace, self.grace = reader, namespace, grace
        self.violations: list[Violation] = []
        self.samples = 0
        self.last: Snapshot | None = None
        self._transit_since: dict[str, float] = {}
        self._claim_since: dict[str, float] = {}
        self._suspect_since: dict[tuple[str, str], float] = {}
        self._active: set[tuple[str, str]] = set()
        self._ready_once: set[str] = set()
        self._short_since: dict[str, float] = {}
        self.longest_shortfall: dict[str, float] = {}  # service: seconds

    def check(self, step: Step, at: float, expected: set[str], final: bool = False) -> bool:
        """Samples once; records new violations; True when every Workload is settled. At the
        end (final) every violation present is reported again and transit has no grace."""
        snap = self.reader.snapshot(at)
        self.samples += 1
        self.last = snap
        found = over_capacity(snap) + self._confirmed(placed_twice(snap), at, final)
        found += lost(snap, expected)
        found += self._readable(snap, at, final)
        self._track_shortfalls(snap, expected)
        fresh = found if final else [f for f in found if f.key not in self._active]
        self._active = {f.key for f in found}
        self.violations += [Violation(step, at, f) for f in fresh]
        return all(unsettled(w, snap) is None for w in snap.workloads.values())

    def new_since(self, count: int) -> list[Violation]:
        return self.violations[count:]

    def _confirmed(self, found: list[Finding], at: float, final: bool) -> list[Finding]:
        seen = {f.key: self._suspect_since.get(f.key, at) for f in found}
        self._suspect_since = seen
        return [f for f in found if final or at - seen[f.key] >= CONFIRM_SECONDS]

    def _readable(self, snap: Snapshot, at: float, final: bool) -> list[Finding]:
        """Invariant 4: a Workload in transit longer than the grace, or whose status claims
        more Ready replicas than there are for longer than STALE_SECONDS (one finding a
        Workload; the claim first)."""
        found = []
        for name, w in sorted(snap.workloads.items()):
            claim, claimed_for = self._lasting(self._claim_since, name, overclaimed(w, snap), at)
            doing, doing_for = self._lasting(self._transit_since, name, unsettled(w, snap), at)
            if claim is not None and (final or claimed_for > STALE_SECONDS):
                found.append(self._unreadable(w, claim, claimed_for, STALE_SECONDS, final))
            elif doing is not None and (final or doing_for > self.grace):
                found.append(self._unreadable(w, doing, doing_for, self.grace, final))
        return found

    def _unreadable(
        self, w: WorkloadFacts, what: str, seconds: float, limit: float, final: bool
    ) -> Finding:
        bound = "at the end" if final else f"over {limit:.0f}s"
        detail = f"{what}, for {seconds:.0f}s ({bound}); status {w.shown()}"
        return Finding("readable", f"workload {self.namespace}/{w.name}", detail)

    @staticmethod
    def _lasting(
        since: dict[str, float], name: str, what: str | None, at: float
    ) -> tuple[str | None, float]:
        """`what` and for how long it has held, by `since` (kept up to date here)."""
        if what is None:
            since.pop(name, None)
            return None, 0.0
        return what, at - since.setdefault(name, at)

    def _track_shortfalls(self, snap: Snapshot, expected: set[str]) -> None:
        """Spans in which a service had fewer Ready replicas than it wants, counted from its
        first time fully Ready; a span still open when the service is deleted ends there."""
        for name in list(self._short_since):
            if name not in expected or name not in snap.workloads:
                self._end_shortfall(name, snap.at)
        for name, w in snap.workloads.items():
            if not w.service or name not in expected:
                continue
            if ready_replicas(w, snap) >= w.replicas:
                self._ready_once.add(name)
                self._end_shortfall(name, snap.at)
            elif name in self._ready_once:
                self._short_since.setdefault(name, snap.at)

    def _end_shortfall(self, name: str, at: float) -> None:
        since = self._short_since.pop(name, None)
        if since is not None:
            self.longest_shortfall[name] = max(self.longest_shortfall.get(name, 0), at - since)

    def finish(self, at: float) -> None:
        """Ends every open shortfall span at `at`."""
        for name in list(self._short_since):
            self._end_shortfall(name, at)


# --- the fleet: pools and nodes, broken and repaired ------------------------------------------


class Fleet:
    """The churn's pools and their kwok nodes, created with make_pool and broken and repaired
    with kubectl. Keeps each pool's spec as the API server returned it and each node's
    manifest, so a deleted one comes back as it was."""

    def __init__(self, k: Kubectl, prefix: str, pools: int, nodes: int, devices: int) -> None:
        self.k, self.nodes_per_pool, self.devices = k, nodes, devices
        self.pools = [f"{prefix}-{i}" for i in range(pools)]
        self.node_manifests = {
            n["metadata"]["name"]: n for p in self.pools for n in pool_nodes(p, nodes, devices)
        }
        self.pool_manifests: dict[str, dict[str, Any]] = {}

    @property
    def nodes(self) -> list[str]:
        return list(self.node_manifests)

    def create(self, timeout: float = 120) -> None:
        """Every pool and node, and waits until the operator reports each pool's nodes Ready
        (which also says the operator is up and watching)."""
        for pool in self.pools:
            make_pool(self.k, pool, self.nodes_per_pool, self.devices)
            spec = self.k.get("acp", pool, cluster_scoped=True)["spec"]
            self.pool_manifests[pool] = {
                "apiVersion": "tessera.dev/v1alpha1",
                "kind": "AcceleratorPool",
                "metadata": {"name": pool},
                "spec": spec,
            }
        wait_for("the churn's pools Ready", self._pools_ready, timeout, every=1)

    def _pools_ready(self) -> bool:
        for pool in self.pools:
            status = self.k.get("acp", pool, cluster_scoped=True).get("status") or {}
            if status.get("readyNodes") != self.nodes_per_pool:
                return False
        return True

    def delete_node(self, node: str) -> None:
        self.k("delete", "node", node, "--timeout=60s")

    def restore_node(self, node: str) -> None:
        self.k.apply(self.node_manifests[node])

    def taint(self, node: str, effect: str) -> None:
        self.k("taint", "node", node, f"{MAINTENANCE_TAINT}=churn:{effect}", "--overwrite")

    def untaint(self, node: str) -> None:
        self.k("taint", "node", node, f"{MAINTENANCE_TAINT}-")

    def cordon(self, node: str, on: bool) -> None:
        self.k("cordon" if on else "uncordon", node)

    def drain(self, pool: str, on: bool) -> None:
        set_draining(self.k, pool, on)

    def delete_pool(self, pool: str) -> None:
        self.k("delete", "acp", pool, "--wait=false")

    def pool_lingers(self, pool: str) -> str | None:
        """Why a deleted pool cannot be re-created yet: it is still being deleted (a finalizer
        holds it while work runs on it), and applying to it would change it, not bring it
        back. None once it is gone."""
        got = self.k("get", "acp", pool, "-o", "json", check=False)
        if got.returncode != 0:
            return None
        meta = json.loads(got.stdout)["metadata"]
        if not meta.get("deletionTimestamp"):
            return None
        return f"pool {pool} is still being deleted (finalizers {meta.get('finalizers')})"

    def restore_pool(self, pool: str) -> None:
        self.k.apply(self.pool_manifests[pool])

    def drop(self) -> None:
        for pool in self.pools:
            drop_pool(self.k, pool, self.nodes_per_pool)


# --- the driver -------------------------------------------------------------------------------


@dataclass
class Broken:
    """A fault in place: what, on what, and how to undo it."""

    fault: Fault
    target: str
    since_step: int
    due_step: int  # repaired at this step, or as soon after as it can be
    repair: Callable[[], None]
    text: str
    blocked: Callable[[], str | None]  # why it cannot be repaired yet; None when it can


@dataclass
class ChurnResult:
    """What a churn did and found; `violations` empty is the pass."""

    seed: int
    seconds: float  # of churn asked for
    duration: float  # wall time of the whole run: set-up, churn, restore, settle, final check
    steps: int
    faults: dict[str, int]  # injections by kind
    actions: dict[str, int]  # every step by kind
    violations: list[str]
    longest_shortfall: float  # seconds, over every service
    longest_shortfall_service: str | None
    samples: int
    settled: bool  # every Workload settled after the churn, before the bound
    unrestored: list[str]  # faults the end could not undo (a pool a finalizer still holds)
    log: list[str] = field(repr=False)

    def to_json(self, first: int = 50) -> dict[str, Any]:
        """The result as soak.json holds it: the log left out, the first violations kept."""
        return {
            "seed": self.seed,
            "seconds": self.seconds,
            "durationSeconds": round(self.duration, 1),
            "steps": self.steps,
            "faults": self.faults,
            "actions": self.actions,
            "samples": self.samples,
            "settled": self.settled,
            "unrestored": self.unrestored,
            "violations": {"count": len(self.violations), "first": self.violations[:first]},
            "longestServiceShortfall": {
                "seconds": round(self.longest_shortfall, 1),
                "service": self.longest_shortfall_service,
            },
        }


def say(line: str) -> None:
    print(line, flush=True)


def unblocked() -> str | None:
    """Nothing stands in the way of the repair (all but a deleted pool's)."""
    return None


class Churn:
    """Drives one churn: `with Churn(k, operator, config) as churn: result = churn.run()`.

    Entering creates the fleet; run() churns for config.seconds, then restores everything,
    waits (bounded) for every Workload to settle and checks the invariants a last time;
    leaving deletes the Workloads and the fleet. `operator` must be started; the churn kills
    and restarts it, and leaves it running.
    """

    def __init__(
        self,
        k: Kubectl,
        operator: Operator,
        config: ChurnConfig,
        log: Callable[[str], None] = say,
    ) -> None:
        self.k, self.operator, self.config, self._print = k, operator, config, log
        self.rng = random.Random(config.seed)
        c = config
        self.fleet = Fleet(k, k.ns, c.pools, c.nodes_per_pool, c.devices_per_node)
        reader = Reader(operator.kubeconfig, k.ns, self.fleet.pools)
        self.sampler = Sampler(reader, k.ns, c.grace_seconds)
        self.live: dict[str, str] = {}  # Workloads created and not deleted, and their shape
        self.broken: dict[str, Broken] = {}  # by target
        self.unrestored: list[str] = []  # faults the end could not repair, and why
        self.injected: Counter[Fault] = Counter({f: 0 for f in Fault if f in c.faults})
        self.actions: Counter[str] = Counter()
        self.lines: list[str] = []
        self.step = Step(0, "set-up")
        self.made = 0
        self.started = time.monotonic()

    def __enter__(self) -> Churn:
        c = self.config
        faults = ",".join(sorted(c.faults)) or "none"
        self.log(f"churn seed {c.seed}, {c.seconds:.0f}s, faults {faults}, namespace {self.k.ns}")
        try:
            self.fleet.create()
        except BaseException:
            self.fleet.drop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if kind is not None:  # the run stopped midway: undo what it can, quietly
                for broken in list(self.broken.values()):
                    with contextlib.suppress(Exception):
                        if broken.blocked() is None:
                            broken.repair()
            clear_workloads(self.k)  # before the nodes go, so no pod is left on a lost node
        finally:
            self.fleet.drop()

    # --- the run --------------------------------------------------------------------------

    def run(self) -> ChurnResult:
        """Churns for config.seconds, sampling after every step and in between; then
        repairs every fault, waits for the Workloads to settle and checks a last time."""
        c = self.config
        self.started = time.monotonic()
        self._sample()
        end = self.started + c.seconds
        while time.monotonic() < end:
            next_step = time.monotonic() + self.rng.uniform(*c.step_gap)
            self._take_step()
            self._sample_until(next_step)
        self._restore()
        settled = self._settle()
        self.step = Step(self.step.index, "final check, after restoring and settling")
        self._note_faults()  # none, unless a pool could not be restored
        self._sample(final=True)
        self.sampler.finish(self._now())
        longest = max(self.sampler.longest_shortfall.items(), key=lambda kv: kv[1], default=None)
        result = ChurnResult(
            seed=c.seed,
            seconds=c.seconds,
            duration=self._now(),
            steps=self.step.index,
            faults={str(f): n for f, n in self.injected.items()},
            actions=dict(sorted(self.actions.items())),
            violations=[str(v) for v in self.sampler.violations],
            longest_shortfall=longest[1] if longest else 0.0,
            longest_shortfall_service=longest[0] if longest else None,
            samples=self.sampler.samples,
            settled=settled,
            unrestored=self.unrestored,
            log=self.lines,
        )
        self.log(
            f"churn done: {result.steps} steps, faults {result.faults}, "
            f"{len(result.violations)} violations, longest service shortfall "
            f"{result.longest_shortfall:.1f}s ({result.longest_shortfall_service})"
        )
        return result

    def _now(self) -> float:
        return time.monotonic() - self.started

    def log(self, line: str) -> None:
        text = f"[churn +{self._now():6.1f}s] {line}"
        self.lines.append(text)
        self._print(text)

    def _sample(self, final: bool = False) -> bool:
        before = len(self.sampler.violations)
        settled = self.sampler.check(self.step, self._now(), set(self.live), final)
        for violation in self.sampler.new_since(before):
            self.log(f"VIOLATION {violation}")
        return settled

    def _sample_until(self, until: float) -> None:
        """Samples now and about every SAMPLE_EVERY seconds until `until`: the pacing of
        the steps, which the churn wants random, not a wait for a condition."""
        while True:
            self._sample()
            left = until - time.monotonic()
            if left <= 0:
                if self.sampler.last is not None:
                    self.log(f"  now: {summary(self.sampler.last)}")
                return
            time.sleep(min(SAMPLE_EVERY, left))

    def _settle(self) -> bool:
        """Waits, sampling, until every Workload is settled; False at the bound."""
        deadline = time.monotonic() + self.config.settle_seconds
        while not self._sample():
            if time.monotonic() >= deadline:
                self.log(f"not every Workload settled within {self.config.settle_seconds:.0f}s")
                return False
            time.sleep(SAMPLE_EVERY)
        self.log("every Workload settled")
        return True

    def _restore(self) -> None:
        """Repairs every fault still in place: the operator first, then pools, then nodes.
        A pool still being deleted gets up to restore_seconds to go (sampling meanwhile);
        one that stays is left as it is and named in the result."""
        order = {Fault.OPERATOR_KILL: 0, Fault.POOL_LOSS: 1, Fault.DRAIN: 2, Fault.NODE_LOSS: 3}
        deadline = time.monotonic() + self.config.restore_seconds
        for broken in sorted(self.broken.values(), key=lambda b: order.get(b.fault, 4)):
            while (why := broken.blocked()) is not None and time.monotonic() < deadline:
                self._sample()
                time.sleep(SAMPLE_EVERY)
            if why is None:
                self._repair(broken, "restore")
            else:
                self.log(f"left as it is: '{broken.text}': {why}")
                self.unrestored.append(f"{broken.text}: {why}")

    # --- choosing and taking steps --------------------------------------------------------

    def _take_step(self) -> None:
        index = self.step.index + 1
        due = sorted((b.due_step, b.target) for b in self.broken.values() if b.due_step <= index)
        for _, target in due:
            broken = self.broken[target]
            why = broken.blocked()
            if why is None:
                self._repair(broken, "repair")
                return
            broken.due_step = index + 2
            self.log(f"repair of '{broken.text}' postponed: {why}")
        if index <= self.config.warm_up:
            self._create()
            return
        options: list[tuple[int, Callable[[], None]]] = []
        if len(self.live) < self.config.max_workloads:
            options.append((3, self._create))
        if self.live:
            options.append((1, self._delete))
        if len(self.broken) < self.config.max_broken and self._injectable():
            options.append((2, self._inject))
        if not options:  # nothing to create, delete or break: wait for a repair
            self._record("idle", "nothing to do this step")
            return
        weights = [w for w, _ in options]
        action = self.rng.choices([a for _, a in options], weights)[0]
        action()

    def _record(self, kind: str, text: str) -> None:
        self.step = Step(self.step.index + 1, f"{kind}: {text}", self.step.faults)
        self.actions[kind] += 1
        self.log(f"step {self.step.index}: {kind}: {text}")

    def _create(self) -> None:
        rng, name = self.rng, ""
        self.made += 1
        pools = self.fleet.pools
        if rng.random() < 0.5:
            name, replicas, count = f"svc-{self.made}", rng.randint(1, 3), rng.randint(1, 8)
            manifest = workload(name, replicas=replicas, count=count, restart="Always", pools=pools)
            text = f"service {name}: {replicas} x {count} devices"
        else:
            runtime = rng.randint(5, 30) * 1000
            name, replicas, count = f"job-{self.made}", rng.randint(1, 2), rng.randint(1, 8)
            manifest = workload(
                name,
                replicas=replicas,
                count=count,
                pools=pools,
                annotations={RUNTIME_ANNOTATION: str(runtime)},
            )
            text = f"batch {name}: {replicas} x {count} devices, {runtime / 1000:.0f}s"
        self._record("create-workload", text)
        self.k.apply(manifest)
        self.live[name] = text

    def _delete(self) -> None:
        name = self.rng.choice(sorted(self.live))
        self._record("delete-workload", self.live.pop(name))
        self.k("delete", "awl", name, "-n", self.k.ns, "--wait=false")

    def _targets(self, fault: Fault) -> list[str]:
        """What a fault can hit now: nothing already broken (one fault an object)."""
        if fault == Fault.OPERATOR_KILL:
            objects = ["operator"]
        elif fault in (Fault.DRAIN, Fault.POOL_LOSS):
            objects = self.fleet.pools
        else:
            objects = self.fleet.nodes
        return [o for o in objects if o not in self.broken]

    def _aim(self, targets: list[str]) -> list[str]:
        """Mostly the targets that hold live pods (a node under them, or their pool), as the
        last sample saw them: a fault on an empty node tests little. This is the one choice
        that looks at the cluster, so a seed replays the same kinds of steps, and the same
        targets as far as the operator places the same way."""
        snap = self.sampler.last
        if snap is None or self.rng.random() < 0.25:
            return targets
        held = {p.node for p in snap.pods if p.live} | {p.pool for p in snap.pods if p.live}
        return [t for t in targets if t in held] or targets

    def _injectable(self) -> list[Fault]:
        return [f for f in Fault if f in self.config.faults and self._targets(f)]

    def _inject(self) -> None:
        """A fault among those injected least so far, so a short run still tries each; the
        first round in Fault's order, the longest-lived first, so that even a short run has
        a node away (and one tainted or cordoned) for longer than the grace period."""
        faults = self._injectable()
        fewest = min(self.injected[f] for f in faults)
        least = [f for f in faults if self.injected[f] == fewest]
        fault = least[0] if fewest == 0 else self.rng.choice(least)
        targets = self._targets(fault)
        target = self.rng.choice(self._aim(targets) if fault in AIMED else targets)
        text, act, repair = self._fault(fault, target)
        hold = self.rng.randint(*self.config.hold_steps[fault])
        self.injected[fault] += 1
        self._record(str(fault), f"{text} (for {hold} steps)")
        act()
        blocked = (
            partial(self.fleet.pool_lingers, target) if fault == Fault.POOL_LOSS else unblocked
        )
        index = self.step.index
        self.broken[target] = Broken(fault, target, index, index + hold, repair, text, blocked)
        self._note_faults()

    def _fault(
        self, fault: Fault, target: str
    ) -> tuple[str, Callable[[], None], Callable[[], None]]:
        """What injecting `fault` on `target` is: its log text, the act, and its repair."""
        fleet = self.fleet
        if fault == Fault.NODE_LOSS:
            return (
                f"delete node {target}",
                partial(fleet.delete_node, target),
                partial(fleet.restore_node, target),
            )
        if fault == Fault.TAINT:
            effect = self.rng.choice(["NoSchedule", "NoExecute"])
            return (
                f"taint node {target} {MAINTENANCE_TAINT}:{effect}",
                partial(fleet.taint, target, effect),
                partial(fleet.untaint, target),
            )
        if fault == Fault.CORDON:
            return (
                f"cordon node {target}",
                partial(fleet.cordon, target, True),
                partial(fleet.cordon, target, False),
            )
        if fault == Fault.DRAIN:
            return (
                f"drain pool {target}",
                partial(fleet.drain, target, True),
                partial(fleet.drain, target, False),
            )
        if fault == Fault.POOL_LOSS:
            return (
                f"delete pool {target}",
                partial(fleet.delete_pool, target),
                partial(fleet.restore_pool, target),
            )
        return "SIGKILL the operator", self.operator.kill, self.operator.start

    def _repair(self, broken: Broken, why: str) -> None:
        self._record(f"{broken.fault}-repair", f"{why} after {broken.text}")
        broken.repair()
        del self.broken[broken.target]
        self._note_faults()

    def _note_faults(self) -> None:
        """Puts the faults now in place on the current step, for violations to name."""
        faults = tuple(f"{b.text} (since step {b.since_step})" for b in self.broken.values())
        self.step = Step(self.step.index, self.step.text, faults)
