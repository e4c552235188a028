"""Leader election over a coordination.k8s.io Lease, so that of several replicas exactly one
runs the placement loop while the others keep warm caches and take over when it stops."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from tessera.errors import Conflict, NotFound
from tessera.k8s import Kube

log = logging.getLogger("tessera.leadership")


def _micro(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


class Leader:
    """Holds (acquires or renews) the Lease; `hold()` says whether this replica may act."""

    def __init__(self, kube: Kube, namespace: str, name: str, identity: str, duration: int = 15):
        self.kube, self.namespace, self.name = kube, namespace, name
        self.identity, self.duration = identity, duration
        self.leading = False

    def hold(self, now: datetime) -> bool:
        try:
            leading = self._try(now)
        except Conflict:
            leading = False
        if leading != self.leading:
            log.info("%s lease %s/%s as %s", "acquired" if leading else "lost or waiting for",
                     self.namespace, self.name, self.identity)  # fmt: skip
        self.leading = leading
        return leading

    def _try(self, now: datetime) -> bool:
        try:
            lease = self.kube.get_lease(self.namespace, self.name)
        except NotFound:
            self.kube.create_lease(self.namespace, self.name, self._spec(now, now, 0))
            return True
        spec: dict[str, Any] = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        renewed = _parse(spec.get("renewTime"))
        duration = int(spec.get("leaseDurationSeconds") or self.duration)
        alive = renewed is not None and now - renewed < timedelta(seconds=duration)
        if holder and holder != self.identity and alive:
            return False  # another replica leads and is alive
        transitions = int(spec.get("leaseTransitions") or 0)
        acquired = _parse(spec.get("acquireTime")) if holder == self.identity else None
        if holder != self.identity:
            transitions += 1
        lease["spec"] = self._spec(acquired or now, now, transitions)
        self.kube.replace_lease(lease)
        return True

    def release(self) -> None:
        """Gives the lease up on a clean shutdown, so a standby takes over at once."""
        if not self.leading:
            return
        try:
            lease = self.kube.get_lease(self.namespace, self.name)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                self.kube.replace_lease(lease)
        except (Conflict, NotFound):
            pass
        self.leading = False

    def _spec(self, acquired: datetime, renewed: datetime, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.duration,
            "acquireTime": _micro(acquired),
            "renewTime": _micro(renewed),
            "leaseTransitions": transitions,
        }
