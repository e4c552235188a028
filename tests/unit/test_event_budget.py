"""The Event budget: a burst of placements posts a burst of Events only up to a point."""

from __future__ import annotations

from tessera.controller.clock import ManualClock
from tessera.controller.events import TokenBucket


def test_a_burst_is_allowed_then_the_rate_refills_up_to_the_burst() -> None:
    clock = ManualClock()
    bucket = TokenBucket(3, 2.0, clock)
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    clock.advance(0.4)  # 0.8 of a token
    assert not bucket.take()
    clock.advance(0.1)  # 1.0
    assert bucket.take() and not bucket.take()
    clock.advance(99.5)  # refilled, but never beyond the burst
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
