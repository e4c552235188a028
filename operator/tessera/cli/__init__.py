"""The `tessera` command: `run` starts the operator, `explain` prints why a workload went
where it did. Wires the layers together; clear messages and exit codes, never a traceback.
Each command is a module of this package with a `register(sub, common)` that adds its
parser."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tessera import __version__
from tessera.cli import explain, run

COMMANDS = (run, explain)


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

    for command in COMMANDS:
        command.register(sub, common)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
