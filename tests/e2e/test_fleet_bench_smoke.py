"""The fleet benchmark at a tiny scale, end to end: its own control plane, the warm-up, the
operator, the idle window and both SIGKILLs, then one repeat of both mixes and the backlog
through Tessera, the floor operator and the bare scheduler, the results file."""

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
    assert "repeat 1: tessera, floor, baseline" in proc.stdout

    r = json.loads((tmp_path / "fleet-custom.json").read_text())
    assert (tmp_path / "fleet-custom.png").stat().st_size > 0
    assert r["parameters"]["nodes"] == 16 and len(r["fleet"]) == 2
    assert r["parameters"]["repeats"] == 1 and r["machine"]["cpuModel"]
    assert len(r["machine"]["loadAverageAtStart"]) == 3
    assert r["versions"]["apiserver"].startswith("v")
    # the unmeasured warm-up came first: every one of its pods was made and bound
    assert r["parameters"]["warmUpWorkloads"] == 12
    assert r["warmUp"]["workloads"] == 12 and r["warmUp"]["createdToBound"]["n"] == 12
    assert len(r["source"]["commit"]) == 40 and "operatorChangedDuringRun" in r["source"]

    # Tessera alone: the idle window with every Workload Running, then SIGKILL at idle (one
    # Workload created as it restarts) and SIGKILL half-way through the gangs' pods
    idle = r["idle"]
    assert idle["seconds"] == 3 and idle["operatorWrites"] == sum(
        idle["operatorWritesByCategory"].values()
    )
    at_idle = r["killAtIdle"]
    assert at_idle["seconds"] > 0 and at_idle["duplicatesAndOrphans"] == 0
    assert at_idle["integrity"]["workloads"] == 13  # the burst and the Workload after restart
    mid = r["killMidBurst"]
    assert 0 < mid["podsCreatedAtKill"] <= mid["pods"] and mid["timedOut"] is None
    assert mid["duplicatesAndOrphans"] == 0 and mid["neverPlaced"] == 0, mid["integrity"]
    assert mid["restartToAllRunningSeconds"] > 0
    assert mid["podsWithoutNodePin"] == 0, mid["podsWithoutNodePinListed"]

    [rep] = r["repeats"]
    assert rep["order"] == ["tessera", "floor", "baseline"]
    tessera, floor, bare = rep["tessera"], rep["floor"], rep["baseline"]
    for mix in ("singles", "gangs"):
        t, f, b = tessera[mix], floor[mix], bare[mix]
        # every workload placed, every pod bound, on every side
        assert t["createdToBound"]["n"] == t["workloads"] == t["createdToRunning"]["n"]
        assert t["unbound"] == 0 and b["unbound"] == 0 and f["unbound"] == 0
        assert b["pods"] == f["pods"] == t["pods"]
        assert b["createdToBound"]["n"] == f["createdToBound"]["n"] == t["workloads"]
        # nothing duplicated, orphaned or missing
        assert t["integrity"]["ok"], t["integrity"]
        assert t["integrity"]["podsRecreated"] == 0
        # the operator's writes are counted: at least one create per pod
        writes = t["apiWrites"]["operator"]
        assert writes["byCategory"]["pod create"] >= t["pods"]
        assert writes["total"] > t["pods"]
        assert t["apiWrites"]["others"]["byRequest"]["POST pods/binding"] >= t["pods"]
        # the pools' status counted every device of the burst (polls from every replica
        # ready, giving up after 60 s)
        assert 0 < t["poolsCountedSeconds"] <= t["createdToReady"]["max"] + 60 + 5, mix
        # who spent the CPU in each burst: each operator only in its own side's
        assert {"kube-apiserver", "etcd", "kube-scheduler", "bench"} <= set(
            b["cpuSeconds"]["byProcess"]
        )
        assert "operator" in t["cpuSeconds"]["byProcess"]
        assert "operator" not in b["cpuSeconds"]["byProcess"]
        assert "floor operator" in f["cpuSeconds"]["byProcess"]
        assert "operator" not in f["cpuSeconds"]["byProcess"]
        assert f["podsCreatedPerSecond"] > 0
    # the backlogs: every Workload created while the operator was stopped got its pod; the
    # operator's peak RSS while all of them were pending; then the floor operator's
    backlog = tessera["backlog"]
    assert backlog["workloads"] == 12 and backlog["integrity"]["ok"], backlog["integrity"]
    assert backlog["integrity"]["workloads"] == 12 and backlog["integrity"]["pods"] == 12
    assert backlog["podsCreatedPerSecond"] > 0 and backlog["startToFirstPodSeconds"] > 0
    assert backlog["apiWrites"]["operator"]["byCategory"]["pod create"] >= 12
    assert backlog["operatorPeakRssMB"] > 0
    assert "operator" in backlog["cpuSeconds"]["byProcess"]
    assert floor["backlog"]["workloads"] == 12 and floor["backlog"]["podsCreatedPerSecond"] > 0
    assert "floor operator" in floor["backlog"]["cpuSeconds"]["byProcess"]
    assert r["operator"]["idle"]["rssMB"] > 0

    # every target measured, each a median over the repeats with its verdict; the bare
    # scheduler as context
    targets = {t["target"]: t for t in r["targets"]}
    assert all(t["spread"]["n"] >= 1 for t in targets.values()), targets
    assert all(t["verdict"] in ("met", "not met", "undecided") for t in targets.values())
    (mid_target,) = (name for name in targets if name.endswith("after SIGKILL mid-burst"))
    assert targets[mid_target]["verdict"] == "met"
    ratio = targets["pods created/s, Tessera / floor, burst of gangs"]["spread"]
    assert ratio["median"] > 0 and ratio["min"] <= ratio["median"] <= ratio["max"]
    context = {c["figure"]: c for c in r["context"]}
    assert context["bound pods/s, gangs"]["baseline"]["median"] > 0


