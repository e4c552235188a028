"""`tessera plan` and `tessera explain` against the real control plane and a running operator,
over the example pools plus three test pools (ten in all: more than the 8 a status keeps).
Run as the installed binary, as people run it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_harness import (
    REPO,
    TESSERA,
    Kubectl,
    Operator,
    drop_pools,
    make_pool,
    namespace,
    wait_for,
    workload,
)

EXTRA = {f"plan-extra-{i}": 1 for i in range(3)}  # pool -> nodes
POOLS = len(list((REPO / "examples" / "pools").glob("*.yaml"))) + len(EXTRA)
OUTPUT: dict[str, str] = {}  # what each case printed, for the docs (printed at the end)


@pytest.fixture(scope="module")
def ns(operator: Operator, installed: Any) -> Iterator[Kubectl]:
    """One namespace for the module, with the test pools, and h100 filled by `filler` (4 x 8
    devices for an estimated 2h): a gang that only h100 can run waits for it."""
    with namespace(installed, "plan") as k:
        for name, nodes in EXTRA.items():
            make_pool(k, name, nodes, devices=4)
        wait_for("every pool", lambda: len(k.get("acp", cluster_scoped=True)["items"]) >= POOLS)
        filler = workload("filler", replicas=4, count=8, pools=["h100"], restart="OnFailure")
        filler["spec"]["estimatedDuration"] = "2h"
        k.apply(filler)
        wait_for("filler placed", lambda: k.status("filler").get("expectedFinish"), 60)
        try:
            yield k
        finally:
            drop_pools(k, EXTRA)
            for key, text in OUTPUT.items():
                print(f"\n### {key}\n{text}")


def tessera(k: Kubectl, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    kubeconfig = str(k.cluster.kubeconfig)
    return subprocess.run(
        [str(TESSERA), *args, "--kubeconfig", kubeconfig],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        input=stdin,
    )


def manifest(tmp_path: Path, k: Kubectl, body: dict[str, Any]) -> str:
    body = json.loads(json.dumps(body))
    body["metadata"]["namespace"] = k.ns
    path = tmp_path / f"{body['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(body))
    return str(path)


def gang() -> dict[str, Any]:
    """4 pods of 8 fp8 devices with 80 GiB: only h100 can run it (the DRA pools' two nodes
    hold 2 such pods), and filler holds it."""
    return workload("gang", replicas=4, count=8, precision="fp8", minMemoryGiB=80)


def rows(table: str) -> list[str]:
    """The pool column of a candidate table (the lines after the POOL header)."""
    lines = table.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("POOL "))
    out = []
    for line in lines[head + 1 :]:
        if not line.strip():
            break
        out.append(line.split()[0])
    return out


def test_plan_of_a_workload_that_fits_now(ns: Kubectl, tmp_path: Path) -> None:
    path = manifest(tmp_path, ns, workload("small", count=1))
    result = tessera(ns, "plan", "-f", path)
    OUTPUT["plan (fits)"] = result.stdout
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith(f"{ns.ns}/small: would be placed now on ")
    assert len(rows(result.stdout)) == POOLS  # every pool, the near misses too
    assert not ns.get("awl")["items"][1:]  # nothing created: filler alone
    as_json = json.loads(tessera(ns, "plan", "-f", path, "-o", "json").stdout)
    assert as_json["wouldPlace"] is True and as_json["pool"] in first
    assert len(as_json["candidates"]) == POOLS and as_json["expected"] is None
    from_stdin = tessera(ns, "plan", "-f", "-", "-o", "yaml", stdin=Path(path).read_text())
    assert from_stdin.returncode == 0 and yaml.safe_load(from_stdin.stdout)["wouldPlace"]


def test_plan_counts_a_dra_pools_devices_as_the_operator_does(ns: Kubectl, tmp_path: Path) -> None:
    """The what-if reads the DRA drivers' ResourceSlices and the claims as the operator's
    caches do: a workload only h200-dra has the memory for would be placed there."""
    body = yaml.safe_load((REPO / "examples" / "workloads" / "long-context.yaml").read_text())
    result = tessera(ns, "plan", "-f", manifest(tmp_path, ns, body))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith(f"{ns.ns}/long-context: would be placed now on h200-dra")


def test_plan_of_a_workload_that_would_wait(ns: Kubectl, tmp_path: Path) -> None:
    path = manifest(tmp_path, ns, gang())
    result = tessera(ns, "plan", "-f", path)
    OUTPUT["plan (waits)"] = result.stdout
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith(f"{ns.ns}/gang: would wait: ")
    listed = rows(result.stdout)
    assert len(listed) == POOLS and listed[0] == "h100"
    assert "has no fp8" in result.stdout  # a near miss's reason
    finish = ns.status("filler")["expectedFinish"]
    expected = f"expected room on h100 at {finish} (when {ns.ns}/filler is expected to finish)"
    assert result.stdout.rstrip().endswith(expected)
    data = json.loads(tessera(ns, "plan", "-f", path, "-o", "json").stdout)
    assert data["wouldPlace"] is False and data["pool"] is None
    assert data["expected"]["pool"] == "h100" and data["expected"]["at"] == finish
    assert data["expected"]["finishing"] == [f"{ns.ns}/filler"]
    assert len(data["candidates"]) == POOLS


def test_plan_of_an_invalid_workload_says_what_admission_says(ns: Kubectl, tmp_path: Path) -> None:
    bad = workload("bad", count=1)
    bad["spec"]["weights"] = {"performance": 0, "cost": 0, "energy": 0}
    result = tessera(ns, "plan", "-f", manifest(tmp_path, ns, bad))
    OUTPUT["plan (invalid)"] = result.stderr
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "weights must not all be zero" in result.stderr
    assert "Workload.tessera.dev" in result.stderr  # the API server's own words
    missing = tessera(ns, "plan", "-f", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr


def test_explain_a_placed_workload(ns: Kubectl) -> None:
    result = tessera(ns, "explain", f"{ns.ns}/filler")
    OUTPUT["explain (placed)"] = result.stdout
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith(f"{ns.ns}/filler: ") and "on h100 (H100-SXM5-80GB" in first
    assert "Placed=True (Placed)" in result.stdout
    assert "expected to finish at" in result.stdout
    assert rows(result.stdout)[0] == "h100"
    data = json.loads(tessera(ns, "explain", "filler", "-n", ns.ns, "-o", "json").stdout)
    assert data["pool"] == "h100" and data["candidatesSource"] == "status"


def test_explain_a_waiting_workload_lists_every_pool(ns: Kubectl) -> None:
    ns.apply(gang())
    status = wait_for("gang waits", lambda: (s := ns.status("gang")).get("candidates") and s, 30)
    assert status["phase"] == "Pending" and len(status["candidates"]) == 8
    assert status["candidatesOmitted"] == POOLS - 8
    reason = status["summary"]["reason"]
    assert reason.startswith("h100: ") and len(reason) <= 60
    row = ns("get", "awl", "gang", "-n", ns.ns).stdout
    assert "REASON" in row.splitlines()[0] and reason in row
    result = tessera(ns, "explain", f"{ns.ns}/gang")
    OUTPUT["explain (waiting)"] = result.stdout
    OUTPUT["kubectl get awl (waiting)"] = row
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{ns.ns}/gang: Pending, not placed")
    assert f"planned again now over every pool ({POOLS};" in result.stdout
    assert len(rows(result.stdout)) == POOLS
    assert f"expected room on h100 at {ns.status('filler')['expectedFinish']}" in result.stdout
    data = json.loads(tessera(ns, "explain", f"{ns.ns}/gang", "-o", "json").stdout)
    assert data["candidatesSource"] == "planned now" and len(data["candidates"]) == POOLS
    ns("delete", "awl", "gang", "-n", ns.ns)


def test_explain_a_failed_workload(ns: Kubectl) -> None:
    fails = {"tessera.dev/simulated-runtime-ms": "500", "tessera.dev/simulated-exit-code": "3"}
    ns.apply(workload("broken", count=1, vendors=["google"], annotations=fails))
    wait_for("broken Failed", lambda: ns.status("broken").get("phase") == "Failed", 60)
    result = tessera(ns, "explain", f"{ns.ns}/broken")
    OUTPUT["explain (failed)"] = result.stdout
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{ns.ns}/broken: Failed, on tpu-v5e")
    assert "Failed=True (PodFailed)" in result.stdout
    assert "last failure: pod broken-tpu-v5e-0 (replica 0):" in result.stdout
    data = json.loads(tessera(ns, "explain", f"{ns.ns}/broken", "-o", "json").stdout)
    assert data["phase"] == "Failed" and data["lastFailure"]["pod"] == "broken-tpu-v5e-0"


def test_explain_a_missing_workload(ns: Kubectl) -> None:
    result = tessera(ns, "explain", f"{ns.ns}/nothing")
    assert result.returncode == 1 and "not found" in result.stderr
