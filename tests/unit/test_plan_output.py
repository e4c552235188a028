"""The pure parts of `tessera plan` and `tessera explain`: reading a manifest, the plan with
every pool, the output and exit codes, when room is expected, and the status's short reason
and omitted count."""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from typing import Any

import pytest
from builders import NOW, pool, snapshot, workload

from tessera import api, placement
from tessera.cli import explain as explain_cli
from tessera.cli import parser
from tessera.cli import plan as plan_cli
from tessera.cli.live import NO, OK, Failed, emit
from tessera.world.facts import object_facts
from tessera.world.status import REASON_CHARS, dump, short_reason, waiting_status

MANIFEST = """\
apiVersion: tessera.dev/v1alpha1
kind: Workload
metadata:
  name: train
  namespace: ml
spec:
  accelerator: {count: 8}
  template:
    spec:
      containers: [{name: main, image: busybox}]
"""


def test_a_manifest_is_one_workload() -> None:
    doc = plan_cli.parse_manifest(MANIFEST)
    assert doc["metadata"]["name"] == "train"
    for bad, says in [
        ("a: [", "not YAML"),
        (MANIFEST + "---\n" + MANIFEST, "found 2 documents"),
        (MANIFEST.replace("kind: Workload", "kind: Pod"), "expected kind Workload"),
        ("- 1\n", "expected one Workload"),
    ]:
        with pytest.raises(Failed) as err:
            plan_cli.parse_manifest(bad)
        assert says in str(err.value) and err.value.code == 2


def test_the_dry_run_uses_a_generated_name_and_the_namespace() -> None:
    doc = plan_cli.parse_manifest(MANIFEST)
    doc["metadata"]["resourceVersion"] = "7"
    body = plan_cli.dry_run_body(doc, "ml")
    assert body["metadata"] == {"namespace": "ml", "generateName": "train-"}
    assert body["spec"] == doc["spec"] and "status" not in body


def test_a_spec_the_models_refuse_is_bad_input() -> None:
    with pytest.raises(Failed) as err:
        plan_cli.parsed_spec({"accelerator": {"count": 0}, "template": {}})
    assert err.value.code == 2 and "spec.accelerator.count" in str(err.value)


def _decide(*pools: placement.PoolState, **kw: Any) -> placement.Decision:
    (decision,) = placement.plan([workload("train", **kw)], snapshot(*pools), NOW, shown=None)
    return decision


def test_placed_now_exits_0_and_names_the_pool() -> None:
    decision = _decide(pool("h100"), pool("a100"), count=8)
    assert plan_cli.exit_code(decision) == OK
    text = plan_cli.human("default/train", decision, None)
    assert text.startswith("default/train: would be placed now on h100 (H100-SXM5-80GB), score")
    assert "every pool considered (2)" in text
    assert "2 of 5 pools considered" in plan_cli.human("default/train", decision, None, 5)
    data = plan_cli.result("default/train", decision, None)
    assert data["wouldPlace"] is True and data["pool"] == "h100" and data["expected"] is None
    assert [c["pool"] for c in data["candidates"]] == ["h100", "a100"]
    json.dumps(data)


def test_waiting_exits_1_and_says_when_room_is_expected() -> None:
    busy = pool("h100", nodes=1, free=[2], releases={0: [(2.0, 6)]})
    decision = _decide(busy, count=8)
    assert plan_cli.exit_code(decision) == NO
    ends = {("h100", NOW + timedelta(hours=2)): ["ml/long"]}
    expected = plan_cli.expected_room(snapshot(busy).pools, ["h100"], 8, 1, NOW, ends)
    assert expected.pool == "h100" and expected.at == NOW + timedelta(hours=2)
    assert expected.message == (
        "expected room on h100 at 2025-06-01T14:00:00Z (when ml/long is expected to finish)"
    )
    text = plan_cli.human("default/train", decision, expected)
    assert "would wait: waiting: no feasible pool has room" in text
    assert text.endswith(expected.message)
    data = plan_cli.result("default/train", decision, expected)
    assert data["wouldPlace"] is False and data["expected"]["at"] == "2025-06-01T14:00:00Z"


def test_no_expected_room_without_known_ends() -> None:
    busy = pool("h100", nodes=1, free=[2])
    expected = plan_cli.expected_room(snapshot(busy).pools, ["h100"], 8, 1, NOW, {})
    assert expected.pool is None and "no running work" in expected.message
    too_little = pool("a100", nodes=1, free=[0], releases={0: [(1.0, 2)]})
    ends = {("a100", NOW + timedelta(hours=1)): ["ml/small"]}
    expected = plan_cli.expected_room(snapshot(too_little).pools, ["a100"], 8, 1, NOW, ends)
    assert expected.pool is None and "1 running workload(s)" in expected.message


