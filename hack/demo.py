"""`make demo`: the local control plane with the simulated fleet, Tessera's CRDs and example
pools, the operator in the background, the example workloads, and a table of where each
workload landed and why.

Safe to re-run: the cluster is reused when it is up, applies are server-side and
idempotent, and a previous demo operator is stopped before a new one starts. Everything
lives in the state directory (default `.tessera/`); `make cluster-down` stops it all.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cluster as cluster_mod
from cluster import Cluster, ClusterError

REPO = cluster_mod.REPO
CRD_DIR = REPO / "crds"
POOLS_DIR = REPO / "examples" / "pools"
WORKLOADS_DIR = REPO / "examples" / "workloads"
NAMESPACE = "ml"
DONE_PHASES = ("Running", "Succeeded")
STEPS = 6


class DemoError(RuntimeError):
    """A step of the demo failed; the message says what and where to look."""


_now = {"step": ""}  # the step running now, named when the demo fails


def say(message: str = "") -> None:
    print(message, flush=True)


@contextlib.contextmanager
def step(number: int, title: str, timed: bool = True) -> Iterator[None]:
    """Prints the step's title and its duration; names the step when it fails."""
    _now["step"] = f"step {number}/{STEPS} ({title})"
    say(f"[{number}/{STEPS}] {title}")
    started = time.monotonic()
    yield
    if timed:
        say(f"      done in {time.monotonic() - started:.1f}s")
    _now["step"] = ""


def default_state_dir() -> Path:
    """The same default as hack/cluster.py, so `make cluster-down` stops what the demo started."""
    return Path(os.environ.get("TESSERA_STATE_DIR", REPO / ".tessera"))


def where() -> str:
    return f" at {_now['step']}" if _now["step"] else ""


def shown(path: Path) -> str:
    """A path as the user would type it from the repository root."""
    with contextlib.suppress(ValueError):
        return str(path.relative_to(REPO))
    return str(path)


# --- the operator process -------------------------------------------------------------------


def operator_command() -> list[str]:
    script = Path(sys.executable).parent / "tessera"
    return [str(script)] if script.exists() else [sys.executable, "-m", "tessera"]


