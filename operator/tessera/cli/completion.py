"""`tessera completion SHELL`: prints a completion script for the shell, generated from the
command's own parser (shtab): subcommands, flags and their choices, no Python at TAB time.
`kubectl_complete-tessera` answers kubectl's plugin completion (`kubectl tessera <TAB>`) from
the same parser."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

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

  # `kubectl tessera <TAB>` needs nothing here: kubectl (1.26 and later) asks
  # kubectl_complete-tessera, installed beside kubectl-tessera
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


# Cobra's completion directives, which kubectl reads from the last line (`:4`): complete
# file names, nothing, or directory names.
FILES, NO_FILES, DIRS = 0, 4, 16
FILE_OPTIONS = {"--filename", "--kubeconfig"}


def candidates(words: Sequence[str]) -> tuple[list[str], int]:
    """What may follow `tessera words[:-1]` and start with words[-1], each with its help
    after a tab, and the directive: file or directory names for such an option, else none."""
    from tessera.cli import parser

    current = words[-1] if words else ""
    done = list(words[:-1])
    node, expects = parser("tessera"), None
    for word in done:
        if expects is not None:  # this word is the previous option's value
            expects = None
            continue
        action = _option(node, word)
        if action is not None:
            expects = action if action.nargs != 0 and "=" not in word else None
        elif word in _commands(node):
            node = _commands(node)[word][0]
    if expects is not None:
        if expects.choices:
            return [c for c in map(str, expects.choices) if c.startswith(current)], NO_FILES
        if expects.metavar == "DIR":
            return [], DIRS
        return [], FILES if FILE_OPTIONS & set(expects.option_strings) else NO_FILES
    if current.startswith("-"):
        flags = [
            f"{flag}\t{_help(a)}".rstrip("\t")
            for a in node._actions
            for flag in a.option_strings
            if flag.startswith("--") and flag.startswith(current) and a.help != argparse.SUPPRESS
        ]
        return flags, NO_FILES
    found = [
        f"{name}\t{help_}"
        for name, (_, help_) in _commands(node).items()
        if name.startswith(current)
    ]
    for action in node._actions:
        if (
            not action.option_strings
            and action.choices
            and not isinstance(action, argparse._SubParsersAction)
        ):
            found += [c for c in map(str, action.choices) if c.startswith(current)]
    return found, NO_FILES


def _help(action: argparse.Action) -> str:
    """The option's help as --help prints it (`%(default)s` filled in)."""
    return (action.help or "") % {**vars(action), "prog": "tessera"}


def _option(node: argparse.ArgumentParser, word: str) -> argparse.Action | None:
    flag = word.split("=", 1)[0]
    return next((a for a in node._actions if flag in a.option_strings), None)


def _commands(node: argparse.ArgumentParser) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """The parser's subcommands: name -> (parser, one-line help)."""
    for action in node._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return {name: (p, helps.get(name, "")) for name, p in action.choices.items()}
    return {}


def kubectl_complete(argv: Sequence[str] | None = None) -> int:
    """kubectl_complete-tessera: kubectl runs it with the words after `kubectl tessera`,
    the last being the one to complete, and reads candidates then `:directive`."""
    found, directive = candidates(list(sys.argv[1:] if argv is None else argv))
    print("\n".join([*found, f":{directive}"]))
    return 0
