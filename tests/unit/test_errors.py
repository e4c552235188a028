"""Which API errors are refusals: the controller reports those in status and falls back on
them; the rest it retries quietly."""

from __future__ import annotations

import pytest

from tessera.errors import ApiError


@pytest.mark.parametrize(
    ("status", "refused"),
    [
        (403, True),  # a quota, Pod Security admission, a policy engine
        (422, True),  # the pod does not validate
        (400, True),
        (408, False),  # a timeout: later
        (429, False),  # API priority and fairness: later
        (500, False),
        (503, False),
    ],
)
def test_a_refusal_is_a_4xx_that_does_not_say_later(status: int, refused: bool) -> None:
    assert ApiError(status, "Reason", "message").refusal is refused
