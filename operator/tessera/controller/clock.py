"""The clock the controller reads, passed in: the system's in the operator, a manual one in
tests and the stub benchmark, so time is driven rather than patched. No I/O."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Two readings: monotonic seconds for intervals, wall time for what status records."""

    def monotonic(self) -> float: ...

    def now(self) -> datetime: ...


class SystemClock:
    """The operator's clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that moves only when told to (`advance`): both readings move together."""

    def __init__(self, start: datetime | None = None, monotonic: float = 1000.0) -> None:
        self._wall = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._mono = monotonic

    def monotonic(self) -> float:
        return self._mono

    def now(self) -> datetime:
        return self._wall

    def advance(self, seconds: float) -> None:
        self._mono += seconds
        self._wall += timedelta(seconds=seconds)
