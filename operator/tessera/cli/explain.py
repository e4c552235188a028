"""`tessera explain NS/NAME`: why a workload is where it is (or waits), from its status."""

from __future__ import annotations

import argparse
import sys

from tessera import api
from tessera.errors import ApiError, ClusterUnreachable, NotFound


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    explain = sub.add_parser("explain", parents=[common], help="why a workload is where it is")
    explain.add_argument("workload", help="NAME or NAMESPACE/NAME")
    explain.add_argument(
        "-n",
        "--namespace",
        default="default",
        help="namespace of a bare NAME (default: %(default)s)",
    )
    explain.set_defaults(func=_explain)


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
