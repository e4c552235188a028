"""The fleet benchmark resumed (bench/fleet_resume.py): which earlier runs a later one may
continue, from which repeat, and the results file the two make together."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.append(str(REPO / "bench"))  # hack/ is on the path too (tests/conftest.py)

import fleet_bench  # noqa: E402  (bench/fleet_bench.py: the benchmark's runner)
import fleet_report  # noqa: E402
import fleet_resume as resume  # noqa: E402
import fleet_targets  # noqa: E402

CUSTOM = ["--nodes", "16", "--pools", "2", "--workloads", "12"]


def side(side: str, created: float) -> dict[str, Any]:
    """A side's phases in one repeat, with the figures the targets read."""
    figures = {"podsCreatedPerSecond": created, "operatorPodsCreatedPerSecond": created}
    return {p: figures | {"workloads": 12, "pods": 12} for p in resume.PHASES[side]}


def record(order: list[str], created: float = 10.0) -> dict[str, Any]:
    return {"order": order, "loadAverageAtStart": [1.0, 1.0, 1.0]} | {
        s: side(s, created) for s in order
    }


def earlier(tmp_path: Path, repeats: int, **changes: Any) -> dict[str, Any]:
    """A results file as a custom-scale run of `repeats` would have written it (bare
    scheduler in the first repeat only), here under tmp_path; `changes` edit its parameters."""
    argv = [*CUSTOM, "--repeats", str(max(repeats, 1)), "--bare-repeats", "1"]
    args = fleet_bench.parse_args(argv)
    orders = [["tessera", "floor", "baseline"], ["floor", "tessera"], ["tessera", "floor"]]
    result = {
        "benchmark": "fleet",
        "startedAt": "2026-12-01T00:00:00+00:00",
        "source": {"commit": "c" * 40, "operatorDigest": fleet_report.source()["operatorDigest"]},
        "versions": {"KUBERNETES_VERSION": "v1.37.2", "apiserver": "v1.37.2"},
        "parameters": fleet_bench.parameters(args) | changes,
        "tesseraAlone": {"singles": {"workloads": 12}},
        "idle": {"operatorWrites": 0},
        "repeats": [record(o) for o in orders[:repeats]],
    }
    (tmp_path / "fleet-custom.json").write_text(json.dumps(result))
    return result


def resumed(tmp_path: Path, *more: str) -> Any:
    return fleet_bench.parse_args([*CUSTOM, "--results-dir", str(tmp_path), "--resume", *more])


def test_a_resumed_run_measures_the_repeats_the_file_lacks(tmp_path: Path) -> None:
    earlier(tmp_path, 3)
    args = resumed(tmp_path, "--repeats", "5")
    # repeat 4 begins with Tessera, whose pods the floor then creates; no bare scheduler:
    # the earlier run had it in its first repeat only, and so does the sample they make
    assert args.first_repeat == 3 and args.bare_repeats == 1
    assert args.earlier["parameters"]["repeats"] == 3
    assert fleet_bench.parse_args(CUSTOM).earlier is None  # not resuming: the whole run


