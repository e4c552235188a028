"""bench/quality*.py at a tiny size: what each information scenario tells the policies, the
LP bounds, the intervals and verdicts, and a whole run whose summary can be redone from the
per-seed figures it keeps."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.append(str(REPO / "bench"))  # appended: hack/ stays first

import quality  # noqa: E402  (bench/quality.py)
import quality_measure  # noqa: E402
import quality_policies  # noqa: E402
import quality_trace  # noqa: E402


@pytest.fixture(scope="module")
def types() -> quality_trace.Types:
    return quality_trace.job_types()


def test_each_scenario_tells_what_it_says(types: quality_trace.Types) -> None:
    jobs = quality_trace.batch(0.3, 0, types)
    exact = quality_trace.inform(jobs, quality_trace.EXACT, 0)
    assert all(j.view == j.speeds and j.measured for j in exact)
    assert all(j.estimate == pytest.approx(j.best_runtime()) for j in exact)
    told = quality_trace.inform(jobs, quality_trace.CATALOG, 0)
    for j in told:
        assert not j.measured and set(j.view) == set(j.speeds)
        assert j.view["H100-SXM5-80GB"] / j.view["A100-SXM4-40GB"] == pytest.approx(67 / 19.5)
    noisy = quality_trace.inform(jobs, "noisy-0.5", 0)
    assert all(set(j.view) == set(j.speeds) and j.view != j.speeds for j in noisy)
    assert [j.view for j in noisy] == [j.view for j in quality_trace.inform(jobs, "noisy-0.5", 0)]
    assert all(j.speeds is src.speeds for j, src in zip(noisy, jobs, strict=True))


def test_no_policy_beats_the_lp_and_exact_information_reaches_it(
    types: quality_trace.Types,
) -> None:
    jobs = quality_trace.inform(quality_trace.batch(0.75, 1, types), quality_trace.EXACT, 1)
    bound = quality_measure.lp_bound(jobs)
    assert quality_measure.lp_informed(jobs) == pytest.approx(bound, rel=1e-6)
    policies = [
        quality_policies.tessera("performance", durations=False),
        quality_policies.greedy_fastest,
        quality_policies.blind(1),
        quality_policies.random_pool(1),
    ]
    for policy in policies:
        assert 0 < quality_measure.snapshot(jobs, policy) <= bound + 1e-9
    told = quality_trace.inform(jobs, quality_trace.CATALOG, 1)
    assert quality_measure.lp_informed(told) < bound


def test_intervals_and_verdicts() -> None:
    i = quality.interval([1.0, 2.0, 3.0])
    assert i["mean"] == 2.0 and i["ci95"] == pytest.approx([-0.4841, 4.4841], abs=1e-4)
    assert quality.verdict([(0.98, 0.99), (0.975, 1.0)], 0.97) == "met"
    assert quality.verdict([(0.98, 0.99), (0.96, 0.98)], 0.97) == "undecided"
    assert quality.verdict([(0.98, 0.99), (0.90, 0.96)], 0.97) == "not met"
    assert quality.verdict([(0.0, 0.0)], 0.0) == "met"
    assert quality.verdict([(0.0, 0.0)], 0.0, strict=True) == "undecided"  # a tie is no lead


def test_a_tiny_run_has_every_target_and_can_be_rescored(tmp_path: Path) -> None:
    out = tmp_path / "quality.json"
    args = ["--seeds", "2", "--demands", "0.5", "--loads", "0.5", "--sim-jobs", "24"]
    assert quality.main([*args, "--sim-seeds", "2", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert len(r["targets"]) == 1 + 2 * (len(quality.SCENARIOS) - 1)
    assert {t["verdict"] for t in r["targets"]} <= {"met", "not met", "undecided"}
    assert {(c["scenario"], c["load"]) for c in r["context"]} == {
        (sc, 0.5) for sc in quality.SCENARIOS
    }
    d = r["decomposition"][0]
    assert d["gap"]["mean"] == pytest.approx(
        d["planner"]["mean"] + d["information"]["mean"], abs=2e-4
    )
    summary = {k: r[k] for k in ("targets", "decomposition", "context", "snapshot")}
    assert quality.main(["--rescore", "--out", str(out)]) == 0
    again = json.loads(out.read_text())
    assert {k: again[k] for k in summary} == summary