def is_operator(pid: int) -> bool:
    """Whether pid is alive and is a `tessera run` (not a stranger that reused the pid)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"run" in argv and any(b"tessera" in arg for arg in argv)


def stop_operator(pid_file: Path, which: str = "the previous demo operator") -> None:
    """Stops the operator recorded in pid_file, if it is still running, and forgets it."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        pid_file.unlink(missing_ok=True)
        return
    if is_operator(pid):
        say(f"      stopping {which} (pid {pid})")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while is_operator(pid) and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # reaps it when it is our own child
            time.sleep(0.1)
        if is_operator(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("      | " + line for line in text[-lines:])


def start_operator(local: Cluster, timeout: float = 60) -> tuple[int, int]:
    """Starts `tessera run` in the background; returns (pid, metrics port) once /healthz is OK."""
    pid_file = local.state_dir / "operator.pid"
    stop_operator(pid_file)
    port = cluster_mod.free_port()
    log_path = local.logs / "operator.log"
    argv = [
        *operator_command(),
        "run",
        "--kubeconfig",
        str(local.kubeconfig),
        "--metrics-address",
        "127.0.0.1",
        "--metrics-port",
        str(port),
    ]
    # `tessera run --kubeconfig` configures Tessera's own client, but kopf logs in on its own
    # (in-cluster, then KUBECONFIG): without this it never watches anything.
    env = {**os.environ, "KUBECONFIG": str(local.kubeconfig)}
    with log_path.open("ab") as log_file:
        log_file.write(f"\n==== {time.strftime('%F %T')} {' '.join(argv)}\n".encode())
        log_file.flush()
        proc = subprocess.Popen(
            argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=REPO, env=env,
        )  # fmt: skip
    pid_file.write_text(f"{proc.pid}\n")
    url = f"http://127.0.0.1:{port}/healthz"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            pid_file.unlink(missing_ok=True)
            raise DemoError(
                f"the operator exited with status {code}; the end of {shown(log_path)}:\n"
                + tail(log_path)
            )
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as resp:
            if resp.status == 200:
                return proc.pid, port
        time.sleep(0.3)
    raise DemoError(f"the operator's {url} did not answer OK within {timeout:.0f}s")


# --- workloads --------------------------------------------------------------------------------


def workloads(local: Cluster) -> list[dict[str, Any]]:
    out = local.kubectl("get", "awl", "-n", NAMESPACE, "-o", "json").stdout
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return sorted(items, key=lambda w: w["metadata"]["name"])


def example_workloads() -> list[tuple[Path, str]]:
    """The example Workloads (file, name), highest priority first. The operator places first
    come, first served across its cycles (priority orders only the Workloads one cycle
    sees), and `kubectl apply` creates a folder's files one by one, so a cycle may see only
    the first few: submitted in priority order, the result does not depend on that."""
    import yaml

    found = []
    for path in sorted(WORKLOADS_DIR.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "Workload":
                priority = int((doc.get("spec") or {}).get("priority", 0))
                found.append((-priority, doc["metadata"]["name"], path))
    return [(path, name) for _, name, path in sorted(found)]


def is_ready(status: dict[str, Any]) -> bool:
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return conds.get("Ready") == "True"


def describe(status: dict[str, Any] | None) -> str:
    if status is None:
        return "not created"
    if not status:
        return "no status: the operator has not handled it (is it running and watching?)"
    return f"{status.get('phase', '?')}: {status.get('message') or 'no message'}"


def wait_for_workloads(
    local: Cluster, expected: list[str], operator_pid: int, timeout: float
) -> list[dict[str, Any]]:
    """Polls until every expected workload is placed, Running/Succeeded and Ready."""
    deadline = time.monotonic() + timeout
    last_line, last_print = "", 0.0
    total = len(expected)
    while True:
        if not is_operator(operator_pid):
            raise DemoError("the operator stopped while the workloads were being placed")
        items = [w for w in workloads(local) if w["metadata"]["name"] in expected]
        statuses = {w["metadata"]["name"]: w.get("status") or {} for w in items}
        failed = [n for n, s in statuses.items() if s.get("phase") == "Failed"]
        if failed:
            raise DemoError(
                "workload failed: "
                + "; ".join(f"{n}: {statuses[n].get('message', '')}" for n in failed)
            )
        placed = sum(1 for s in statuses.values() if s.get("pool"))
        running = sum(1 for s in statuses.values() if s.get("phase") in DONE_PHASES)
        ready = sum(1 for s in statuses.values() if is_ready(s))
        line = f"placed {placed}/{total}, running {running}/{total}, ready {ready}/{total}"
        now = time.monotonic()
        if line != last_line or now - last_print >= 10:
            say(f"      {line}")
            last_line, last_print = line, now
        if len(items) == total and placed == running == ready == total:
            return items
        if now >= deadline:
            waiting = [
                f"        {n}: " + describe(statuses.get(n))
                for n in expected
                if n not in statuses
                or statuses[n].get("phase") not in DONE_PHASES
                or not is_ready(statuses[n])
            ]
            log_path = local.logs / "operator.log"
            raise DemoError(
                f"timed out after {timeout:g}s ({line}); still waiting for:\n"
                + "\n".join(waiting)
                + f"\n      the end of {shown(log_path)}:\n"
                + tail(log_path, 10)
            )
        time.sleep(1)


def devices_held(items: list[dict[str, Any]]) -> dict[str, int]:
    """Devices the workloads hold on each pool: a Running workload's replicas times its
    devices per pod, on the pool it was placed on."""
    held: dict[str, int] = {}
    for w in items:
        status = w.get("status") or {}
        if status.get("phase") == "Running" and status.get("pool"):
            spec = w.get("spec") or {}
            count = spec.get("replicas", 1) * (spec.get("accelerator") or {}).get("count", 1)
            held[status["pool"]] = held.get(status["pool"], 0) + count
    return held


def wait_for_pool_counts(local: Cluster, expected: list[str], timeout: float) -> float:
    """Polls until every pool counts at least the devices the example workloads hold on it
    (more when other workloads run there too), so the fleet table agrees with the placements
    above it: the operator writes a pool's device counts at most every 5 s
    (docs/operations.md), and the pools' first status was just written. Returns the seconds
    it waited."""
    started = time.monotonic()
    while True:
        held = devices_held([w for w in workloads(local) if w["metadata"]["name"] in expected])
        pools = json.loads(local.kubectl("get", "acp", "-o", "json").stdout)["items"]
        shown = {
            p["metadata"]["name"]: ((p.get("status") or {}).get("devices") or {}).get("allocated")
            or 0
            for p in pools
        }
        behind = {name: n for name, n in shown.items() if n < held.get(name, 0)}
        waited = time.monotonic() - started
        if not behind:
            return waited
        if waited >= timeout:
            raise DemoError(
                f"the pools' device counts did not catch up after {timeout:g}s: "
                + ", ".join(
                    f"{name} shows {n} allocated, the example workloads hold {held[name]}"
                    for name, n in sorted(behind.items())
                )
            )
        time.sleep(0.5)


# --- the result table -------------------------------------------------------------------------


def clip(text: str, width: int = 80) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def objective(spec: dict[str, Any]) -> str:
    weights = spec.get("weights")
    if weights:
        terms = ("performance", "cost", "energy")
        return "custom " + "/".join(f"{weights.get(t, 0):g}" for t in terms)
    return str(spec.get("objective", "balanced"))


def runner_up(status: dict[str, Any]) -> str:
    """The best candidate other than the chosen pool: its score and why it was not chosen
    (no room now, or, with a better score and room, that it would finish much later)."""
    others = [c for c in status.get("candidates") or [] if c.get("pool") != status.get("pool")]
    if not others:
        return "- (no other pool passes its selection)"
    c = others[0]
    if c.get("feasible"):
        text = f"{c['pool']} ({c.get('score', 0):.1f})"
        if c.get("reasons"):
            text += f": {c['reasons'][0]}"
        return clip(text)
    reasons = c.get("reasons") or ["infeasible"]
    return clip(f"{c['pool']}: {reasons[0]}")


def placement_table(items: list[dict[str, Any]]) -> str:
    head = ("WORKLOAD", "POOL", "ACCELERATOR", "SCORE", "OBJECTIVE", "PHASE", "RUNNER-UP")
    rows = [head]
    for w in items:
        s = w.get("status") or {}
        score = s.get("score")
        rows.append(
            (
                w["metadata"]["name"],
                s.get("pool") or "-",
                s.get("accelerator") or "-",
                f"{score:.1f}" if isinstance(score, int | float) else "-",
                objective(w.get("spec") or {}),
                s.get("phase", "-"),
                runner_up(s),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join(
        "  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
    )


def indent(text: str) -> str:
    return "\n".join("  " + line for line in text.rstrip().splitlines())


def stop_command(local: Cluster) -> str:
    if local.state_dir == default_state_dir().resolve():
        return "make cluster-down"
    return f".venv/bin/python hack/cluster.py down --state-dir {local.state_dir}"


def next_steps(local: Cluster, port: int) -> str:
    kubectl = cluster_mod.binaries()["kubectl"]
    kubeconfig = shown(local.kubeconfig)
    return "\n".join(
        [
            "Look further (from the repository root):",
            f"  export KUBECONFIG={local.kubeconfig}",
            f"  alias kubectl={kubectl}",
            "  kubectl get acp,awl -A",
            f"  kubectl describe awl -n {NAMESPACE} llm-pretrain",
            f"  .venv/bin/tessera explain {NAMESPACE}/llm-pretrain --kubeconfig {kubeconfig}",
            f"  curl http://127.0.0.1:{port}/metrics     # operator metrics (/healthz too)",
            f"  operator log: {shown(local.logs / 'operator.log')}",
            f"  control-plane logs: {shown(local.logs)}/",
            f"Stop everything (operator, control plane, state): {stop_command(local)}",
        ]
    )


# --- main -------------------------------------------------------------------------------------


def run(local: Cluster, timeout: float, keep: bool = True) -> int:
    say(f"Tessera demo (state in {shown(local.state_dir)}/)")
    with step(1, "Starting the local control plane with the simulated fleet"):
        local.up()
        nodes = local.kubectl("get", "nodes", "--no-headers").stdout.strip().splitlines()
        say(f"      {len(nodes)} nodes, API server {local.server}")
    with step(2, "Installing the CRDs and the example accelerator pools"):
        local.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_DIR))
        crds = [f"crd/{p.stem}" for p in sorted(CRD_DIR.glob("*.yaml"))]
        local.wait_established(crds)
        local.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(POOLS_DIR))
        pools = sorted(p.stem for p in POOLS_DIR.glob("*.yaml"))
        say(f"      {len(crds)} CRDs Established; pools: {', '.join(pools)}")
    with step(3, "Starting the operator in the background"):
        pid, port = start_operator(local)
        say(f"      pid {pid}, log {shown(local.logs / 'operator.log')}, "
            f"metrics http://127.0.0.1:{port}/metrics")  # fmt: skip
    with step(4, f"Submitting the example workloads (namespace {NAMESPACE})"):
        workloads = example_workloads()
        expected = [name for _, name in workloads]
        local.kubectl("apply", "--server-side", "--force-conflicts",
                      "-f", str(WORKLOADS_DIR / "namespace.yaml"))  # fmt: skip
        files = list(dict.fromkeys(str(path) for path, _ in workloads))  # in that order
        local.kubectl("apply", "--server-side", "--force-conflicts", *(f"-f={f}" for f in files))
        say(f"      {', '.join(expected)}")
    with step(5, f"Waiting until every workload is placed and running (up to {timeout:g}s)"):
        items = wait_for_workloads(local, expected, pid, timeout)
        waited = wait_for_pool_counts(local, expected, timeout=15)
        say(f"      pools' device counts caught up {waited:.1f}s later (written every 5 s)")
    with step(6, "Where each workload landed and why", timed=False):
        say()
        say(placement_table(items))
        say()
        say("  The fleet (kubectl get acp):")
        say(indent(local.kubectl("get", "acp").stdout))
    if keep:
        say()
        say(next_steps(local, port))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=default_state_dir(),
        help="where the cluster and operator keep their state and logs (default .tessera)",
    )
    parser.add_argument(
        "--keep",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="leave the operator and control plane running at the end (default: keep)",
    )
    parser.add_argument(
        "--timeout", type=float, default=120, help="seconds to wait for the workloads"
    )
    args = parser.parse_args(argv)
    local = Cluster(args.state_dir.resolve())
    ok = False
    try:
        code = run(local, args.timeout, args.keep)
        ok = True
        return code
    except (DemoError, ClusterError, subprocess.SubprocessError, OSError, ValueError) as err:
        print(f"\ndemo failed{where()}: {err}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"\ndemo interrupted{where()}", file=sys.stderr)
    except Exception as err:  # never a bare traceback; say what broke
        print(f"\ndemo failed{where()}: {type(err).__name__}: {err}", file=sys.stderr)
    finally:
        if not args.keep:
            say("--no-keep: stopping the operator and the control plane")
            stop_operator(local.state_dir / "operator.pid", "the operator")
            local.down(quiet=True, keep_logs=not ok)
    print(f"logs: {shown(local.logs)}/ (operator.log, kube-apiserver.log, ...)", file=sys.stderr)
    if args.keep:
        print(f"stop everything with: {stop_command(local)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
