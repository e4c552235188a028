"""The fleet-scale benchmark: Tessera, a floor operator and the bare kube-scheduler on one local
control plane, phase by phase (a fleet_<phase>.py each, run here and, repeated in rotated order,
by fleet_rotation.py); no phase imports it."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
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
import fleet_idle  # noqa: E402
import fleet_report as report  # noqa: E402
import fleet_resume  # noqa: E402
import fleet_rotation  # noqa: E402
import fleet_setup  # noqa: E402
import fleet_specs as specs  # noqa: E402
import fleet_targets  # noqa: E402
import fleet_warmup  # noqa: E402
from fleet_cleanup import cleanup  # noqa: E402
from fleet_context import Bench  # noqa: E402
from fleet_kube import BenchError  # noqa: E402
from tessera.controller.visits import FULL_PASS  # noqa: E402

# The idle window outlasts the operator's longest periodic pass (every Workload visited each
# FULL_PASS), so a pass that writes or lists when nothing changed shows in it.
IDLE = 1.5 * FULL_PASS
SCALES = {
    "default": {"nodes": 1000, "pools": 8, "workloads": 1000, "idle": IDLE, "warm": 10.0},
    "large": {"nodes": 5000, "pools": 20, "workloads": 10000, "idle": IDLE, "warm": 20.0},
    "custom": {"nodes": 16, "pools": 2, "workloads": 12, "idle": 5.0, "warm": 3.0},
}
REPEATS = {"default": 5, "large": 5, "custom": 1}  # each fleet figure the median of these
WARM_UP = 1000  # Workloads in the unmeasured burst that warms the control plane up


def run(bench: Bench) -> None:
    """The set-up, an unmeasured warm-up, the operator at rest, Tessera alone (the idle
    window and both SIGKILLs), then the repeats of every side's bursts and backlogs in
    rotated order (fleet_rotation.py); every phase is cleaned up before the next. Each
    figure goes into bench.results as soon as it is measured, so a run that fails later
    still reports what it measured; bench.step names the phase for the report of a
    failed run. Resuming an earlier run (--resume), only the set-up, the warm-up and the
    repeats it lacks."""
    a, r = bench.args, bench.results
    fleet_setup.setup(bench)
    if a.earlier is not None:
        fleet_resume.check_versions(a.earlier, report.versions(bench.server_version))
    if a.warm_up:
        bench.step = "warm-up"
        warm_up, phase = fleet_warmup.warm_up(bench, a.warm_up)
        cleanup(bench, phase)
        r["warmUp"] = warm_up
    fleet_setup.start_operator(bench)
    mixes = {
        "singles": specs.singles(a.workloads, bench.pools, ""),
        "gangs": specs.gangs(a.workloads, bench.pools, ""),
    }
    if a.earlier is None:
        bench.step = "operator idle"
        r["operator"] = {"idle": fleet_idle.at_rest(bench)}
        fleet_rotation.tessera_alone(bench, mixes)
    fleet_rotation.repeats(bench, mixes, a.first_repeat)


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
    parser.add_argument(
        "--repeats",
        type=int,
        help="repeats of every side's bursts and backlogs, in rotated order "
        "(default: 5 at the default and large scales, 1 at a custom one)",
    )
    parser.add_argument(
        "--bare-repeats",
        type=int,
        help="run the bare scheduler (context, no target) in the first K repeats only "
        "(default: every repeat)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="add the repeats the scale's results file lacks, up to --repeats (same operator "
        "source and parameters; runs the set-up, the warm-up and those repeats only)",
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
    args.repeats = args.repeats if args.repeats is not None else REPEATS[args.name]
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    args.earlier, args.first_repeat = None, 0
    if args.resume:
        try:
            args.earlier = json.loads(results_path(args).read_text())
        except (OSError, ValueError) as err:
            parser.error(f"--resume: no earlier results to add to: {err}")
        if args.bare_repeats is None:
            args.bare_repeats = args.earlier["parameters"]["bareRepeats"]
    args.bare_repeats = args.repeats if args.bare_repeats is None else args.bare_repeats
    if not 0 <= args.bare_repeats <= args.repeats:
        parser.error("--bare-repeats must be between 0 and --repeats")
    args.warm_up = min(args.workloads, WARM_UP) if args.warm_up is None else args.warm_up
    quick = SCALES["custom"] if custom and args.workloads <= 100 else scale
    args.idle_seconds = args.idle_seconds if args.idle_seconds is not None else quick["idle"]
    args.warm_seconds = args.warm_seconds if args.warm_seconds is not None else quick["warm"]
    if args.earlier is not None:
        digest = report.source()["operatorDigest"]
        try:
            args.first_repeat = fleet_resume.check(args.earlier, parameters(args), digest)
        except fleet_resume.ResumeError as err:
            parser.error(f"--resume {results_path(args)}: {err}")
    return args


def parameters(args: argparse.Namespace) -> dict[str, Any]:
    """What the run measured: with the machine, what its figures depend on."""
    return {
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
        "repeats": args.repeats,
        "bareRepeats": args.bare_repeats,
        "fullPassSeconds": FULL_PASS,
    }


def results_path(args: argparse.Namespace) -> Path:
    paced = f"-rate{args.rate:g}" if args.rate else ""
    return args.results_dir / f"fleet-{args.name}{paced}.json"


def write(args: argparse.Namespace, result: dict[str, Any]) -> tuple[Path, Path | None]:
    """The JSON results and, where there are latencies, the chart of their distributions."""
    args.results_dir.mkdir(parents=True, exist_ok=True)
    out = results_path(args)
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
    out.write_text(dump(result))
    return out, png if panels else None


# A list of numbers only, one per line as json.dumps(indent=1) writes it.
_NUMBERS = re.compile(r"\[\n\s*(-?[\d.e+-]+(?:,\n\s*-?[\d.e+-]+)*)\n\s*\]")


def dump(result: dict[str, Any]) -> str:
    """The results as indented JSON with each list of numbers (a phase's latency samples) on
    one line: at 5,000 nodes, one per line made the file 2.4 MB."""
    text = json.dumps(result, indent=1)
    return _NUMBERS.sub(lambda m: "[" + re.sub(r",\n\s*", ", ", m.group(1)) + "]", text) + "\n"


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
    except (
        BenchError,
        fleet_resume.ResumeError,
        local_cluster.ClusterError,
        urllib3.exceptions.HTTPError,
    ) as err:
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
    # The digest, not the commit: a commit made during the run changes no operator file.
    changed = report.source()["operatorDigest"] != code["operatorDigest"]
    result: dict[str, Any] = {
        "benchmark": "fleet",
        "scale": args.name,
        "startedAt": began.isoformat(timespec="seconds"),
        "durationSeconds": round(time.monotonic() - bench.started, 1),
        "machine": {**report.machine(), "loadAverageAtStart": load_at_start},
        "versions": report.versions(bench.server_version),
        "source": {**code, "operatorChangedDuringRun": changed},
        "parameters": parameters(args),
        "fleet": [
            {"pool": g["name"], "group": g["group"], "zone": g["zone"], "nodes": g["count"]}
            for g in bench.groups
        ],
        **bench.results,
    }
    if failed:
        result.update(failed=failed, failedIn=bench.step)
    if args.earlier is not None:
        result = fleet_resume.merge(args.earlier, result, args.first_repeat)
    result["targets"] = fleet_targets.targets(result)
    result["context"] = fleet_targets.context(result)
    if changed:
        bench.say("warning: operator/ changed during the run; the figures mix two versions")
    out, png = write(args, result)
    written = f"{out} and {png}" if png else f"{out} (no latencies to chart)"
    bench.say(("done" if ok else f"failed in {bench.step}; what it measured") + f": {written}")
    print(report.table(result["targets"]))
    print(report.comparison_table(report.comparison(result)))
    print(report.orders(result))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
