"""The fleet-scale benchmark: Tessera, the bare kube-scheduler and a floor operator on one local
control plane, phase by phase (a fleet_<phase>.py each, run in order here); no phase imports it."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import urllib3

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "hack"))

import cluster as local_cluster  # noqa: E402  (hack/cluster.py)
import fleet_backlog  # noqa: E402
import fleet_baseline  # noqa: E402
import fleet_bursts  # noqa: E402
import fleet_floor  # noqa: E402
import fleet_idle  # noqa: E402
import fleet_report as report  # noqa: E402
import fleet_restart  # noqa: E402
import fleet_setup  # noqa: E402
import fleet_specs as specs  # noqa: E402
import fleet_warmup  # noqa: E402
from fleet_cleanup import cleanup  # noqa: E402
from fleet_context import Bench, pods_made, ratio  # noqa: E402
from fleet_kube import BenchError  # noqa: E402

SCALES = {
    "default": {"nodes": 1000, "pools": 8, "workloads": 1000, "idle": 20.0, "warm": 10.0},
    "large": {"nodes": 5000, "pools": 20, "workloads": 10000, "idle": 30.0, "warm": 20.0},
    "custom": {"nodes": 16, "pools": 2, "workloads": 12, "idle": 5.0, "warm": 3.0},
}
WARM_UP = 1000  # Workloads in the unmeasured burst that warms the control plane up


def run(bench: Bench) -> None:
    """The set-up, an unmeasured warm-up, six measured bursts and two backlogs, in that
    order; every phase but the last is cleaned up before the next. Each figure goes into
    bench.results as soon as it is measured, so a run that fails later still reports what
    it measured; bench.step names the phase for the report of a failed run."""
    a, r = bench.args, bench.results
    fleet_setup.setup(bench)
    if a.warm_up:
        bench.step = "warm-up"
        warm_up, phase = fleet_warmup.warm_up(bench, a.warm_up)
        cleanup(bench, phase)
        r["warmUp"] = warm_up
    fleet_setup.start_operator(bench)
    bench.step = "operator idle"
    op: dict[str, Any] = {"idle": fleet_idle.at_rest(bench), "burstCpuSeconds": {}}
    r.update(operator=op, tessera={}, baseline={}, ratio={})
    mixes = {
        "singles": specs.singles(a.workloads, bench.pools, ""),
        "gangs": specs.gangs(a.workloads, bench.pools, ""),
    }
    pods = {}  # the pods Tessera made of each mix: the baseline and the floor make them again

    # Tessera's bursts; after the singles, with every Workload Running, the idle window
    # and the restart.
    for mix, workloads in mixes.items():
        bench.step = f"tessera {mix}"
        t, phase, ready = fleet_bursts.tessera(bench, mix, workloads)
        restart = None
        if mix == "singles":
            t["idle"] = fleet_idle.window(bench, ready, len(workloads))
            restart = fleet_restart.restart(bench, phase)
        t["integrity"] = bench.integrity(phase)
        pods[mix] = pods_made(phase)
        r["tessera"][mix] = t
        op["burstCpuSeconds"][mix] = t["operatorCpuSeconds"]
        if restart is not None:
            r["restart"] = restart
            op["peakRssMB"] = restart["peakRssMBBeforeKill"]
            op["idleWithWorkloads"] = {
                "seconds": t["idle"]["seconds"],
                "cpuSeconds": t["idle"]["operatorCpuSeconds"],
                "rssMB": t["idle"]["operatorRssMB"],
            }
        r["restart"]["duplicatesAndOrphans"] = sum(
            x["integrity"]["duplicatesAndOrphans"] for x in r["tessera"].values()
        )
        bench.step = f"clean-up after tessera {mix}"
        cleanup(bench, phase)
    op["afterRestartPeakRssMB"] = round(bench.operator.figures()["peakRssMB"], 1)

    # Tessera's backlog: singles created while it is stopped.
    bench.step = "tessera backlog"
    pending = specs.singles(a.workloads, bench.pools, "")
    t, phase = fleet_backlog.tessera(bench, pending)
    pods["backlog"] = pods_made(phase)
    r["backlog"] = {"tessera": t}
    r["restart"]["duplicatesAndOrphans"] += t["integrity"]["duplicatesAndOrphans"]
    bench.step = "clean-up after tessera backlog"
    cleanup(bench, phase)

    # The same pods without Tessera: created directly, then by the floor operator.
    bench.say("stopping the operator for the baseline and the floor")
    bench.operator.stop()
    r.update(floor={}, ratioToFloor={})
    for kind in ("baseline", "floor"):
        for mix, workloads in mixes.items():
            bench.step = f"{kind} {mix}"
            if kind == "baseline":
                b, phase = fleet_baseline.baseline(bench, mix, pods[mix])
                r["ratio"][mix] = ratio(
                    r["tessera"][mix]["podsBoundPerSecond"], b["podsBoundPerSecond"]
                )
            else:
                b, phase = fleet_floor.floor(bench, mix, workloads, pods[mix])
                r["ratioToFloor"][mix] = ratio(
                    r["tessera"][mix]["podsBoundPerSecond"], b["podsBoundPerSecond"]
                )
            r[kind][mix] = b
            bench.step = f"clean-up after {kind} {mix}"
            cleanup(bench, phase)
    bench.step = "floor backlog"
    b, phase = fleet_floor.floor(bench, "backlog", pending, pods["backlog"], backlog=True)
    r["backlog"]["floor"] = b
    r["backlog"]["ratioToFloor"] = ratio(
        r["backlog"]["tessera"]["podsCreatedPerSecond"], b["podsCreatedPerSecond"]
    )
    for watch in phase.watches:  # the last phase leaves its pods: the cluster goes next
        watch.stop()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=" ".join((__doc__ or "").split()))
    parser.add_argument("--scale", choices=["default", "large"], default="default")
    parser.add_argument("--nodes", type=int, help="override the scale's node count")
    parser.add_argument("--pools", type=int, help="override the scale's pool count")
    parser.add_argument("--workloads", type=int, help="override the scale's N")
    parser.add_argument("--threads", type=int, default=16, help="client threads creating objects")
    parser.add_argument(
        "--rate",
        type=float,
        help="offer the bursts at this many pods/s instead of as fast as the client can",
    )
    parser.add_argument("--idle-seconds", type=float, help="idle window after the burst")
    parser.add_argument("--warm-seconds", type=float, help="quiet period before measuring idle")
    parser.add_argument(
        "--warm-up",
        type=int,
        help=f"Workloads in the unmeasured first burst (default: N, at most {WARM_UP}; 0: none)",
    )
    parser.add_argument("--timeout", type=float, default=120, help="base timeout of each wait (s)")
    parser.add_argument("--results-dir", type=Path, default=HERE / "results")
    parser.add_argument("--keep-state", action="store_true", help="keep the state dir and logs")
    args = parser.parse_args(argv)
    custom = any(x is not None for x in (args.nodes, args.pools, args.workloads))
    args.name = "custom" if custom else args.scale
    if args.rate is not None and args.rate <= 0:
        parser.error("--rate must be above 0")
    scale = SCALES[args.scale]
    args.nodes = args.nodes or scale["nodes"]
    args.pools = args.pools or scale["pools"]
    args.workloads = args.workloads or scale["workloads"]
    args.warm_up = min(args.workloads, WARM_UP) if args.warm_up is None else args.warm_up
    quick = SCALES["custom"] if custom and args.workloads <= 100 else scale
    args.idle_seconds = args.idle_seconds if args.idle_seconds is not None else quick["idle"]
    args.warm_seconds = args.warm_seconds if args.warm_seconds is not None else quick["warm"]
    return args


def write(args: argparse.Namespace, result: dict[str, Any]) -> tuple[Path, Path | None]:
    """The JSON results and, where there are latencies, the chart of their distributions."""
    args.results_dir.mkdir(parents=True, exist_ok=True)
    paced = f"-rate{args.rate:g}" if args.rate else ""
    out = args.results_dir / f"fleet-{args.name}{paced}.json"
    png = out.with_suffix(".png")
    p = result["parameters"]
    title = (
        f"Tessera fleet benchmark ({args.name}): {p['workloads']:,} workloads, "
        f"{p['nodes']:,} nodes in {p['pools']} pools"
    )
    panels = report.curves(result)
    if panels:
        report.chart(png, panels, title)
    else:
        png.unlink(missing_ok=True)  # an earlier run's chart would not match these results
    out.write_text(json.dumps(result, indent=1) + "\n")
    return out, png if panels else None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    state = Path(tempfile.mkdtemp(prefix="tessera-bench-fleet-"))
    bench = Bench(args, state)
    began = datetime.now(UTC)
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    code = report.source()
    failed: str | None = None
    ok = False
    try:
        with local_cluster.terminated_as_exit():
            bench.say(
                f"fleet benchmark ({args.name}): {args.nodes} nodes, {args.pools} pools, "
                f"{args.workloads} workloads, {args.threads} client threads" + bench.pace
            )
            run(bench)
            ok = True
    except (BenchError, local_cluster.ClusterError, urllib3.exceptions.HTTPError) as err:
        failed = str(err) or type(err).__name__
        print(f"fleet benchmark failed ({bench.step}): {failed}", file=sys.stderr)
    except Exception as err:  # a bug in the harness: what was measured is still written
        failed = f"{type(err).__name__}: {err}"
        traceback.print_exc()
        print(f"fleet benchmark failed ({bench.step}): {failed}", file=sys.stderr)
    finally:
        bench.cpu.stop()
        with contextlib.suppress(Exception):
            if hasattr(bench, "operator"):
                bench.operator.stop()
        bench.cluster.down(quiet=True, keep_logs=not ok or args.keep_state)
        if ok and not args.keep_state:
            shutil.rmtree(state, ignore_errors=True)
        else:
            print(f"state and logs kept in {state}", file=sys.stderr)
    if not bench.results:
        return 1  # failed before measuring anything: no results to write
    result: dict[str, Any] = {
        "benchmark": "fleet",
        "scale": args.name,
        "startedAt": began.isoformat(timespec="seconds"),
        "durationSeconds": round(time.monotonic() - bench.started, 1),
        "machine": {**report.machine(), "loadAverageAtStart": load_at_start},
        "versions": report.versions(bench.server_version),
        # The digest, not the commit: a commit made during the run changes no operator file.
        "source": {
            **code,
            "operatorChangedDuringRun": report.source()["operatorDigest"] != code["operatorDigest"],
        },
        "parameters": {
            "nodes": args.nodes,
            "pools": args.pools,
            "devicesPerNode": 8,
            "workloads": args.workloads,
            "gangSizes": list(specs.GANG_SIZES),
            "clientThreads": args.threads,
            "clientPodsPerSecond": args.rate,  # None: as fast as the client can
            "idleSeconds": args.idle_seconds,
            "warmSeconds": args.warm_seconds,
            "warmUpWorkloads": args.warm_up,
        },
        "fleet": [
            {"pool": g["name"], "group": g["group"], "zone": g["zone"], "nodes": g["count"]}
            for g in bench.groups
        ],
        **bench.results,
    }
    if failed:
        result.update(failed=failed, failedIn=bench.step)
    result["targets"] = report.targets(result)
    if result["source"]["operatorChangedDuringRun"]:
        bench.say("warning: operator/ changed during the run; the figures mix two versions")
    out, png = write(args, result)
    written = f"{out} and {png}" if png else f"{out} (no latencies to chart)"
    bench.say(("done" if ok else f"failed in {bench.step}; what it measured") + f": {written}")
    print(report.table(result["targets"]))
    print(report.comparison_table(report.comparison(result)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
