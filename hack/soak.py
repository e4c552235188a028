"""`make soak`: the churn of tests/e2e/churn.py for minutes instead of a minute, then how fast
a service gets back a replica whose node was deleted, on a control plane and an operator of
its own. Writes bench/results/soak.json; exits 1 when an invariant broke (or the run failed).

The churn finds what breaks rarely; the node-loss measurement says how long a user waits in
the commonest loss, next to how long Kubernetes itself takes to notice it (podgc), since
before the operator replaced lost replicas itself that was the wait.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HACK = Path(__file__).resolve().parent
REPO = HACK.parent
sys.path.insert(0, str(HACK))
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.append(str(REPO / "bench"))  # appended: hack/ (and its `fleet`) stays first

from churn import ALL_FAULTS, Churn, ChurnConfig, Fault  # noqa: E402
from churn_checks import Reader, Snapshot  # noqa: E402
from operator_harness import (  # noqa: E402
    Kubectl,
    Operator,
    clear_workloads,
    drop_pool,
    install_crds,
    make_pool,
    namespace,
    pool_nodes,
    wait_for,
    workload,
)

import cluster as local_cluster  # noqa: E402  (hack/cluster.py)
import fleet_report  # noqa: E402  (bench/: the machine and the source a result came from)

RESULTS = REPO / "bench" / "results" / "soak.json"
FIRST_VIOLATIONS = 50  # kept in the results; the count is of all of them

# Node-loss recovery: a service of 3 replicas of 1 device on a pool of 4 one-device nodes, so
# each replica has a node of its own and one node is free to take a lost replica.
RECOVERY_NODES, RECOVERY_REPLICAS, REPETITIONS = 4, 3, 3
POLL_SECONDS = 0.2
GIVE_UP_SECONDS = 180.0
# kube-controller-manager's pod garbage collector (k8s.io/kubernetes pkg/controller/podgc,
# gc_controller.go, v1.37): every gcCheckPeriod it lists pods bound to nodes that no longer
# exist and quarantines those nodes for quarantineTime; the first pass after the quarantine
# that still finds the node gone force-deletes their pods. The first pass after the delete
# comes within a period, and each period starts when the last pass ended, so the pass two
# periods on is just past the quarantine: a pod of a deleted node goes 40 to 60 s after it
# when nothing else deletes it (47 s, three times out of three, on this project's machine).
PODGC_CHECK_PERIOD_SECONDS = 20
PODGC_QUARANTINE_SECONDS = 40


@dataclass(frozen=True)
class Loss:
    """One node deleted under a replica: seconds from the delete until a replica was Ready
    again elsewhere in the pool, and until the old pod was gone; None: not within
    GIVE_UP_SECONDS."""

    node: str
    replica: int
    replica_ready: float | None
    old_pod_gone: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "replica": self.replica,
            "replicaReadySeconds": _rounded(self.replica_ready),
            "oldPodGoneSeconds": _rounded(self.old_pod_gone),
        }


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 2)


def _took(seconds: float | None) -> str:
    return f"{seconds:.1f}s" if seconds is not None else f"not within {GIVE_UP_SECONDS:.0f}s"


def spread(values: Sequence[float | None]) -> dict[str, Any]:
    """Median, min, max and spread (max - min) of the measured values; the give-ups counted."""
    got = [v for v in values if v is not None]
    if not got:
        return {"median": None, "min": None, "max": None, "spread": None, "gaveUp": len(values)}
    return {
        "median": round(statistics.median(got), 2),
        "min": round(min(got), 2),
        "max": round(max(got), 2),
        "spread": round(max(got) - min(got), 2),
        "gaveUp": len(values) - len(got),
    }


# --- the churn ----------------------------------------------------------------------------------


def soak_churn(
    control_plane: local_cluster.Cluster, operator: Operator, config: ChurnConfig
) -> dict[str, Any]:
    """The churn in a namespace of its own; its result as JSON."""
    with namespace(control_plane, "soak") as k, Churn(k, operator, config) as driver:
        result = driver.run()
    return result.to_json(first=FIRST_VIOLATIONS)


# --- node-loss recovery -----------------------------------------------------------------------


def replica_ready_elsewhere(snap: Snapshot, replica: int, old_uid: str, lost_node: str) -> bool:
    """A pod of the replica other than the old one, Ready and Running on a node that exists."""
    return any(
        p.replica == replica
        and p.uid != old_uid
        and p.live
        and p.ready
        and p.phase == "Running"
        and p.node in snap.nodes
        and p.node != lost_node
        for p in snap.pods
    )


def serving(reader: Reader) -> Snapshot | None:
    """The snapshot once every replica runs Ready on its own existing node, else None."""
    snap = reader.snapshot(0)
    ready = [p for p in snap.pods if p.live and p.ready and p.node in snap.nodes]
    replicas = {p.replica for p in ready}
    if len(replicas) == RECOVERY_REPLICAS and len({p.node for p in ready}) == len(ready):
        return snap
    return None


def lose_a_node(k: Kubectl, reader: Reader, snap: Snapshot, replica: int) -> Loss:
    """Deletes the node under the replica and polls until it is Ready again elsewhere and
    the old pod is gone (or GIVE_UP_SECONDS); then puts the node back."""
    old = next(
        p for p in snap.pods if p.replica == replica and p.live and p.ready and p.node in snap.nodes
    )
    ready_at: float | None = None
    gone_at: float | None = None
    start = time.monotonic()
    k("delete", "node", old.node, "--wait=false")
    while (ready_at is None or gone_at is None) and time.monotonic() - start < GIVE_UP_SECONDS:
        now = reader.snapshot(0)
        took = time.monotonic() - start
        if gone_at is None and old.uid not in {p.uid for p in now.pods}:
            gone_at = took
        if ready_at is None and replica_ready_elsewhere(now, replica, old.uid, old.node):
            ready_at = took
        time.sleep(POLL_SECONDS)
    nodes = {n["metadata"]["name"]: n for n in pool_nodes(old.pool, RECOVERY_NODES, 1)}
    k.apply(nodes[old.node])
    return Loss(old.node, replica, ready_at, gone_at)


def node_loss_recovery(control_plane: local_cluster.Cluster) -> dict[str, Any]:
    """REPETITIONS node losses under a Ready service, each after the service is whole again
    and each under the next replica, so no two lose the same node."""
    losses: list[Loss] = []
    with namespace(control_plane, "recovery") as k:
        pool = f"{k.ns}-pool"
        make_pool(k, pool, RECOVERY_NODES, devices=1)
        try:
            reader = Reader(control_plane.kubeconfig, k.ns, [pool])
            k.apply(
                workload("svc", replicas=RECOVERY_REPLICAS, count=1, restart="Always", pools=[pool])
            )
            for index in range(REPETITIONS):
                snap = wait_for(
                    "the service whole", lambda: serving(reader), timeout=GIVE_UP_SECONDS
                )
                loss = lose_a_node(k, reader, snap, index % RECOVERY_REPLICAS)
                losses.append(loss)
                say(
                    f"node loss {index + 1}/{REPETITIONS}: {loss.node} (replica {loss.replica}): "
                    f"replica Ready again elsewhere: {_took(loss.replica_ready)}; old pod gone: "
                    f"{_took(loss.old_pod_gone)}"
                )
        finally:
            clear_workloads(k)
            drop_pool(k, pool, RECOVERY_NODES)
    return {
        "service": {
            "replicas": RECOVERY_REPLICAS,
            "devicesPerReplica": 1,
            "poolNodes": RECOVERY_NODES,
            "devicesPerNode": 1,
        },
        "pollSeconds": POLL_SECONDS,
        "giveUpSeconds": GIVE_UP_SECONDS,
        "repetitions": [loss.to_json() for loss in losses],
        "replicaReadySeconds": spread([loss.replica_ready for loss in losses]),
        "garbageCollector": {
            "note": "expectedOrphanDeletionSeconds: what podgc alone takes to delete a pod of "
            "a deleted node (its constants, see hack/soak.py); oldPodGoneSeconds: measured "
            "here, whoever deleted it first (the operator or podgc)",
            "podgcCheckPeriodSeconds": PODGC_CHECK_PERIOD_SECONDS,
            "podgcQuarantineSeconds": PODGC_QUARANTINE_SECONDS,
            "expectedOrphanDeletionSeconds": {
                "min": PODGC_QUARANTINE_SECONDS,
                "max": PODGC_QUARANTINE_SECONDS + PODGC_CHECK_PERIOD_SECONDS,
            },
            "oldPodGoneSeconds": spread([loss.old_pod_gone for loss in losses]),
        },
    }


# --- the run --------------------------------------------------------------------------------------


def say(message: str) -> None:
    print(f"==> {message}", file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=" ".join((__doc__ or "").split("\n\n")[0].split()))
    parser.add_argument("--minutes", type=float, default=10, help="minutes of churn (default 10)")
    parser.add_argument("--seed", type=int, default=1, help="the churn's seed (default 1)")
    parser.add_argument(
        "--faults",
        default=",".join(sorted(ALL_FAULTS)),
        help="comma-separated faults to inject (default: all of "
        f"{', '.join(sorted(ALL_FAULTS))}); empty for none",
    )
    parser.add_argument("--no-recovery", action="store_true", help="skip the node-loss measurement")
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"default {RESULTS}")
    parser.add_argument("--keep-state", action="store_true", help="keep the state dir and logs")
    args = parser.parse_args(argv)
    try:
        args.faults = frozenset(Fault(f.strip()) for f in args.faults.split(",") if f.strip())
    except ValueError as err:
        parser.error(str(err))
    if args.minutes <= 0:
        parser.error("--minutes must be above 0")
    return args


def run(args: argparse.Namespace, state: Path, results: dict[str, Any]) -> None:
    """A control plane like the e2e tests' (hack/cluster.py, no demo fleet: the churn brings
    its own pools), the CRDs, an operator, then the churn and the node-loss measurement;
    each figure goes into `results` as soon as it is measured."""
    control_plane = local_cluster.Cluster(state)
    say(f"starting a local control plane in {state}")
    control_plane.up(fleet=None)
    try:
        install_crds(control_plane)
        (state / "operator-logs").mkdir()
        operator = Operator(control_plane.kubeconfig, state / "operator-logs")
        operator.start()
        try:
            config = ChurnConfig(seed=args.seed, seconds=args.minutes * 60, faults=args.faults)
            results["churn"] = soak_churn(control_plane, operator, config)
            if not args.no_recovery:
                say("node-loss recovery: a service of 3 on a pool of 4 one-device nodes")
                results["nodeLossRecovery"] = node_loss_recovery(control_plane)
        finally:
            operator.stop()
    finally:
        control_plane.down(quiet=True, keep_logs=True)


def report(
    args: argparse.Namespace,
    results: dict[str, Any],
    began: datetime,
    seconds: float,
    code: dict[str, Any],
    failed: str | None,
) -> dict[str, Any]:
    """soak.json: what ran (seed, minutes, faults, the source), what the churn found, and
    the node-loss figures; `failed` names what stopped a run early."""
    churned = results.get("churn", {})
    violations = churned.get("violations", {"count": 0, "first": []})
    out = {
        "benchmark": "soak",
        "startedAt": began.isoformat(timespec="seconds"),
        "durationSeconds": round(seconds, 1),
        "machine": fleet_report.machine(),
        # The digest, not the commit: a commit made during the run changes no operator file.
        "source": {
            **code,
            "operatorChangedDuringRun": fleet_report.source()["operatorDigest"]
            != code["operatorDigest"],
        },
        "seed": args.seed,
        "minutes": args.minutes,
        "faultsEnabled": sorted(args.faults),
        "steps": churned.get("steps"),
        "faults": churned.get("faults"),
        "actions": churned.get("actions"),
        "violations": {
            "count": violations["count"],
            "first": violations["first"][:FIRST_VIOLATIONS],
        },
        "longestServiceShortfall": churned.get("longestServiceShortfall"),
        "settled": churned.get("settled"),
        "unrestored": churned.get("unrestored"),
        "nodeLossRecovery": results.get("nodeLossRecovery"),
    }
    if failed:
        out["failed"] = failed
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    state = Path(tempfile.mkdtemp(prefix="tessera-soak-"))
    began, started, code = datetime.now(UTC), time.monotonic(), fleet_report.source()
    results: dict[str, Any] = {}
    failed: str | None = None
    try:
        with local_cluster.terminated_as_exit():
            run(args, state, results)
    except Exception as err:  # what was measured is still written
        failed = f"{type(err).__name__}: {err}"
        traceback.print_exc()
    out = report(args, results, began, time.monotonic() - started, code, failed)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(out, indent=1) + "\n")
    count = out["violations"]["count"]
    ok = failed is None and count == 0
    if ok and not args.keep_state:
        shutil.rmtree(state, ignore_errors=True)
    else:
        say(f"state and logs (the operator's in operator-logs/) kept in {state}")
    recovery = (out["nodeLossRecovery"] or {}).get("replicaReadySeconds")
    if recovery:
        say(f"node-loss recovery: {recovery}")
    say(
        f"soak {'passed' if ok else 'FAILED'}: seed {args.seed}, {out['steps']} steps, "
        f"{count} violations; results in {args.results}" + (f"; {failed}" if failed else "")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
