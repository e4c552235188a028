"""The `tessera` command: `run` starts the operator; `pools suggest`, `plan`, `explain`, `top`
read the cluster (docs/cli.md), and `completion` prints a shell's completion. Wires the layers
together; clear messages and exit codes, never a traceback. Each command is a module of this
package with a `register(sub, common)` that adds its parser. Installed twice: as `tessera`
and as the kubectl plugin `kubectl-tessera` (`kubectl tessera top` runs it with argv
['top']), whose help then says `kubectl tessera`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from tessera import __version__
from tessera.cli import completion, explain, plan, pools, run, top

COMMANDS = (run, explain, plan, top, completion, pools)


def prog_name(argv0: str) -> str:
    """The name help and usage give the command: `kubectl tessera` when kubectl runs the
    plugin (its executable is kubectl-tessera), else `tessera`."""
    name = os.path.basename(argv0)
    return "kubectl tessera" if name.startswith("kubectl-tessera") else "tessera"


def parser(prog: str = "tessera") -> argparse.ArgumentParser:
    summary = (__doc__ or "").partition(".")[0] + "."  # the docstring's first sentence
    root = argparse.ArgumentParser(prog=prog, description=summary)
    root.add_argument("--version", action="version", version=f"tessera {__version__}")
    sub = root.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster, then KUBECONFIG)"
    )
    common.add_argument("--context", help="kubeconfig context")

    for command in COMMANDS:
        command.register(sub, common)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser(prog_name(sys.argv[0])).parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
