"""The fleet benchmark's set-up: the control plane, the CRDs, the fleet and its pools, and the
operator started and warm. Imports fleet_context and hack/; no other phase, not the runner."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "hack"))

import cluster as local_cluster  # noqa: E402  (hack/cluster.py)
import fleet  # noqa: E402  (hack/fleet.py: the simulated fleet)
import fleet_specs as specs  # noqa: E402
from fleet_context import REPO, Bench  # noqa: E402
from fleet_kube import Api, Floor, Operator, wait_until  # noqa: E402


def setup(bench: Bench) -> None:
    """A fresh control plane with the CRDs installed, the fleet's nodes Ready and a pool
    for each of its groups."""
    a = bench.args
    bench.say(f"starting a local control plane in {bench.state}")
    bench.cluster.up(fleet=None)
    bench.cpu.start()
    bench.api = Api(bench.cluster.server, bench.cluster.pki, connections=a.threads + 8)
    bench.floor_operator = Floor(bench.api, bench.state)
    bench.server_version = str(bench.api.get("/version")["gitVersion"])
    bench.say("installing the CRDs")
    bench.cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    bench.cluster.wait_established(["workloads.tessera.dev", "acceleratorpools.tessera.dev"])
    wait_until("the Workloads' watch cache", lambda: workloads_watchable(bench), 60, poll=0.5)
    bench.groups = fleet.pool_groups(fleet.load_groups(), a.pools, a.nodes, 8)
    fleet_file = bench.state / "bench-fleet.yaml"
    fleet_file.write_text(yaml.safe_dump({"groups": bench.groups}, sort_keys=False))
    bench.say(f"creating {a.nodes} nodes in {a.pools} pools (8 devices each) and waiting Ready")
    bench.cluster.create_fleet(fleet_file)
    bench.pools = [specs.pool_manifest(g) for g in bench.groups]
    for pool in bench.pools:
        bench.api.call("POST", f"/apis/{specs.API_VERSION}/acceleratorpools", pool)
    bench.say(f"fleet ready: {', '.join(g['name'] + ':' + str(g['count']) for g in bench.groups)}")


def workloads_watchable(bench: Bench) -> bool:
    """Whether a watch of the Workloads from the present is served: just after the CRD
    is established, their watch cache is still filling (429, "storage is (re)initializing"),
    and then starts at a resourceVersion that a namespace made before it is too old for."""
    path = f"/apis/{specs.API_VERSION}/workloads"
    rv = bench.api.get(path, limit="1")["metadata"]["resourceVersion"]
    query = {"watch": "1", "resourceVersion": rv, "timeoutSeconds": "1"}
    status, event = bench.api.call("GET", path, query=query, ok=(429,))
    return status == 200 and (event or {}).get("type") != "ERROR"


def start_operator(bench: Bench) -> None:
    """Starts the operator and waits until it is warm: healthy, every pool's status
    written, and a quiet period passed."""
    bench.operator = Operator(bench.cluster.kubeconfig, bench.state, local_cluster.free_port())
    bench.operator.start()
    bench.say(f"operator started (pid {bench.operator.pid}); waiting until it is warm")
    wait_warm(bench)


def wait_warm(bench: Bench) -> None:
    """Until the (re)started operator is healthy and every pool's status is written."""
    checks = [bench.operator.check]
    wait_until("operator /healthz", bench.operator.healthy, 120, checks=checks, poll=0.2)
    want = {g["name"]: g["count"] for g in bench.groups}

    def pools_seen() -> bool:
        items = bench.api.get(f"/apis/{specs.API_VERSION}/acceleratorpools")["items"]
        got = {p["metadata"]["name"]: (p.get("status") or {}).get("readyNodes") for p in items}
        return got == want

    wait_until(
        "every pool's status",
        pools_seen,
        60 + bench.args.nodes / 50,
        checks=checks,
        poll=0.5,
    )
