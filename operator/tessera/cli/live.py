"""What the read-only commands share: a connection that fails with a clear message, the live
World read once from the API server (the operator's own view, built by the same pure code),
and output as a table or as YAML or JSON for scripts."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import yaml

from tessera import api
from tessera.errors import ApiError, ClusterUnreachable, NotFound, TesseraError
from tessera.k8s import Kube
from tessera.world.facts import namespace_facts, node_facts, object_facts, pod_facts
from tessera.world.snapshot import World

# Exit codes every command shares: 0 done, 1 a negative answer (not found, would wait),
# 2 bad input or no cluster.
OK, NO, BAD = 0, 1, 2


class Failed(Exception):
    """A command cannot go on: the message is printed as `tessera: ...`, the code returned."""

    def __init__(self, message: str, code: int = BAD) -> None:
        super().__init__(message)
        self.code = code


def connect(args: argparse.Namespace) -> Kube:
    try:
        return Kube.connect(args.kubeconfig, args.context)
    except ClusterUnreachable as err:
        raise Failed(str(err)) from err


def _items(kube: Kube, path: str) -> list[dict[str, Any]]:
    try:
        items: list[dict[str, Any]] = kube.request("GET", path).get("items") or []
    except (ClusterUnreachable, ApiError) as err:
        raise Failed(str(err)) from err
    return items


def world(kube: Kube) -> World:
    """The fleet as the operator sees it now: nodes, pods, pools, workloads, namespaces and
    quotas, each read with one LIST (the kinds the operator watches, tessera.watched).
    Read-only. A cluster whose CRDs predate AcceleratorQuota has no quotas."""
    base = f"/apis/{api.GROUP}/{api.VERSION}"
    pods = _items(kube, "/api/v1/pods")  # every pod: others' hold devices too
    try:
        quotas = kube.request("GET", f"{base}/acceleratorquotas").get("items") or []
    except NotFound:
        quotas = []
    except (ClusterUnreachable, ApiError) as err:
        raise Failed(str(err)) from err
    return World(
        quotas={q.name: q for q in map(object_facts, quotas)},
        nodes={n.name: n for n in map(node_facts, _items(kube, "/api/v1/nodes"))},
        pods=[pod_facts(p) for p in pods],
        pools={p.name: p for p in map(object_facts, _items(kube, f"{base}/acceleratorpools"))},
        workloads={w.key: w for w in map(object_facts, _items(kube, f"{base}/workloads"))},
        namespaces={
            n["metadata"]["name"]: namespace_facts(n) for n in _items(kube, "/api/v1/namespaces")
        },
    )


def add_output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o",
        "--output",
        choices=["table", "yaml", "json"],
        default="table",
        help="table for people (default), yaml or json for scripts",
    )


def emit(args: argparse.Namespace, data: Any, table: Callable[[], str]) -> None:
    """Prints `data` as YAML or JSON when asked, else the human `table()`."""
    if args.output == "json":
        print(json.dumps(data, indent=2, sort_keys=False, default=str))
    elif args.output == "yaml":
        print(yaml.safe_dump(data, sort_keys=False, default_flow_style=False).rstrip())
    else:
        print(table())


def guarded(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A command whose failures are a line on stderr and an exit code, never a traceback."""

    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except Failed as err:
            print(f"tessera: {err}", file=sys.stderr)
            return err.code
        except TesseraError as err:
            print(f"tessera: {err}", file=sys.stderr)
            return BAD

    return run


def columns(rows: list[tuple[str, ...]]) -> str:
    """Fixed-width columns, two spaces apart, the last one free (kubectl's look)."""
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        ("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1]).rstrip()
        for r in rows
    )
