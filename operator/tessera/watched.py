"""The kinds the operator's caches watch, declared once: the informers, the RBAC rules (and
so the chart) and the benchmark all derive from this list. Pure: imports only tessera.api."""

from __future__ import annotations

from dataclasses import dataclass

from tessera import api


@dataclass(frozen=True)
class Watched:
    """One collection the caches list and watch: its API group and version, its plural,
    whether it is namespaced, and the World field its facts go to."""

    group: str
    version: str
    plural: str
    namespaced: bool
    field: str
    # A cluster that does not serve it (an older Kubernetes without DRA) is an empty cache,
    # not a start-up that never finishes.
    optional: bool = False

    @property
    def prefix(self) -> str:
        """The API path its resources live under: /api/v1 or /apis/GROUP/VERSION."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"


WATCHED: tuple[Watched, ...] = (
    Watched("", "v1", "nodes", namespaced=False, field="nodes"),
    Watched("", "v1", "pods", namespaced=True, field="pods"),
    Watched(api.GROUP, api.VERSION, "acceleratorpools", namespaced=False, field="pools"),
    Watched(api.GROUP, api.VERSION, "workloads", namespaced=True, field="workloads"),
    Watched("", "v1", "namespaces", namespaced=False, field="namespaces"),
    Watched(api.GROUP, api.VERSION, "acceleratorquotas", namespaced=False, field="quotas"),
    # Dynamic Resource Allocation: the devices DRA drivers publish, and those claims hold.
    Watched("resource.k8s.io", "v1", "resourceslices", False, "slices", optional=True),
    Watched("resource.k8s.io", "v1", "resourceclaims", True, "claims", optional=True),
)


def resources() -> frozenset[tuple[str, str]]:
    """(group, plural) of every watched kind: what the RBAC rules grant list and watch on."""
    return frozenset((w.group, w.plural) for w in WATCHED)
