"""The reasons and messages the user-facing docs quote are ones the operator writes: every
backticked CamelCase word in them (a condition or event reason, a condition type, a phase)
is a string literal somewhere in operator/tessera, and the message fragments that
troubleshooting.md shows are in the code as written. A reason renamed in the code
(NodesNotReady became NodesUnavailable) then fails here until the docs follow."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CODE = REPO / "operator" / "tessera"
DOCS = REPO / "docs"
CHECKED = ["troubleshooting.md", "concepts.md", "operations.md"]

# A backticked word that reads as a reason: starts upper case, letters only, some lower
# case (`NodesUnavailable`, `Deleting`, `NotReady`; not `PENDING`, `NODES` or `acp`).
REASON = re.compile(r"`([A-Z][a-z]+(?:[A-Z][a-z]*)*)`")

# Kubernetes' own words the docs quote: reasons the scheduler, the kubelet and the API server
# write, and a Deployment strategy. They are not Tessera's to write, so the code need not
# hold them (some it reads, and holds anyway).
KUBERNETES = {
    "Unschedulable",
    "FailedScheduling",
    "ImagePullBackOff",
    "CrashLoopBackOff",
    "Forbidden",
    "Recreate",
}

# Message fragments troubleshooting.md shows (in its code blocks and quotes, with example
# names filled in), each as the code writes it: each must be in the doc and in the code.
FRAGMENTS = [
    # A pool's conditions (tessera.world.pool_status.pool_status, deletion_message).
    " nodes take new pods",
    " nodes take no new pods (their devices are not ",
    "nodes this pool selects are counted for a pool that selected them first: ",
    "the node selector matches no node (or",
    "deleting: waits for ",
    " batch workload(s) to finish (",
    " service(s) to move away (",
    # Replicas lost with their node (tessera.controller.repairs, world.status).
    " lost: ",
    " was deleted",
    " takes no new pods (",
    ": placed again on ",
    "; no room on pool ",
    " yet: waiting",
    ", and the pool has no room for it: placing the gang again",
    ": the gang cannot complete",
    "replaced once a pool of that name is back",
    # Exclusions (tessera.world.exclusions) and withdrawals.
    "withdrawn from at ",
    " (tried again at ",
    "or sooner when the pool changes)",
    "withdrawn from ",
    "pods unschedulable for over ",
    # Quotas (tessera.placement.sharing, cycle).
    "waiting for quota: ",
    " units in use ",
    "); this needs ",
    "above nominal while quota ",
    " is owed capacity",
    " is selected by quotas ",
    " it may preempt ",
    "protects just-placed work)",
    # Migration off a draining pool (tessera.controller.fallback).
    " is draining; no other pool has room yet: ",
    # Refused pods and Services (tessera.controller.writes).
    " refused: ",
    # Failed pods and gang restarts (tessera.world.facts.failure_reason, world.status).
    " exited with code ",
    "restarting the gang (",
    " restarts): pod ",
    " (backoffLimit ",
    " reached after ",
    # Scale up and rollout (tessera.world.status, controller.repairs, rollouts, lifecycle).
    "added by a scale to",
    "; waiting for room on ",
    ": placed on ",
    "rolling out a new template",
    " replicas updated, ",
    ": replacing pod ",
    " with one of the new ",
]


@cache
def sources() -> str:
    return "\n".join(p.read_text() for p in sorted(CODE.rglob("*.py")))


@cache
def literals() -> frozenset[str]:
    """Every string constant in the operator's code, f-strings' literal parts included."""
    found: set[str] = set()
    for path in sorted(CODE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
    return frozenset(found)


def quoted_reasons(text: str) -> set[str]:
    return set(REASON.findall(text))


def stale(text: str) -> list[str]:
    """The reason-like words a doc quotes that the code never writes."""
    return sorted(quoted_reasons(text) - literals() - KUBERNETES)


def flat(text: str) -> str:
    """The text with each run of white space one space: a quote may wrap across lines."""
    return " ".join(text.split())


@pytest.mark.parametrize("name", CHECKED)
def test_every_reason_a_doc_quotes_is_written_by_the_code(name: str) -> None:
    text = (DOCS / name).read_text()
    assert quoted_reasons(text), f"{name}: no reason found: is the pattern still right?"
    missing = stale(text)
    assert not missing, f"{name} quotes reasons no code under operator/tessera writes: {missing}"


@pytest.mark.parametrize("fragment", FRAGMENTS)
def test_a_message_troubleshooting_shows_is_the_codes(fragment: str) -> None:
    shown = flat((DOCS / "troubleshooting.md").read_text())
    assert fragment in shown, f"troubleshooting.md no longer shows {fragment!r}: drop it here"
    assert fragment in sources(), f"no code under operator/tessera writes {fragment!r}"


def test_a_stale_reason_is_caught() -> None:
    assert "NodesUnavailable" in literals()
    assert stale("`Degraded=True` | `NodesUnavailable` | ...") == []
    assert stale("`Degraded=True` | `NodesNotReady` | ...") == ["NodesNotReady"]
    assert stale("the `Unschedulable` pods, `PENDING`, `acp`, `Tainted key:Effect`") == []
