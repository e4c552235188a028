"""`tessera completion SHELL`: prints a completion script for the shell, generated from the
command's own parser (shtab): subcommands, flags and their choices, no Python at TAB time."""

from __future__ import annotations

import argparse

SHELLS = ("bash", "zsh", "tcsh")

EXAMPLES = """\
examples:
  # bash: this shell only, or every new one
  source <(tessera completion bash)
  tessera completion bash > ~/.local/share/bash-completion/completions/tessera

  # zsh: a file on $fpath named _tessera
  tessera completion zsh > "${fpath[1]}/_tessera"

  # the kubectl plugin's own name, for shells that run kubectl-tessera directly
  tessera completion bash --prog kubectl-tessera
"""


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    completion = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description=(
            "Prints a completion script for bash, zsh or tcsh on stdout, generated from the\n"
            "command's own options: load it in the shell or save it where the shell looks."
        ),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    completion.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    completion.add_argument(
        "--prog",
        default="tessera",
        help="the command name to complete (default: %(default)s)",
    )
    completion.set_defaults(func=_completion)


def script(shell: str, prog: str = "tessera") -> str:
    """The completion script of `prog` (tessera's parser under that name) for `shell`."""
    import shtab

    from tessera.cli import parser

    return shtab.complete(parser(prog), shell=shell)


def _completion(args: argparse.Namespace) -> int:
    print(script(args.shell, args.prog))
    return 0
