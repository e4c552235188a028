"""AcceleratorQuotas on the real control plane: one team borrows the idle fleet and another
reclaims its share; priority preemption inside one quota; a quota across the A100 and H100
pools counts units, not devices; SIGKILL of the operator in the middle of a preemption;
minutes of two teams' churn without thrash. A
pool of its own per test (the test-only accelerator at 1 unit a device), namespaces
labelled per team."""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import pytest
from operator_harness import (
    RESOURCE,
    TESSERA,
    Kubectl,
    Operator,
    Sampler,
    clear_workloads,
    drop_pools,
    is_ready,
    metric_value,
    namespace,
    pool_manifest,
    pool_nodes,
    wait_for,
    workload,
)


@pytest.fixture
def suffix() -> str:
    return uuid.uuid4().hex[:5]


@contextmanager
def team(cluster: Any, name: str) -> Iterator[Kubectl]:
    """A namespace labelled team=<name> (what the quotas select)."""
    with namespace(cluster, name) as k:
        k("label", "namespace", k.ns, f"team={name}")
        yield k


def share_pool(k: Kubectl, name: str, nodes: int, devices: int) -> None:
    """`nodes` kwok nodes of `devices` test devices each, in a pool counting 1 unit a device."""
    pool = pool_manifest(name, {"matchLabels": {"example.com/test-pool": name}})
    pool["spec"]["accelerator"]["unitsPerDevice"] = 1
    k.apply(*pool_nodes(name, nodes, devices), pool)


def quota(k: Kubectl, name: str, team_label: str, nominal: float, **spec: Any) -> None:
    body = {
        "apiVersion": "tessera.dev/v1alpha1",
        "kind": "AcceleratorQuota",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {"matchLabels": {"team": team_label}},
            "nominal": nominal,
            **spec,
        },
    }
    k("apply", "--server-side", "-f", "-", input=json.dumps(body))


def quota_status(k: Kubectl, name: str) -> dict[str, Any]:
    return k.get("acq", name, cluster_scoped=True).get("status") or {}


def running(k: Kubectl, name: str) -> bool:
    pods = [p for p in k.pods() if p["metadata"]["labels"].get("tessera.dev/workload") == name]
    return (
        bool(pods) and all(is_ready(p) for p in pods) and k.status(name).get("phase") == "Running"
    )


def pod_uids(k: Kubectl, name: str) -> set[str]:
    return {
        p["metadata"]["uid"]
        for p in k.pods()
        if p["metadata"]["labels"].get("tessera.dev/workload") == name
        and not p["metadata"].get("deletionTimestamp")
    }


def reasons(k: Kubectl, name: str) -> list[str]:
    return [e["reason"] for e in k.events(name)]


NO_WAIT = {"minRuntimeSeconds": 0}


@contextmanager
def a_borrows_the_pool(cluster: Any, suffix: str) -> Iterator[tuple[Kubectl, Kubectl, str]]:
    """Teams a and b with 4 units each over a pool of 8 devices; a runs `first` (its
    nominal) and `borrower` (4 units borrowed while b is idle). Yields a, b and the pool."""
    pool = f"share-{suffix}"
    with team(cluster, f"ta-{suffix}") as a, team(cluster, f"tb-{suffix}") as b:
        share_pool(a, pool, nodes=2, devices=4)
        quota(a, f"qa-{suffix}", f"ta-{suffix}", 4, preemption=NO_WAIT)
        quota(a, f"qb-{suffix}", f"tb-{suffix}", 4, preemption=NO_WAIT)
        try:
            a.apply(workload("first", count=4, pools=[pool]))
            wait_for("first running", lambda: running(a, "first"), timeout=60)
            a.apply(workload("borrower", count=4, pools=[pool]))
            wait_for("borrower running", lambda: running(a, "borrower"), timeout=60)
            yield a, b, pool
        finally:
            a("delete", "acq", f"qa-{suffix}", f"qb-{suffix}", "--wait=false", check=False)
            clear_workloads(a)
            clear_workloads(b)
            drop_pools(a, {pool: 2})