def test_a_repeat_cut_short_is_run_again(tmp_path: Path) -> None:
    file = earlier(tmp_path, 3)
    del file["repeats"][2]["floor"]["backlog"]  # the run failed in the third repeat's last phase
    assert not resume.complete(file["repeats"][2]) and resume.complete(file["repeats"][1])
    assert resume.done(file) == 2
    # the third repeat (rotation: Tessera, then the floor) can begin a run
    assert resume.check(file, file["parameters"] | {"repeats": 5}, file["source"]["operatorDigest"])
    (tmp_path / "fleet-custom.json").write_text(json.dumps(file))
    assert resumed(tmp_path, "--repeats", "5").first_repeat == 2


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"nodes": 17}, "nodes is 16, not 17"),
        ({"clientThreads": 8}, "clientThreads is 16, not 8"),
        ({"warmUpWorkloads": 0}, "warmUpWorkloads is 12, not 0"),
    ],
)
def test_a_run_of_other_parameters_is_refused(
    tmp_path: Path, change: dict[str, Any], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    earlier(tmp_path, 3, **change)
    with pytest.raises(SystemExit):
        resumed(tmp_path, "--repeats", "5")
    assert says in capsys.readouterr().err


def test_other_operator_source_versions_or_too_few_repeats_are_refused(tmp_path: Path) -> None:
    file = earlier(tmp_path, 3)
    params = file["parameters"] | {"repeats": 5}
    with pytest.raises(resume.ResumeError, match=r"operator's source differs.*commit cccccccccccc"):
        resume.check(file, params, "0" * 16)
    digest = file["source"]["operatorDigest"]
    with pytest.raises(resume.ResumeError, match="has 3 repeats already"):
        resume.check(file, params | {"repeats": 3}, digest)
    with pytest.raises(resume.ResumeError, match=r"KUBERNETES_VERSION is 'v1\.38\.0'"):
        resume.check_versions(file, {"KUBERNETES_VERSION": "v1.38.0", "apiserver": "v1.37.2"})
    resume.check_versions(file, file["versions"] | {"kopf": "1.38.0"})  # packages may differ
    # repeat 2 runs the floor first, and the floor needs the pods Tessera made in this run
    two = earlier(tmp_path, 1)
    with pytest.raises(resume.ResumeError, match="repeat 2 runs floor first"):
        resume.check(two, two["parameters"] | {"repeats": 5}, digest)
    nothing = earlier(tmp_path, 0)
    with pytest.raises(resume.ResumeError, match="measured no repeat"):
        resume.check(nothing, nothing["parameters"] | {"repeats": 5}, digest)
    (tmp_path / "fleet-custom.json").unlink()
    with pytest.raises(SystemExit):
        resumed(tmp_path)  # no earlier results at all


def test_the_merged_file_holds_every_repeat_and_each_run(tmp_path: Path) -> None:
    file = earlier(tmp_path, 3)
    file.update(failed="timed out", failedIn="floor backlog (r3)")
    later = {
        "startedAt": "2026-12-08T01:00:00+00:00",
        "durationSeconds": 3000.0,
        "machine": {"cpus": 2, "loadAverage": [3.0, 3.0, 3.0]},
        "source": {"commit": "d" * 40, "operatorDigest": file["source"]["operatorDigest"]},
        "parameters": file["parameters"] | {"repeats": 5},
        "warmUp": {"workloads": 12},
        "repeats": [record(["tessera", "floor"], 20.0), record(["floor", "tessera"], 30.0)],
    }
    merged = resume.merge(file, later, 3)
    assert [r["tessera"]["singles"]["podsCreatedPerSecond"] for r in merged["repeats"]] == [
        10.0,
        10.0,
        10.0,
        20.0,
        30.0,
    ]
    assert merged["parameters"]["repeats"] == 5
    assert merged["tesseraAlone"] == file["tesseraAlone"] and merged["idle"] == file["idle"]
    assert merged["startedAt"] == file["startedAt"] and merged["source"] == file["source"]
    [run] = merged["resumed"]
    assert run["repeats"] == [4, 5] and run["source"]["commit"] == "d" * 40
    assert run["startedAt"] == later["startedAt"] and run["warmUp"] == {"workloads": 12}
    assert "failed" not in merged  # the later run completed what the earlier one had not
    assert file["parameters"]["repeats"] == 3 and len(file["repeats"]) == 3  # left as it was
    # the targets are over all five repeats
    spread = fleet_targets.each(merged, "tessera", "singles", fleet_targets.created)
    assert spread is not None and spread["n"] == 5 and spread["median"] == 10.0
    # a later run that fails says so; its repeats replace the earlier's from `first` on
    cut = resume.merge(file, later | {"failed": "x", "failedIn": "y", "repeats": []}, 2)
    assert len(cut["repeats"]) == 2 and cut["failed"] == "x" and cut["resumed"][0]["repeats"] == []
