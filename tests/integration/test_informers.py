"""The operator's list-and-watch caches against the real API server: they fill, follow
changes, wake the loop only for changes that matter, and list again after 410 Gone."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tessera.controller.informers import Informer, Informers, sources
from tessera.errors import Gone
from tessera.k8s import Kube
from tessera.world.facts import PodFacts

DEVICE = "nvidia.com/gpu"


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def pod(name: str, devices: int) -> dict[str, Any]:
    resources = {"requests": {DEVICE: str(devices)}, "limits": {DEVICE: str(devices)}}
    container = {"name": "main", "image": "busybox", "resources": resources if devices else {}}
    # No scheduler has this name: the pod stays as created, so only this test changes it.
    spec = {"containers": [container], "schedulerName": "nobody"}
    return {"metadata": {"name": name}, "spec": spec}


WORKLOAD = {
    "apiVersion": "tessera.dev/v1alpha1",
    "kind": "Workload",
    "metadata": {"name": "w"},
    "spec": {
        "accelerator": {"count": 1},
        "template": {"spec": {"containers": [{"name": "main", "image": "train:1.0"}]}},
    },
}


def synced(informers: Informers) -> None:
    """Waits (30 s at most) for every cache to be read whole."""
    done = threading.Thread(target=informers.wait_synced, daemon=True)
    done.start()
    done.join(30)
    assert not done.is_alive()


class Counter:
    def __init__(self) -> None:
        self.calls = 0
        self.event = threading.Event()

    def __call__(self) -> None:
        self.calls += 1
        self.event.set()


def test_a_pod_cache_follows_creation_change_and_deletion(kube: Kube, namespace: str) -> None:
    (source,) = sources([namespace])["pods"]
    changed = Counter()
    informer = Informer(kube, source, changed)
    kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod("before", 1))
    kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod("no-devices", 0))
    informer.start()
    try:
        assert informer.synced.wait(30)
        # Listed: the pod with devices is kept; one with none, and not Tessera's, is not.
        assert set(informer.store) == {(namespace, "before")}
        kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod("after", 2))
        facts = wait_for("the new pod", lambda: informer.store.get((namespace, "after")))
        assert isinstance(facts, PodFacts) and facts.requests == {DEVICE: 2}

        # An annotation changes no fact: the loop is not woken, the facts object is kept.
        changed.event.clear()
        calls = changed.calls
        kube.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/after",
            {"metadata": {"annotations": {"note": "x"}}},
            content_type="application/merge-patch+json",
        )
        # ...but a label that names a Workload does (and comes after, so both were seen).
        kube.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/after",
            {"metadata": {"labels": {"tessera.dev/workload": "w"}}},
            content_type="application/merge-patch+json",
        )
        wait_for("the label", lambda: informer.store[(namespace, "after")].workload == "w")
        assert changed.calls == calls + 1

        kube.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/before")
        wait_for("the deletion", lambda: (namespace, "before") not in informer.store)
        assert informer.lists == 1  # followed by watching, not by listing again
    finally:
        informer.stop()


def test_after_410_gone_the_cache_reads_everything_again_and_catches_up(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server drops old resourceVersions (etcd compaction). Here the first watch-list is
    ended after its initial events (as the server ends every watch in time), and the resumed
    watch is answered as if that version had been compacted away: the cache must read the
    collection whole again and see what changed meanwhile."""
    real_watch = kube.watch
    calls: list[str | None] = []

    def watch(path: str, version: str | None, seconds: int) -> Iterator[dict[str, Any]]:
        calls.append(version)
        if len(calls) == 2:
            kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod("meanwhile", 1))
            raise Gone(410, "Expired", f"too old resource version: {version}")
        for event in real_watch(path, version, seconds):
            yield event
            if len(calls) == 1 and event["type"] == "BOOKMARK":
                return  # the server ended the first watch

    monkeypatch.setattr(kube, "watch", watch)
    (source,) = sources([namespace])["pods"]
    informer = Informer(kube, source, lambda: None)
    informer.start()
    try:
        wait_for("the pod created while the watch was refused", lambda: informer.store)
        assert informer.lists == 2 and calls[0] is None and calls[1] and calls[2] is None
        kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod("later", 1))
        wait_for("the pod after", lambda: (namespace, "later") in informer.store)
    finally:
        informer.stop()