def test_a_team_reclaims_what_another_borrowed(
    operator: Operator, installed: Any, suffix: str
) -> None:
    with a_borrows_the_pool(installed, suffix) as (a, b, pool):
        status = wait_for(
            "quota a borrows",
            lambda: (s := quota_status(a, f"qa-{suffix}")).get("borrowed") == 4 and s,
            timeout=30,
        )
        assert status["used"] == 4 + 4 and status["namespaces"] == [a.ns]
        assert status["pools"] == [{"pool": pool, "devices": 8, "units": 8}]
        assert a.status("first")["quota"] == f"qa-{suffix}"
        kept = pod_uids(a, "first")

        b.apply(workload("claim", count=4, pools=[pool]))
        wait_for("claim running", lambda: running(b, "claim"), timeout=90)
        victim = a.status("borrower")
        assert victim["phase"] == "Pending" and not victim.get("pool")
        record = victim["preempted"]
        assert (record["by"], record["rule"], record["pool"]) == (
            f"{b.ns}/claim", "Reclaim", pool
        )  # fmt: skip
        cond = a.condition("borrower", "Preempted")
        assert cond and cond["status"] == "True" and cond["reason"] == "Reclaim"
        assert f"by {b.ns}/claim" in cond["message"]
        assert "Preempted" in reasons(a, "borrower") and "Preempting" in reasons(b, "claim")
        wait_for("the victim's pods gone", lambda: not pod_uids(a, "borrower"), timeout=60)
        assert pod_uids(a, "first") == kept  # the one within nominal is untouched
        assert "preempting" in b.status("claim")["message"]
        qa = wait_for(
            "quota a back at nominal",
            lambda: (s := quota_status(a, f"qa-{suffix}")).get("used") == 4 and s,
            timeout=30,
        )
        assert qa["borrowed"] == 0 and qa["waiting"] == 1
        assert quota_status(b, f"qb-{suffix}")["used"] == 4
        metrics = operator.metrics()
        preempted = {"quota": f"qb-{suffix}", "rule": "Reclaim"}
        assert metric_value(metrics, "tessera_preemptions_total", **preempted) == 1
        used = metric_value(metrics, "tessera_quota_units", quota=f"qa-{suffix}", state="used")
        assert used in (4.0, 8.0)  # set every 2 s
        listed = a("get", "acq", f"qa-{suffix}").stdout.splitlines()
        assert listed[0].split() == ["NAME", "NOMINAL", "USED", "BORROWED", "WAITING", "AGE"]


def test_priority_preempts_within_one_quota_whole_gangs(
    operator: Operator, installed: Any, suffix: str
) -> None:
    pool = f"prio-{suffix}"
    with team(installed, f"tc-{suffix}") as c:
        share_pool(c, pool, nodes=2, devices=4)
        quota(c, f"qc-{suffix}", f"tc-{suffix}", 8, preemption=NO_WAIT)
        try:
            c.apply(workload("low", replicas=2, count=4, pools=[pool]))
            wait_for("low running", lambda: running(c, "low"), timeout=60)
            urgent = workload("urgent", count=4, pools=[pool])
            urgent["spec"]["priority"] = 50
            c.apply(urgent)
            wait_for("urgent running", lambda: running(c, "urgent"), timeout=90)
            low = c.status("low")
            assert low["phase"] == "Pending" and low["preempted"]["rule"] == "WithinQuota"
            wait_for("both of low's pods gone", lambda: not pod_uids(c, "low"), timeout=60)
            assert "waiting" in c.status("low")["message"]
        finally:
            c("delete", "acq", f"qc-{suffix}", "--wait=false", check=False)
            clear_workloads(c)
            drop_pools(c, {pool: 2})


