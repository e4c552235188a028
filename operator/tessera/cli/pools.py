"""`tessera pools suggest`: AcceleratorPool manifests for the fleet's accelerator nodes, read
from the live nodes' labels (tessera.suggest does the work, with no I/O)."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

import yaml

from tessera.cli import live
from tessera.errors import ApiError, ClusterUnreachable, NotFound
from tessera.k8s import Kube
from tessera.suggest import Pool, Suggestion, suggest

_EXAMPLES = """\
The output is YAML ready for a GitOps repository: one AcceleratorPool per accelerator model
found, each with a comment giving its nodes and devices. Nodes that carry accelerator devices
or labels but whose model cannot be told for certain (labels that disagree, a model the
catalog does not know, devices with no label naming them) are listed on stderr with the
reason, never guessed; nodes without accelerators are counted there in one line.

examples:
  tessera pools suggest                       # the pools, as YAML, on stdout
  tessera pools suggest > pools.yaml          # stdout is YAML only: the notes go to stderr
  tessera pools suggest | kubectl apply --server-side -f -
  tessera pools suggest --output-dir gitops/pools/    # one <pool>.yaml per pool
  tessera pools suggest -o json | jq '.unidentified'  # everything, for scripts

exit status: 0 pools suggested; 1 no accelerator node could be identified; 2 error (no
cluster, unwritable directory, a file that exists without --force).
"""


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    pools = sub.add_parser(
        "pools",
        help="AcceleratorPool helpers: suggest pools from the nodes",
        description="AcceleratorPool helpers.",
    )
    verbs = pools.add_subparsers(dest="verb", required=True, metavar="{suggest}")
    suggest = verbs.add_parser(
        "suggest",
        parents=[common],
        help="print AcceleratorPool YAML for the accelerator nodes found",
        description="Reads the live nodes, groups them by the accelerator model the catalog\n"
        "resolves from their labels, and prints one AcceleratorPool per model: a selector\n"
        "that picks exactly those nodes by labels naming the model, a toleration for the\n"
        "device plugin's taint when every node carries it, and the model.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    suggest.add_argument(
        "-o",
        "--output",
        choices=["text", "yaml", "json"],
        default="text",
        help="text: the pools' YAML with comments on stdout, notes on stderr (default); "
        "yaml or json: one document with pools, unidentified nodes and counts, for scripts",
    )
    suggest.add_argument(
        "--output-dir",
        metavar="DIR",
        type=Path,
        help="write one DIR/<pool>.yaml per pool instead of printing the pools",
    )
    suggest.add_argument(
        "--force", action="store_true", help="with --output-dir: replace files that exist"
    )
    suggest.set_defaults(func=live.guarded(_suggest))


def _suggest(args: argparse.Namespace) -> int:
    kube = live.connect(args)
    found = suggest(_nodes(kube), _slices(kube))
    if args.output_dir is not None:
        _write(args.output_dir, found.pools, force=args.force)
    if args.output == "json":
        print(json.dumps(found.to_dict(), indent=2))
    elif args.output == "yaml":
        print(yaml.safe_dump(found.to_dict(), sort_keys=False).rstrip())
    elif args.output_dir is None and found.pools:
        print(found.to_yaml().rstrip())
    if args.output == "text":
        _notes(found)
    if not found.pools:
        print(
            "tessera: no accelerator node could be identified: no pool to suggest",
            file=sys.stderr,
        )
        return live.NO
    return live.OK


def _slices(kube: Kube) -> list[dict[str, object]]:
    """The DRA drivers' ResourceSlices (none on a cluster that does not serve them)."""
    try:
        found = kube.request("GET", "/apis/resource.k8s.io/v1/resourceslices")
    except NotFound:
        return []
    except (ClusterUnreachable, ApiError) as err:
        raise live.Failed(str(err)) from err
    items: list[dict[str, object]] = found.get("items") or []
    return items


def _nodes(kube: Kube) -> list[dict[str, object]]:
    try:
        items: list[dict[str, object]] = kube.request("GET", "/api/v1/nodes").get("items") or []
    except (ClusterUnreachable, ApiError) as err:
        raise live.Failed(str(err)) from err
    return items


def _notes(found: Suggestion) -> None:
    """The nodes left out, on stderr as YAML comments: `2>&1` still gives valid YAML."""
    if found.unidentified:
        n = len(found.unidentified)
        print(
            f"# {n} accelerator node{'s' if n != 1 else ''} not in any suggested pool "
            "(set their pools by hand):",
            file=sys.stderr,
        )
        for u in found.unidentified:
            print(f"#   {u.node}: {u.reason}", file=sys.stderr)
    if found.not_accelerator:
        n = found.not_accelerator
        print(
            f"# {n} node{'s' if n != 1 else ''} without accelerator devices or labels: "
            "not accelerator nodes",
            file=sys.stderr,
        )


def _write(directory: Path, pools: tuple[Pool, ...], force: bool) -> None:
    targets = {directory / f"{p.name}.yaml": p for p in pools}
    there = sorted(str(t) for t in targets if t.exists())
    if there and not force:
        raise live.Failed(
            "would replace "
            + ", ".join(there)
            + ": pass --force to replace them, or choose another directory"
        )
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for path, pool in targets.items():
            path.write_text(pool.to_yaml(), encoding="utf-8")
            n = len(pool.nodes)
            print(
                textwrap.shorten(
                    f"wrote {path}: {pool.model}, {n} node{'s' if n != 1 else ''}", 200
                ),
                file=sys.stderr,
            )
    except OSError as err:
        raise live.Failed(f"cannot write {directory}: {err.strerror or err}") from err