def test_without_a_watch_list_the_cache_lists_in_pages_then_watches(
    kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kubernetes before 1.32 refuses watch-lists; the cache then lists (in pages), once."""
    monkeypatch.setattr("tessera.controller.informers.PAGE", 2)
    for i in range(5):
        kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod(f"p{i}", 1))
    (source,) = sources([namespace])["pods"]
    informer = Informer(kube, source, lambda: None)
    informer.streaming = False
    informer.start()
    try:
        assert informer.synced.wait(30)
        assert sorted(name for _, name in informer.store) == [f"p{i}" for i in range(5)]
        kube.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/p0")
        wait_for("the deletion", lambda: (namespace, "p0") not in informer.store)
        assert informer.lists == 1
    finally:
        informer.stop()


def test_every_cache_fills_and_copies_as_the_world_reads_it(
    kube: Kube, namespace: str, crds: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tessera.informers")
    kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod("p", 1))
    informers = Informers(kube, [namespace])
    informers.start()
    try:
        synced(informers)
        copied = informers.copy()
        assert set(copied) == {
            "nodes", "pods", "pools", "workloads", "namespaces", "quotas", "slices", "claims",
            "edits",
        }  # fmt: skip
        assert [(p.namespace, p.name) for p in copied["pods"]] == [(namespace, "p")]
        assert copied["nodes"], "the kwok fleet's nodes are cached"
        assert namespace in copied["namespaces"]
        # Each whole read says how long it took and what it kept: a slow start-up over
        # thousands of objects names the collection it waits on.
        read = {r.args[0]: r.args[2] for r in caplog.records if "read whole" in r.msg}
        assert read[f"/api/v1/namespaces/{namespace}/pods"] == 1
        assert read["/api/v1/nodes"] == len(copied["nodes"])
        assert len(read) == 8  # one read per watched kind
    finally:
        informers.stop()


def test_a_new_workload_says_it_arrived_and_a_change_to_one_does_not(
    kube: Kube, namespace: str, crds: list[str]
) -> None:
    """`arrived` cuts the loop's wait for its next cycle (tessera.controller.PERIOD): it is set
    by a Workload new to the cache, not by a change to one already there, nor by pods."""
    informers = Informers(kube, [namespace])
    informers.start()
    workloads = f"/apis/tessera.dev/v1alpha1/namespaces/{namespace}/workloads"
    try:
        synced(informers)
        informers.changed.clear()
        kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod("p", 1))
        assert informers.changed.wait(30)
        assert not informers.arrived.is_set()  # a pod is not an arrival

        kube.request("POST", workloads, WORKLOAD)
        assert informers.arrived.wait(30)
        wait_for("the Workload", lambda: f"{namespace}/w" in informers.copy()["workloads"])

        informers.arrived.clear()
        informers.changed.clear()
        kube.request(
            "PATCH", f"{workloads}/w/status", {"status": {"message": "seen"}},
            content_type="application/merge-patch+json",
        )  # fmt: skip
        assert informers.changed.wait(30)
        assert not informers.arrived.is_set()  # a change to a known Workload is not either
    finally:
        informers.stop()


def test_each_copy_names_the_keys_changed_since_the_copy_before(
    kube: Kube, namespace: str, crds: list[str]
) -> None:
    """The loop reads which Workloads changed from the caches (Edits), not by comparing two
    copies: each copy names every key set or deleted since the one before, and one after a
    whole read names none (None: compare everything)."""
    informers = Informers(kube, [namespace])
    informers.start()
    path = f"/apis/tessera.dev/v1alpha1/namespaces/{namespace}/workloads"
    key = f"{namespace}/w"
    serials: list[int] = []

    def edited_until(done: Callable[[dict[str, Any]], bool]) -> set[Any]:
        """The workload keys the copies name until one shows `done`."""
        keys: set[Any] = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            copied = informers.copy()
            serials.append(copied["edits"].serial)
            named = copied["edits"].keys["workloads"]
            assert named is not None, "a watched change is named, not a whole read"
            keys |= named
            if done(copied["workloads"]):
                return keys
            time.sleep(0.1)
        raise AssertionError("timed out")

    try:
        synced(informers)
        first = informers.copy()["edits"]
        assert first.keys["workloads"] is None  # read whole since: compare everything
        assert informers.copy()["edits"].keys["workloads"] == frozenset()  # nothing since

        kube.request("POST", path, WORKLOAD)
        assert edited_until(lambda w: key in w) == {key}
        kube.request(
            "PATCH", f"{path}/w/status", {"status": {"message": "seen"}},
            content_type="application/merge-patch+json",
        )  # fmt: skip
        assert edited_until(lambda w: w[key].status.get("message") == "seen") == {key}
        kube.request("DELETE", f"{path}/w")
        assert edited_until(lambda w: key not in w) == {key}
        assert serials == list(range(first.serial + 2, first.serial + 2 + len(serials)))
    finally:
        informers.stop()
