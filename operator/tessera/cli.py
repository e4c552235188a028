"""The `tessera` command: `run` starts the operator, `explain` prints why a workload went
where it did. Wires the layers together; clear messages and exit codes, never a traceback."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Sequence

from tessera import __version__, api
from tessera.errors import ApiError, ClusterUnreachable, CRDsMissing, NotFound


def _run(args: argparse.Namespace) -> int:
    import kopf

    from tessera import controller as kopf_app
    from tessera import metrics
    from tessera.controller.leadership import Leader
    from tessera.controller.pipeline import Controller
    from tessera.k8s import Kube

    log_format = kopf.LogFormat.JSON if args.log_format == "json" else kopf.LogFormat.PLAIN
    kopf.configure(verbose=args.verbose, log_format=log_format)
    log = logging.getLogger("tessera")
    try:
        kube = Kube.connect(args.kubeconfig, args.context)
        version = kube.version()
        kube.check_crds()
    except (ClusterUnreachable, CRDsMissing) as err:
        print(f"tessera: {err}", file=sys.stderr)
        return 2
    log.info("tessera %s connected to Kubernetes %s", __version__, version)
    controller = Controller(kube)
    health = metrics.Health(kube.version, lambda: controller.heartbeat)
    try:
        server = metrics.serve(args.metrics_address, args.metrics_port, health)
    except OSError as err:
        print(
            f"tessera: cannot serve metrics on {args.metrics_address}:{args.metrics_port}: "
            f"{err.strerror}",
            file=sys.stderr,
        )
        return 2
    log.info("metrics and /healthz on %s:%d", args.metrics_address, args.metrics_port)

    # kopf runs the process; it watches nothing itself (see tessera.controller.informers), so it
    # writes no finalizers, progress annotations or handler Events on Tessera's objects.
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False
    memo = kopf.Memo(
        controller=controller, kube=kube, leader=None, namespaces=tuple(args.namespace)
    )
    if args.leader_elect:
        identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
        memo.leader = Leader(kube, args.lease_namespace, args.lease_name, identity)
        log.info(
            "leader election on lease %s/%s as %s", args.lease_namespace, args.lease_name, identity
        )
    _ = kopf_app  # importing registers the loop with kopf
    try:
        kopf.run(
            clusterwide=True,  # kopf itself watches nothing; the caches honour --namespace
            # Replicas coordinate through the Lease, not kopf peering: every replica keeps
            # its watches (a warm standby), only the Lease holder places and writes.
            standalone=True,
            settings=settings,
            memo=memo,
        )
    finally:
        server.shutdown()
    return 0


def _explain(args: argparse.Namespace) -> int:
    from tessera.k8s import Kube
    from tessera.placement import table

    namespace, _, name = args.workload.rpartition("/")
    namespace = namespace or args.namespace
    try:
        kube = Kube.connect(args.kubeconfig, args.context)
        path = f"/apis/{api.GROUP}/{api.VERSION}/namespaces/{namespace}/workloads/{name}"
        body = kube.request("GET", path)
    except NotFound:
        print(f"tessera: workload {namespace}/{name} not found", file=sys.stderr)
        return 1
    except (ClusterUnreachable, ApiError) as err:
        print(f"tessera: {err}", file=sys.stderr)
        return 2
    status = api.WorkloadStatus.model_validate(body.get("status") or {})
    where = (
        f"on {status.pool} ({status.accelerator}, score {status.score:.1f})"
        if status.pool
        else "not placed"
    )
    print(f"{namespace}/{name}: {status.phase.value}, {where}")
    if status.message:
        print(status.message)
    if status.candidates:
        print()
        print(table(status.candidates))
    for excluded in status.excluded_pools:
        print(f"withdrawn from {excluded.pool}: {excluded.reason}")
    return 0


def parser() -> argparse.ArgumentParser:
    summary = (__doc__ or "").partition(".")[0] + "."  # the docstring's first sentence
    top = argparse.ArgumentParser(prog="tessera", description=summary)
    top.add_argument("--version", action="version", version=f"tessera {__version__}")
    sub = top.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster, then KUBECONFIG)"
    )
    common.add_argument("--context", help="kubeconfig context")

    run = sub.add_parser("run", parents=[common], help="run the operator")
    run.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        help="watch workloads in this namespace (repeatable; default: all)",
    )
    run.add_argument(
        "--metrics-port",
        type=int,
        default=8080,
        help="port of /metrics and /healthz (default: %(default)s)",
    )
    run.add_argument(
        "--metrics-address",
        default="0.0.0.0",
        help="address to serve metrics on (default: %(default)s)",
    )
    run.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="text",
        help="log lines (default: %(default)s)",
    )
    run.add_argument(
        "--leader-elect",
        action="store_true",
        help="run as one of several replicas: only the holder of a Lease places workloads",
    )
    run.add_argument(
        "--lease-name",
        default="tessera-operator",
        help="Lease for --leader-elect (default: %(default)s)",
    )
    run.add_argument(
        "--lease-namespace",
        default=os.environ.get("POD_NAMESPACE", "default"),
        help="namespace of the Lease (default: $POD_NAMESPACE or default)",
    )
    run.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    run.set_defaults(func=_run)

    explain = sub.add_parser("explain", parents=[common], help="why a workload is where it is")
    explain.add_argument("workload", help="NAME or NAMESPACE/NAME")
    explain.add_argument(
        "-n",
        "--namespace",
        default="default",
        help="namespace of a bare NAME (default: %(default)s)",
    )
    explain.set_defaults(func=_explain)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
