"""The fleet benchmark resumed: a later run adds the repeats an earlier results file lacks (a
run cut short, or five repeats at 5,000 nodes, which take longer than one sitting on a small
machine). Both runs must measure the same thing: the same operator source, parameters and
control-plane versions. Pure: the runner reads and writes the files."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from fleet_stats import sides_of
from fleet_targets import PHASES as ALL_PHASES

# The phases each side measures in a repeat (fleet_rotation.py; the bare scheduler has no
# backlog): a record missing one was cut short, and is run again.
PHASES = {
    "tessera": ALL_PHASES,
    "floor": ALL_PHASES,
    "baseline": tuple(p for p in ALL_PHASES if p != "backlog"),
}
# What must match for repeats of two runs to be one sample: the fleet, the load offered...
SAME_PARAMETERS = ("nodes", "pools", "devicesPerNode", "workloads", "gangSizes")
SAME_PARAMETERS += ("clientThreads", "clientPodsPerSecond", "warmUpWorkloads", "bareRepeats")
# ...and the control plane (the Python packages may differ: the operator's digest covers it).
SAME_VERSIONS = ("KUBERNETES_VERSION", "ETCD_VERSION", "KWOK_VERSION", "apiserver")


class ResumeError(ValueError):
    """The earlier results cannot be continued by this run: why, for the user."""


def complete(record: Mapping[str, Any]) -> bool:
    """Whether a repeat's record has every phase of every side in its order."""
    return all(
        all(isinstance((record.get(side) or {}).get(phase), dict) for phase in PHASES[side])
        for side in record.get("order") or ()
    )


def done(earlier: Mapping[str, Any]) -> int:
    """The repeats already measured: the complete records before the first that is not."""
    count = 0
    for record in earlier.get("repeats") or []:
        if not complete(record):
            break
        count += 1
    return count


def check(earlier: Mapping[str, Any], parameters: Mapping[str, Any], digest: str) -> int:
    """The index (from 0) of the first repeat this run measures, where it can continue the
    earlier run; otherwise ResumeError, saying what differs."""
    if not earlier.get("repeats") or "tesseraAlone" not in earlier:
        raise ResumeError("the earlier run measured no repeat: run it again whole")
    theirs = earlier["source"]["operatorDigest"]
    if theirs != digest:
        raise ResumeError(
            f"the operator's source differs from the earlier run's (digest {digest}, "
            f"not {theirs}, commit {earlier['source']['commit'][:12]})"
        )
    old = earlier["parameters"]
    for name in SAME_PARAMETERS:
        if old.get(name) != parameters.get(name):
            raise ResumeError(f"{name} is {parameters.get(name)!r}, not {old.get(name)!r}")
    first = done(earlier)
    if first >= parameters["repeats"]:
        raise ResumeError(f"the earlier run has {first} repeats already: ask for more")
    if sides_of(first, old["bareRepeats"])[0] != "tessera":
        # The floor and the bare scheduler create the pods Tessera made in the run's first
        # repeat (fleet_rotation.repeats): a run must begin with Tessera's.
        raise ResumeError(
            f"repeat {first + 1} runs {sides_of(first, old['bareRepeats'])[0]} first, which "
            "needs the pods Tessera makes earlier in the same run: resume after a multiple "
            "of three repeats"
        )
    return first


def check_versions(earlier: Mapping[str, Any], versions: Mapping[str, Any]) -> None:
    """ResumeError where this run's control plane is not the earlier run's."""
    for name in SAME_VERSIONS:
        if earlier["versions"].get(name) != versions.get(name):
            raise ResumeError(
                f"{name} is {versions.get(name)!r}, not {earlier['versions'].get(name)!r}"
            )


def merge(earlier: Mapping[str, Any], later: Mapping[str, Any], first: int) -> dict[str, Any]:
    """The earlier results with the later run's repeats after its first `first`, and a
    `resumed` entry per later run (when, where, on which commit, which repeats, its
    warm-up). Tessera-alone figures, the idle window and the chart's samples stay the
    earlier run's; targets and context are for the caller to compute again."""
    out = copy.deepcopy(dict(earlier))
    added = copy.deepcopy(later.get("repeats") or [])
    out["repeats"] = out["repeats"][:first] + added
    out["parameters"]["repeats"] = later["parameters"]["repeats"]
    out.pop("failed", None)
    out.pop("failedIn", None)
    if "failed" in later:
        out.update(failed=later["failed"], failedIn=later["failedIn"])
    out.setdefault("resumed", []).append(
        {
            "startedAt": later["startedAt"],
            "durationSeconds": later["durationSeconds"],
            "machine": later["machine"],
            "source": later["source"],
            "repeats": list(range(first + 1, first + len(added) + 1)),
            "warmUp": later.get("warmUp"),
        }
    )
    return out
