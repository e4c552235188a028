"""`tessera top` without a cluster: the report and its tables from a World built in code, the
kubectl plugin's name, and the completion script."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import UTC, datetime
from typing import Any

import pytest

from tessera import cli
from tessera.cli import completion, top
from tessera.world.caches import WorldCache
from tessera.world.facts import NodeFacts, ObjectFacts, node_facts, object_facts, pod_facts
from tessera.world.snapshot import World

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
LABEL = "example.com/pool"


def node(name: str, group: str, ready: bool = True, **spec: Any) -> NodeFacts:
    return node_facts(
        {
            "metadata": {"name": name, "labels": {LABEL: group}},
            "spec": spec,
            "status": {
                "allocatable": {"example.com/dev": "8"},
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
    )


def pool(name: str, group: str, model: str = "B1", **extra: Any) -> ObjectFacts:
    spec = {
        "accelerator": {
            "vendor": "other",
            "model": model,
            "resourceName": "example.com/dev",
            "memoryGiB": 64,
            "peakTFLOPS": {"bf16": 500},
        },
        "nodeSelector": {"matchLabels": {LABEL: group}},
        **extra,
    }
    meta = {"name": name, "uid": f"u-{name}", "generation": 1, "resourceVersion": "1"}
    meta["creationTimestamp"] = "2026-12-01T00:00:00Z"
    return object_facts({"metadata": meta, "spec": spec, "status": {}})


def workload(
    name: str, status: dict[str, Any], created: str, ns: str = "ml", replicas: int = 2
) -> ObjectFacts:
    template = {"spec": {"containers": [{"name": "m", "image": "x"}]}}
    return object_facts(
        {
            "metadata": {
                "name": name,
                "namespace": ns,
                "uid": f"u-{name}",
                "generation": 1,
                "creationTimestamp": created,
            },
            "spec": {"replicas": replicas, "accelerator": {"count": 4}, "template": template},
            "status": status,
        }
    )


def pod(workload: ObjectFacts, replica: int, node: str, pool: str) -> Any:
    return pod_facts(
        {
            "metadata": {
                "name": f"{workload.name}-{replica}",
                "namespace": workload.namespace,
                "uid": f"p-{workload.name}-{replica}",
                "labels": {
                    "tessera.dev/workload": workload.name,
                    "tessera.dev/pool": pool,
                    "tessera.dev/replica": str(replica),
                },
                "ownerReferences": [
                    {"apiVersion": "tessera.dev/v1alpha1", "kind": "Workload", "uid": workload.uid}
                ],
            },
            "spec": {
                "nodeName": node,
                "containers": [{"resources": {"requests": {"example.com/dev": "4"}}}],
            },
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )


WAIT = "waiting: no feasible pool has room for 2 pods of 4 devices now (1 feasible)"


def fleet() -> World:
    nodes = [node("a0", "a"), node("a1", "a"), node("b0", "b"), node("b1", "b", ready=False)]
    placed = {
        "pool": "alpha",
        "phase": "Running",
        "readyReplicas": 2,
        "assignments": [{"replica": 0, "node": "a0"}, {"replica": 1, "node": "a1"}],
    }
    train = workload("train", placed, "2026-12-06T11:00:00Z")
    serve = workload(
        "serve",
        {**placed, "pool": "beta", "phase": "Placed", "readyReplicas": 0,
         "assignments": [{"replica": 0, "node": "b0"}]},
        "2026-12-06T11:10:00Z",
        ns="web",
        replicas=1,
    )  # fmt: skip
    done = workload("old", {**placed, "phase": "Succeeded"}, "2026-12-05T00:00:00Z")
    big = workload("big", {"phase": "Pending", "message": WAIT}, "2026-12-06T11:57:30Z")
    older = workload("older", {"phase": "Pending", "message": "no pool"}, "2026-12-04T12:00:00Z")
    fresh = workload("fresh", {}, "2026-12-06T11:59:50Z", ns="web")
    pods = [pod(train, 0, "a0", "alpha"), pod(train, 1, "a1", "alpha")]
    return World(
        nodes={n.name: n for n in nodes},
        pods=pods,
        pools={p.name: p for p in [pool("beta", "b", "B2"), pool("alpha", "a")]},
        workloads={w.key: w for w in [train, serve, done, big, older, fresh]},
        namespaces={},
        cache=WorldCache(),
    )


def test_top_counts_each_pools_nodes_and_devices_and_lists_what_runs_there() -> None:
    report = top.Top.of(fleet(), NOW)
    alpha, beta = report.pools
    assert (alpha.name, alpha.accelerator) == ("alpha", "B1")
    assert (alpha.nodes_usable, alpha.nodes, alpha.used, alpha.free, alpha.total) == (
        2, 2, 8, 8, 16,
    )  # fmt: skip
    assert [w.key for w in alpha.workloads] == ["ml/train"]  # the finished one holds nothing
    # b1 is NotReady: its devices count in the total, not in what is free.
    assert (beta.nodes_usable, beta.nodes, beta.used, beta.free, beta.total) == (1, 2, 4, 4, 16)
    assert [(w.key, w.phase, w.ready, w.replicas) for w in beta.workloads] == [
        ("web/serve", "Placed", 0, 1)
    ]
    assert [(w.key, int(w.age)) for w in report.waiting] == [
        ("ml/older", 2 * 86400),
        ("ml/big", 150),
        ("web/fresh", 10),
    ]


def test_top_table_reads_like_kubectl() -> None:
    assert top.Top.of(fleet(), NOW).table() == (
        "POOL   ACCELERATOR  NODES  USED  FREE  TOTAL  WORKLOADS\n"
        "alpha  B1           2/2    8     8     16     1\n"
        "beta   B2           1/2    4     4     16     1\n"
        "\n"
        "WORKLOAD   POOL   PHASE    READY\n"
        "ml/train   alpha  Running  2/2\n"
        "web/serve  beta   Placed   0/1\n"
        "\n"
        "WAITING    AGE  REASON\n"
        "ml/older   2d   no pool\n"
        f"ml/big     2m   {WAIT}\n"
        "web/fresh  10s  not yet planned"
    )


def test_top_by_namespace_and_by_section() -> None:
    report = top.Top.of(fleet(), NOW, namespace="web")
    assert [w.key for p in report.pools for w in p.workloads] == ["web/serve"]
    assert [w.key for w in report.waiting] == ["web/fresh"]
    assert report.pools[0].used == 8, "pool counts stay fleet-wide"
    assert report.table("pools").splitlines()[0].startswith("POOL ")
    assert "WAITING" not in report.table("pools")
    assert report.table("workloads").splitlines()[0].startswith("WORKLOAD ")
    empty = top.Top.of(fleet(), NOW, namespace="nobody")
    assert empty.table("workloads") == "No workloads."


def test_top_data_for_scripts_is_plain_json() -> None:
    data = json.loads(json.dumps(top.Top.of(fleet(), NOW).data()))
    assert data["pools"][0] == {
        "name": "alpha",
        "accelerator": "B1",
        "nodes": {"usable": 2, "total": 2},
        "devices": {"used": 8, "free": 8, "total": 16},
        "workloads": [
            {"namespace": "ml", "name": "train", "phase": "Running", "ready": 2, "replicas": 2}
        ],
    }
    assert data["waiting"][1] == {
        "namespace": "ml",
        "name": "big",
        "created": "2026-12-06T11:57:30Z",
        "ageSeconds": 150,
        "reason": WAIT,
    }
    assert set(top.Top.of(fleet(), NOW).data("pools")) == {"pools"}


def test_a_pool_whose_spec_does_not_parse_is_shown_with_its_problem() -> None:
    w = fleet()
    bad = World(
        nodes=w.nodes,
        pods=[],
        pools={**w.pools, "gamma": object_facts({"metadata": {"name": "gamma"}, "spec": {}})},
        workloads={},
        namespaces={},
    )
    row = top.Top.of(bad, NOW).table("pools").splitlines()[-1]
    assert row.startswith("gamma  -") and "invalid spec: spec.accelerator" in row


@pytest.mark.parametrize(
    ("seconds", "shown"), [(0, "0s"), (59, "59s"), (60, "1m"), (7200, "2h"), (90000, "1d")]
)
def test_ages_are_kubectls(seconds: int, shown: str) -> None:
    assert top.age(seconds) == shown


def test_the_kubectl_plugin_says_kubectl_tessera() -> None:
    assert cli.prog_name("/usr/local/bin/kubectl-tessera") == "kubectl tessera"
    assert cli.prog_name("/opt/tessera/bin/tessera") == "tessera"
    assert cli.parser("kubectl tessera").format_usage().startswith("usage: kubectl tessera ")


@pytest.mark.parametrize("command", ["run", "top", "completion"])
def test_each_command_has_examples_in_its_help(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    out = capsys.readouterr().out
    assert "examples:\n" in out and f"  tessera {command}" in out


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_the_bash_completion_script_parses_and_knows_the_commands() -> None:
    script = completion.script("bash")
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    for word in ("run", "explain", "top", "completion", "--namespace", "pools"):
        assert word in script
    assert completion.script("zsh").startswith("#compdef tessera")
    assert "_shtab_kubectl_tessera" in completion.script("bash", "kubectl-tessera")
