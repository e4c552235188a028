"""hack/demo.py's placement table: the RUNNER-UP column says why the next pool lost."""

from __future__ import annotations

import demo  # hack/demo.py (hack/ is on the path: tests/conftest.py)


def _status(*candidates: dict[str, object]) -> dict[str, object]:
    return {"pool": "h200", "candidates": [*candidates, {"pool": "h200", "feasible": True}]}


def test_a_better_scored_pool_with_room_says_why_it_lost() -> None:
    later = "expected to finish in 24.5h, more than 50% after the soonest (3.0h)"
    status = _status(
        {"pool": "l4", "feasible": True, "fitsNow": True, "score": 100, "reasons": [later]}
    )
    assert demo.runner_up(status) == f"l4 (100.0): {later}"


def test_a_pool_without_room_says_so_and_one_with_nothing_against_it_shows_its_score() -> None:
    full = "no node has 8 free nvidia.com/gpu (largest free: 0)"
    status = _status(
        {"pool": "h100", "feasible": True, "fitsNow": False, "score": 75.3, "reasons": [full]}
    )
    assert demo.runner_up(status) == f"h100 (75.3): {full}"
    plain = _status({"pool": "a100", "feasible": True, "fitsNow": True, "score": 32.3})
    assert demo.runner_up(plain) == "a100 (32.3)"
    ruled_out = _status({"pool": "a100", "feasible": False, "reasons": ["80 GiB < 120 GiB"]})
    assert demo.runner_up(ruled_out) == "a100: 80 GiB < 120 GiB"
    assert demo.runner_up({"pool": "tpu", "candidates": []}).startswith("- (no other pool")
