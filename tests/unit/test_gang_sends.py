"""How a placement's claimed pods are sent (Writes.send_all): the first alone, so a refusal
that would refuse them all gives the rest back unsent; then the rest together, so a gang's
pods wait for connections once, not once each. Real asyncio; the sends are stand-ins for
the event loop's pod creates (tessera.k8s_aio), which tests/integration/test_k8s_aio.py
exercises against the API server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, cast

import pytest

from tessera.controller.ledger import Ledger
from tessera.controller.writes import Claimed, Writes
from tessera.errors import ApiError


class Refused(ApiError):
    def __init__(self) -> None:
        super().__init__(403, "Forbidden", "refused by the test")


def gang(ledger: Ledger, n: int, send: Callable[[int], Coroutine[Any, Any, bool]]) -> list[Claimed]:
    """n claimed pods of workload ml/g, each sent by `send(replica)`."""
    out: list[Claimed] = []
    for r in range(n):
        key = f"ml/g-{r}"
        assert ledger.claim(key, "ml/g", 0.0)

        async def one(r: int = r, key: str = key) -> bool:
            try:
                return await send(r)
            except Exception:
                ledger.unclaim(key)  # as Writes.pods' sends do
                raise

        out.append((key, one))
    return out


def writes(ledger: Ledger) -> Writes:
    return Writes(cast(Any, None), cast(Any, None), ledger, cast(Any, None), cast(Any, None))


def test_the_rest_of_a_gang_is_sent_together_after_the_first() -> None:
    ledger = Ledger()
    started: list[int] = []
    in_flight, most = [0], [0]

    async def send(r: int) -> bool:
        started.append(r)
        in_flight[0] += 1
        most[0] = max(most[0], in_flight[0])
        await asyncio.sleep(0.01)
        in_flight[0] -= 1
        return True

    assert asyncio.run(writes(ledger).send_all(gang(ledger, 8, send)))
    assert started[0] == 0, "the first goes first"
    assert sorted(started) == list(range(8))
    assert most[0] == 7, "the other seven were in flight at once, not one after another"


def test_a_refused_first_pod_gives_the_rest_back_unsent() -> None:
    ledger = Ledger()
    sent: list[int] = []

    async def send(r: int) -> bool:
        sent.append(r)
        if r == 0:
            raise Refused()
        return True

    with pytest.raises(Refused):
        asyncio.run(writes(ledger).send_all(gang(ledger, 4, send)))
    assert sent == [0]
    assert not any(ledger.claimed(f"ml/g-{r}") for r in range(4)), "sent again next visit"


def test_a_pod_refused_among_the_rest_leaves_its_peers_sent_and_only_its_claim_given_back() -> None:
    ledger = Ledger()
    done: list[int] = []

    async def send(r: int) -> bool:
        await asyncio.sleep(0.01 if r != 2 else 0)
        if r == 2:
            raise Refused()
        done.append(r)
        return True

    with pytest.raises(Refused):
        asyncio.run(writes(ledger).send_all(gang(ledger, 4, send)))
    assert sorted(done) == [0, 1, 3], "every other send ran to its end before the error"
    assert [ledger.claimed(f"ml/g-{r}") for r in range(4)] == [True, True, False, True]


def test_a_pod_that_exists_already_makes_the_gang_not_all_created() -> None:
    ledger = Ledger()

    async def send(r: int) -> bool:
        return r != 1  # 409: created before, not yet in the cache

    assert not asyncio.run(writes(ledger).send_all(gang(ledger, 3, send)))
    assert asyncio.run(writes(ledger).send_all([])) is True