def test_a_quota_across_a100_and_h100_counts_units(
    operator: Operator, installed: Any, suffix: str
) -> None:
    """4 units: eight A100s (8 x 0.3153 = 2.52) and one H100 fit; two more H100s do not,
    though 11 devices would be far below a raw count of the same fleet."""
    with team(installed, f"td-{suffix}") as d:
        quota(d, f"qd-{suffix}", f"td-{suffix}", 4, borrowingLimit=0)
        try:
            d.apply(workload("on-a100", count=8, pools=["a100"]))
            wait_for("on-a100 placed", lambda: d.status("on-a100").get("pool") == "a100")
            d.apply(workload("two-h100", count=2, pools=["h100"]))
            message = wait_for(
                "two-h100 waits for quota", lambda: d.status("two-h100").get("message"), timeout=30
            )
            assert message.startswith(f"waiting for quota: quota qd-{suffix} has 2.52 of 4 units")
            placed = d.condition("two-h100", "Placed")
            assert placed and placed["reason"] == "WaitingForQuota"
            assert (
                d.status("two-h100")["summary"]["reason"]
                == f"quota qd-{suffix}: over its share now"
            )
            # The what-if says the same of the same manifest.
            manifest = d("get", "awl", "two-h100", "-n", d.ns, "-o", "yaml").stdout
            plan = subprocess.run(
                [str(TESSERA), "plan", "-f", "-", "--kubeconfig", str(d.cluster.kubeconfig)],
                input=manifest, capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert plan.returncode == 1, plan.stdout + plan.stderr
            assert f"waiting for quota: quota qd-{suffix} has 2.52 of 4 units" in plan.stdout
            d.apply(workload("one-h100", count=1, pools=["h100"]))
            wait_for("one-h100 placed", lambda: d.status("one-h100").get("pool") == "h100")
            status = wait_for(
                "quota used",
                lambda: (s := quota_status(d, f"qd-{suffix}")).get("used") == 3.52 and s,
                timeout=30,
            )
            assert status["pools"] == [
                {"pool": "a100", "devices": 8, "units": 2.52},
                {"pool": "h100", "devices": 1, "units": 1.0},
            ]
            assert status["waiting"] == 1 and status["waitingForQuota"] == 1
            units = d.get("acp", "a100", cluster_scoped=True)["status"]["accelerator"]
            assert units["unitsPerDevice"] == 0.3153
        finally:
            d("delete", "acq", f"qd-{suffix}", "--wait=false", check=False)


def test_sigkill_during_a_preemption_neither_evicts_twice_nor_loses_a_workload(
    operator: Operator, installed: Any, suffix: str
) -> None:
    """The operator is killed as soon as the victim's eviction is written (its pods maybe not
    yet deleted). Restarted, it finishes that eviction and no other: the victim waits (not
    lost, evicted once), the preemptor runs, the workload within nominal is untouched."""
    op = operator
    with a_borrows_the_pool(installed, suffix) as (a, b, _):
        try:
            kept = pod_uids(a, "first")
            b.apply(workload("claim", count=4, pools=[f"share-{suffix}"]))
            record = wait_for(
                "the eviction written", lambda: a.status("borrower").get("preempted"), every=0.05
            )
            op.kill()
            op.start()
            wait_for("claim running", lambda: running(b, "claim"), timeout=90)
            wait_for("the victim's pods gone", lambda: not pod_uids(a, "borrower"), timeout=60)
            victim = a.status("borrower")
            assert victim["phase"] == "Pending" and victim["preempted"] == record  # once
            assert pod_uids(a, "first") == kept and a.status("first")["phase"] == "Running"
            assert reasons(a, "first").count("Preempted") == 0
            assert a.get("awl", "borrower")["metadata"]["name"] == "borrower"  # not lost
        finally:
            if not op.healthy():
                op.start()


CHURN_SECONDS = float(os.environ.get("TESSERA_QUOTA_CHURN_SECONDS", "300"))
MIN_RUNTIME = 15


class Thrash(Sampler):
    """Samples both teams' Workloads, their quotas and the pool's pods: when each workload
    was last placed, each eviction with how long its victim had run, the most devices any
    node held, the most units any quota used."""

    every = 0.5

    def __init__(self, teams: dict[str, Kubectl], pool: str, quotas: dict[str, str]) -> None:
        super().__init__()
        self.teams, self.pool, self.quotas = teams, pool, quotas
        self.placed_at: dict[str, str] = {}
        self.evictions: dict[tuple[str, str], tuple[str, float]] = {}  # (victim, at) -> by, ran
        self.most_on_a_node = 0
        self.most_used: dict[str, float] = {}

    def sample(self) -> None:
        for k in self.teams.values():
            for w in k.get("awl")["items"]:
                key = f"{k.ns}/{w['metadata']['name']}"
                status = w.get("status") or {}
                if status.get("placedAt"):
                    self.placed_at[key] = status["placedAt"]
                record = status.get("preempted")
                if record and (key, record["at"]) not in self.evictions and key in self.placed_at:
                    ran = (parse(record["at"]) - parse(self.placed_at[key])).total_seconds()
                    self.evictions[key, record["at"]] = (record["by"], ran)
        k = next(iter(self.teams.values()))
        for name in self.quotas.values():
            used = float(quota_status(k, name).get("used") or 0)
            self.most_used[name] = max(self.most_used.get(name, 0.0), used)
        pods = json.loads(
            k("get", "pods", "-A", "-l", f"tessera.dev/pool={self.pool}", "-o", "json").stdout
        )["items"]
        per_node: dict[str, int] = {}
        for p in pods:
            if p["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            node = p["spec"].get("nodeName") or "?"
            devices = int(p["spec"]["containers"][0]["resources"]["requests"][RESOURCE])
            per_node[node] = per_node.get(node, 0) + devices
        self.most_on_a_node = max(self.most_on_a_node, *per_node.values(), 0)


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_two_teams_churn_for_minutes_without_thrash(
    operator: Operator, installed: Any, suffix: str
) -> None:
    """Two teams of 6 units (4 more borrowable) over 12 devices submit and finish jobs of
    mixed sizes and priorities at random for CHURN_SECONDS, each going quiet in turn (the
    other borrows, then gives back). Preemption happens, but never of
    a workload younger than minRuntimeSeconds, never back and forth, never past a node's
    devices or a quota's limit; at the end every workload is running or says why it waits."""
    pool = f"churn-{suffix}"
    rng = random.Random(7)
    names = {"a": f"qca-{suffix}", "b": f"qcb-{suffix}"}
    with team(installed, f"ca-{suffix}") as a, team(installed, f"cb-{suffix}") as b:
        teams = {"a": a, "b": b}
        share_pool(a, pool, nodes=3, devices=4)
        policy = {"minRuntimeSeconds": MIN_RUNTIME}
        for t, k in teams.items():
            quota(k, names[t], f"c{t}-{suffix}", 6, borrowingLimit=4, preemption=policy)
            governs = lambda t=t, k=k: quota_status(k, names[t]).get("namespaces") == [k.ns]  # noqa: E731
            wait_for(f"quota {t} governs its namespace", governs, timeout=30)
        live: dict[str, list[str]] = {"a": [], "b": []}
        submitted = 0
        try:
            with Thrash(teams, pool, names) as watch:
                start = time.monotonic()
                while (elapsed := time.monotonic() - start) < CHURN_SECONDS:
                    # Phases of 30 s: both teams busy, then one goes quiet (its jobs finish,
                    # the other borrows), then it comes back (and reclaims its share).
                    quiet = {0: "", 1: "b", 2: "", 3: "a"}[int(elapsed // 30) % 4]
                    t = rng.choice("ab")
                    k = teams[t]
                    if t == quiet:
                        if live[t]:
                            k("delete", "awl", live[t].pop(0), "-n", k.ns, "--wait=false")
                    elif live[t] and (len(live[t]) >= 5 or rng.random() < 0.3):
                        gone = live[t].pop(rng.randrange(len(live[t])))
                        k("delete", "awl", gone, "-n", k.ns, "--wait=false")
                    else:
                        submitted += 1
                        w = workload(f"j{submitted}", count=rng.choice([2, 4]), pools=[pool])
                        w["spec"]["priority"] = rng.choice([0, 0, 10])
                        k.apply(w)
                        live[t].append(f"j{submitted}")
                    time.sleep(rng.uniform(1.0, 2.5))
                time.sleep(MIN_RUNTIME + 10)  # the last protected ones may still be reclaimed
            assert watch.samples > 10
            assert watch.evictions, "no preemption in the churn: it did not test sharing"
            for (victim, _), (by, ran) in watch.evictions.items():
                assert ran >= MIN_RUNTIME - 1, f"{victim} evicted by {by} after {ran:.0f}s"
                assert (by, victim) not in {(v, b) for (v, _), (b, _) in watch.evictions.items()}
            assert watch.most_on_a_node <= 4
            assert all(used <= 6 + 4 for used in watch.most_used.values()), watch.most_used
            assert len(watch.evictions) <= submitted
            for t, k in teams.items():
                for name in live[t]:
                    status = k.status(name)
                    assert status.get("phase") in ("Running", "Pending"), (name, status)
                    assert status.get("phase") == "Running" or status.get("message")
        finally:
            a("delete", "acq", *names.values(), "--wait=false", check=False)
            clear_workloads(a)
            clear_workloads(b)
            drop_pools(a, {pool: 3})
