"""Watch caches of the objects the loop reads (nodes, pods, pools, workloads, namespaces,
quotas):
one thread per collection keeps a dict of compact facts. Talks only via tessera.k8s.

Why not kopf's watches: kopf runs every watch event through its per-object machinery (a
worker, a diff base, handler selection), which was most of the operator's CPU in a burst and
all of it at start-up over thousands of nodes. Here an event costs one JSON decoding
(pydantic-core's), one facts extraction and a dict write, and an event that changes no
fact wakes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tessera.dra import claim_facts, slice_facts
from tessera.errors import ApiError, Gone, TesseraError
from tessera.k8s import Kube
from tessera.watched import WATCHED
from tessera.world.caches import Edits
from tessera.world.facts import namespace_facts, node_facts, object_facts, pod_facts

log = logging.getLogger("tessera.informers")

# Where a LIST is needed (no watch-list): objects per page, and one LIST at a time across the
# caches. A page of parsed objects is garbage a moment later, but the memory it took stays
# with the process (500 nodes per page cost 45 MB more RSS than 100 do, for good).
PAGE = 100
_listing = threading.Lock()
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
WATCH_SECONDS = 300  # the server ends each watch after this; it resumes from where it was
MAX_BACKOFF = 30.0


@dataclass(frozen=True)
class Source:
    """One collection to cache: where it is, and the key and facts of each object in it
    (facts None: the object is of no interest, and is not kept)."""

    kind: str
    path: str
    key: Callable[[Mapping[str, Any]], Hashable]
    facts: Callable[[Mapping[str, Any]], Any]
    optional: bool = False  # tessera.watched.Watched.optional


def _name(body: Mapping[str, Any]) -> str:
    return str(body["metadata"]["name"])


def _namespaced(body: Mapping[str, Any]) -> tuple[str, str]:
    meta = body["metadata"]
    return (meta.get("namespace", ""), meta["name"])


def _workload_key(body: Mapping[str, Any]) -> str:
    meta = body["metadata"]
    return f"{meta.get('namespace')}/{meta['name']}"


def _pod(body: Mapping[str, Any]) -> Any:
    facts = pod_facts(body)
    if not facts.requests and not facts.workload:
        return None  # a pod with no devices and not ours changes nothing Tessera counts
    return facts


# How each watched kind's objects are cached: the key of each, and its facts (None: of no
# interest, not kept), by the World field they go to (tessera.watched.WATCHED).
_CACHED: dict[
    str, tuple[Callable[[Mapping[str, Any]], Hashable], Callable[[Mapping[str, Any]], Any]]
] = {
    "nodes": (_name, node_facts),
    "pods": (_namespaced, _pod),
    "pools": (_name, object_facts),
    "workloads": (_workload_key, object_facts),
    "namespaces": (_name, namespace_facts),
    "quotas": (_name, object_facts),
    "slices": (_name, slice_facts),
    "claims": (_namespaced, claim_facts),
}


def sources(namespaces: Sequence[str] = ()) -> dict[str, list[Source]]:
    """What the loop reads, by World field, for every kind in tessera.watched.WATCHED. With
    namespaces, namespaced kinds are watched only there (one watch each)."""
    out: dict[str, list[Source]] = {}
    for kind in WATCHED:
        key, facts = _CACHED[kind.field]
        if kind.namespaced and namespaces:
            paths = [f"{kind.prefix}/namespaces/{ns}/{kind.plural}" for ns in namespaces]
        else:
            paths = [f"{kind.prefix}/{kind.plural}"]
        out[kind.field] = [Source(kind.plural, path, key, facts, kind.optional) for path in paths]
    return out


class Informer:
    """Reads a collection once with a watch-list (every object streamed one at a time, then
    the changes; a paginated LIST where the server has none), then watches it, resuming from
    the last resourceVersion whenever the server ends the watch; reads it whole again only
    when the server no longer has that resourceVersion (410 Gone). `store` is replaced or
    updated in place by the thread alone; readers copy it (`take`), with the keys it
    changed since the last copy: at 10,000 Workloads, finding them by comparing two copies
    cost the loop 3-6 ms a cycle (bench/cycles.py)."""

    def __init__(
        self,
        kube: Kube,
        source: Source,
        changed: Callable[[], None],
        arrived: Callable[[], None] | None = None,
    ) -> None:
        """`changed` is called on every change the store takes; `arrived` (if given) also
        when an object is new to it."""
        self.kube, self.source, self._changed, self._arrived = kube, source, changed, arrived
        self.store: dict[Hashable, Any] = {}
        # Keys set or deleted since the last `take`; None: the store was read whole since.
        self._edited: set[Hashable] | None = None
        self._lock = threading.Lock()  # the store's changes and `_edited` go together
        self.synced = threading.Event()  # set once the whole collection is in the store
        self.lists = 0  # reads of the whole collection: the first, then one per 410 Gone
        self.streaming = True  # the server serves watch-lists (else: LIST, then watch)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"tessera-watch-{source.kind}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stops at the next event; the thread is a daemon, so exit never waits on a watch."""
        self._stop.set()

    def take(self) -> tuple[dict[Hashable, Any], set[Hashable] | None]:
        """A copy of the store, and the keys changed since the last copy (None: unknown)."""
        with self._lock:
            edited, self._edited = self._edited, set()
            return self.store.copy(), edited

    def _run(self) -> None:
        version: str | None = None
        backoff = 1.0
        while not self._stop.is_set():
            try:
                if version is None and not self.streaming:
                    version = self._list()
                version = self._watch(version)
                backoff = 1.0
                continue
            except Gone:
                log.info("%s: resourceVersion %s is gone; reading again", self.source.path, version)
                version = None
                continue
            except ApiError as err:
                if err.status == 404 and self.source.optional:
                    if not self.synced.is_set():
                        log.info("%s is not served: empty until it is", self.source.path)
                        self.synced.set()
                    self._stop.wait(MAX_BACKOFF)
                    continue
                if version is None and self.streaming and err.status in (400, 422):
                    # Kubernetes before 1.32 (the WatchList gate off) refuses watch-lists.
                    log.info("%s: no watch-list (%s); listing instead", self.source.path, err)
                    self.streaming = False
                    continue
                log.warning("watching %s: %s; again in %.0fs", self.source.path, err, backoff)
            except TesseraError as err:
                log.warning("watching %s: %s; again in %.0fs", self.source.path, err, backoff)
            except Exception:  # a bug must not silently end the cache
                log.exception("watching %s failed; reading it again", self.source.path)
                version = None
            self._stop.wait(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)

    def _list(self) -> str:
        """Lists the collection page by page (where the server has no watch-list)."""
        source = self.source
        began = time.monotonic()
        fresh: dict[Hashable, Any] = {}
        query = {"limit": str(PAGE)}
        while True:
            with _listing:
                page = self.kube.request("GET", source.path, query=query, timeout=60)
                for body in page.pop("items", None) or []:
                    facts = source.facts(body)
                    if facts is not None:
                        fresh[source.key(body)] = facts
                meta = page.get("metadata") or {}
                del page  # before the next page is read
            if not meta.get("continue"):
                break
            query["continue"] = meta["continue"]
        self._fill(fresh, began)
        return str(meta.get("resourceVersion", ""))

    def _fill(self, fresh: dict[Hashable, Any], began: float) -> None:
        """Makes a whole read of the collection (begun at monotonic `began`) the store;
        unchanged objects keep their old facts object, which the World cache compares by
        identity. Logs what was read and how long it took: a start-up over thousands of
        nodes and pods waits on these reads, and the log says which one it waits on."""
        log.info(
            "%s: read whole in %.1fs (%d kept)", self.source.path, time.monotonic() - began,
            len(fresh),
        )  # fmt: skip
        old = self.store
        for key, facts in fresh.items():
            if old.get(key) == facts:
                fresh[key] = old[key]
        self.lists += 1
        with self._lock:
            self.store, self._edited = fresh, None
        if fresh.keys() != old.keys() or any(old[k] is not v for k, v in fresh.items()):
            self._changed()
        self.synced.set()

    def _watch(self, version: str | None) -> str | None:
        """Applies watch events until the server ends the watch; returns the last version.
        Without a version it is a watch-list: the objects arrive one at a time into a fresh
        store, which becomes the store at the bookmark that ends them (memory stays flat)."""
        source = self.source
        began = time.monotonic()
        filling = version is None
        store: dict[Hashable, Any] = {} if filling else self.store
        for event in self.kube.watch(source.path, version, WATCH_SECONDS):
            kind, body = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                code = int(body.get("code") or 0)
                error = Gone if code == 410 else ApiError
                raise error(code, body.get("reason", ""), body.get("message", ""))
            meta = body.get("metadata") or {}
            version = str(meta.get("resourceVersion") or version or "")
            if kind == "BOOKMARK":
                if filling and (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true":
                    self._fill(store, began)
                    store, filling = self.store, False
                continue
            if self._stop.is_set():
                break
            key = source.key(body)
            facts = None if kind == "DELETED" else source.facts(body)
            known = store.get(key)
            if known == facts:
                continue  # no fact changed, or a deletion of what is not kept
            if filling:  # a fresh store no reader sees yet
                self._put(store, key, facts)
                continue
            with self._lock:
                self._put(store, key, facts)
                if self._edited is not None:
                    self._edited.add(key)
            if known is None and self._arrived is not None:
                self._arrived()
            self._changed()
        return None if filling else version  # cut short while filling: start again

    @staticmethod
    def _put(store: dict[Hashable, Any], key: Hashable, facts: Any) -> None:
        if facts is None:
            del store[key]
        else:
            store[key] = facts


class Informers:
    """Every cache the loop reads, the event that says something in them changed, and the
    one that says a Workload arrived (new to the cache: it waits to be placed)."""

    def __init__(self, kube: Kube, namespaces: Sequence[str] = ()) -> None:
        self.changed = threading.Event()
        self.arrived = threading.Event()
        arrivals = {"workloads": self.arrived.set}
        self.copies = 0  # copies taken (`copy`): each Edits says which it follows
        self.by_field = {
            name: [Informer(kube, s, self.changed.set, arrivals.get(name)) for s in group]
            for name, group in sources(namespaces).items()
        }

    def __iter__(self) -> Any:
        return (i for group in self.by_field.values() for i in group)

    def start(self) -> None:
        for informer in self:
            informer.start()

    def stop(self) -> None:
        for informer in self:
            informer.stop()
        self.changed.set()
        self.arrived.set()

    def wait_synced(self) -> None:
        for informer in self:
            informer.synced.wait()

    def copy(self) -> dict[str, Any]:
        """One copy of every cache, as the World's fields (pods as a list), with the keys
        each changed since the copy before (`edits`: tessera.world.caches.Edits)."""
        self.copies += 1
        copied: dict[str, Any] = {}
        edited: dict[str, frozenset[Hashable] | None] = {}
        for name, group in self.by_field.items():
            merged: dict[Hashable, Any] = {}
            keys: set[Hashable] | None = set()
            for informer in group:
                store, changed = informer.take()
                merged.update(store)
                keys = None if keys is None or changed is None else keys | changed
            copied[name] = list(merged.values()) if name == "pods" else merged
            edited[name] = None if keys is None else frozenset(keys)
        copied["edits"] = Edits(self.copies, edited)
        return copied
