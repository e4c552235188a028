"""`tessera explain NS/NAME`: why a workload is where it is, or why it waits. A placed or
finished workload is explained from its status; a waiting one is planned again over the live
World with the operator's own code (tessera plan's), every pool listed."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from tessera import api, placement
from tessera.cli.live import NO, OK, Failed, add_output, connect, emit, guarded, world
from tessera.cli.plan import Expected, plan_live
from tessera.errors import ApiError, ClusterUnreachable, NotFound

EXAMPLES = """\
examples:
  tessera explain team-a/train         why team-a/train is where it is, or why it waits
  tessera explain train -n team-a      the same
  tessera explain team-a/train -o json for scripts: status, candidates, expected room

A waiting workload's candidates are planned again now over every pool (its status keeps the
best 8); a placed or finished one's are those its status recorded when it was placed.
exit codes: 0 explained, 1 no such workload, 2 no cluster."""


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    explain = sub.add_parser(
        "explain",
        parents=[common],
        help="why a workload is where it is",
        description="Why a Workload is where it is, or why it waits: every pool considered, "
        "its score and reasons.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    explain.add_argument("workload", help="NAME or NAMESPACE/NAME")
    explain.add_argument(
        "-n",
        "--namespace",
        default="default",
        help="namespace of a bare NAME (default: %(default)s)",
    )
    add_output(explain)
    explain.set_defaults(func=guarded(_explain))


def conditions(status: api.WorkloadStatus) -> list[str]:
    """`Placed=True (Placed)`, one per condition."""
    return [f"{c.type}={c.status} ({c.reason})" for c in status.conditions]


def summary_lines(key: str, status: api.WorkloadStatus) -> list[str]:
    """The status in a few lines: phase and where, the message, the conditions, restarts and
    the last failure."""
    where = (
        f"on {status.pool} ({status.accelerator}, score {status.score or 0:.1f})"
        if status.pool
        else "not placed"
    )
    lines = [f"{key}: {status.phase.value}, {where}"]
    if status.message:
        lines.append(status.message)
    if status.conditions:
        lines.append("conditions: " + ", ".join(conditions(status)))
    if status.restarts:
        lines.append(f"restarts: {status.restarts}")
    if status.last_failure is not None:
        f = status.last_failure
        lines.append(f"last failure: pod {f.pod} (replica {f.replica}): {f.reason}")
    if status.expected_finish is not None:
        lines.append(f"expected to finish at {status.expected_finish:%Y-%m-%dT%H:%M:%SZ}")
    for excluded in status.excluded_pools:
        lines.append(f"withdrawn from {excluded.pool}: {excluded.reason}")
    return lines


def human(
    key: str,
    status: api.WorkloadStatus,
    candidates: list[api.Candidate],
    live: bool,
    expected: Expected | None,
    decision: placement.Decision | None = None,
) -> str:
    lines = summary_lines(key, status)
    if live and decision is not None:
        now = _now(decision)
        same = "" if now == status.message else f" {now}"
        lines += [
            "",
            f"planned again now over every pool ({len(candidates)}; the status keeps at most "
            f"{placement.MAX_CANDIDATES}):{same}",
        ]
    elif candidates:
        more = f", {status.candidates_omitted} more not kept" if status.candidates_omitted else ""
        lines += ["", f"candidates when it was placed ({len(candidates)}{more}):"]
    if candidates:
        lines.append(placement.table(candidates))
    if expected is not None:
        lines += ["", expected.message]
    return "\n".join(lines)


def _now(decision: placement.Decision) -> str:
    if decision.placed:
        return f"it would be placed on {decision.pool} at the next cycle"
    return decision.message


def _explain(args: argparse.Namespace) -> int:
    namespace, _, name = args.workload.rpartition("/")
    namespace = namespace or args.namespace
    key = f"{namespace}/{name}"
    kube = connect(args)
    path = f"/apis/{api.GROUP}/{api.VERSION}/namespaces/{namespace}/workloads/{name}"
    try:
        body = kube.request("GET", path)
    except NotFound as err:
        raise Failed(f"workload {key} not found", NO) from err
    except (ClusterUnreachable, ApiError) as err:
        raise Failed(str(err)) from err
    raw_status: dict[str, Any] = body.get("status") or {}
    status = api.WorkloadStatus.model_validate(raw_status)
    candidates = list(status.candidates)
    decision: placement.Decision | None = None
    expected: Expected | None = None
    waiting = status.phase == api.Phase.PENDING and not status.pool
    if waiting:
        try:
            spec = api.WorkloadSpec.model_validate(body.get("spec") or {})
        except ValidationError:
            spec = None  # the status says which field (InvalidSpec): nothing to plan
        if spec is not None:
            now = datetime.now(UTC)
            live = world(kube)
            facts = live.workloads.get(key)
            target = (
                live.pending(facts, spec, now)
                if facts is not None
                else placement.PendingWorkload(
                    namespace=namespace, name=name, spec=spec, created_at=now
                )
            )
            decision, expected = plan_live(live, target, now)
            candidates = list(decision.candidates)
    data = {
        "workload": key,
        "phase": status.phase.value,
        "pool": status.pool,
        "accelerator": status.accelerator,
        "score": status.score,
        "message": status.message,
        "reason": status.summary.reason,
        "conditions": [c.model_dump(by_alias=True, mode="json") for c in status.conditions],
        "restarts": status.restarts,
        "lastFailure": (
            status.last_failure.model_dump(by_alias=True, mode="json")
            if status.last_failure
            else None
        ),
        "candidatesSource": "planned now" if decision is not None else "status",
        "candidates": [c.model_dump(by_alias=True, mode="json") for c in candidates],
        "candidatesOmitted": 0 if decision is not None else status.candidates_omitted,
        "expected": expected.as_dict() if expected else None,
    }
    emit(
        args,
        data,
        lambda: human(key, status, candidates, decision is not None, expected, decision),
    )
    return OK
