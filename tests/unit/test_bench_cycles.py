"""bench/cycles.py: the loop's cost over a stub API places every Workload of its burst."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.append(str(REPO / "bench"))  # appended: hack/ (and its `fleet`) stays first

import cycles  # noqa: E402  (bench/cycles.py)


def test_a_small_burst_is_placed_whole_and_every_cycle_is_timed() -> None:
    figures = cycles.run(nodes=40, pools=4, workloads=60, per_cycle=10)
    assert figures["podsPlaced"] == 60
    assert figures["cycles"] >= 6  # 10 arrive each cycle
    assert 0 < figures["worldCpuMs"]["p50"] <= figures["cycleCpuMs"]["p50"]
    assert figures["last50"]["workloads"] > 0
