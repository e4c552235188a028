"""Two replicas with leader election: one places, the other stands by with warm indexes and
takes over when the leader is killed. Against the real API server's Lease objects."""

from __future__ import annotations

import json
from typing import Any

from operator_harness import Kubectl, Operator, drop_pools, make_pool, namespace, wait_for, workload

LEASE = ["--leader-elect", "--lease-namespace", "default", "--lease-name", "tessera-ha-test"]


def holder(k: Kubectl) -> str | None:
    out = k("get", "lease", "tessera-ha-test", "-n", "default", "-o", "json", check=False)
    if out.returncode != 0:
        return None
    return str(json.loads(out.stdout)["spec"].get("holderIdentity") or "") or None


def test_standby_takes_over_when_the_leader_dies(cluster: Any, tmp_path: Any) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "crds/")
    a = Operator(cluster.kubeconfig, tmp_path, *LEASE, name="replica-a")
    b = Operator(cluster.kubeconfig, tmp_path, *LEASE, name="replica-b")
    with namespace(cluster, "ha") as k:
        make_pool(k, "ha-pool", nodes=2, devices=4)
        try:
            a.start()
            wait_for("replica-a leads", lambda: holder(k) == "replica-a")
            b.start()
            k.apply(workload("one", count=1, pools=["ha-pool"]))
            wait_for("one placed", lambda: k.status("one").get("pool") == "ha-pool")
            assert holder(k) == "replica-a"
            assert "placed" in a.log() and "placed" not in b.log()
            a.kill()
            k.apply(workload("two", count=1, pools=["ha-pool"]))
            wait_for("replica-b takes over", lambda: holder(k) == "replica-b", timeout=40)
            wait_for("two placed", lambda: k.status("two").get("pool") == "ha-pool", timeout=20)
            assert "acquired lease" in b.log()
            b.stop()  # a clean stop gives the lease up at once
            wait_for("lease released", lambda: holder(k) is None, timeout=20)
        finally:
            a.stop()
            b.stop()
            drop_pools(k, {"ha-pool": 2})
            k("delete", "lease", "tessera-ha-test", "-n", "default", check=False)