def test_a_resumed_run_adds_the_missing_repeats(tmp_path: Path) -> None:
    """An earlier run's two repeats (made up here, as a run cut short would have left them),
    then a run with --resume measures the third only: the set-up, the warm-up, then Tessera
    and the floor, and writes the three together."""
    sys.path.append(str(REPO / "bench"))
    import fleet_bench  # bench/fleet_bench.py: the benchmark's runner
    import fleet_report
    from fleet_resume import PHASES

    argv = ["--nodes", "16", "--pools", "2", "--workloads", "12", "--idle-seconds", "3"]
    argv += ["--warm-seconds", "2", "--results-dir", str(tmp_path)]
    pinned = fleet_report.versions(None)
    args = fleet_bench.parse_args([*argv, "--repeats", "2", "--bare-repeats", "1"])
    made_up = {"operatorPodsCreatedPerSecond": 1.0, "podsCreatedPerSecond": 1.0}
    made_up |= {"pods": 12, "workloads": 12}
    repeats = [
        {"order": order} | {side: {p: dict(made_up) for p in PHASES[side]} for side in order}
        for order in (["tessera", "floor", "baseline"], ["floor", "tessera"])
    ]
    earlier = {
        "benchmark": "fleet",
        "startedAt": "2026-12-01T00:00:00+00:00",
        "source": {"commit": "c" * 40, **fleet_report.source()},
        "versions": fleet_report.versions(pinned["KUBERNETES_VERSION"]),  # the server's too
        "parameters": fleet_bench.parameters(args),
        "tesseraAlone": {"singles": {"workloads": 12}},
        "repeats": repeats,
    }
    (tmp_path / "fleet-custom.json").write_text(json.dumps(earlier))

    run = [sys.executable, str(REPO / "bench" / "fleet_bench.py"), *argv]
    run += ["--repeats", "3", "--resume"]
    proc = subprocess.run(run, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "repeat 3 of 3: tessera, then floor" in proc.stdout
    assert "repeat 1 of 3" not in proc.stdout and "operator idle:" not in proc.stdout
    assert "restart: SIGKILL" not in proc.stdout

    r = json.loads((tmp_path / "fleet-custom.json").read_text())
    assert r["repeats"][:2] == repeats and r["parameters"]["repeats"] == 3
    assert r["tesseraAlone"] == earlier["tesseraAlone"] and "idle" not in r
    [resumed] = r["resumed"]
    assert resumed["repeats"] == [3] and resumed["warmUp"]["workloads"] == 12
    assert resumed["source"]["operatorDigest"] == earlier["source"]["operatorDigest"]
    third = r["repeats"][2]
    assert third["order"] == ["tessera", "floor"]
    for mix in ("singles", "gangs"):
        t, f = third["tessera"][mix], third["floor"][mix]
        assert t["integrity"]["ok"], t["integrity"]
        assert f["pods"] == t["pods"] and f["unbound"] == 0  # the pods Tessera made in repeat 3
    targets = {t["target"]: t for t in r["targets"]}
    created = targets["pods created/s, Tessera / floor, burst of gangs"]
    assert created["spread"]["n"] == 3  # the made-up repeats' 1.0 and the one measured
