"""settle_claims: which pods this process sent are still trusted to be on their way."""

from __future__ import annotations

import time

from hypothesis import given
from hypothesis import strategies as st

from tessera.controller.ledger import CREATED_GRACE, settle_claims


def test_a_seen_pod_is_forgotten_and_an_old_unseen_one_is_sent_again() -> None:
    created = {
        "ns/seen": (0.0, "ns/w"),
        "ns/old": (100.0, "ns/w"),
        "ns/young": (100.0 + CREATED_GRACE - 1, "ns/w"),
    }
    expired = settle_claims(created, {"ns/seen"}, copied=100.0 + CREATED_GRACE + 5)
    assert expired == [("ns/old", CREATED_GRACE + 5)]
    assert list(created) == ["ns/young"]


def test_a_pod_sent_after_the_world_was_copied_is_kept_however_late_the_cycle_runs() -> None:
    # The regression: a cycle placing a large gang burst waited 40 s on the send queue, so
    # pods it sent 40 s after its World was copied were not in that World. Counted to the
    # clock after placement they looked 40 s unseen, and were sent again (409).
    copied = time.monotonic() - 100  # the clock now is 100 s past the copy
    created = {"ns/g-1": (copied + 2.0, "ns/g"), "ns/g-2": (copied + 39.0, "ns/g")}
    assert settle_claims(created, set(), copied) == []
    assert set(created) == {"ns/g-1", "ns/g-2"}


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=4),
        st.floats(min_value=0, max_value=200, allow_nan=False),
        max_size=20,
    ),
    st.sets(st.text(min_size=1, max_size=4), max_size=10),
    st.floats(min_value=0, max_value=200, allow_nan=False),
)
def test_every_claim_is_kept_seen_or_expired_by_its_age_at_the_copy(
    sent: dict[str, float], visible: set[str], copied: float
) -> None:
    created = {name: (at, "ns/w") for name, at in sent.items()}
    expired = dict(settle_claims(created, visible, copied))
    for name, at in sent.items():
        if name in visible:
            assert name not in created and name not in expired
        elif copied - at >= CREATED_GRACE:
            assert name not in created and expired[name] == copied - at
        else:
            assert created[name] == (at, "ns/w") and name not in expired
