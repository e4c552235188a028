"""The fleet benchmark's restart: the operator killed with every Workload Running, started
again, and timed to its next placement. Imports fleet_context; no other phase."""

from __future__ import annotations

import time
from typing import Any

import fleet_specs as specs
from fleet_context import WORKLOADS, Bench, Phase
from fleet_kube import wait_until


def restart(bench: Bench, phase: Phase) -> dict[str, Any]:
    """SIGKILL the operator with every Workload Running, start it again and create one
    more Workload at once: how long until that one is placed and its pod exists."""
    assert phase.workloads is not None
    wl = phase.workloads
    before = bench.operator.figures()
    bench.say(
        f"  restart: SIGKILL the operator (RSS {before['rssMB']:.1f} MB, "
        f"peak {before['peakRssMB']:.1f} MB) and start it again with one new Workload"
    )
    bench.operator.kill()
    name = "restart-probe"
    body = specs.workload_manifest(name, phase.namespace, bench.pools[0])
    t0 = time.monotonic()
    bench.operator.start()
    bench.api.call("POST", WORKLOADS.format(ns=phase.namespace), body)

    def placed() -> bool:
        pods = phase.pods.members().get(name, [])
        return name in wl.placed and bool(pods)

    wait_until(
        "the Workload created after the restart to be placed",
        placed,
        bench.args.timeout + bench.args.workloads / 20,
        say=bench.say,
        progress=lambda: f"placed: {name in wl.placed}",
        checks=[phase.check, bench.operator.check],
    )
    pod = phase.pods.members()[name][0]
    with wl.lock, phase.pods.lock:
        seconds = max(wl.placed[name], phase.pods.created[pod]) - t0
    wait_until("the restarted operator's /healthz", bench.operator.healthy, 60, poll=0.1)
    healthy = time.monotonic() - t0
    wait_until(
        "the new Workload to run",
        lambda: name in wl.running,
        bench.args.timeout,
        checks=[phase.check, bench.operator.check],
    )
    after = bench.operator.figures()
    bench.say(
        f"  restart: placed in {seconds:.2f} s after the restart "
        f"(/healthz answered after {healthy:.2f} s)"
    )
    return {
        "seconds": round(seconds, 3),
        "healthySeconds": round(healthy, 3),
        "rssMBBeforeKill": round(before["rssMB"], 1),
        "peakRssMBBeforeKill": round(before["peakRssMB"], 1),
        "rssMBAfterRestart": round(after["rssMB"], 1),
        "podsRecreated": phase.pods.recreated(),
    }
