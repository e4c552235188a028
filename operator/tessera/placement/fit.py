"""Node-level fit: which nodes of one pool take each pod of a gang, and when a gang would fit.
Pure functions and a small mutable index used within one plan; imports nothing from Tessera."""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable


class NodeFit:
    """Free devices per ready node of one pool, indexed by free count for best-fit.

    Each pod goes to the node with the fewest free devices that still holds it (ties by node
    name), so gangs pack onto few nodes and large holes stay open for large pods."""

    __slots__ = ("_rooms", "free", "gated", "levels", "version")

    def __init__(
        self, nodes: Iterable[tuple[str, int]], gated: Iterable[tuple[str, int]] = ()
    ) -> None:
        self.free: dict[str, int] = {}
        self.levels: dict[int, list[str]] = {}
        # Free devices of the nodes only some workloads may use (tainted: PoolView.unlocked),
        # outside the index: the `_with` methods add those a workload names.
        self.gated: dict[str, int] = dict(gated)
        self.version = 0
        self._rooms: dict[int, int] = {}  # pods of a size that fit, until the next change
        for name, free in sorted(nodes):
            self.free[name] = free
            if free > 0:
                self.levels.setdefault(free, []).append(name)

    def copy(self) -> NodeFit:
        """An independent copy: each of a plan's passes starts from the snapshot's free
        devices, and copying them is far cheaper than indexing 250 nodes of a pool again."""
        other = NodeFit.__new__(NodeFit)
        other.free = dict(self.free)
        other.levels = {level: list(names) for level, names in self.levels.items()}
        other.gated = dict(self.gated)
        other.version = 0
        other._rooms = dict(self._rooms)
        return other

    def room_with(self, count: int, extra: Collection[str]) -> int:
        """How many pods of `count` devices fit now on the ready nodes and the `extra` gated
        ones."""
        room = self.room(count)
        return room + sum(self.gated.get(n, 0) // count for n in extra) if extra else room

    def fits_with(self, count: int, replicas: int, extra: Collection[str]) -> bool:
        if not extra:
            return self.fits(count, replicas)
        return self.room_with(count, extra) >= replicas

    def largest_with(self, extra: Collection[str]) -> int:
        if not extra:
            return self.largest()
        return max([self.largest(), *(self.gated.get(n, 0) for n in extra)])

    def take_with(self, count: int, replicas: int, extra: Collection[str]) -> list[str] | None:
        """As `take`, over the ready nodes and the `extra` gated ones (best fit across both)."""
        if not extra:
            return self.take(count, replicas)
        if not self.fits_with(count, replicas, extra):
            return None
        placed: list[str] = []
        for _ in range(replicas):
            level = min((f for f in self.levels if f >= count), default=None)
            best = (level, self.levels[level][0], False) if level is not None else None
            for name in sorted(extra):
                free = self.gated.get(name, 0)
                if free >= count and (best is None or (free, name) < best[:2]):
                    best = (free, name, True)
            assert best is not None and best[0] is not None, "fits_with said the gang fits"
            free, name, gated = best
            if gated:
                self.gated[name] = free - count
            else:
                self._move(name, free, free - count)
            placed.append(name)
        self.version += 1
        self._rooms.clear()
        return placed

    def room(self, count: int) -> int:
        """How many pods of `count` devices fit now."""
        pods = self._rooms.get(count)
        if pods is None:
            pods = sum((level // count) * len(names) for level, names in self.levels.items())
            self._rooms[count] = pods
        return pods

    def fits(self, count: int, replicas: int) -> bool:
        return self.room(count) >= replicas

    def largest(self) -> int:
        return max(self.levels, default=0)

    def take(self, count: int, replicas: int) -> list[str] | None:
        """Reserve devices for every pod of the gang, or nothing when the gang does not fit."""
        if not self.fits(count, replicas):
            return None
        placed: list[str] = []
        for _ in range(replicas):
            level = min(f for f in self.levels if f >= count)
            name = self.levels[level][0]
            self._move(name, level, level - count)
            placed.append(name)
        self.version += 1
        self._rooms.clear()
        return placed

    def give(self, name: str, devices: int) -> None:
        """Return devices to a node (used by simulations when work ends)."""
        level = self.free[name]
        self._move(name, level, level + devices)
        self.version += 1
        self._rooms.clear()

    def set_free(self, name: str, free: int) -> None:
        """A node's free devices are now `free` (a plan starts from the last one's index,
        tessera.placement.cycle.Prepared); a node outside the index is left out still."""
        if name in self.free:
            self._move(name, self.free[name], free)
        elif name in self.gated:
            self.gated[name] = free
        else:
            return
        self._rooms.clear()

    def _move(self, name: str, old: int, new: int) -> None:
        if old > 0:
            names = self.levels[old]
            names.pop(bisect.bisect_left(names, name))
            if not names:
                del self.levels[old]
        if new > 0:
            bisect.insort(self.levels.setdefault(new, []), name)
        self.free[name] = new


def earliest_fit(
    free: dict[str, int],
    releases: Iterable[tuple[float, str, int]],
    count: int,
    replicas: int,
    *,
    presorted: bool = False,
    pods_now: int | None = None,
) -> float | None:
    """The first release time after which a gang of `replicas` pods of `count` devices fits,
    given free devices now and (time, node, devices) releases (`presorted` when they come in
    time order already); 0.0 if it fits now, None if the known releases never make room.
    `pods_now`: the pods of `count` devices that fit now, where the caller knows (NodeFit.room).
    Only the nodes releases add to are followed: a planning cycle asks this of pools that
    are full, for most workloads that wait, and copying a pool's every node each time was
    most of the cost."""
    pods = sum(f // count for f in free.values()) if pods_now is None else pods_now
    if pods >= replicas:
        return 0.0
    freed: dict[str, int] = {}  # free devices of the nodes released to, so far
    for at, node, devices in releases if presorted else sorted(releases):
        before = freed.get(node)
        if before is None:
            before = free.get(node)
            if before is None:
                continue
        after = freed[node] = before + devices
        pods += after // count - before // count
        if pods >= replicas:
            return at
    return None
