"""The fleet benchmark at a tiny scale, end to end: its own control plane, the warm-up, the
operator, both mixes through Tessera, through the bare scheduler and through the floor
operator, the restart, the backlog, the results file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_fleet_benchmark_runs_and_reports_every_figure(tmp_path: Path) -> None:
    argv = [sys.executable, str(REPO / "bench" / "fleet_bench.py"), "--nodes", "16", "--pools", "2"]
    argv += ["--workloads", "12", "--idle-seconds", "3", "--warm-seconds", "2"]
    argv += ["--results-dir", str(tmp_path)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "target" in proc.stdout and "restart to next placement" in proc.stdout
    assert "singles: creation to all bound p50 / p99" in proc.stdout  # Tessera, floor, bare

    r = json.loads((tmp_path / "fleet-custom.json").read_text())
    assert (tmp_path / "fleet-custom.png").stat().st_size > 0
    assert r["parameters"]["nodes"] == 16 and len(r["fleet"]) == 2
    assert r["versions"]["apiserver"].startswith("v")
    # the unmeasured warm-up came first: every one of its pods was made and bound
    assert r["parameters"]["warmUpWorkloads"] == 12
    assert r["warmUp"]["workloads"] == 12 and r["warmUp"]["createdToBound"]["n"] == 12
    assert len(r["source"]["commit"]) == 40 and "operatorChangedDuringRun" in r["source"]
    for mix in ("singles", "gangs"):
        tessera, baseline = r["tessera"][mix], r["baseline"][mix]
        # every workload placed, every pod bound, in both runs
        assert tessera["createdToBound"]["n"] == tessera["workloads"]
        assert tessera["createdToRunning"]["n"] == tessera["workloads"]
        assert tessera["unbound"] == 0 and baseline["unbound"] == 0
        assert baseline["pods"] == tessera["pods"]
        assert baseline["createdToBound"]["n"] == tessera["workloads"]
        # nothing duplicated, orphaned or missing
        assert tessera["integrity"]["ok"], tessera["integrity"]
        assert tessera["integrity"]["podsRecreated"] == 0
        # the operator's writes are counted: at least one create per pod
        writes = tessera["apiWrites"]["operator"]
        assert writes["byCategory"]["pod create"] >= tessera["pods"]
        assert writes["total"] > tessera["pods"]
        assert tessera["apiWrites"]["others"]["byRequest"]["POST pods/binding"] >= tessera["pods"]
        assert r["ratio"][mix] > 0
        # who spent the CPU in each burst: the operator only in Tessera's
        assert {"kube-apiserver", "etcd", "kube-scheduler", "bench"} <= set(
            baseline["cpuSeconds"]["byProcess"]
        )
        assert "operator" in tessera["cpuSeconds"]["byProcess"]
        assert "operator" not in baseline["cpuSeconds"]["byProcess"]
        # the floor: the same Workloads, each turned into Tessera's pods by an operator
        # that costs next to nothing, all bound, its CPU counted apart
        floor = r["floor"][mix]
        assert floor["pods"] == tessera["pods"] and floor["unbound"] == 0
        assert floor["createdToBound"]["n"] == tessera["workloads"]
        assert floor["podsCreatedPerSecond"] > 0 and r["ratioToFloor"][mix] > 0
        assert "floor operator" in floor["cpuSeconds"]["byProcess"]
        assert "operator" not in floor["cpuSeconds"]["byProcess"]
    singles = r["tessera"]["singles"]
    assert singles["integrity"]["workloads"] == 13  # the burst and the Workload after restart
    idle = singles["idle"]
    assert idle["operatorWrites"] == sum(idle["operatorWritesByCategory"].values())
    assert r["restart"]["seconds"] > 0 and r["restart"]["duplicatesAndOrphans"] == 0
    # the pools' status counted every device of each burst before the next step: measured
    # from the burst's last pod, by polls that start once every replica is ready and give
    # up after 60 s, so it is above 0 and within the slowest Workload's creation to ready
    # (its last pod came after that Workload's creation) plus those 60 s
    for mix in ("singles", "gangs"):
        t = r["tessera"][mix]
        assert 0 < t["poolsCountedSeconds"] <= t["createdToReady"]["max"] + 60 + 5, mix
    # the backlog: every Workload created while the operator was stopped got its pod; then
    # the same backlog through the floor operator
    backlog = r["backlog"]["tessera"]
    assert backlog["workloads"] == 12 and backlog["integrity"]["ok"], backlog["integrity"]
    assert backlog["integrity"]["workloads"] == 12 and backlog["integrity"]["pods"] == 12
    assert backlog["podsCreatedPerSecond"] > 0 and backlog["startToFirstPodSeconds"] > 0
    assert backlog["apiWrites"]["operator"]["byCategory"]["pod create"] >= 12
    assert "operator" in backlog["cpuSeconds"]["byProcess"]
    floor = r["backlog"]["floor"]
    assert floor["workloads"] == 12 and floor["podsCreatedPerSecond"] > 0
    assert "floor operator" in floor["cpuSeconds"]["byProcess"]
    assert r["backlog"]["ratioToFloor"] > 0
    assert r["operator"]["idle"]["rssMB"] > 0 and r["operator"]["peakRssMB"] > 0
    assert all(t["met"] in (True, False) for t in r["targets"])
