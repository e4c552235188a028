"""What the read-only commands share: a connection that fails with a clear message, the live
World read once from the API server (the operator's own view, built by the same pure code),
and output as a table or as YAML or JSON for scripts."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from typing import Any

import yaml

from tessera import catalog
from tessera.controller.informers import sources
from tessera.errors import ApiError, ClusterUnreachable, NotFound, TesseraError
from tessera.k8s import Kube
from tessera.world.facts import ObjectFacts
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


def _items(kube: Kube, path: str, optional: bool = False) -> list[dict[str, Any]]:
    try:
        items: list[dict[str, Any]] = kube.request("GET", path).get("items") or []
    except NotFound:
        if optional:
            return []
        raise Failed(f"{path} is not served: are Tessera's CRDs installed?") from None
    except (ClusterUnreachable, ApiError) as err:
        raise Failed(str(err)) from err
    return items


def world(kube: Kube) -> World:
    """The fleet as the operator sees it now: every kind its caches watch
    (tessera.watched), each read with one LIST and folded into facts by the same code
    (tessera.controller.informers.sources), DRA slices and claims included. Read-only. A
    cluster without DRA, or whose CRDs predate AcceleratorQuota, has none of those. Units
    are counted against the reference the pools' status shows the operator uses."""
    copied: dict[str, Any] = {}
    for field, found in sources().items():
        merged: dict[Any, Any] = {}
        for source in found:
            optional = source.optional or source.kind == "acceleratorquotas"
            for body in _items(kube, source.path, optional):
                facts = source.facts(body)
                if facts is not None:
                    merged[source.key(body)] = facts
        copied[field] = list(merged.values()) if field == "pods" else merged
    return World(**copied, unit_reference=unit_reference(copied["pools"].values()))


def unit_reference(pools: Iterable[ObjectFacts]) -> str:
    """The catalog model the operator counts normalised units against (`tessera run
    --unit-reference`), read back from the pools' status: the model under which every pool
    of a catalog model, with the catalog's figures, has the units per device its status
    shows (the default when no pool says, or none fits)."""
    shown = []
    for pool in pools:
        resolved = pool.status.get("accelerator") or {}
        entry = catalog.get(str(resolved.get("model", "")))
        own = pool.spec.get("accelerator") or {}
        units = resolved.get("unitsPerDevice")
        if entry and units and not (own.get("unitsPerDevice") or own.get("peakTFLOPS")):
            shown.append((catalog.dense_tflops(entry.peak_tflops), float(units)))
    for reference in [catalog.REFERENCE_MODEL, *catalog.model_names()]:
        entry = catalog.get(reference)
        base = catalog.dense_tflops(entry.peak_tflops) if entry else 0.0
        if shown and base and all(abs(round(t / base, 4) - u) < 1e-3 for t, u in shown):
            return reference
    return catalog.REFERENCE_MODEL


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
