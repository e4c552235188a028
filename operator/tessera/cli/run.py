"""`tessera run`: starts the operator (kopf runs the process; the controller's loop does the
work), with its metrics and health endpoint and, for replicas, leader election."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys

from tessera import __version__, catalog
from tessera.errors import ClusterUnreachable, CRDsMissing

EXAMPLES = """\
examples:
  # in the cluster (its service account), else the kubeconfig's context; every namespace
  tessera run

  # two namespaces only, JSON log lines, metrics on another port
  tessera run -n ml -n research --log-format json --metrics-port 9090

  # one of several replicas (what the Helm chart's ha.enabled runs)
  tessera run --leader-elect --lease-namespace tessera-system
"""


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    run = sub.add_parser(
        "run",
        parents=[common],
        help="run the operator",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    run.add_argument(
        "--unit-reference",
        default=catalog.REFERENCE_MODEL,
        choices=catalog.model_names(),
        metavar="MODEL",
        help="the catalog model one normalised unit of AcceleratorQuotas stands for "
        "(default: %(default)s)",
    )
    run.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    run.set_defaults(func=_run)


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
    controller = Controller(kube, unit_reference=args.unit_reference)
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