def test_the_plan_lists_every_pool_and_the_status_keeps_8() -> None:
    pools = [pool(f"p{i}", model="H100-SXM5-80GB", nodes=1, free=[0]) for i in range(11)]
    every = _decide(*pools, count=8)
    assert len(every.candidates) == 11 and every.omitted == 0
    (capped,) = placement.plan([workload("train", count=8)], snapshot(*pools), NOW)
    assert len(capped.candidates) == placement.MAX_CANDIDATES and capped.omitted == 3
    facts = object_facts({"metadata": {"name": "train", "namespace": "default"}, "spec": {}})
    status, reason = waiting_status(
        facts, capped.message, dump(capped.candidates), 1, NOW, capped.omitted
    )
    assert reason == "WaitingForCapacity" and status["candidatesOmitted"] == 3
    assert status["summary"]["reason"] == "p0: no node has 8 free (largest 0)"
    api.WorkloadStatus.model_validate(status)


def test_the_short_reason_fits_its_column() -> None:
    room = {"pool": "h100", "reasons": ["room for 1 of 2 pods of 8 nvidia.com/gpu now"]}
    assert short_reason([room]) == "h100: room for 1 of 2 pods"
    long = {"pool": "p" * 30, "reasons": ["needs cuda >= 12.4, pool has 12.2; " * 3]}
    text = short_reason([{"pool": "x", "reasons": []}, long])
    assert len(text) <= REASON_CHARS and text.startswith("p" * 30 + ": needs cuda")
    assert short_reason([]) == "no pool"
    assert short_reason([room], waiting_for="a100").startswith("waiting for a100")


def test_placement_takes_the_reason_off() -> None:
    from tessera.world.status import lifecycle_status, placement_status

    decision = _decide(pool("h100"), count=8)
    facts = object_facts(
        {
            "metadata": {"name": "train", "namespace": "default"},
            "spec": {},
            "status": {"phase": "Pending", "summary": {"ready": "0/1", "reason": "h100: x"}},
        }
    )
    status = placement_status(facts, decision, NOW, "placed")
    assert status["summary"] == {"reason": None} and status["candidatesOmitted"] == 0
    spec = workload("train", count=8).spec
    status.update(lifecycle_status(spec, "h100", status, 1, {}, [], 1, NOW))
    assert status["summary"] == {"ready": "0/1", "reason": None}
    # once written (the reason gone), later lifecycle statuses say nothing of it
    written = {"phase": "Placed", "summary": {"ready": "0/1"}}
    assert lifecycle_status(spec, "h100", written, 1, {}, [], 0, NOW)["summary"] == {"ready": "0/1"}


def test_explain_summarises_a_failed_workload() -> None:
    status = api.WorkloadStatus.model_validate(
        {
            "phase": "Failed",
            "pool": "l4",
            "accelerator": "L4",
            "score": 61.2,
            "message": "pod job-l4-0 failed: exit code 3",
            "restarts": 0,
            "candidatesOmitted": 2,
            "candidates": [{"pool": "l4", "accelerator": "L4", "feasible": True, "score": 61.2}],
            "lastFailure": {"pod": "job-l4-0", "replica": 0, "reason": "exit code 3"},
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "PodFailed",
                    "message": "m",
                    "lastTransitionTime": "2025-06-01T12:00:00Z",
                }
            ],
        }
    )
    text = explain_cli.human("ml/job", status, list(status.candidates), False, None)
    assert text.splitlines()[0] == "ml/job: Failed, on l4 (L4, score 61.2)"
    assert "conditions: Failed=True (PodFailed)" in text
    assert "last failure: pod job-l4-0 (replica 0): exit code 3" in text
    assert "candidates when it was placed (1, 2 more not kept):" in text


def test_output_formats_and_help_examples(capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(output="json")
    emit(args, {"wouldPlace": True}, lambda: "table")
    assert json.loads(capsys.readouterr().out) == {"wouldPlace": True}
    for command in ("plan", "explain"):
        with pytest.raises(SystemExit):
            parser().parse_args([command, "--help"])
        out = capsys.readouterr().out
        assert "examples:" in out and f"tessera {command}" in out and "-o" in out
