"""kubectl_complete-tessera answers kubectl's plugin completion from the command's own
parser: subcommands with their help, flags, an option's choices, and file or directory
names where an option takes one (Cobra's directives on the last line)."""

from __future__ import annotations

import pytest

from tessera.cli import completion
from tessera.cli.completion import DIRS, FILES, NO_FILES, candidates


def names(found: list[str]) -> list[str]:
    return [c.split("\t")[0] for c in found]


def test_the_first_word_is_a_command_with_its_help() -> None:
    found, directive = candidates([""])
    assert names(found) == ["run", "explain", "plan", "top", "completion", "pools"]
    assert "plan\twhere a workload would be placed now (read-only what-if)" in found
    assert directive == NO_FILES
    assert names(candidates(["p"])[0]) == ["plan", "pools"]


def test_a_subcommand_offers_its_own_words_and_flags() -> None:
    assert names(candidates(["pools", ""])[0]) == ["suggest"]
    assert names(candidates(["top", ""])[0]) == ["pools", "workloads"]
    assert candidates(["completion", "z"]) == (["zsh"], NO_FILES)
    flags = names(candidates(["plan", "--"])[0])
    assert {"--filename", "--namespace", "--output", "--kubeconfig", "--context"} <= set(flags)
    assert "--version" not in flags  # the root's, not plan's
    found, _ = candidates(["plan", "--nam"])
    assert found == ["--namespace\tnamespace when the manifest names none (default: default)"]


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["top", "-o", ""], (["table", "yaml", "json"], NO_FILES)),
        (["top", "--output", "j"], (["json"], NO_FILES)),
        (["plan", "-f", ""], ([], FILES)),
        (["plan", "--kubeconfig", ""], ([], FILES)),
        (["pools", "suggest", "--output-dir", ""], ([], DIRS)),
        (["explain", "--context", ""], ([], NO_FILES)),
    ],
)
def test_an_options_value(words: list[str], expected: tuple[list[str], int]) -> None:
    assert candidates(words) == expected


def test_a_value_already_given_is_skipped() -> None:
    """`-o json` is an option and its value, not a command: the flags of top come next."""
    assert "--namespace" in names(candidates(["top", "-o", "json", "--"])[0])
    assert "--namespace" in names(candidates(["top", "--output=json", "--"])[0])


def test_the_executable_prints_candidates_then_the_directive(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert completion.kubectl_complete(["completion", "b"]) == 0
    assert capsys.readouterr().out == "bash\n:4\n"
