"""bench/sharing.py's pure parts: Jain's index, the entitlements in units and in devices, the
saturated-time accounting, the verdicts, and a tiny replay in which reclaim fires only when
the quotas count units."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.append(str(REPO / "bench"))  # appended: hack/ (and its `fleet`) stays first

import sharing  # noqa: E402  (bench/sharing.py)


def test_jains_index_is_one_when_equal_and_one_over_n_when_one_has_all() -> None:
    assert sharing.jain([2.0, 2.0, 2.0]) == pytest.approx(1.0)
    assert sharing.jain([3.0, 0.0, 0.0]) == pytest.approx(1 / 3)
    assert sharing.jain([1.0, 0.5]) == pytest.approx(1.5**2 / (2 * 1.25))


def test_fairness_compares_shares_of_work_with_shares_of_entitlement() -> None:
    entitled = {"a": 2.0, "b": 1.0}
    assert sharing.fairness({"a": 20.0, "b": 10.0}, entitled) == pytest.approx(1.0)
    assert sharing.shares({"a": 15.0, "b": 15.0}, entitled) == pytest.approx({"a": 0.75, "b": 1.5})
    assert sharing.shares({"a": 0.0, "b": 0.0}, entitled) == {"a": 0.0, "b": 0.0}


def test_nominals_are_the_same_fractions_of_the_fleets_units_or_devices() -> None:
    units = sharing.nominals(sharing.TEAMS, "units")
    devices = sharing.nominals(sharing.TEAMS, "devices")
    assert sum(units.values()) == pytest.approx(sharing.fleet_units())
    assert sum(devices.values()) == pytest.approx(sharing.fleet_devices())
    for team in sharing.TEAMS:
        assert units[team.name] / sharing.fleet_units() == pytest.approx(
            devices[team.name] / sharing.fleet_devices()
        )
    # the old generations hold most devices but few units: what makes the two counts differ
    assert sharing.fleet_devices() == 80
    assert sharing.fleet_units() == pytest.approx(16 + 32 * 0.3153 + 32 * 0.1223)
    assert sharing.quotas(sharing.TEAMS, "none") == ()
    (llm, *_) = sharing.quotas(sharing.TEAMS, "devices")
    assert llm.namespaces == {"llm"} and llm.spec.nominal == pytest.approx(80 / 3)


def test_each_team_offers_the_load_times_its_entitlement() -> None:
    jobs = sharing.trace(3000, 1.4, seed=3)
    span = jobs[-1].arrival - jobs[0].arrival
    for team in sharing.TEAMS:
        offered = sum(j.work for j in jobs if j.team == team.name) / span
        assert offered == pytest.approx(1.4 * sharing.fleet_units() * team.share, rel=0.2)


def test_work_counts_only_while_every_team_waits() -> None:
    tl = sharing.Timeline(
        times=[0.0, 10.0, 20.0],
        work=[{"a": 0.0, "b": 0.0}, {"a": 10.0, "b": 20.0}, {"a": 30.0, "b": 20.0}],
        rates=[{"a": 1.0, "b": 2.0}, {"a": 2.0, "b": 0.0}, {"a": 1.0, "b": 1.0}],
        saturated=[True, False, True],
    )
    work, seconds = tl.saturated_work(5.0, 25.0)
    assert seconds == 10.0  # 5..10 and 20..25
    assert work == {"a": 5.0 + 5.0, "b": 10.0 + 5.0}
    assert tl.work_at(15.0) == {"a": 20.0, "b": 20.0}


def test_verdicts_over_the_seeds() -> None:
    assert sharing.verdict([0.96, 0.97], 0.95) == "met"
    assert sharing.verdict([0.90, 0.94], 0.95) == "not met"
    assert sharing.verdict([0.94, 0.96], 0.95) == "undecided"
    assert sharing.verdict([], 0.95) == "undecided"
    assert sharing.verdict([0.05, 0.08], 0.10, higher_is_better=False) == "met"


def test_a_team_below_its_units_reclaims_what_another_borrows() -> None:
    """infer takes all 16 H100s (16 units, 16 devices; nominal 10 units or 26.7 devices).
    llm's 4-device job arrives: counting units infer borrows, so two of its jobs are evicted
    and restart; counting devices it does not, and llm waits for them to end."""
    jobs = [sharing.Job(i, "infer", 0.0, 2, 3600.0, ()) for i in range(8)]
    jobs.append(sharing.Job(8, "llm", 600.0, 4, 600.0, (sharing.H100,)))
    units = sharing.simulate(jobs, "units")
    assert units.preemptions == 2
    llm = units.jobs[8]
    assert (llm.pool, llm.start, llm.end) == ("h100", 600.0, 1200.0)
    assert sorted(j.preempted for j in units.jobs) == [0] * 7 + [1, 1]
    # work held: every job's own, plus the two evicted jobs' 600 s on 2 devices each
    assert sum(units.timeline.work[-1].values()) == pytest.approx(
        sum(j.work for j in jobs) + 2 * 2 * 600
    )
    for policy in ("devices", "none"):
        run = sharing.simulate(jobs, policy)
        assert run.preemptions == 0
        assert run.jobs[8].start == 3600.0
        assert sum(run.timeline.work[-1].values()) == pytest.approx(sum(j.work for j in jobs))
