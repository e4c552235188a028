"""The Event budget: a burst of placements posts a burst of Events only up to a point."""

from __future__ import annotations

from tessera.handlers.reconciler import TokenBucket


def test_a_burst_is_allowed_then_the_rate_refills_up_to_the_burst() -> None:
    now = [0.0]
    bucket = TokenBucket(3, 2.0, clock=lambda: now[0])
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    now[0] = 0.4  # 0.8 of a token
    assert not bucket.take()
    now[0] = 0.5  # 1.0
    assert bucket.take() and not bucket.take()
    now[0] = 100.0  # refilled, but never beyond the burst
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
