"""The fleet benchmark's SIGKILL mid-burst: the operator killed while it is creating the pods of
the largest burst, started again at once, and what it left counted: pods of a Workload beyond
its replicas, pods without a live Workload owner, Workloads never placed. Imports fleet_context;
no other phase."""

from __future__ import annotations

import threading
import time
from typing import Any

from fleet_context import WORKLOADS, Bench, Phase, pods_made
from fleet_kube import BenchError, burst


def mid_burst(
    bench: Bench, name: str, workloads: list[dict[str, Any]]
) -> tuple[dict[str, Any], Phase]:
    """A burst of Workloads through the operator; once half its pods exist, SIGKILL the
    operator and start it again at once. Waits until every Workload is Running (or the
    wait times out: what is missing is then counted), then checks the namespace. The phase
    is left for the clean-up."""
    phase, pods = bench.workload_phase(name, workloads)
    half = max(pods // 2, 1)
    bench.say(
        f"SIGKILL mid-burst: creating {len(workloads)} Workloads ({pods} pods) in "
        f"{phase.namespace}; the operator is killed once {half} pods exist"
    )
    killed: dict[str, Any] = {}
    stop = threading.Event()

    def killer() -> None:
        while not stop.is_set() and phase.pods.counts()[0] < half:
            time.sleep(0.005)
        before = bench.operator.figures()
        bench.operator.kill()
        killed["podsCreatedAtKill"] = phase.pods.counts()[0]
        killed["at"] = time.monotonic()
        bench.operator.start()
        killed["rssMBBeforeKill"] = round(before["rssMB"], 1)

    thread = threading.Thread(target=killer, name="bench-kill", daemon=True)
    thread.start()
    phase.starts, first, last_post = burst(
        bench.api, WORKLOADS.format(ns=phase.namespace), workloads, bench.args.threads
    )
    thread.join(bench.args.timeout)
    stop.set()
    thread.join(30)
    if "at" not in killed:
        raise BenchError("the operator was not killed mid-burst")
    bench.say(
        f"  SIGKILL with {killed['podsCreatedAtKill']} of {pods} pods created "
        f"({last_post - first:.2f} s of Workload creates); started again"
    )
    timed_out, all_running = None, None
    try:
        bench.wait_workloads(phase, pods, running=True)
        all_running = round(time.monotonic() - killed["at"], 3)
    except BenchError as err:  # counted below: the Workloads never placed, the pods missing
        timed_out = str(err)
        bench.say(f"  {timed_out}")
    assert phase.workloads is not None
    with phase.workloads.lock:
        placed = set(phase.workloads.placed)
    integrity = bench.integrity(phase)
    never_placed = sorted(set(phase.starts) - placed)
    loose = sorted(pod["metadata"]["name"] for pod in pods_made(phase) if not pinned(pod))
    unpinned = len(loose)
    result = {
        "workloads": len(workloads),
        "pods": pods,
        "podsCreatedAtKill": killed["podsCreatedAtKill"],
        "rssMBBeforeKill": killed["rssMBBeforeKill"],
        "restartToAllRunningSeconds": all_running,
        "integrity": integrity,
        "duplicated": len(integrity["duplicated"]),
        "orphans": len(integrity["orphans"]),
        "missing": len(integrity["missing"]),
        "neverPlaced": len(never_placed),
        "podsWithoutNodePin": unpinned,
        "podsWithoutNodePinListed": loose[:20],
        "timedOut": timed_out,
    }
    # A pod without its pin can take a node another placement holds: as bad as a duplicate.
    result["duplicatesAndOrphans"] = (
        integrity["duplicatesAndOrphans"] + len(never_placed) + unpinned
    )
    bench.say(
        f"  after the SIGKILL mid-burst: {result['duplicated']} duplicated, "
        f"{result['orphans']} orphans, {result['missing']} missing, "
        f"{result['neverPlaced']} never placed, {unpinned} pods without a node pin; "
        "every Workload Running "
        f"{all_running} s after the restart"
    )
    return result, phase


def pinned(pod: dict[str, Any]) -> bool:
    """Whether the pod's required node affinity pins it to one node (a `matchFields` term
    on metadata.name), as Tessera pins the pods of a placement it reserved."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return any(t.get("matchFields") for t in required.get("nodeSelectorTerms") or [])
