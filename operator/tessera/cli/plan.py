"""`tessera plan -f workload.yaml`: where a Workload would go if it were created now, read-only.
The manifest is checked by the API server itself (a server-side dry-run create: its schema and
CEL rules, the admission message), then planned over the live World with the operator's own
code, behind the workloads already waiting."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tessera import api, placement
from tessera.cli.live import BAD, NO, OK, Failed, add_output, connect, emit, guarded, world
from tessera.controller import collector
from tessera.errors import ApiError, ClusterUnreachable
from tessera.placement.explain import hours
from tessera.world.facts import TERMINAL, validation_message
from tessera.world.snapshot import World

EXAMPLES = """\
examples:
  tessera plan -f train.yaml             where train.yaml would go now, and why
  kubectl get awl train -o yaml | tessera plan -f -
  tessera plan -f train.yaml -o json     for scripts: wouldPlace, pool, candidates, expected

exit codes: 0 it would be placed now, 1 it would wait, 2 bad input (the API server's message)
or no cluster. Nothing is created: the manifest goes to the API server as a dry run."""


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    plan = sub.add_parser(
        "plan",
        parents=[common],
        help="where a workload would be placed now (read-only what-if)",
        description="Where a Workload would be placed if it were created now, every pool's "
        "score and reasons, and, when none has room, when one is expected to.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    plan.add_argument(
        "-f", "--filename", required=True, help="the Workload manifest (YAML or JSON; - for stdin)"
    )
    plan.add_argument(
        "-n",
        "--namespace",
        default="default",
        help="namespace when the manifest names none (default: %(default)s)",
    )
    add_output(plan)
    plan.set_defaults(func=guarded(_plan))


# --- reading the manifest ---------------------------------------------------------------


def parse_manifest(text: str, source: str = "-") -> dict[str, Any]:
    """The one Workload a manifest holds; Failed (exit 2) for anything else."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise Failed(f"{source}: not YAML: {err}") from err
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise Failed(f"{source}: expected one Workload manifest, found {len(docs)} documents")
    doc: dict[str, Any] = docs[0]
    kind, version = doc.get("kind"), doc.get("apiVersion")
    if kind != "Workload" or version != api.API_VERSION:
        raise Failed(f"{source}: expected kind Workload, {api.API_VERSION}; got {kind}, {version}")
    if not isinstance(doc.get("metadata", {}), dict) or not isinstance(doc.get("spec"), dict):
        raise Failed(f"{source}: a Workload needs metadata and a spec")
    return doc


def read_manifest(path: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise Failed(f"cannot read {path}: {err.strerror or err}") from err
    return parse_manifest(text, "stdin" if path == "-" else path)


def dry_run_body(doc: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """What the dry-run create sends: the manifest under a generated name (a Workload of the
    same name may exist: planning it again is no conflict), status left out."""
    meta = dict(doc.get("metadata") or {})
    name = str(meta.pop("name", "") or meta.get("generateName") or "plan")
    for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"):
        meta.pop(key, None)
    meta["generateName"] = f"{name[:40].rstrip('-')}-"
    meta["namespace"] = namespace
    return {
        "apiVersion": api.API_VERSION,
        "kind": "Workload",
        "metadata": meta,
        "spec": doc.get("spec"),
    }


def admitted_spec(kube: Any, doc: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """The spec as the API server would store it (defaults applied), or Failed with its
    refusal (its schema and CEL messages) as the admission message."""
    path = f"/apis/{api.GROUP}/{api.VERSION}/namespaces/{namespace}/workloads"
    query = {"dryRun": "All", "fieldValidation": "Strict"}
    try:
        answer = kube.request("POST", path, dry_run_body(doc, namespace), query)
    except ApiError as err:
        if err.refusal:
            raise Failed(f"the API server refuses this Workload: {err.message}") from err
        raise Failed(str(err)) from err
    except ClusterUnreachable as err:
        raise Failed(str(err)) from err
    spec: dict[str, Any] = answer.get("spec") or dict(doc.get("spec") or {})
    return spec


def parsed_spec(spec: Mapping[str, Any]) -> api.WorkloadSpec:
    """The operator's own reading of the spec (as tessera.controller.specs does): a spec the
    API server takes but the models refuse (CRDs of another version) is bad input too."""
    try:
        return api.WorkloadSpec.model_validate(spec)
    except ValidationError as err:
        raise Failed(f"invalid spec: {validation_message(err)}") from err


# --- planning over the live World -------------------------------------------------------


def queue(world: World, now: datetime, leave_out: str = "") -> list[placement.PendingWorkload]:
    """The workloads waiting for a pool, as the controller's placing phase plans them
    (tessera.controller.placing); specs the models refuse are left out, and `leave_out`."""
    out = []
    for key, facts in sorted(world.waiting().items()):
        if key == leave_out:
            continue
        try:
            spec = api.WorkloadSpec.model_validate(facts.spec)
        except ValidationError:
            continue
        out.append(world.pending(facts, spec, now))
    return out


def what_if(world: World, target: placement.PendingWorkload, now: datetime) -> placement.Decision:
    """The decision for `target` in a plan over the live World, behind the workloads already
    waiting (its own waiting self replaced), every pool listed."""
    pending = [*queue(world, now, leave_out=target.key), target]
    with collector.paused():  # as the operator plans
        decisions = placement.plan(pending, world.snapshot(), now, shown=None)
    return next(d for d in decisions if (d.namespace, d.name) == (target.namespace, target.name))


@dataclass(frozen=True)
class Expected:
    """When a pool is expected to have room for a waiting gang, from the running work that
    says when it ends (status.expectedFinish, from its estimatedDuration)."""

    pool: str | None = None
    at: datetime | None = None
    finishing: tuple[str, ...] = ()  # the workloads whose end makes the room
    timed: int = 0  # running workloads on the feasible pools that say when they end
    room_now: tuple[str, ...] = ()  # feasible pools with room now, taken by work ahead

    @property
    def message(self) -> str:
        if self.pool is not None and self.at is not None:
            who = ", ".join(self.finishing)
            when = f" (when {who} is expected to finish)" if who else ""
            return f"expected room on {self.pool} at {self.at:%Y-%m-%dT%H:%M:%SZ}{when}"
        if self.room_now:
            return (
                f"{', '.join(self.room_now)} has room now, but the workloads waiting ahead "
                "take it first"
            )
        if not self.timed:
            return "no running work on the feasible pools says when it ends (no estimatedDuration)"
        return (
            f"the {self.timed} running workload(s) on the feasible pools that say when they "
            "end do not free enough room"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "at": self.at.strftime("%Y-%m-%dT%H:%M:%SZ") if self.at else None,
            "finishing": list(self.finishing),
            "message": self.message,
        }


def finishing(world: World) -> dict[tuple[str, datetime], list[str]]:
    """The placed workloads that say when they end, by (pool, expected end)."""
    out: dict[tuple[str, datetime], list[str]] = {}
    for key, facts in sorted(world.workloads.items()):
        if facts.status.get("phase") in TERMINAL:
            continue
        placed = world.placement_of(key)
        if placed is not None and placed.ends_at is not None:
            out.setdefault((placed.pool, placed.ends_at), []).append(key)
    return out


def expected_room(
    pools: Iterable[placement.PoolState],
    feasible: Iterable[str],
    count: int,
    replicas: int,
    now: datetime,
    ends: Mapping[tuple[str, datetime], Sequence[str]],
) -> Expected:
    """The soonest a feasible pool has room for `replicas` pods of `count` devices, as the
    releases in the snapshot (the running work's expected ends) make it: earliest_fit over
    the pool's ready nodes. The work waiting ahead is not counted."""
    names = set(feasible)
    best: Expected | None = None
    room_now: list[str] = []
    for pool in pools:
        if pool.name not in names:
            continue
        ready = [n for n in pool.nodes if n.ready]
        free = {n.name: n.free for n in ready}
        if placement.earliest_fit(free, (), count, replicas) == 0.0:
            room_now.append(pool.name)
            continue
        releases = sorted((r.at, n.name, r.devices) for n in ready for r in n.releases)
        timeline = [(max((at - now).total_seconds(), 0.0), n, d) for at, n, d in releases]
        seconds = placement.earliest_fit(free, timeline, count, replicas, presorted=True)
        if seconds is None:
            continue
        at = next(r[0] for r, t in zip(releases, timeline, strict=True) if t[0] == seconds)
        if best is None or best.at is None or at < best.at:
            best = Expected(pool.name, at, tuple(ends.get((pool.name, at), ())))
    timed = sum(len(keys) for (pool_name, _), keys in ends.items() if pool_name in names)
    if best is None:
        return Expected(timed=timed, room_now=tuple(room_now))
    return Expected(best.pool, best.at, best.finishing, timed)


# --- output -----------------------------------------------------------------------------


def exit_code(decision: placement.Decision) -> int:
    return OK if decision.placed else NO


def headline(decision: placement.Decision) -> str:
    if decision.placed:
        return (
            f"would be placed now on {decision.pool} ({decision.accelerator}), "
            f"score {decision.score or 0:.1f}"
        )
    return f"would wait: {decision.message}"


def result(key: str, decision: placement.Decision, expected: Expected | None) -> dict[str, Any]:
    """What `-o yaml|json` prints."""
    return {
        "workload": key,
        "wouldPlace": decision.placed,
        "pool": decision.pool,
        "accelerator": decision.accelerator,
        "score": decision.score,
        "nodes": list(decision.nodes),
        "message": decision.message,
        "candidates": [c.model_dump(by_alias=True, mode="json") for c in decision.candidates],
        "expected": expected.as_dict() if expected else None,
    }


def considered(decision: placement.Decision, pools: int) -> str:
    """How many pools the table lists, of how many."""
    n = len(decision.candidates)
    if n >= pools:
        return f"every pool considered ({n}), best first:"
    return (
        f"{n} of {pools} pools considered, best first (the workload's own pools, vendors "
        "or models leave out the rest):"
    )


def human(key: str, decision: placement.Decision, expected: Expected | None, pools: int = 0) -> str:
    lines = [f"{key}: {headline(decision)}"]
    if decision.placed and decision.runtime is not None:
        lines.append(f"expected to run {hours(decision.runtime)} there")
    table = placement.table(decision.candidates)
    lines += ["", considered(decision, pools), table]
    if expected is not None:
        lines += ["", expected.message]
    return "\n".join(lines)


def plan_live(
    world: World, target: placement.PendingWorkload, now: datetime
) -> tuple[placement.Decision, Expected | None]:
    """The what-if decision, and for a waiting one when a pool is expected to have room."""
    decision = what_if(world, target, now)
    if decision.placed:
        return decision, None
    feasible = [c.pool for c in decision.candidates if c.feasible]
    need = target.spec.accelerator
    snapshot = world.snapshot()
    expected = expected_room(
        snapshot.pools, feasible, need.count, target.spec.replicas, now, finishing(world)
    )
    return decision, expected


def _plan(args: argparse.Namespace) -> int:
    doc = read_manifest(args.filename)
    meta = doc.get("metadata") or {}
    namespace = str(meta.get("namespace") or args.namespace)
    kube = connect(args)
    spec = parsed_spec(admitted_spec(kube, doc, namespace))
    now = datetime.now(UTC)
    name = str(meta.get("name") or "(new)")
    target = placement.PendingWorkload(
        namespace=namespace, name=name, spec=spec, created_at=now, excluded_pools={}
    )
    live = world(kube)
    decision, expected = plan_live(live, target, now)
    key = f"{namespace}/{name}"
    pools = len(live.pool_specs)
    emit(args, result(key, decision, expected), lambda: human(key, decision, expected, pools))
    return exit_code(decision)


__all__ = ["BAD", "NO", "OK", "register"]
